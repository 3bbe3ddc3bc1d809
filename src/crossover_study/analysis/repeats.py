"""A point measured in several separate processes (``timing.repeats``).

One process's blocks describe the noise of seconds; two runs of a study minutes apart
differ by more (process start, memory layout, the machine's load and clock drift), so an
interval built from one run's blocks is too narrow for what a second run shows. pyperf
answers this by spreading a benchmark over several worker processes; the study does the
same: run ``r`` of every point is a measuring job of its own (``config.batches``),
scheduled in rounds over the devices (``config.previous_round_jobs``).

This module turns the runs back into one row per point and gives the statistics that
include the run-to-run spread:

- :func:`merge_repeats`: the per-job rows (one per run, column ``repeat``) become one
  row per point in ``timings.csv``: every ok run's blocks in ``block_step_times_s``,
  ``blocks_per_run`` to split them again, ``step_time_s`` the median of all of them and
  ``step_time_pi_*`` the prediction interval below.
- :func:`row_runs`: a timings row's blocks split into runs.
- :func:`resample_medians`: the two-level (hierarchical) bootstrap that the crossover
  uses: runs are resampled with replacement first, then blocks within each drawn run
  (Davison & Hinkley 1997, *Bootstrap Methods and their Application*, §3.8, "multistage
  sampling": resampling the top stage only or both stages; both are resampled here so
  that a point measured once keeps its block bootstrap).
- :func:`prediction_interval`: where a repeat of the study should put the point's
  median.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from crossover_study.study.spec import POINT_COLUMNS, falsy, size_columns

#: Coverage of :func:`prediction_interval`.
PREDICTION_LEVEL = 0.95


def row_runs(row) -> list[list[float]]:
    """Seconds per step of each timed block of one ok timings row, split into runs.

    ``row`` is a mapping (a pandas Series or dict) with ``block_step_times_s`` (JSON
    list) and, for a point merged from several runs, ``blocks_per_run`` (JSON list of
    counts summing to the blocks). A row without recorded blocks gives its
    ``step_time_s`` as one run of one block. Raises ValueError when the counts do not
    add up to the blocks.
    """
    text = row.get("block_step_times_s")
    if not (isinstance(text, str) and text.strip()):
        return [[float(row["step_time_s"])]]
    blocks = [float(b) for b in json.loads(text)]
    counts_text = row.get("blocks_per_run")
    if not (isinstance(counts_text, str) and counts_text.strip()):
        return [blocks]
    counts = [int(c) for c in json.loads(counts_text)]
    if sum(counts) != len(blocks) or any(c < 1 for c in counts):
        raise ValueError(
            f"blocks_per_run {counts} does not split the {len(blocks)} blocks of the row"
        )
    out, start = [], 0
    for c in counts:
        out.append(blocks[start : start + c])
        start += c
    return out


def resample_medians(
    runs: Sequence[Sequence[float]], n_boot: int, rng: np.random.Generator
) -> np.ndarray:
    """Bootstrap replicates of the median step time of one point; shape ``(n_boot,)``.

    ``runs``: per run, the seconds per step of its blocks (one run: a list holding one
    list). One run: every replicate resamples the blocks with replacement and takes
    their median (exactly the draws of the one-level bootstrap, so a table of points
    measured once gives the same replicates as before runs existed). Several runs: each
    replicate draws as many runs as there are, with replacement, then resamples each
    drawn run's blocks with replacement, and takes the median of all drawn blocks.
    Raises ValueError for no runs, an empty run or a block time that is not positive.
    """
    arrays = [np.asarray(r, dtype=float) for r in runs]
    if not arrays or any(a.size == 0 or np.any(a <= 0) for a in arrays):
        raise ValueError("every point needs one or more runs of positive block times")
    if len(arrays) == 1:
        b = arrays[0]
        return np.median(b[rng.integers(0, b.size, size=(n_boot, b.size))], axis=1)
    n_runs, width = len(arrays), max(a.size for a in arrays)
    chosen = rng.integers(0, n_runs, size=(n_boot, n_runs))
    drawn = np.full((n_boot, n_runs, width), np.nan)
    for j, a in enumerate(arrays):
        resampled = a[rng.integers(0, a.size, size=(n_boot, n_runs, a.size))]
        mask = chosen == j
        drawn[mask, : a.size] = resampled[mask]
    return np.nanmedian(drawn.reshape(n_boot, -1), axis=1)


def prediction_interval(
    runs: Sequence[Sequence[float]], level: float = PREDICTION_LEVEL
) -> tuple[float, float] | None:
    """Interval (seconds per step) that the median step time of a repeat of the study,
    with as many runs, should fall in with probability ``level``; None for one run.

    Each run is summarised by the log of its blocks' median; with n runs, mean m and
    sample standard deviation s of those logs, the interval is
    exp(m ± t(1 - (1 - level)/2; n - 1) · s · sqrt(1/n + 1/n)): the normal-theory
    prediction interval for the mean of n future observations from a sample of n (Hahn
    & Meeker 1991, *Statistical Intervals*, §4.7). Log scale because step times are
    positive and their spread is multiplicative. It is a prediction interval, not a
    confidence interval of the median: the question is where a second run lands, and
    that run has its own noise (a 95% confidence interval covers another run's estimate
    at about 83% when both vary alike). One run says nothing about run-to-run spread,
    hence None.
    """
    medians = [statistics.median(r) for r in runs]
    n = len(medians)
    if n < 2:
        return None
    logs = np.log(np.asarray(medians, dtype=float))
    half = stats.t.ppf(0.5 + level / 2, n - 1) * logs.std(ddof=1) * math.sqrt(2.0 / n)
    centre = float(logs.mean())
    return float(math.exp(centre - half)), float(math.exp(centre + half))


def _median_or_none(values) -> float | None:
    kept = [float(v) for v in values if v is not None and not pd.isna(v)]
    return statistics.median(kept) if kept else None


def _first_with(runs: pd.DataFrame, column: str, value) -> pd.Series | None:
    hits = runs[runs[column] == value]
    return None if hits.empty else hits.iloc[0]


def _merge_point(runs: pd.DataFrame, noise_threshold: float) -> dict:
    """One timings row from the rows of one point's runs (sorted by run)."""
    ok = runs[runs["status"] == "ok"]
    if len(runs) == 1 or ok.empty:  # measured once, or no run measured it
        row = runs.iloc[0].to_dict()
        if len(runs) > 1:
            row["repeat"] = None
        elif pd.isna(row.get("repeat")):  # a table written before runs existed
            return row
        if not ok.empty:
            row["repeats"] = 1
        return row
    row = ok.iloc[0].to_dict()
    per_run = [row_runs(r)[0] for _, r in ok.iterrows()]
    blocks = [b for run in per_run for b in run]
    step = statistics.median(blocks)
    q = statistics.quantiles(blocks, n=4, method="inclusive") if len(blocks) > 1 else [step] * 3
    row.update(
        repeat=0 if len(runs) == 1 else None,
        repeats=len(per_run),
        step_time_s=step,
        step_time_iqr_s=q[2] - q[0],
        noisy=(q[2] - q[0]) / step > noise_threshold,
        block_step_times_s=json.dumps(blocks),
        n_blocks=len(blocks),
        blocks_per_run=json.dumps([len(r) for r in per_run]) if len(per_run) > 1 else None,
    )
    interval = prediction_interval(per_run)
    row["step_time_pi_low_s"], row["step_time_pi_high_s"] = interval or (None, None)
    for column in ("cold_start_s", "first_step_s", "device_init_s", "import_s"):
        row[column] = _median_or_none(ok[column])
    row["timer_overhead_s"] = _median_or_none(ok["timer_overhead_s"])
    if "step_page_faults" in ok:  # each run's process faults alike or not at all
        row["step_page_faults"] = _median_or_none(ok["step_page_faults"])
    row["measured_s"] = float(pd.to_numeric(runs["measured_s"], errors="coerce").sum())
    if pd.notna(row.get("global_batch")):
        row["samples_per_s"] = float(row["global_batch"]) / step
    allreduce = _median_or_none(ok["allreduce_s"]) if "allreduce_s" in ok else None
    row["allreduce_s"] = allreduce
    row["allreduce_share"] = None if allreduce is None else allreduce / step
    # The block-length check of the whole point fails when any run's failed; the long
    # block and the host load shown beside it are that run's.
    decisive = _first_with(ok, "sync_check", "failed")
    if decisive is None:
        decisive = _first_with(ok, "sync_check", "passed")
    if decisive is not None:
        for column in (
            "sync_check",
            "sync_check_long_s",
            "sync_check_steps",
            "host_load_start",
            "host_load_end",
            "host_cpus_others",
        ):
            row[column] = decisive.get(column)
    if "traces_timed" in ok and ok["traces_timed"].notna().any():
        row["traces_timed"] = float(ok["traces_timed"].max())
        row["retraced"] = bool(row["traces_timed"] > 0)
    if "same_program" in ok:  # one run that computed something else decides
        differs = ok[falsy(ok["same_program"])]
        if not differs.empty:
            for column in ("same_program", "same_program_message"):
                row[column] = differs.iloc[0].get(column)
    failed = runs[runs["status"] != "ok"]
    if not failed.empty:
        lost = "; ".join(
            f"run {int(r['repeat'])}: {r['status']}: {r.get('message') or ''}".strip()
            for _, r in failed.iterrows()
        )
        note = f"{len(per_run)} of {len(runs)} runs ok (the others: {lost})"
        row["message"] = f"{row['message']}; {note}" if row.get("message") else note
    return row


