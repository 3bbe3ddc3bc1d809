"""The tidy timings table: collect per-job tables, validate them, summarise wall time."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import jsonschema
import pandas as pd
import yaml

from .files import write_csv_atomic
from .harness import TimingPolicy
from .point_runs import merge_repeats
from .provenance import SCHEMAS, table_columns
from .spec import timings_columns, undocumented_axes


class TableError(ValueError):
    """A timings table breaks its schema; the message names the file, row and column."""


def validate_timings(df: pd.DataFrame, source: str = "timings") -> None:
    """Check every row of ``df`` against ``workflow/schemas/timings.schema.yaml``, that
    no undocumented column is present (a size axis that rows name in ``axes`` is
    documented by them, and must hold positive whole numbers where set). Raises
    :class:`TableError`."""
    schema = yaml.safe_load((SCHEMAS / "timings.schema.yaml").read_text())
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
    validator = jsonschema.Draft202012Validator(schema)
    records = df.astype(object).where(df.notna(), None).to_dict("records")
    for i, record in enumerate(records):
        error = jsonschema.exceptions.best_match(validator.iter_errors(record))
        if error is not None:
            col = ".".join(map(str, error.absolute_path)) or "<row>"
            raise TableError(f"{source}: row {i}, column {col}: {error.message}")


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    """Columns as their schema types: numbers as floats, booleans as True/False/None
    (pandas would turn a boolean column with gaps into 0.0/1.0), text as text."""
    schema = yaml.safe_load((SCHEMAS / "timings.schema.yaml").read_text())
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
        elif "number" in types:
            out[column] = pd.to_numeric(values, errors="raise")
    return out


def text_columns(table: str) -> tuple[str, ...]:
    """Columns of ``table`` (timings or crossover) that the schema types as text only
    (``string``, possibly null), in schema order."""
    schema = yaml.safe_load((SCHEMAS / f"{table}.schema.yaml").read_text())
    names = []
    for name, spec in schema["properties"].items():
        types = spec.get("type", [])
        types = {types} if isinstance(types, str) else set(types)
        if "string" in types and not types & {"number", "integer", "boolean"}:
            names.append(name)
    return tuple(names)


def read_job_tables(
    csvs: Iterable[str | Path], columns: Iterable[str] | None = None
) -> pd.DataFrame:
    """The per-job CSVs concatenated, one row per run of a point, typed as the schema
    types them, with the documented columns in schema order followed by the size axes
    of plug-in cases (:func:`spec.timings_columns`), or with ``columns``."""
    frames = [pd.read_csv(p, dtype=object) for p in csvs]
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
    """Concatenate per-job CSVs into the study's timings table (atomically written).

    Rows of one point measured in several runs (``timing.repeats``, column ``repeat``)
    become one row (:func:`point_runs.merge_repeats`, which flags a merged point noisy
    against ``noise_threshold``, the config's ``timing.noise_threshold``); a table
    without the column (written before runs existed) is kept as it is. ``runs``: the
    frame :func:`read_job_tables` already read from ``csvs`` (not read again).

    Returns the table with the documented columns in schema order, or with ``columns``
    (the audit re-collects a run recorded under an older schema with that run's own
    header). Raises TableError when a row breaks the schema.
    """
    df = runs if runs is not None else read_job_tables(csvs, columns)
    if "repeat" in df.columns:
        df = merge_repeats(df, noise_threshold)
    columns = list(df.columns)
    validate_timings(df, source=str(out))
    write_csv_atomic(df.to_dict("records"), columns, Path(out))
    return df


def wall_summary(timings: pd.DataFrame, benchmarks: Iterable[str | Path]) -> dict:
    """Share of the measuring jobs' wall time spent in measured work.

    ``benchmarks`` are Snakemake ``benchmark:`` files of the measuring jobs (column
    ``s``: wall seconds of the job's last run). Measured work is the sum of
    ``measured_s`` over the rows (cold start, first step, warm-up and timed blocks).
    The rest of the jobs' time is process start, import and device initialisation.
    Returns both sums in seconds and their ratio (None when no job time is recorded).
    """
    jobs_s = 0.0
    for path in benchmarks:
        bench = pd.read_csv(path, sep="\t")
        jobs_s += float(bench["s"].sum())
    measured = float(pd.to_numeric(timings["measured_s"], errors="coerce").fillna(0).sum())
    return {
        "measuring_jobs_wall_s": round(jobs_s, 3),
        "measured_work_s": round(measured, 3),
        "measured_share": round(measured / jobs_s, 4) if jobs_s > 0 else None,
    }


def collect_study(
    csvs: Iterable[str | Path],
    probes: Iterable[str | Path] | None,
    benchmarks: Iterable[str | Path],
    timings_out: str | Path,
    wall_out: str | Path,
    merge_environments: bool = False,
    noise_threshold: float = TimingPolicy.noise_threshold,
    columns: Iterable[str] | None = None,
) -> tuple[pd.DataFrame, dict, list[str]]:
    """The collect step of a study: check each job's table against its probe record,
    concatenate the tables into ``timings_out`` and write the wall-time summary to
    ``wall_out`` (JSON). ``csvs`` and ``probes`` are in the same order; ``benchmarks``
    are the jobs' benchmark files (:func:`wall_summary`); ``noise_threshold`` is the
    config's ``timing.noise_threshold`` (for points measured in several runs,
    :func:`collect_timings`). The audit runs this same step again
    (:mod:`crossover_study.audit_stages`): ``probes`` None for a run recorded without
    probe records (its tables are checked against none), ``columns`` the run's own
    header (:func:`read_job_tables`).

    Returns (timings, wall summary, merged-on-purpose lines). Raises
    :class:`probe.ProbeError` for an accelerator row no probe backs (a lost GPU request
    must not become a CPU timing under its name), :class:`TableError` for a row that
    breaks the schema and :class:`environments.EnvironmentMixError` when a curve mixes
    hosts, devices or library versions and ``merge_environments`` is False.
    """
    import json

    from .environments import check_environments
    from .probe import check_tables

    csvs = list(csvs)
    if probes is not None:
        check_tables(csvs, probes)
    # Every run of a point is checked: runs merged into one row must share a machine.
    runs = read_job_tables(csvs, columns)
    merged = check_environments(runs, merge=merge_environments, source=str(timings_out))
    timings = collect_timings(csvs, timings_out, noise_threshold=noise_threshold, runs=runs)
    summary = wall_summary(timings, benchmarks)
    Path(wall_out).write_text(json.dumps(summary, indent=1))
    return timings, summary, merged
