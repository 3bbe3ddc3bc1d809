"""The report's remedy sentences: the fastest variant against the naive program at the
seed's size, and how far each remedy moves the crossover and N*.

Every number is read from the tables (``timings.csv`` and
:func:`crossover_study.analysis.shifts.remedy_shift`'s table) and only rounded for display.
"""

from __future__ import annotations

import pandas as pd

from crossover_study.answers.phrasebook import (
    MARGIN,
    device_label,
    faster_or_slower,
    fmt_count,
    fmt_size,
    times,
)
from crossover_study.answers.rows import flag_text, seed_rows, to_number
from crossover_study.core.progress import format_seconds
from crossover_study.study.spec import (
    ACCELERATORS,
    FRAMEWORKS,
    contended_apart,
    falsy,
    synced,
    truthy,
)

#: Variants that add work to the naive program on purpose (the anti-patterns of STUDY.md
#: item 7: a loss read back every step, data copied from the host every step). They
#: show what a factor costs and are never offered as a remedy, even when noise makes
#: one of them look faster.
ANTI_PATTERNS = ("read_loss_every_step", "copy_data_each_step")
#: Variants measured on the CPU only to price another device, never ranked as a remedy:
#: ``strategy_step`` is the TPU's program (TPUStrategy's custom step, data pre-placed per
#: replica, no fit and no validation: ``study/programs.py``), measured so that a TPU card
#: prices the same program the CPU ran.
PRICING_ONLY = ("strategy_step",)
#: Why a variant with ``same_program`` False is never a remedy, short (the row's
#: ``same_program_message`` has the numbers; :mod:`crossover_study.measure.same_program`).
NOT_SAME_PROGRAM = (
    "something else than the step as written (traced or compiled, Python "
    "state the step changes each call, such as a learning rate, stays at its first value)"
)


def not_same_program(rows: pd.DataFrame) -> list[str]:
    """Variants of ``rows`` (timings rows) of which a row has ``same_program`` False:
    a derived variant found to compute something else than the step as written. Sorted;
    empty for a table without the column."""
    if rows.empty or "same_program" not in rows:
        return []
    return sorted(set(rows.loc[falsy(rows["same_program"]), "variant"]))


def left_out_text(variants: list[str]) -> str:
    """``loop left out: it computes something else ...``; "" for no variants."""
    if not variants:
        return ""
    they = "it computes" if len(variants) == 1 else "they compute"
    return f"{', '.join(variants)} left out: {they} {NOT_SAME_PROGRAM}"


def remedy_sentence(timings: pd.DataFrame, case: str) -> str:
    """One sentence per device: the fastest variant against the naive program.

    Compares, at the seed's own size and per framework, the median step time of the
    ``eager`` program with the fastest other variant measured there (synced timings
    only; the :data:`ANTI_PATTERNS` never count as remedies, nor does a variant whose
    ``same_program`` is False: the sentence names it as left out and why), e.g. "On
    cpu: tensorflow custom_step takes 837 µs per step, 25× faster than eager (20.8 ms)".
    Says so when no variant beats eager by more than ``MARGIN`` or none was measured.
    Rows measured under contention (``contended``) are never ranked
    (:func:`spec.contended_apart`): the clause names the variants left out for it, and
    says so when eager itself was.
    """
    # Replicated rows left out (spec.select_rows), contended rows too (not ok there).
    everything = synced(seed_rows(timings, case))
    rows = synced(seed_rows(contended_apart(timings), case))
    parts = []
    for device in [d for d in ("cpu", *ACCELERATORS) if d in set(everything["device"])]:
        on_device = rows[rows["device"] == device]
        clauses = []
        for framework in [f for f in FRAMEWORKS if f in set(everything["framework"])]:
            mine = on_device[on_device["framework"] == framework]
            apart = _contended_variants(everything, device, framework)
            table = remedy_table(mine)
            if "eager" in apart:
                clauses.append(
                    f"no {framework} remedy is ranked: eager was measured under contention "
                    "(other work held the CPUs), so nothing is compared with it"
                )
                continue
            differ = [v for v in not_same_program(mine) if v != "eager"]
            reasons = [left_out_text(differ)] if differ else []
            if apart:
                reasons.append(f"{', '.join(apart)} left out: measured under contention")
            left_out = f" ({'; '.join(reasons)})" if reasons else ""
            times = remedy_times(mine)
            if table.empty:
                if left_out and "eager" in times:
                    clauses.append(f"no {framework} variant is a remedy{left_out}")
                continue
            eager = times["eager"]
            offered = table[table["offered"]]
            if offered.empty:
                top = table.iloc[0]
                clauses.append(
                    f"no {framework} variant beats eager ({format_seconds(eager)}) by more "
                    f"than {MARGIN:.0%}: the fastest, {within_noise_text(top.name, top)}"
                    f"{left_out}"
                )
                continue
            best = offered.iloc[0]
            # A headline number is never quoted without its flags (noisy, failed check).
            flags = flag_text(mine[mine["variant"].isin([best.name, "eager"])])
            ratio, how = ratio_text(best)
            clauses.append(
                f"{framework} {best.name} takes {format_seconds(best['step_time_s'])} per step, "
                f"{ratio} faster than eager ({format_seconds(eager)}; {how})"
                f"{flags}{left_out}"
            )
        if clauses:
            parts.append(f"On {device_label(device)}: " + "; ".join(clauses) + ".")
    if not parts:
        return "No variant other than eager was measured at the seed's size."
    return "Best remedy at the seed's size. " + " ".join(parts)


