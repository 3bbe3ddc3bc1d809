"""The tidy tables: collect per-job tables, validate them, summarise wall time, and the
one way into ``timings.csv`` and ``crossover.csv`` (:func:`read_timings`,
:func:`read_crossover`): read, join the tables beside ``timings.csv``
(:mod:`crossover_study.analysis.table_split`), upgrade an older format (:func:`upgrade`),
validate against the schema, return typed columns."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from pathlib import Path

import jsonschema
import pandas as pd

from crossover_study.analysis import table_split
from crossover_study.analysis.repeats import merge_repeats
from crossover_study.analysis.wall import wall_summary
from crossover_study.core import columns as col
from crossover_study.core.files import write_csv_atomic
from crossover_study.core.origin import table_columns, table_schema
from crossover_study.stepmodel.columns import model_columns
from crossover_study.study.points import TimingPolicy
from crossover_study.study.spec import TIMINGS_FORMAT, case_axes, timings_columns, undocumented_axes

#: Format of the timings this version writes (column ``format_version``): 3 since a
#: study's points are written as tables by concern (:func:`upgrade`). A table, or a
#: row, without the column is format 1.
FORMAT_VERSION = TIMINGS_FORMAT

#: Format of the ``crossover.csv`` this version writes: 2 since cases are plug-ins.
CROSSOVER_FORMAT = 2

#: The current format of each table :func:`read_table` reads.
CURRENT = {"timings": FORMAT_VERSION, "crossover": CROSSOVER_FORMAT}


class TableError(ValueError):
    """A timings table breaks its schema; the message names the file, row and column."""


def validate_timings(df: pd.DataFrame, source: str = "timings") -> None:
    """Check every row of ``df`` against ``workflow/schemas/timings.schema.yaml``, that
    no undocumented column is present (a size axis that rows name in ``axes`` is
    documented by them, and must hold positive whole numbers where set). Raises
    :class:`TableError`."""
    schema = table_schema("timings")
    axes = undocumented_axes(df)
    extra = set(df.columns) - set(schema["properties"]) - set(axes)
    if extra:
        raise TableError(f"{source}: undocumented column(s) {sorted(extra)}")
    for axis in axes:
        values = pd.to_numeric(df[axis], errors="coerce")
        bad = df[axis].notna() & ~(values.notna() & (values >= 1) & (values % 1 == 0))
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise TableError(
                f"{source}: row {i}, column {axis}: {df[axis].iloc[i]!r} is not a positive "
                "whole size"
            )
    schema = {**schema, "properties": {**schema["properties"], **{a: {} for a in axes}}}
    _validate_rows(df, schema, source)


def validate_crossover(df: pd.DataFrame, source: str = "crossover") -> None:
    """Check every row of ``df`` against ``workflow/schemas/crossover.schema.yaml`` and
    that no undocumented column is present. Raises :class:`TableError` naming
    ``source``, the row (0-based, header not counted) and the column."""
    schema = table_schema("crossover")
    extra = set(df.columns) - set(schema["properties"])
    if extra:
        raise TableError(f"{source}: undocumented column(s) {sorted(extra)}")
    _validate_rows(df, schema, source)


def _validate_rows(df: pd.DataFrame, schema: dict, source: str) -> None:
    """Each row of ``df`` against the JSON schema ``schema`` (empty cells as null);
    raises :class:`TableError` at the first row that breaks it."""
    validator = jsonschema.Draft202012Validator(schema)
    records = df.astype(object).where(df.notna(), None).to_dict("records")
    for i, record in enumerate(records):
        error = jsonschema.exceptions.best_match(validator.iter_errors(record))
        if error is not None:
            col = ".".join(map(str, error.absolute_path)) or "<row>"
            raise TableError(f"{source}: row {i}, column {col}: {error.message}")


def _typed(df: pd.DataFrame, table: str = "timings") -> pd.DataFrame:
    """Columns as their schema types (``table``: timings or crossover): numbers as
    floats, booleans as True/False/None (pandas would turn a boolean column with gaps
    into 0.0/1.0), text as text. Raises ValueError for a number column holding text
    (:func:`read_timings` names the cell first)."""
    schema = table_schema(table)
    out = df.copy()
    for axis in undocumented_axes(out):
        out[axis] = pd.to_numeric(out[axis], errors="raise")
    for column, spec in schema["properties"].items():
        if column not in out:
            continue
        types = spec["type"] if isinstance(spec["type"], list) else [spec["type"]]
        values = out[column]
        if "boolean" in types:
            out[column] = values.map(
                lambda v: None if pd.isna(v) else str(v).strip().lower() in ("true", "1", "1.0")
            ).astype(object)
        elif "number" in types or "integer" in types:
            out[column] = pd.to_numeric(values, errors="raise")
    # One block per type again: each column replaced above is a block of its own, and a
    # frame of 150 blocks makes pandas warn (PerformanceWarning) at its next insert.
    return out.copy()


@cache
def text_columns(table: str) -> tuple[str, ...]:
    """Columns of ``table`` (timings or crossover) that the schema types as text only
    (``string``, possibly null), in schema order."""
    schema = table_schema(table)
    names = []
    for name, spec in schema["properties"].items():
        types = spec.get("type", [])
        types = {types} if isinstance(types, str) else set(types)
        if "string" in types and not types & {"number", "integer", "boolean"}:
            names.append(name)
    return tuple(names)


def read_csv_text(path: str | Path, table: str = "timings") -> pd.DataFrame:
    """The CSV file ``path`` of a ``table`` (timings or crossover) with every cell as
    text and an empty cell as missing. A text column of the schema (a name: ``case``,
    ``host``, ``note`` ...) keeps what it holds, so that a case named ``nan``, ``NA``,
    ``null`` or ``None`` stays that name (pandas' default reads those as missing); a
    number or boolean column, and a plug-in case's size axis, reads pandas' missing
    markers (``nan``, ``NA`` ...) as missing too. Raises FileNotFoundError, and
    ``pandas.errors.EmptyDataError`` for an empty file."""
    # pandas' own default list of missing markers (the one read_csv documents), applied
    # per column: read_csv has no public name for it.
    from pandas._libs.parsers import STR_NA_VALUES

    text = set(text_columns(table))
    header = pd.read_csv(path, nrows=0, dtype=str).columns
    if hasattr(path, "seek"):  # a buffer (collect's check of its own tables): again
        path.seek(0)
    markers = sorted(STR_NA_VALUES)
    na_values = {column: [""] if column in text else markers for column in header}
    return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=na_values)


#: The tables :func:`read_table` reads (their schemas: ``workflow/schemas/<table>.schema.yaml``).
TABLES = ("timings", "crossover")


def format_versions(df: pd.DataFrame) -> pd.Series:
    """The format of each row of a timings or crossover table (ints, indexed as
    ``df``): its ``format_version`` where set, else 1 (a table, or a row kept from a
    table, written before the column existed)."""
    if col.FORMAT_VERSION not in df:
        return pd.Series(1, index=df.index, dtype=int)
    values = pd.to_numeric(df[col.FORMAT_VERSION], errors="coerce")
    return values.fillna(1).astype(int)


def upgrade(df: pd.DataFrame, table: str) -> pd.DataFrame:
    """``df`` (a timings or crossover table, ``table``, as read) in the current format
    (:data:`CURRENT`): the one place where older formats are read.

    The formats of the timings: 3 (this version's, :data:`FORMAT_VERSION`): a study's
    points are written as tables by concern, ``timings.csv`` with the columns a person
    reads and the tables beside it (:mod:`crossover_study.analysis.table_split`, joined
    back by :func:`read_table` before this function sees them); a per-job table holds
    the whole row. 2: the whole row in one ``timings.csv`` (rates and JSON cells
    included), size columns named by ``axes``: read as it is. 1: no ``format_version``.
    Both older formats hold the whole row and are read without a join.

    Format 1 (no ``format_version``; every older run, the committed reference runs
    included): the documented columns the table lacks are added empty (NaN: the
    schema's "empty in tables written before the column existed"); of a timings table,
    rows of format 1 get ``axes`` from the case registry (their case's axes; empty for a
    case it does not know), every row with an empty ``replicas`` gets 1 (one process,
    one device: replicas did not exist) and one with an empty ``timing`` gets ``synced``
    (the only timing before unsynced rows existed); the rows' ``format_version`` becomes
    the current one. Columns come in schema order, then the rest (a plug-in
    case's size axes) in the order they had. A table in the current format is returned
    as a copy, columns ordered. Raises ValueError for a ``table`` other than
    :data:`TABLES` and :class:`TableError` for a format newer than this code reads.
    """
    if table not in TABLES:
        raise ValueError(f"table must be one of {TABLES}, got {table!r}")
    out = df.copy()
    versions = format_versions(out)
    current = CURRENT[table]
    if (versions > current).any():
        raise TableError(
            f"{table}: format_version {int(versions.max())} is newer than this code reads "
            f"({current})"
        )
    old = versions < current
    documented = list(table_columns(table))
    text = set(text_columns(table))
    # The columns the table lacks, added at once (one by one fragments the frame:
    # pandas' PerformanceWarning). Text columns as objects: filling them in stays valid.
    missing = {
        column: pd.Series(None, index=out.index, dtype=object if column in text else float)
        for column in documented
        if column not in out
    }
    if missing:
        out = pd.concat([out, pd.DataFrame(missing, index=out.index)], axis=1)
    if table == "timings":
        empty = out[col.AXES].isna() | (out[col.AXES].astype(str).str.strip() == "")
        fill = old & empty
        if fill.any():
            out[col.AXES] = out[col.AXES].astype(object)
            out.loc[fill, col.AXES] = out.loc[fill, col.CASE].map(_registered_axes)
        for column, value in ((col.REPLICAS, 1), (col.TIMING, "synced")):
            blank = out[column].isna() | (out[column].astype(str).str.strip() == "")
            if blank.any():
                out[column] = out[column].astype(object)
                out.loc[blank, column] = value
    if old.any():
        out[col.FORMAT_VERSION] = out[col.FORMAT_VERSION].astype(object)
        out.loc[old, col.FORMAT_VERSION] = current
    return out[[*documented, *[c for c in out.columns if c not in set(documented)]]]


def _registered_axes(case) -> str | None:
    """A format-1 row's ``axes``: its case's registered axes, comma-joined; None for a
    case the registry does not know."""
    try:
        return ",".join(case_axes(str(case)))
    except KeyError:
        return None


def _check_cells(df: pd.DataFrame, table: str, source: str) -> None:
    """Every number and boolean cell of ``df`` (text as read) is one: raises
    :class:`TableError` naming ``source``, the row (0-based, header not counted), the
    column and the value, before :func:`_typed` would fail without saying where."""
    schema = table_schema(table)
    kinds = {}
    for column, spec in schema["properties"].items():
        types = spec.get("type", [])
        types = [types] if isinstance(types, str) else types
        if "boolean" in types:
            kinds[column] = "boolean"
        elif "number" in types or "integer" in types:
            kinds[column] = "number"
    if table == "timings":
        kinds.update({axis: "number" for axis in undocumented_axes(df)})
    for column, kind in kinds.items():
        if column not in df:
            continue
        values = df[column]
        if kind == "number":
            bad = values.notna() & pd.to_numeric(values, errors="coerce").isna()
        else:
            text = values.map(lambda v: str(v).strip().lower())
            bad = values.notna() & ~text.isin(("true", "false", "1", "0", "1.0", "0.0"))
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise TableError(
                f"{source}: row {i}, column {column}: {values.iloc[i]!r} is not a {kind}"
            )


def read_table(source: str | Path | pd.DataFrame, table: str) -> pd.DataFrame:
    """The one way into ``timings.csv`` and ``crossover.csv`` (``table``: timings or
    crossover): read ``source`` (a path; or a DataFrame already read, whose text
    columns holding numbers, as pandas guesses them, become text), join the tables
    beside a ``timings.csv`` written by table (format 3,
    :func:`table_split.join`: the whole row of each point, rates from the study's rates
    files), upgrade an older format (:func:`upgrade`), check every cell and row against the schema and return
    the table with typed columns (:func:`_typed`: numbers as floats or ints, booleans as
    True/False/None, text as text; seconds stay seconds). An empty file is an empty
    table with the schema's columns.

    Raises FileNotFoundError for a missing file, :class:`table_split.SplitError` for a
    table beside it that is missing, and :class:`TableError` naming the file,
    row and column of a cell or row that breaks the schema (an undocumented column, a
    number column holding text, a value outside its enum).
    """
    if table not in TABLES:
        raise ValueError(f"table must be one of {TABLES}, got {table!r}")
    if isinstance(source, pd.DataFrame):
        name = f"{table} table"
        df = source.copy()
        for column in set(text_columns(table)) & set(df.columns):
            df[column] = df[column].map(lambda v: v if pd.isna(v) else str(v)).astype(object)
    else:
        name = str(source)
        try:
            df = read_csv_text(source, table)
        except pd.errors.EmptyDataError:
            df = pd.DataFrame(columns=list(table_columns(table)))
        if table == "timings" and len(df.columns) and table_split.is_split(source, df.columns):
            df = table_split.join(df, source, read_csv_text)
    df = upgrade(df, table)
    _check_cells(df, table, name)
    df = _typed(df, table)
    (validate_timings if table == "timings" else validate_crossover)(df, source=name)
    return df


def read_timings_text(path: str | Path) -> pd.DataFrame:
    """``timings.csv`` at ``path`` with every cell as text (:func:`read_csv_text`), and
    for a table written by table (format 3) the tables beside it joined back
    (:func:`table_split.join`): the whole rows as written, neither upgraded nor typed
    (the manifest's and the audit's view). Raises FileNotFoundError and
    ``SplitError``."""
    df = read_csv_text(path)
    if len(df.columns) and table_split.is_split(path, df.columns):
        df = table_split.join(df, path, read_csv_text)
    return df


def validate_study_tables(timings: str | Path) -> list[Path]:
    """Check each table of the study whose ``timings.csv`` is ``timings`` against its
    schema (``workflow/schemas/<table>.schema.yaml``; ``timings.csv``'s own columns
    against ``timings.schema.yaml``): no undocumented column but a plug-in case's size
    axes, every cell of its type, every row valid. Returns the tables checked. Raises
    :class:`TableError` naming the file, row and column."""
    paths = table_split.study_files(timings)
    key = table_split.key_columns(read_csv_text(timings))
    for path in paths:
        table = path.stem if path != Path(timings) else "timings"
        df = read_csv_text(path, table)
        schema = table_schema(table)
        axes = [c for c in key if c not in schema["properties"]]
        extra = set(df.columns) - set(schema["properties"]) - set(axes)
        if extra:
            raise TableError(f"{path}: undocumented column(s) {sorted(extra)}")
        _check_cells(df, table, str(path))
        typed = _typed(df, table)
        schema = {**schema, "properties": {**schema["properties"], **{a: {} for a in axes}}}
        _validate_rows(typed, schema, str(path))
    return paths


def read_timings(source: str | Path | pd.DataFrame) -> pd.DataFrame:
    """A ``timings.csv`` (path or DataFrame) joined with the tables beside it, upgraded,
    validated and typed: one row per measured point, the whole row (every column of
    ``workflow/schemas/timings.schema.yaml``) in schema order and then a plug-in case's
    size axes (:func:`read_table`). Raises FileNotFoundError, ``SplitError`` and
    :class:`TableError`."""
    return read_table(source, "timings")


def read_crossover(source: str | Path | pd.DataFrame) -> pd.DataFrame:
    """A ``crossover.csv`` (path or DataFrame) upgraded, validated and typed: one row per
    case x framework x variant x accelerator x axis, the schema's columns
    (:func:`read_table`); an empty file gives an empty table. Raises
    FileNotFoundError and :class:`TableError`."""
    return read_table(source, "crossover")


def read_job_tables(
    csvs: Iterable[str | Path], columns: Iterable[str] | None = None
) -> pd.DataFrame:
    """The per-job CSVs concatenated, one row per run of a point, typed as the schema
    types them, with the documented columns in schema order followed by the size axes
    of plug-in cases (:func:`spec.timings_columns`), or with ``columns``."""
    frames = [read_csv_text(p) for p in csvs]
    documented = list(table_columns("timings"))
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=documented)
    if columns is None:
        columns = timings_columns(df)
    return _typed(df.reindex(columns=list(columns)))


def collect_timings(
    csvs: Iterable[str | Path],
    out: str | Path,
    columns: Iterable[str] | None = None,
    noise_threshold: float = TimingPolicy.noise_threshold,
    runs: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Concatenate per-job CSVs into the study's timings, written as tables by concern
    (format 3: ``out``, ``timings.csv``, and the tables beside it,
    :func:`table_split.write_tables`; each atomically), or as one table with
    ``columns`` when they are given (the whole row: the audit collects a run of an
    older format again with that run's own header), and also where two rows name one
    point (rows without sizes: the tables beside would not know which is whose). The
    rates of ``out``'s folder
    (``rates/<framework>/<device>.json``) are the rows' rates; a row priced at other
    rates keeps them in ``rates.csv``. The tables are
    read back and must give the rows again (:func:`read_timings`), else
    :class:`table_split.SplitError`.

    The step-time model's columns (``model_*``) are set from each row's counts and rates
    (:func:`step_columns.model_columns`; empty without them). Rows of one point measured
    in several runs (``timing.repeats``, column ``repeat``) become one row (:func:`point_runs.merge_repeats`, which flags a merged point noisy
    against ``noise_threshold``, the config's ``timing.noise_threshold``); a table
    without the column (written before runs existed) is kept as it is. ``runs``: the
    frame :func:`read_job_tables` already read from ``csvs`` (not read again).

    Returns the whole rows with the documented columns in schema order, or with
    ``columns``. Raises TableError when a row breaks the schema.
    """
    whole = columns is not None
    df = runs if runs is not None else read_job_tables(csvs, columns)
    if col.REPEAT in df.columns:
        df = merge_repeats(df, noise_threshold)
    columns = list(df.columns)
    # The step-time model's columns, derived here from the row's counts and rates (a
    # deterministic function of them); kept only where the header has them.
    df = model_columns(df)[columns]
    validate_timings(df, source=str(out))
    if whole or not table_split.unique_points(df):
        write_csv_atomic(df.to_dict("records"), columns, Path(out))
        return df
    table_split.write_tables(df, out)
    _check_tables(df, Path(out))
    return df


def _check_tables(df: pd.DataFrame, out: Path) -> None:
    """The tables written from ``df`` at ``out`` read back as ``df`` written whole
    would read (:func:`read_timings`); raises :class:`table_split.SplitError` naming
    the first column that differs."""
    import io

    whole = io.StringIO()
    df.to_csv(whole, index=False)
    whole.seek(0)
    expected = read_timings(read_csv_text(whole))
    got = read_timings(out)
    for column in expected.columns:
        a, b = expected[column], got[column] if column in got else None
        if b is None or not a.astype(object).equals(b.astype(object)):
            raise table_split.SplitError(
                f"{out}: the tables beside it do not give column {column} again"
            )


def collect_study(
    csvs: Iterable[str | Path],
    probes: Iterable[str | Path] | None,
    benchmarks: Iterable[str | Path],
    timings_out: str | Path,
    wall_out: str | Path,
    merge_environments: bool = False,
    noise_threshold: float = TimingPolicy.noise_threshold,
    columns: Iterable[str] | None = None,
    rates_benchmarks: Iterable[str | Path] = (),
) -> tuple[pd.DataFrame, dict, list[str]]:
    """The collect step of a study: check each job's table against its probe record,
    concatenate the tables into ``timings_out`` and write the wall-time summary to
    ``wall_out`` (JSON). ``csvs`` and ``probes`` are in the same order; ``benchmarks``
    are the measuring jobs' benchmark files and ``rates_benchmarks`` the rates jobs'
    (:func:`wall_summary`, of the rows before runs are merged); ``noise_threshold`` is the
    config's ``timing.noise_threshold`` (for points measured in several runs,
    :func:`collect_timings`). The audit runs this same step again
    (:mod:`crossover_study.audit.stages`): ``probes`` None for a run recorded without
    probe records (its tables are checked against none), ``columns`` the run's own
    header (:func:`read_job_tables`).

    Returns (timings, wall summary, merged-on-purpose lines). Raises
    :class:`probe.ProbeError` for an accelerator row no probe backs (a lost GPU request
    must not become a CPU timing under its name), :class:`TableError` for a row that
    breaks the schema and :class:`environments.EnvironmentMixError` when a curve mixes
    hosts, devices or library versions and ``merge_environments`` is False.
    """
    import json

    from crossover_study.analysis.environments import check_environments
    from crossover_study.measure.probe import check_tables

    csvs = list(csvs)
    if probes is not None:
        check_tables(csvs, probes)
    # Every run of a point is checked: runs merged into one row must share a machine.
    runs = read_job_tables(csvs, columns)
    merged = check_environments(runs, merge=merge_environments, source=str(timings_out))
    timings = collect_timings(
        csvs, timings_out, columns, noise_threshold=noise_threshold, runs=runs
    )
    summary = wall_summary(runs, benchmarks, rates_benchmarks)
    Path(wall_out).write_text(json.dumps(summary, indent=1))
    return timings, summary, merged
