"""The study's timings split into tables by concern, and joined back.

``collect`` writes a study's points (format 3) as ``timings.csv`` (the columns a person
reads, :data:`crossover_study.core.columns.TIMINGS`) and tables beside it keyed by the
point: ``attribution.csv``, ``counts.csv``, ``measurement.csv`` and ``environment.csv``
(one row per point, :data:`~crossover_study.core.columns.WIDE_TABLES`), ``blocks.csv``,
``compile_cache.csv``, ``top_ops.csv``, ``tracer_bias.csv``,
``attribution_sources.csv``, ``products.csv``, ``rnn_layers.csv``,
``elementwise.csv`` and ``rnn_modules.csv`` (one row per value of what a measuring job
writes as a JSON cell, :data:`~crossover_study.core.columns.LONG_TABLES`) and
``rates.csv`` (the rates of a row only where they differ from
``rates/<framework>/<device>.json``, which holds them otherwise). :func:`write_tables`
writes them (:func:`split`) and :func:`join` puts the whole row of each point back together, JSON cells rebuilt exactly
as they were and rates read from the rates files: the frame
:func:`crossover_study.analysis.tables.read_timings` returns, whichever way the points
were written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from crossover_study.core import columns as col
from crossover_study.core.files import write_csv_atomic
from crossover_study.stepmodel.rates import row_columns
from crossover_study.study.spec import undocumented_axes

#: Long tables added after studies were first written by table: a study written before
#: one has no such file, and its rows read with that column empty.
LATER_TABLES = ("rnn_modules",)

#: The curves among the rates (JSON lists of [size, rate] pairs in a row).
CURVES = ("rate_flop_curve", "rate_mem_curve")


class SplitError(ValueError):
    """The tables of a study do not make its points again (a sibling table missing, a
    key not unique, a JSON cell that is not a list or an object)."""


def key_columns(frame: pd.DataFrame) -> list[str]:
    """The columns that name a point in ``frame`` (a timings frame: ``timings.csv`` or
    the whole rows): :data:`~crossover_study.core.columns.POINT_KEY`, then the size
    columns it has (the seeds', then a plug-in case's axes as its rows' ``axes`` name
    them, :func:`crossover_study.study.spec.undocumented_axes`). The tables beside
    ``timings.csv`` carry the same columns first."""
    sizes = [c for c in col.SEED_SIZES if c in frame]
    return [*[c for c in col.POINT_KEY if c in frame], *sizes, *undocumented_axes(frame)]


def _keys(frame: pd.DataFrame, key: list[str]) -> pd.Series:
    """One string per row naming its point (the key columns' text, empty for missing)."""
    if not key or frame.empty:
        return pd.Series("", index=frame.index, dtype=object)
    text = frame[key].astype(object).where(frame[key].notna(), "").astype(str)
    return text.agg("\x1f".join, axis=1)


def unique_points(wide: pd.DataFrame) -> bool:
    """True when no two rows of ``wide`` name the same point (:func:`key_columns`): the
    condition for writing them as tables beside each other."""
    return not _keys(wide, key_columns(wide)).duplicated().any()


def _text(value) -> str | None:
    """A JSON element as a long table's cell: text as it is, a number or boolean as JSON
    writes it, None empty."""
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _value(text, field: str):
    """A long table's cell as the JSON element it was (:func:`_text` undone)."""
    if text is None or (isinstance(text, float) and pd.isna(text)):
        return None
    return str(text) if field in col.LONG_TEXT_FIELDS else json.loads(text)


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and pd.isna(value))