def remedy_times(rows: pd.DataFrame) -> pd.Series:
    """Median seconds per step by variant of ``rows`` (ok timings rows of one device and
    framework at one size) that may be ranked as remedies against ``eager``: the
    :data:`ANTI_PATTERNS`, the :data:`PRICING_ONLY` variants and those that compute
    something else than the step as written (:func:`not_same_program`) left out."""
    times = pd.to_numeric(rows.set_index("variant")["step_time_s"], errors="coerce")
    times = times.groupby(level=0).median().dropna()
    left_out = [
        *ANTI_PATTERNS,
        *PRICING_ONLY,
        *(v for v in not_same_program(rows) if v != "eager"),
    ]
    return times.drop([v for v in left_out if v in times.index])


#: Columns of :func:`remedy_table`.
REMEDY_COLUMNS = (
    "step_time_s",
    "speedup",
    "speedup_low",
    "speedup_high",
    "interleaved",
    "offered",
    "apart_reason",
)
#: Why a variant measured apart from eager is never offered, whatever its ratio: a ratio
#: of two medians timed at different moments (or in different processes) has no
#: interval, and can hold what differs between the two measurements rather than between
#: the programs (issue 62: ``malloc_env``, a fresh process, 1.2x faster than eager in the
#: job's process, where eager in a fresh process took the same time).
APART = "measured apart from eager, with no paired interval"


