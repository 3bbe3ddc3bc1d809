"""Which rows of the tables an answer quotes, and the numbers read from them.

The answers (:mod:`crossover_study.answers.sentences`, :mod:`crossover_study.answers.remedies`,
:mod:`crossover_study.answers.replicas`) select their rows here: the ok rows of a case
at the seed's size, its failed points there (both :func:`spec.select_rows`, the
selection the figures and the crossover make too), the flags a quoted timing carries, the
crossover table's verdict at the seed's size and the replicas' step times. Nothing is
estimated: values are read from ``timings.csv``, ``crossover.csv`` or the scaling
table and converted to floats.
"""

from __future__ import annotations

import pandas as pd

from crossover_study.analysis.crossover import point_verdict
from crossover_study.analysis.repeats import row_runs
from crossover_study.study.spec import select_rows, truthy


def to_number(value) -> float | None:
    """One table cell as a float; None for an empty cell, NaN or text that is no number."""
    value = pd.to_numeric(value, errors="coerce")
    return None if pd.isna(value) else float(value)


def first_number(series: pd.Series) -> float | None:
    """The first value of a column that is a number, as a float; None when none is."""
    values = pd.to_numeric(series, errors="coerce").dropna()
    return float(values.iloc[0]) if len(values) else None


def seed_rows(timings: pd.DataFrame, case: str, replicas: bool = False) -> pd.DataFrame:
    """ok rows of ``case`` with every axis at the seed's size (:func:`spec.seed_sizes`),
    a slice of ``timings`` (one row per measured point, ``timings.csv``'s columns):
    :func:`spec.select_rows`, whose rule for replicated rows applies (left out unless
    ``replicas``). Raises KeyError when ``timings`` lacks a column of the seed's axes."""
    return select_rows(timings, case, replicas=replicas)


def failed_at_seed(timings: pd.DataFrame, case: str, device: str) -> str | None:
    """The messages of ``case``'s ``error``/``oom`` rows on ``device`` at the seed's size
    (the eager program's first, distinct ones joined with "; "), or None. Replicated
    rows are left out (:func:`spec.select_rows`)."""
    rows = select_rows(timings, case, status=("error", "oom"), device=device)
    if rows.empty:
        return None
    rows = rows.sort_values("variant", key=lambda v: v != "eager", kind="stable")
    return "; ".join(dict.fromkeys(str(m) for m in rows["message"]))


def flag_text(rows: pd.DataFrame) -> str:
    """`` (flagged: noisy, ...)`` when a row's timing is flagged (see the report's
    measurement warnings), else ``""``: a headline number is never quoted without it."""
    flags = []
    if "sync_check" in rows and (rows["sync_check"] == "failed").any():
        flags.append("block-length check failed")
    for column, text in (
        ("noisy", "noisy"),
        (
            "retraced",
            "retraced while timed: a traced function given a new Python number or "
            "shape traces again; pass a tensor",
        ),
        ("nonfinite_loss", "loss NaN/inf: the program diverged"),
        ("contended", "measured under contention: other work held the CPUs"),
        ("threads_changed", "timed with other CPU threads than the job's: the program set them"),
    ):
        if column in rows and truthy(rows[column]).any():
            flags.append(text)
    return f" (flagged: {', '.join(flags)})" if flags else ""


def size_verdicts(text) -> list[tuple[float, str]]:
    """``size_verdicts`` of a crossover row (``32:slower 128:tied``) as (size, verdict)
    pairs; none for an empty cell or a table written before the column existed."""
    if not isinstance(text, str):
        return []
    pairs = []
    for item in text.split():
        size, _, verdict = item.rpartition(":")
        if to_number(size) is not None:
            pairs.append((float(size), verdict))
    return pairs


def verdict_at_seed(rows: pd.DataFrame) -> str | None:
    """The accelerator against the CPU at the seed's size (``slower``, ``tied`` or
    ``faster``) from the first crossover row whose ``size_verdicts`` holds that size."""
    if "size_verdicts" not in rows or "seed_size" not in rows:
        return None
    for _, row in rows.iterrows():
        seed = to_number(row.get("seed_size"))
        for size, verdict in size_verdicts(row.get("size_verdicts")):
            if seed is not None and size == seed:
                return verdict
    return None


def seed_verdict(
    crossover_rows: pd.DataFrame | None, cpu: pd.Series | None, accelerator: pd.Series | None
) -> str | None:
    """The accelerator against the CPU at the seed's size, ``slower``, ``tied`` or
    ``faster``: the one verdict ``crossover-study check`` and the report draw from the
    same numbers. Where a row of ``crossover_rows`` (crossover-table rows of one case,
    program and accelerator) has a verdict at the seed's size, that one
    (:func:`verdict_at_seed`: the axis's bootstrap); else the same rule on the two
    timings rows at that size, ``cpu`` and ``accelerator`` (ok rows, their blocks,
    :func:`point_runs.row_runs`): the percentile 95 % bootstrap interval of the ratio of
    their block medians excludes 1 on the side of the ratio of their ``step_time_s``
    (:func:`crossover.point_verdict`; a row without blocks counts as one block, so the
    sign of the difference decides). None where neither is there. Raises ValueError for
    a row whose blocks do not add up (:func:`point_runs.row_runs`)."""
    found = verdict_at_seed(crossover_rows) if crossover_rows is not None else None
    if found is not None or cpu is None or accelerator is None:
        return found
    t_cpu, t_acc = to_number(cpu.get("step_time_s")), to_number(accelerator.get("step_time_s"))
    if not t_cpu or not t_acc or t_cpu <= 0 or t_acc <= 0:
        return None
    return point_verdict(row_runs(cpu), row_runs(accelerator), t_cpu=t_cpu, t_acc=t_acc)


def replica_times(rows: pd.DataFrame) -> pd.Series:
    """Seconds per step of scaling-table rows: global_batch / samples_per_s (the
    runner's samples_per_s is global_batch / step_time_s)."""
    batch = pd.to_numeric(rows["global_batch"], errors="coerce")
    return batch / pd.to_numeric(rows["samples_per_s"], errors="coerce")