def _long_rows(wide: pd.DataFrame, key: list[str], table: str) -> list[dict]:
    """The rows of the long table ``table`` from the whole rows ``wide`` (typed)."""
    source, index, fields = col.LONG_TABLES[table]
    out = []
    if source not in wide:
        return out
    for _, row in wide.iterrows():
        cell = row[source]
        if _missing(cell) or not str(cell).strip():
            continue
        ident = {k: row[k] for k in key}
        text = str(cell)
        parsed = json.loads(text) if text.lstrip()[:1] in ("[", "{") else None
        if parsed == {} or parsed == []:
            out.append(dict(ident))  # an empty collection: one row, nothing in it
        elif isinstance(parsed, dict):
            for name, value in parsed.items():
                out.append({**ident, fields[0]: name, fields[1]: _text(value)})
        elif isinstance(parsed, list):
            runs = _runs(row, len(parsed)) if table == "blocks" else None
            for i, element in enumerate(parsed):
                values = element if isinstance(element, list) else [element]
                if len(values) != len(fields):
                    raise SplitError(f"{source}: {element!r} does not have the fields {fields}")
                record = {**ident, index: i, **dict(zip(fields, map(_text, values), strict=True))}
                if runs is not None:
                    record[col.RUN] = runs[i]
                out.append(record)
        elif index is None:
            # Not a JSON object (attr_source of a row not profiled: the reason): one row
            # without a name.
            out.append({**ident, fields[0]: None, fields[1]: text})
        else:
            raise SplitError(f"{source}: {text[:60]!r} is not a JSON list")
    return out


def _runs(row, n: int) -> list[int | None]:
    """The run (0-based) of each of a row's ``n`` blocks, from ``blocks_per_run``
    (None for each block of a row measured in one run)."""
    counts = row.get(col.BLOCKS_PER_RUN)
    if _missing(counts) or not str(counts).strip():
        return [None] * n
    runs = [r for r, c in enumerate(json.loads(counts)) for _ in range(int(c))]
    if len(runs) != n:
        raise SplitError(f"blocks_per_run {counts} does not split the {n} blocks of the row")
    return runs


def _rebuild(group: pd.DataFrame, table: str) -> str:
    """A row's JSON cell from its rows of the long table ``table`` (text, in order)."""
    source, index, fields = col.LONG_TABLES[table]
    if len(group) == 1 and group[list(fields)].iloc[0].isna().all():
        return "{}" if index is None else "[]"
    if index is None:
        names = group[fields[0]].tolist()
        if len(names) == 1 and _missing(names[0]):
            return str(group[fields[1]].iloc[0])
        return json.dumps(
            {str(n): _value(v, fields[1]) for n, v in zip(names, group[fields[1]], strict=True)}
        )
    group = group.sort_values(index, key=lambda s: pd.to_numeric(s), kind="stable")
    if len(fields) == 1:
        return json.dumps([_value(v, fields[0]) for v in group[fields[0]]])
    return json.dumps(
        [[_value(r[f], f) for f in fields] for r in group[list(fields)].to_dict("records")]
    )


def _rates_text(rates: dict) -> dict:
    """A row's rate columns as comparable text (numbers as Python writes them)."""
    out = {}
    for c in col.RATE_COLUMNS:
        v = rates.get(c)
        out[c] = None if _missing(v) else (str(v) if isinstance(v, str) else repr(float(v)))
    return out