def remedy_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Every variant of ``rows`` (ok timings rows of one device and framework at one
    size) that may be ranked against ``eager`` (:func:`remedy_times`), indexed by
    variant, columns :data:`REMEDY_COLUMNS`, the largest speed-up first. The one
    ranking rule of the remedy sentence, the report's first screen and ``check``.

    ``speedup`` (eager / variant, > 1: the variant is faster) is the variant row's
    paired speed-up where its blocks were interleaved with eager's
    (:mod:`crossover_study.measure.pairing`; ``speedup_low``/``speedup_high`` its 95 %
    interval), else the ratio of the two rows' medians (interval NaN, ``interleaved``
    False: not measured side by side). ``offered``: a remedy is offered only when it was
    paired and the lower end of its interval is above ``1 + MARGIN``; a variant measured
    apart is never offered (:data:`APART`), and ``apart_reason`` says why it was measured
    apart (its row's ``interleaved_reason``, or :data:`APART` alone; None for a paired
    one). Empty (with the columns) without an eager row."""
    times = remedy_times(rows)
    if "eager" not in times or len(times) < 2:
        return pd.DataFrame(columns=list(REMEDY_COLUMNS))
    eager = float(times["eager"])
    by_variant = rows.drop_duplicates("variant").set_index("variant")
    entries = {}
    for variant, t in times.drop("eager").items():
        row = by_variant.loc[variant]
        entry = variant_speedup(row, eager, float(t))
        offered = bool(entry["interleaved"]) and entry["speedup_low"] > 1 + MARGIN
        reason = None
        if not entry["interleaved"]:
            why = row.get("interleaved_reason")
            reason = f"{APART} ({why})" if isinstance(why, str) and why else APART
        entries[variant] = (float(t), *entry.values(), offered, reason)
    table = pd.DataFrame.from_dict(entries, orient="index", columns=list(REMEDY_COLUMNS))
    return table.sort_values("speedup", ascending=False)


def variant_speedup(row, eager_s: float, step_time_s: float) -> dict:
    """``{"speedup", "speedup_low", "speedup_high", "interleaved"}`` of one variant row
    (a timings row, Series or mapping) against eager: its paired speed-up and 95 %
    interval where its blocks were interleaved with eager's (``interleaved`` True and
    the three numbers present), else ``eager_s / step_time_s`` (seconds per step of the
    two rows' medians) with a NaN interval and ``interleaved`` False."""
    paired = truthy(pd.Series([row.get("interleaved")])).iloc[0]
    speedup = to_number(row.get("speedup"))
    low, high = to_number(row.get("speedup_low")), to_number(row.get("speedup_high"))
    if paired and None not in (speedup, low, high):
        return {"speedup": speedup, "speedup_low": low, "speedup_high": high, "interleaved": True}
    nan = float("nan")
    return {
        "speedup": eager_s / step_time_s,
        "speedup_low": nan,
        "speedup_high": nan,
        "interleaved": False,
    }


def ratio_text(entry) -> tuple[str, str]:
    """A variant's speed-up and how it was measured: ``("1.52×", "95 % CI 1.47–1.60")``
    for a paired speed-up, ``("1.5×", "measured apart, not side by side")`` without one;
    ``entry`` is a :func:`remedy_table` row (or a mapping with its keys)."""
    speedup = float(entry["speedup"])
    if bool(entry["interleaved"]):
        low, high = float(entry["speedup_low"]), float(entry["speedup_high"])
        return times(speedup, 2), f"95 % CI {low:.2f}–{high:.2f}"
    return times(speedup), "measured apart, not side by side"


def within_noise_text(variant: str, entry) -> str:
    """Why ``variant`` (a :func:`remedy_table` row, or a mapping with its keys) is not
    offered as a remedy, in words: ``compile no different from eager within noise
    (0.97×, 95 % CI 0.90–1.05)`` when its interval covers 1; ``compile slower than eager
    (0.71×, 95 % CI 0.68–0.71)`` when it lies below 1; ``compile 1.06× faster, but its
    95 % CI 1.02–1.11 reaches below 1.1×`` when it lies above 1; ``compile under 10 %
    faster than eager (1.0×, measured apart)`` without an interval; ``malloc_env 1.2×
    faster, but measured apart from eager, with no paired interval (why), so not
    offered`` without one where its ratio is above ``1 + MARGIN`` (:data:`APART`;
    ``entry``'s ``apart_reason``)."""
    speedup = float(entry["speedup"])
    if not bool(entry["interleaved"]):
        if speedup > 1 + MARGIN:
            reason = entry.get("apart_reason")
            reason = reason if isinstance(reason, str) and reason else APART
            return f"{variant} {times(speedup)} faster, but {reason}, so not offered"
        return f"{variant} under {MARGIN:.0%} faster than eager ({times(speedup)}, measured apart)"
    low, high = float(entry["speedup_low"]), float(entry["speedup_high"])
    if low <= 1 <= high:
        return (
            f"{variant} no different from eager within noise ({times(speedup, 2)}, 95 % CI "
            f"{low:.2f}–{high:.2f})"
        )
    if high < 1:
        return f"{variant} slower than eager ({times(speedup, 2)}, 95 % CI {low:.2f}–{high:.2f})"
    return (
        f"{variant} {times(speedup, 2)} faster, but its 95 % CI {low:.2f}–{high:.2f} reaches "
        f"below {times(1 + MARGIN)}"
    )


def _contended_variants(rows: pd.DataFrame, device: str, framework: str) -> list[str]:
    """Variants of ``framework`` on ``device`` among ``rows`` (ok rows at the seed's
    size) with a row measured under contention, sorted; anti-patterns left out (never
    ranked anyway)."""
    if "contended" not in rows:
        return []
    mine = rows[(rows["device"] == device) & (rows["framework"] == framework)]
    mine = mine[truthy(mine["contended"])]
    return sorted(set(mine["variant"]) - set(ANTI_PATTERNS))


def _where(outcome, size, axis: str) -> str:
    """Where the accelerator overtakes the CPU on ``axis``, in words."""
    if not isinstance(outcome, str):
        return "not measured"
    if outcome == "crossover" and to_number(size) is not None:
        return f"at {axis} ≈ {fmt_size(to_number(size))}"
    return {
        "accelerator_faster_throughout": f"already at the smallest {axis}",
        "no_crossover": f"nowhere in the measured {axis} range",
        "indistinguishable": f"nowhere: indistinguishable within noise at every {axis} measured",
        "accelerator_faster_in_part": (
            f"nowhere it can be placed: faster only at part of the measured {axis} range"
        ),
    }.get(outcome, f"unknown ({outcome})")


def _n_star_text(value) -> str:
    value = to_number(value)
    return "never" if value is None else f"after {fmt_count(value)} steps"


def remedy_shift_sentence(
    shift: pd.DataFrame, case: str, timings: pd.DataFrame | None = None
) -> str:
    """How far each remedy moves the crossover and N* for ``case``, in words.

    ``shift`` is :func:`crossover_study.analysis.shifts.remedy_shift`'s table. One clause per
    framework × variant × accelerator: the speed-up at the seed's size against the CPU
    program it is compared with (``cpu_variant``), the crossover on each axis with more
    than one common size next to eager's (with the ratio when both cross), and N* next
    to eager's. Says so when no remedy has accelerator data to compare. With
    ``timings`` (the timings table), names the variants left out of ``shift`` because
    they compute something else than the step as written (``same_program`` False,
    :func:`crossover_study.analysis.shifts.remedy_shift`).
    """
    rows = shift[shift["case"] == case] if not shift.empty else shift
    differ = []
    if timings is not None and not timings.empty:
        mine = timings[timings["case"] == case]
        differ = [
            f"{f} {v}" for f in FRAMEWORKS for v in not_same_program(mine[mine["framework"] == f])
        ]
    left_out = f" ({left_out_text(differ)})" if differ else ""
    if rows.empty:
        return (
            "No remedy (a variant other than eager) has ok accelerator rows for this "
            f"case, so no remedy's effect on the crossover or N* was measured here{left_out}."
        )
    clauses = []
    for (framework, variant, acc), group in rows.groupby(
        ["framework", "variant", "accelerator"], sort=False
    ):
        name = device_label(acc)
        first = group.iloc[0]
        speedup = to_number(first.get("speedup_at_seed"))
        text = f"{framework} {variant} on {name}"
        if speedup is not None:
            text += f" is {faster_or_slower(speedup)} than the CPU's {first.get('cpu_variant')} at the seed's size"
            if isinstance(first.get("program"), str):
                text += f" (both ran {first['program']})"
        crossings = []
        for _, r in group[group["outcome"] != "too_few_points"].iterrows():
            piece = (
                f"overtakes it {_where(r['outcome'], r['crossover_size'], r['axis'])} "
                f"(eager: {_where(r['eager_outcome'], r['eager_crossover_size'], r['axis'])}"
            )
            ratio = to_number(r.get("crossover_shift"))
            if ratio is not None and ratio < 1:
                piece += f"; {times(1 / ratio)} smaller"
            elif ratio is not None:
                piece += f"; {times(ratio)} larger"
            crossings.append(piece + ")")
        if crossings:
            text += "; " + "; ".join(crossings)
        text += (
            f"; time-to-train wins {_n_star_text(first.get('n_star_steps'))} "
            f"(eager: {_n_star_text(first.get('eager_n_star_steps'))})"
        )
        clauses.append(text)
    return ". ".join(clauses) + left_out + "."
