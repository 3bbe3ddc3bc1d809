"""A CPU step's page faults in the answer's words (issue 51): where the C library gives
the memory a step frees back to the kernel and maps it again at the next, the minor
page faults of a step (``step_page_faults``) cost a share of it; the why says how much,
what removes it (glibc's thresholds in the environment) and the measured remedy (the
``malloc_env`` variant, :mod:`crossover_study.measure.fresh_point`).

Every number is read from ``timings.csv`` (``step_page_faults``, ``rate_page_fault_s``,
``step_time_s``, ``job_step_time_s``) and only rounded for display; a row without a
fault count gets empty text, never an estimate.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from crossover_study.answers.phrasebook import MARGIN, fmt_si
from crossover_study.answers.remedies import APART, ratio_text, variant_speedup, within_noise_text
from crossover_study.answers.rows import to_number
from crossover_study.core.progress import format_seconds
from crossover_study.study.spec import row_axes

#: Bytes of one page a minor fault maps (4 KiB: x86-64 and most Linux builds on arm64),
#: to say how much memory a step's faults map afresh: at least that much, since a fault
#: in a transparent huge page maps 2 MiB (NumPy asks for them from 4 MiB on; PyTorch's
#: CPU tensors did not get them on the 2-core VM, whose THP mode is madvise).
PAGE_BYTES = 4096
#: A step's page faults are named in its why when, at the job's measured price of a
#: fault (``rate_page_fault_s``), they cost at least this share of the measured step.
FAULT_SHARE = 0.1
#: Seconds per fault where the row has no measured price: the lowest measured on the
#: 2-core VM (:data:`crossover_study.measure.heap.FALLBACK_FAULT_S`), said as assumed.
ASSUMED_FAULT_S = 1.0e-6
#: The variant that measures the allocator's remedy (measure.fresh_point).
MALLOC_VARIANT = "malloc_env"


def _round_count(count: float) -> str:
    """'about 16 000' style: two significant digits, thin-space-free thousands."""
    if count >= 1000:
        rounded = round(count, -int(np.floor(np.log10(count))) + 1)
        return f"{rounded:,.0f}".replace(",", " ")
    return f"{count:.0f}"


def page_fault_text(row: pd.Series, rows: pd.DataFrame | None = None) -> str:
    """Where a CPU row's minor page faults a step (``step_page_faults``, the user's heap
    state where ``step_state`` says ``fresh_process``) cost at least :data:`FAULT_SHARE`
    of its step at ``rate_page_fault_s`` (:data:`ASSUMED_FAULT_S` without one, said so):
    'about 11 000 page faults a step: 44 MB of memory is mapped afresh every step (≈ 14
    ms at 1.3 µs a fault, 71 % of the step)', what removes it (glibc's thresholds in
    the environment), and the measured remedy: the ``malloc_env`` row of ``rows`` at the
    same sizes, framework and device ('measured: started so, the step takes 12.6 ms with
    0 faults a step, 1.57× faster than eager (eager in fresh processes: 19.8 ms), 95 % CI
    1.50–1.63': its speed-up paired with the eager program in fresh processes,
    :func:`remedies.variant_speedup`, offered only where the interval's lower end is
    above ``1 + MARGIN``; a row without a paired interval is not offered, said so), or
    that it was not measured. Where the row was timed
    in a fresh process, the measuring job's own step time beside it. Empty text
    otherwise (another device, no fault count, faults too cheap to matter, the
    ``malloc_env`` row itself)."""
    faults = to_number(row.get("step_page_faults"))
    step = to_number(row.get("step_time_s"))
    if row.get("device") != "cpu" or not faults or not step or row.get("variant") == MALLOC_VARIANT:
        return ""
    price = to_number(row.get("rate_page_fault_s"))
    assumed = not price
    price = ASSUMED_FAULT_S if assumed else price
    cost = faults * price
    if cost < FAULT_SHARE * step:
        return ""
    text = (
        f"about {_round_count(faults)} page faults a step: at least "
        f"{fmt_si(faults * PAGE_BYTES, 'B')} of memory is mapped afresh every step (≈ {format_seconds(cost)} at "
        f"{format_seconds(price)} a fault{' assumed' if assumed else ''}, "
        f"{round(100 * min(cost / step, 1.0))} % of the step): the C library gives the memory "
        "the step frees back to the kernel and maps it again at the next"
    )
    if row.get("step_state") == "fresh_process":
        job = to_number(row.get("job_step_time_s"))
        if job:
            text += (
                f" (timed in a fresh process, as your loop runs it; the measuring job's process, "
                f"whose heap kept the memory, took {format_seconds(job)})"
            )
    from crossover_study.measure.heap import REMEDY_ENV

    env = " ".join(f"{k}={v}" for k, v in REMEDY_ENV.items())
    remedy = _malloc_row(row, rows)
    if remedy is None:
        return text + (
            f"; what removes it: start the process with {env} (glibc keeps the freed memory; "
            f"not measured here: list {MALLOC_VARIANT} in sweep.variants)"
        )
    took = to_number(remedy.get("step_time_s"))
    kept = to_number(remedy.get("step_page_faults"))
    text += (
        f"; what removes it: start the process with {env} (glibc keeps the freed memory); "
        f"measured ({MALLOC_VARIANT}, the same program): the step takes {format_seconds(took)} "
        f"with {_round_count(kept or 0.0)} page faults a step"
    )
    entry = variant_speedup(remedy, step, took)
    if not entry["interleaved"]:
        # Never a ratio to the job's row: its process and a fresh one differ in more
        # than the allocator (issue 62), and two medians measured apart have no interval.
        return text + f", but {APART}, so it is not offered as the remedy"
    ratio, how = ratio_text(entry)
    eager = to_number(remedy.get("paired_eager_step_s"))
    against = f" (eager in fresh processes: {format_seconds(eager)})" if eager else ""
    if entry["speedup_low"] > 1 + MARGIN:
        return text + f", {ratio} faster than eager{against}, {how}"
    return text + f": {within_noise_text(MALLOC_VARIANT, entry)}{against}, so it is not offered"


def page_fault_short(row: pd.Series) -> str:
    """The few words of :func:`page_fault_text` for the first screen and the check's
    short why: 'about 11 000 page faults a step (44.2 MB mapped afresh, 58 % of the
    step)'; empty text where :func:`page_fault_text` is."""
    if not page_fault_text(row):
        return ""
    faults = to_number(row.get("step_page_faults"))
    price = to_number(row.get("rate_page_fault_s")) or ASSUMED_FAULT_S
    share = min(faults * price / to_number(row.get("step_time_s")), 1.0)
    return (
        f"about {_round_count(faults)} page faults a step ({fmt_si(faults * PAGE_BYTES, 'B')} "
        f"mapped afresh, {round(100 * share)} % of the step)"
    )


def _malloc_row(row: pd.Series, rows: pd.DataFrame | None) -> pd.Series | None:
    """The ok ``malloc_env`` row of ``rows`` at ``row``'s case, framework, device, timing
    and sizes, or None."""
    if rows is None or rows.empty or "variant" not in rows:
        return None
    match = (rows["variant"] == MALLOC_VARIANT) & (rows["status"] == "ok")
    for column in ("case", "framework", "device", "timing", *row_axes(row)):
        if column in rows and column in row:
            match &= rows[column] == row[column]
    found = rows[match]
    took = pd.to_numeric(found.get("step_time_s", pd.Series(dtype=float)), errors="coerce")
    found = found[took.notna() & (took > 0)]
    return None if found.empty else found.iloc[0]
