"""Where a study's wall time went (``wall.json``): the measuring and rates jobs'
Snakemake benchmark files and the rows' own timers (:func:`wall_summary`, written by the
collect step, :func:`crossover_study.analysis.tables.collect_study`)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

import pandas as pd


def _benchmark_runs(paths: Iterable[str | Path]) -> list[tuple[float, float]]:
    """(wall seconds, end as seconds since the epoch) of each Snakemake benchmark file:
    its column ``s`` summed and the file's modification time (written as the job ended)."""
    runs = []
    for path in paths:
        bench = pd.read_csv(path, sep="\t")
        runs.append((float(bench["s"].sum()), Path(path).stat().st_mtime))
    return runs


def _column_sum(rows: pd.DataFrame, column: str) -> float | None:
    """Sum of a column of seconds (empty cells count 0); None when the table has no such
    column at all."""
    if column not in rows:
        return None
    return float(pd.to_numeric(rows[column], errors="coerce").fillna(0).sum())


def _attribution_s(rows: pd.DataFrame) -> float | None:
    """Seconds the measured attribution took: ``attr_cost_s`` (profiling and reading a
    point's block) plus ``attr_setup_s`` (its once-per-process set-up) summed, empty
    cells 0; None when the table has neither column (a study before the attribution)."""
    parts = [_column_sum(rows, c) for c in ("attr_cost_s", "attr_setup_s")]
    return None if all(p is None for p in parts) else sum(p or 0.0 for p in parts)


def _startup_s(rows: pd.DataFrame) -> float:
    """Process start, framework import and device initialisation, once per measuring
    process: ``import_s`` + ``device_init_s`` of one row per ``run_id`` (every row of a
    job's process carries the same two; rows without a run id, written for a job that
    never started, paid none)."""
    if "run_id" not in rows or "import_s" not in rows:
        return 0.0
    cols = [c for c in ("import_s", "device_init_s") if c in rows]
    per_run = rows[["run_id", *cols]].copy()
    for c in cols:
        per_run[c] = pd.to_numeric(per_run[c], errors="coerce")
    first = per_run.dropna(subset=["run_id"]).groupby("run_id")[cols].max()
    return float(first.fillna(0).to_numpy().sum())


#: The parts of the measuring jobs' time that the rows' own timers give, in
#: ``wall.json``'s order (:func:`job_parts`); the rest is ``other``.
PARTS = ("timed", "count", "replay", "attribution", "import")


def job_parts(timings: pd.DataFrame) -> dict[str, float | None]:
    """Seconds of each of :data:`PARTS` over the rows of ``timings``: ``timed``,
    ``measured_s`` plus ``job_measured_s`` (a row timed again in a fresh process holds
    that process's ``measured_s``; the job's own first measurement of it was timed work
    too); ``count`` and ``replay``, the columns ``count_s`` and ``replay_s``;
    ``attribution`` (:func:`_attribution_s`); ``import`` (:func:`_startup_s`). None for a
    part whose columns the table lacks (``timed`` and ``import`` count 0 then)."""
    timed = (_column_sum(timings, "measured_s") or 0.0) + (
        _column_sum(timings, "job_measured_s") or 0.0
    )
    return {
        "timed": timed,
        "count": _column_sum(timings, "count_s"),
        "replay": _column_sum(timings, "replay_s"),
        "attribution": _attribution_s(timings),
        "import": _startup_s(timings),
    }


def _share(part: float | None, whole: float) -> float | None:
    return None if part is None or whole <= 0 else round(part / whole, 4)