def merge_repeats(rows: pd.DataFrame, noise_threshold: float) -> pd.DataFrame:
    """One row per point from per-job rows with a ``repeat`` column (typed as the
    timings schema types them: numbers as floats, booleans as bools).

    Rows of one point are those equal in :data:`~crossover_study.study.spec.POINT_COLUMNS` and
    the size columns. For each point: the ok runs' blocks are pooled
    (``block_step_times_s``, run by run, ``blocks_per_run``), ``step_time_s`` and
    ``step_time_iqr_s`` are their median and interquartile range, ``noisy`` compares the
    two with ``noise_threshold``, ``repeats`` counts the ok runs and ``step_time_pi_*``
    is :func:`prediction_interval`; cold start, first step, device initialisation,
    import, timer overhead and all-reduce take the median over the ok runs,
    ``measured_s`` the sum over all runs; the block-length check fails when any run's
    failed (its long block and host load are shown); ``same_program`` is False when any
    run's is (with that run's message); other columns are the first ok run's. A point
    with no ok run keeps its first run's row. Runs that failed while others succeeded
    are named in ``message``. Returns the rows in the order of each point's first row; a point measured once keeps its row, with ``repeats`` 1.
    Raises KeyError when ``rows`` lacks ``repeat``.
    """
    if rows.empty:
        return rows.copy()
    keys = [c for c in (*POINT_COLUMNS, *size_columns(rows)) if c in rows]
    ident = (
        rows[keys].astype(object).where(rows[keys].notna(), "").astype(str).agg("|".join, axis=1)
    )
    repeat = pd.to_numeric(rows["repeat"], errors="coerce").fillna(0)  # empty: run 0
    order = pd.DataFrame({"ident": ident, "repeat": repeat, "pos": range(len(rows))})
    merged = []
    for _, group in order.groupby("ident", sort=False):
        positions = group.sort_values(["repeat", "pos"])["pos"].tolist()
        if len(positions) == 1 or (group["repeat"] > 0).any():
            merged.append(_merge_point(rows.iloc[positions], noise_threshold))
        else:  # the same point twice, not runs of it: kept as they are
            merged += [rows.iloc[p].to_dict() for p in positions]
    return pd.DataFrame(merged, columns=rows.columns)