def rates_files(folder: str | Path) -> dict[tuple[str, str], dict]:
    """The rate columns of every ``rates/<framework>/<device>.json`` under ``folder``
    (a study's results), keyed by (framework, device)
    (:func:`crossover_study.stepmodel.rates.row_columns` of its ``rates``; all None for a
    file without rates). A file that is not JSON is passed over."""
    out = {}
    for path in sorted(Path(folder).glob("rates/*/*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        rates = record.get("rates") if isinstance(record, dict) else None
        out[(path.parent.name, path.stem)] = _rates_text(row_columns(rates))
    return out


def _rate_rows(wide: pd.DataFrame, key: list[str], files: dict) -> list[dict]:
    """``rates.csv``'s rows: the rates of each row that differ from its rates file's
    (one row per rate; a curve one row per pair; one row without a rate for a row whose
    rates are all empty)."""
    out = []
    none = _rates_text({})
    for _, row in wide.iterrows():
        mine = _rates_text({c: row.get(c) for c in col.RATE_COLUMNS})
        # Without a rates file the join gives no rates: a row without any matches it.
        if mine == files.get((str(row[col.FRAMEWORK]), str(row[col.DEVICE])), none):
            continue
        ident = {k: row[k] for k in key}
        if mine == none:
            out.append({**ident})
            continue
        for c, v in mine.items():
            if v is None:
                continue
            if c in CURVES:
                for i, (size, rate) in enumerate(json.loads(v)):
                    out.append(
                        {**ident, "rate": c, "point": i, "size": _text(size), "value": _text(rate)}
                    )
            else:
                out.append({**ident, "rate": c, "value": v})
    return out


def split(wide: pd.DataFrame, folder: str | Path) -> dict[str, tuple[list[str], list[dict]]]:
    """The tables of the study whose whole rows are ``wide`` (one per point, typed as
    :func:`crossover_study.analysis.tables.read_timings` types them) and whose rates
    files are under ``folder``: table name -> (columns, rows). A table with one row per
    point leaves out the points with nothing in it (a point not measured has no
    attribution). Raises
    :class:`SplitError` when two rows name the same point or a JSON cell is neither a
    list nor an object."""
    key = key_columns(wide)
    names = _keys(wide, key)
    if names.duplicated().any():
        raise SplitError(f"two rows name the point {names[names.duplicated()].iloc[0]!r}")
    plugin = [c for c in key if c not in col.POINT_KEY and c not in col.SEED_SIZES]
    readable = [c for c in col.TIMINGS if c in wide] + plugin
    tables = {"timings": (readable, wide[readable].to_dict("records"))}
    for table, columns in col.WIDE_TABLES.items():
        have = [c for c in columns if c in wide]
        rows = wide[wide[have].notna().any(axis=1)] if have else wide.iloc[:0]
        tables[table] = ([*key, *have], rows[[*key, *have]].to_dict("records"))
    for table, (_, index, fields) in col.LONG_TABLES.items():
        extra = [col.RUN] if table == "blocks" else []
        head = [*key, *([index] if index else []), *extra, *fields]
        tables[table] = (head, _long_rows(wide, key, table))
    tables["rates"] = ([*key, *col.RATES], _rate_rows(wide, key, rates_files(folder)))
    return tables


def write_tables(wide: pd.DataFrame, timings_out: str | Path) -> list[Path]:
    """Write the tables of :func:`split` beside each other, ``timings_out``
    (``timings.csv``) and ``<table>.csv`` in its folder (each atomically), the rates
    files read from that folder's ``rates/``. Returns the paths written, ``timings_out``
    first. Raises :class:`SplitError` as :func:`split` and OSError."""
    timings_out = Path(timings_out)
    paths = []
    for table, (columns, rows) in split(wide, timings_out.parent).items():
        path = timings_out if table == "timings" else table_path(timings_out, table)
        write_csv_atomic(rows, columns, path)
        paths.append(path)
    return paths


def table_path(timings: str | Path, table: str) -> Path:
    """The file of ``table`` beside the study's ``timings`` (``timings.csv``)."""
    timings = Path(timings)
    return timings if table == "timings" else timings.with_name(f"{table}.csv")


def study_files(timings: str | Path) -> list[Path]:
    """The tables of the study whose ``timings.csv`` is ``timings``, that exist:
    ``timings.csv`` first, then those beside it (:data:`~crossover_study.core.columns.STUDY_TABLES`)."""
    return [p for p in [Path(timings), *tables_beside(timings)] if p.exists()]


def tables_beside(timings: str | Path) -> list[Path]:
    """The tables beside the study's ``timings`` (``timings.csv``) that exist, in
    :data:`~crossover_study.core.columns.STUDY_TABLES` order (none for a run of format
    2 or 1)."""
    paths = [table_path(timings, t) for t in col.STUDY_TABLES[1:]]
    return [p for p in paths if p.exists()]


def is_split(path: str | Path, header) -> bool:
    """True for a ``timings.csv`` (``path``) written by table (format 3): its header
    (column names) lacks ``block_step_times_s``, which a whole row always has, and
    ``blocks.csv`` lies beside it (collect always writes it). A table of a few columns
    made by hand is read as it is."""
    blocks = table_path(path, "blocks")
    return col.BLOCK_STEP_TIMES_S not in set(header) and blocks.exists()


def join(timings: pd.DataFrame, path: str | Path, read) -> pd.DataFrame:
    """The whole rows of the points of ``timings`` (``path``'s ``timings.csv`` as text,
    format 3) with the tables beside it joined back: each one's columns by the point,
    the JSON cells rebuilt from the long tables, ``blocks_per_run`` from ``blocks.csv``'s
    runs and the rates from ``rates.csv`` or else the row's
    ``rates/<framework>/<device>.json`` (text, as a whole row holds them; empty without a
    file). ``read``: reads one table's CSV as text (the reader of ``timings.csv``).
    Raises :class:`SplitError` naming a table that is missing (one of
    :data:`LATER_TABLES` may be: its column is then empty)."""
    path = Path(path)
    key = key_columns(timings)
    names = _keys(timings, key)
    out = timings.copy()
    added: dict[str, pd.Series] = {}

    def sibling(table: str) -> pd.DataFrame:
        file = table_path(path, table)
        if not file.exists():
            raise SplitError(f"{path}: the table {file.name} beside it is missing")
        frame = read(file)
        return frame.assign(_point=_keys(frame, key).to_numpy())

    for table, columns in col.WIDE_TABLES.items():
        frame = sibling(table).drop_duplicates("_point").set_index("_point")
        for c in columns:
            if c in frame:
                added[c] = names.map(frame[c])
    for table in col.LONG_TABLES:
        if table in LATER_TABLES and not table_path(path, table).exists():
            continue  # a study written before the table existed: its column stays empty
        frame = sibling(table)
        source = col.LONG_TABLES[table][0]
        cells = {p: _rebuild(g, table) for p, g in frame.groupby("_point", sort=False)}
        added[source] = names.map(cells)
        if table == "blocks":
            added[col.BLOCKS_PER_RUN] = names.map(
                {p: _counts(g) for p, g in frame.groupby("_point", sort=False)}
            )
    added.update(_joined_rates(out, names, sibling("rates"), path.parent))
    # The text type the reader gave timings.csv's columns (pandas' str), for a joined
    # table read exactly as one table holding the whole row would be.
    text = out[col.CASE].dtype if col.CASE in out else object
    extra = pd.DataFrame(
        {c: s.astype(object).astype(text) for c, s in added.items()}, index=out.index
    )
    return pd.concat([out, extra], axis=1)


def _counts(group: pd.DataFrame) -> str | None:
    """``blocks_per_run`` of a point from its rows of ``blocks.csv`` (None when its
    blocks name no run)."""
    runs = group[col.RUN]
    if runs.isna().all():
        return None
    counts = pd.to_numeric(runs).astype(int).value_counts(sort=False).sort_index()
    return json.dumps([int(c) for c in counts])


def _joined_rates(timings, names, rates: pd.DataFrame, folder: Path) -> dict[str, pd.Series]:
    """The rate columns of each row: from ``rates`` (``rates.csv`` with ``_point``) where
    it names the row, else from the row's rates file."""
    files = rates_files(folder)
    own: dict[str, dict] = {}
    for point, group in rates.groupby("_point", sort=False):
        values = dict.fromkeys(col.RATE_COLUMNS)
        for rate, g in group.groupby("rate", sort=False):
            if rate in CURVES:
                g = g.sort_values("point", key=lambda s: pd.to_numeric(s), kind="stable")
                pairs = [
                    [json.loads(s), json.loads(v)]
                    for s, v in zip(g["size"], g["value"], strict=True)
                ]
                values[rate] = json.dumps(pairs)
            else:
                values[rate] = str(g["value"].iloc[0])
        own[point] = values
    columns = {c: [] for c in col.RATE_COLUMNS}
    for name, fw, dev in zip(names, timings[col.FRAMEWORK], timings[col.DEVICE], strict=True):
        values = own.get(name) or files.get((str(fw), str(dev))) or {}
        for c in col.RATE_COLUMNS:
            columns[c].append(values.get(c))
    return {c: pd.Series(v, index=timings.index, dtype=object) for c, v in columns.items()}