def wall_summary(
    timings: pd.DataFrame,
    benchmarks: Iterable[str | Path],
    rates_benchmarks: Iterable[str | Path] = (),
    now: float | None = None,
) -> dict:
    """Where the study's wall time went (``wall.json``).

    ``timings``: the measuring jobs' rows (one per point and run; the collect step passes
    them before runs of a point are merged). ``benchmarks``: the measuring jobs'
    Snakemake ``benchmark:`` files (column ``s``: wall seconds of the job's last run);
    ``rates_benchmarks``: those of the rates jobs (one per framework and device; none for
    a study without them, whose rates, if any, were measured inside the measuring jobs
    and count as ``other``). ``now``: seconds since the epoch when the summary is taken
    (default: the clock; the collect job's time). Keys, seconds rounded to 3 decimals,
    shares to 4:

    - ``study_wall_s``: from the earliest job's start (a benchmark file's modification
      time minus its ``s``) to ``now``. Its limits: a rerun that kept jobs of an earlier
      run counts from that run's start (the pause between included), a benchmark file
      copied or touched since (an archive unpacked) moves its job's start, and the
      planning before the first job is not counted. None without benchmark files.
    - ``measuring_jobs_wall_s``: the measuring jobs' ``s`` summed (a job's time, also
      when jobs ran side by side: it can exceed ``study_wall_s``).
    - ``rates_jobs_wall_s``: the rates jobs' ``s`` summed; None without rates jobs.
    - ``measured_work_s``: ``measured_s`` summed over the rows (cold start, first step,
      warm-up and timed blocks), plus ``job_measured_s`` (the job process's own
      measurement of a row timed again in a fresh process); ``measured_share`` and ``timed_share``: it over
      ``measuring_jobs_wall_s`` (the same number; ``measured_share`` is the older name).
    - ``count_share`` and ``replay_share``: the rows' ``count_s`` (counting a point's
      operations after its timed blocks) and ``replay_s`` (replaying its products and
      layers for the step model) summed, over ``measuring_jobs_wall_s``; an empty cell
      counts 0, a table without the column gives None.
    - ``attribution_share``: the measured attribution's ``attr_cost_s`` and
      ``attr_setup_s`` summed (:func:`_attribution_s`), over ``measuring_jobs_wall_s``;
      None for a table without those columns.
    - ``import_share``: process start, framework import and device initialisation
      (``import_s`` + ``device_init_s``, once per measuring process: per ``run_id``) over
      ``measuring_jobs_wall_s``. A job rerun whose rows were all kept paid an import that
      no row records; a kept row's run counts its own.
    - ``other_share``: the rest of the measuring jobs' time (the job's planning, journal,
      probe record, rates measured inside the job, the points' set-up outside
      ``measured_s``); negative only if the parts overlap. The attribution counted here
      until ``attribution_share`` was added (2026-12-05).
    - ``rates_share``: ``rates_jobs_wall_s`` over ``measuring_jobs_wall_s`` +
      ``rates_jobs_wall_s``; None without rates jobs.

    Every share is None when no measuring job's time is recorded (the audit collects
    again without benchmark files). Raises OSError for a benchmark file that cannot be
    read, KeyError for one without column ``s``.
    """
    measuring, rates = _benchmark_runs(benchmarks), _benchmark_runs(rates_benchmarks)
    jobs_s = sum(s for s, _ in measuring)
    rates_s = sum(s for s, _ in rates) if rates else None
    starts = [end - s for s, end in (*measuring, *rates)]
    now = time.time() if now is None else now
    parts = job_parts(timings)
    measured = parts["timed"]
    other_s = jobs_s - sum(v or 0.0 for v in parts.values())
    return {
        "study_wall_s": round(now - min(starts), 3) if starts else None,
        "measuring_jobs_wall_s": round(jobs_s, 3),
        "rates_jobs_wall_s": None if rates_s is None else round(rates_s, 3),
        "measured_work_s": round(measured, 3),
        "measured_share": _share(measured, jobs_s),
        "timed_share": _share(measured, jobs_s),
        **{f"{part}_share": _share(parts[part], jobs_s) for part in PARTS[1:]},
        "other_share": _share(other_s, jobs_s),
        "rates_share": _share(rates_s, jobs_s + (rates_s or 0.0)),
    }
