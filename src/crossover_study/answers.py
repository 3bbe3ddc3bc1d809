"""The report's answer to each seed question, in one sentence of measured numbers.

Every number in a sentence is read from the tables (``timings.csv`` and
``crossover.csv``) and only rounded for display; nothing is estimated here.
"""

from __future__ import annotations

import pandas as pd

from crossover_study import cases
from crossover_study.programs import PROGRAMS, program_column, program_of_rows
from crossover_study.programs import cpu_rows as same_program_cpu_rows
from crossover_study.spec import (
    ACCELERATORS,
    FRAMEWORKS,
    seed_sizes,
    truthy,
    without_replicas,
)

#: Display characters (kept as escapes so linters do not mistake them for x and -).
TIMES = "\u00d7"
EN_DASH = "\u2013"

__all__ = [
    "case_assumption",
    "case_question",
    "answer_sentence",
    "format_seconds",
    "program_legend",
    "remedy_sentence",
    "remedy_shift_sentence",
    "replica_program_sentence",
]

_DEVICE_NAMES = {"cpu": "CPU", "cuda": "CUDA", "cuda_multi": "several-GPU CUDA", "tpu": "TPU"}


def case_question(case: str) -> str:
    """The question ``case`` asks, as its section heading in the report says it (the
    case registry's: a seed's, or the ``question`` of a case of the study's own)."""
    return cases.question(case)


def case_assumption(case: str) -> str | None:
    """What ``case`` assumes where its seed is silent (shown beside its answer), or None
    when the seed gives everything its program needs (the case registry's)."""
    return cases.get(case).assumption_text()


def format_seconds(seconds: float) -> str:
    """A duration in readable units: ``522 µs``, ``1.84 ms``, ``3.2 s`` (3 digits)."""
    s = float(seconds)
    if abs(s) < 1e-3:
        return f"{s * 1e6:.3g} µs"
    if abs(s) < 1:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s" if abs(s) < 1000 else f"{s:,.0f} s"


def _fmt_size(value: float) -> str:
    """A size: whole numbers as they are (``1024``), else 3 digits (``13.5``)."""
    value = float(value)
    return f"{round(value)}" if abs(value) >= 100 else f"{value:.3g}"


def _fmt_count(value: float) -> str:
    """A count of steps with thousands separators (``12,345``)."""
    return f"{round(float(value)):,}"


def _fmt_ratio(ratio: float) -> str:
    return f"{ratio:.0f}" if ratio >= 10 else f"{ratio:.1f}"


def _num(value) -> float | None:
    value = pd.to_numeric(value, errors="coerce")
    return None if pd.isna(value) else float(value)


def _first(series: pd.Series) -> float | None:
    values = pd.to_numeric(series, errors="coerce").dropna()
    return float(values.iloc[0]) if len(values) else None


def _seed_rows(timings: pd.DataFrame, case: str) -> pd.DataFrame:
    """ok rows of ``case`` with every axis at the seed's size."""
    df = timings[(timings["case"] == case) & (timings["status"] == "ok")]
    for axis, value in seed_sizes(case).items():
        df = df[pd.to_numeric(df[axis], errors="coerce") == value]
    return df


def _failed_at_seed(timings: pd.DataFrame, case: str, device: str) -> str | None:
    """The messages of ``case``'s ``error``/``oom`` rows on ``device`` at the seed's size
    (the eager program's first, distinct ones joined with "; "), or None."""
    rows = timings[(timings["case"] == case) & (timings["device"] == device)]
    rows = rows[rows["status"].isin(["error", "oom"])]
    for axis, value in seed_sizes(case).items():
        rows = rows[pd.to_numeric(rows[axis], errors="coerce") == value]
    if rows.empty:
        return None
    rows = rows.sort_values("variant", key=lambda v: v != "eager", kind="stable")
    return "; ".join(dict.fromkeys(str(m) for m in rows["message"]))


def _flags(rows: pd.DataFrame) -> str:
    """`` (flagged: noisy, ...)`` when a row's timing is flagged (see the report's
    measurement warnings), else ``""``: a headline number is never quoted without it."""
    flags = []
    if "sync_check" in rows and (rows["sync_check"] == "failed").any():
        flags.append("block-length check failed")
    for column, text in (
        ("noisy", "noisy"),
        ("retraced", "retraced while timed"),
        ("nonfinite_loss", "loss NaN/inf: the program diverged"),
    ):
        if column in rows and truthy(rows[column]).any():
            flags.append(text)
    return f" (flagged: {', '.join(flags)})" if flags else ""


def _program(framework: str, variant: str, several_variants: bool) -> str:
    return f"{framework}/{variant}" if several_variants else framework


def _size_verdicts(text) -> list[tuple[float, str]]:
    """``size_verdicts`` of a crossover row (``32:slower 128:tied``) as (size, verdict)
    pairs; none for an empty cell or a table written before the column existed."""
    if not isinstance(text, str):
        return []
    pairs = []
    for item in text.split():
        size, _, verdict = item.rpartition(":")
        if _num(size) is not None:
            pairs.append((float(size), verdict))
    return pairs


def _seed_verdict(rows: pd.DataFrame) -> str | None:
    """The accelerator against the CPU at the seed's size (``slower``, ``tied`` or
    ``faster``) from the first crossover row whose ``size_verdicts`` holds that size."""
    if "size_verdicts" not in rows or "seed_size" not in rows:
        return None
    for _, row in rows.iterrows():
        seed = _num(row.get("seed_size"))
        for size, verdict in _size_verdicts(row.get("size_verdicts")):
            if seed is not None and size == seed:
                return verdict
    return None


def _measured_clause(
    name: str,
    program: str,
    rows: pd.DataFrame,
    speedup: float | None,
    ran: str | None = None,
) -> str:
    """'with torch, CUDA is 1.7x slower at the seed's size; it overtakes ...; both ran
    torch_step' (``ran``: the training program both devices ran, ``programs.PROGRAMS``)."""
    parts = []
    seed_verdict = _seed_verdict(rows)
    if speedup is None:
        parts.append(f"with {program}, {name} has no step time at the seed's size")
    elif seed_verdict == "tied" or speedup == 1:
        by_medians = (
            "equal medians"
            if speedup == 1
            else f"medians {_fmt_ratio(speedup)}{TIMES} faster"
            if speedup > 1
            else f"medians {_fmt_ratio(1 / speedup)}{TIMES} slower"
        )
        parts.append(
            f"with {program}, {name} is indistinguishable from the CPU within noise at the "
            f"seed's size ({by_medians})"
        )
    elif speedup >= 1:
        parts.append(
            f"with {program}, {name} is {_fmt_ratio(speedup)}{TIMES} faster at the seed's size"
        )
    else:
        parts.append(
            f"with {program}, {name} is {_fmt_ratio(1 / speedup)}{TIMES} slower at the seed's size"
        )
    if rows.empty:
        parts.append("no crossover was computed")
    crossings = []
    for _, row in rows[rows["outcome"] == "crossover"].iterrows():
        size = _num(row.get("crossover_size"))
        if size is None:
            continue
        text = f"{row['axis']} ≈ {_fmt_size(size)}"
        lo, hi = _num(row.get("ci_low")), _num(row.get("ci_high"))
        if lo is not None and hi is not None:
            text += f" (95% CI {_fmt_size(lo)}{EN_DASH}{_fmt_size(hi)})"
        crossings.append(text)
    if crossings:
        parts.append("it overtakes the CPU at " + " and at ".join(crossings))
    for _, row in rows[rows["outcome"] == "accelerator_faster_in_part"].iterrows():
        faster = [
            _fmt_size(size) for size, v in _size_verdicts(row.get("size_verdicts")) if v == "faster"
        ]
        where = f" ({row['axis']} = {', '.join(faster)})" if faster else ""
        parts.append(
            f"it is faster only at part of the measured range of {row['axis']}{where}, "
            "with no smaller size where it is slower, so no crossover is placed"
        )
    for outcome, template in (
        (
            "accelerator_faster_throughout",
            "it is faster over the whole measured range of {}",
        ),
        (
            "indistinguishable",
            "it is indistinguishable from the CPU within noise at every size measured on {}",
        ),
        (
            "no_crossover",
            "it does not overtake the CPU inside the measured range of {}",
        ),
        ("too_few_points", "too few common sizes on {} to place a crossover"),
    ):
        axes = list(dict.fromkeys(rows.loc[rows["outcome"] == outcome, "axis"]))
        if axes:
            parts.append(
                template.format(
                    " or ".join(axes) if outcome == "no_crossover" else " and ".join(axes)
                )
            )
    n_star = _first(rows["n_star_steps"]) if "n_star_steps" in rows else None
    if n_star is not None:
        parts.append(f"after N* = {_fmt_count(n_star)} steps its time-to-train wins")
    elif speedup is not None and speedup < 1:
        parts.append("its time-to-train never beats the CPU's at the seed's size")
    if ran is not None:
        parts.append(f"both devices ran the program {ran}")
    return "; ".join(parts)


def answer_sentence(timings: pd.DataFrame, crossover: pd.DataFrame | None, case: str) -> str:
    """One sentence answering the seed question of ``case`` with measured numbers.

    Says the CPU's median step time at the seed's own size per framework (µs, ms or
    s), then per accelerator and framework: how many times faster or slower it is at
    the seed's size (``speedup_at_seed`` of ``crossover``, else the ratio of the two
    step times in ``timings``; "indistinguishable from the CPU within noise" where the
    ``size_verdicts`` of ``crossover`` call the seed's size tied, or the medians are
    equal), where it overtakes the CPU (``crossover_size`` with its 95% CI) or that it
    does not, is faster throughout, faster only at some sizes, or "indistinguishable
    within noise at every size measured" (outcome ``indistinguishable``), after how
    many steps N* its time-to-train wins, and the
    training program both devices ran (``programs.PROGRAMS``). The accelerator is only
    compared with CPU rows of the same program (``programs.cpu_rows``); where the CPU has
    none, the clause says so instead of comparing two programs.
    When the accelerator's rows are all ``unavailable`` the sentence says "no CUDA
    device was visible on this machine (<message>), so no crossover was measured here".
    """
    crossover = crossover if crossover is not None else pd.DataFrame()
    timings = without_replicas(timings)  # replicated rows have their own section
    seed = seed_sizes(case)
    at_seed = _seed_rows(timings, case)
    case_rows = timings[timings["case"] == case]
    several_variants = case_rows["variant"].nunique() > 1
    programs = [
        (f, v)
        for f in sorted(
            case_rows["framework"].unique(),
            key=lambda f: (FRAMEWORKS.index(f) if f in FRAMEWORKS else 99, f),
        )
        for v in sorted(case_rows.loc[case_rows["framework"] == f, "variant"].unique())
    ]

    sizes = ", ".join(f"{a}={_fmt_size(v)}" for a, v in seed.items())
    cpu_times = []
    for framework, variant in programs:
        rows = at_seed[
            (at_seed["device"] == "cpu")
            & (at_seed["framework"] == framework)
            & (at_seed["variant"] == variant)
        ]
        t = pd.to_numeric(rows["step_time_s"], errors="coerce").median()
        if pd.notna(t):
            cpu_times.append(
                f"{format_seconds(t)} per step with "
                f"{_program(framework, variant, several_variants)}{_flags(rows)}"
            )
    if cpu_times:
        head = (
            f"At the seed's size ({sizes}) the CPU takes "
            + (", ".join(cpu_times[:-1]) + " and " if len(cpu_times) > 1 else "")
            + cpu_times[-1]
        )
    else:
        head = f"At the seed's size ({sizes}) no CPU step time was measured"
        failed = _failed_at_seed(timings, case, "cpu")
        if failed:
            head += f" (the point failed: {failed})"

    clauses = []
    present = set(case_rows["device"]) | (
        set(crossover.loc[crossover["case"] == case, "accelerator"])
        if not crossover.empty
        else set()
    )
    for acc in [a for a in ACCELERATORS if a in present] or list(ACCELERATORS[:1]):
        name = _DEVICE_NAMES.get(acc, acc.upper())
        acc_rows = case_rows[case_rows["device"] == acc]
        if acc_rows.empty:
            clauses.append(f"no {name} points were run for this case")
            continue
        if not (acc_rows["status"] == "ok").any():
            unavailable = acc_rows[acc_rows["status"] == "unavailable"]
            if not unavailable.empty:
                # One reason per framework: each framework can miss the device for its
                # own reason (torch: no TPU backend; TensorFlow: no TPU found).
                reasons = {}
                for framework, message in zip(
                    unavailable["framework"], unavailable["message"], strict=True
                ):
                    if pd.notna(message) and str(message).strip():
                        reasons.setdefault(framework, str(message))
                distinct = set(reasons.values())
                if not reasons:
                    why = ""
                elif len(distinct) == 1:
                    why = f" ({distinct.pop()})"
                else:
                    why = " (" + "; ".join(f"{f}: {m}" for f, m in reasons.items()) + ")"
                clauses.append(
                    f"no {name} device was visible on this machine{why}, "
                    "so no crossover was measured here"
                )
            else:
                status = acc_rows["status"].iloc[0]
                messages = [str(m) for m in acc_rows["message"].dropna() if str(m).strip()]
                why = f": {messages[0]}" if messages else ""
                clauses.append(
                    f"no {name} point ran ({status}{why}), so no crossover was measured here"
                )
            continue
        for framework, variant in programs:
            program = _program(framework, variant, several_variants)
            group = acc_rows[
                (acc_rows["framework"] == framework) & (acc_rows["variant"] == variant)
            ]
            if group.empty:
                continue
            if not (group["status"] == "ok").any():
                status = group["status"].iloc[0]
                messages = [str(m) for m in group["message"].dropna() if str(m).strip()]
                why = f": {messages[0]}" if messages else ""
                clauses.append(f"with {program}, no {name} point ran ({status}{why})")
                continue
            rows = (
                crossover[
                    (crossover["case"] == case)
                    & (crossover["framework"] == framework)
                    & (crossover["variant"] == variant)
                    & (crossover["accelerator"] == acc)
                ]
                if not crossover.empty
                else pd.DataFrame(columns=["outcome", "axis"])
            )
            cpu_rows, _, ran = same_program_cpu_rows(case_rows, case, framework, variant, acc)
            if ran is None:
                ran = program_of_rows(group[group["status"] == "ok"])
                clauses.append(
                    f"with {program}, the CPU has no ok rows of the same program ({ran}), "
                    f"so {name} is not compared with the CPU"
                )
                continue
            cpu_rows = _seed_rows(cpu_rows, case)
            speedup = _first(rows["speedup_at_seed"]) if "speedup_at_seed" in rows else None
            if speedup is None:
                pick = at_seed[
                    (at_seed["framework"] == framework) & (at_seed["variant"] == variant)
                ]
                cpu = pd.to_numeric(cpu_rows["step_time_s"]).median()
                fast = pd.to_numeric(pick.loc[pick["device"] == acc, "step_time_s"]).median()
                speedup = (
                    float(cpu / fast) if pd.notna(cpu) and pd.notna(fast) and fast > 0 else None
                )
            clauses.append(_measured_clause(name, program, rows, speedup, ran))
    return head + ("; " + "; ".join(clauses) if clauses else "") + "."


def program_legend(timings: pd.DataFrame, case: str) -> str:
    """'Programs measured: keras_fit (Keras Model.fit as the seed calls it ...); ...':
    one line per training program with an ok row of ``case`` in ``timings`` (its
    ``program`` column, else the program table), described as ``programs.PROGRAMS``
    does; empty when there is none."""
    rows = timings[(timings["case"] == case) & (timings["status"] == "ok")]
    if rows.empty:
        return ""
    found = [p for p in dict.fromkeys(program_column(rows)) if isinstance(p, str)]
    if not found:
        return ""
    return "Programs measured: " + "; ".join(f"{p} ({PROGRAMS.get(p, p)})" for p in found) + "."


#: A variant must be this much faster than eager to be called a remedy: the noise
#: threshold of STUDY.md item 4 (IQR/median 0.1), so noise is not sold as a speed-up.
MARGIN = 0.1
#: Variants that add work to the naive program on purpose (the anti-patterns of STUDY.md
#: item 7: a loss read back every step, data copied from the host every step). They
#: show what a factor costs and are never offered as a remedy, even when noise makes
#: one of them look faster.
ANTI_PATTERNS = ("read_loss_every_step", "copy_data_each_step")


def remedy_sentence(timings: pd.DataFrame, case: str) -> str:
    """One sentence per device: the fastest variant against the naive program.

    Compares, at the seed's own size and per framework, the median step time of the
    ``eager`` program with the fastest other variant measured there (synced timings
    only; the :data:`ANTI_PATTERNS` never count as remedies), e.g. "On cpu: tensorflow custom_step takes 837 µs per step, 25× faster than
    eager (20.8 ms)". Says so when no variant beats eager by more than ``MARGIN`` or
    none was measured.
    """
    rows = _seed_rows(without_replicas(timings), case)
    if "timing" in rows:
        rows = rows[rows["timing"].fillna("synced") == "synced"]
    parts = []
    for device in [d for d in ("cpu", *ACCELERATORS) if d in set(rows["device"])]:
        on_device = rows[rows["device"] == device]
        clauses = []
        for framework in [f for f in FRAMEWORKS if f in set(on_device["framework"])]:
            mine = on_device[on_device["framework"] == framework]
            times = pd.to_numeric(mine.set_index("variant")["step_time_s"], errors="coerce")
            times = times.groupby(level=0).median().dropna()
            times = times.drop([v for v in ANTI_PATTERNS if v in times.index])
            if "eager" not in times or len(times) < 2:
                continue
            eager = times["eager"]
            best = times.drop("eager").idxmin()
            if eager / times[best] < 1 + MARGIN:
                clauses.append(
                    f"no {framework} variant beats eager ({format_seconds(eager)}) by more "
                    f"than {MARGIN:.0%}"
                )
                continue
            ratio = eager / times[best]
            # A headline number is never quoted without its flags (noisy, failed check).
            flags = _flags(mine[mine["variant"].isin([best, "eager"])])
            clauses.append(
                f"{framework} {best} takes {format_seconds(times[best])} per step, "
                f"{_fmt_ratio(ratio)}{TIMES} faster than eager ({format_seconds(eager)})"
                f"{flags}"
            )
        if clauses:
            parts.append(f"On {_DEVICE_NAMES.get(device, device)}: " + "; ".join(clauses) + ".")
    if not parts:
        return "No variant other than eager was measured at the seed's size."
    return "Best remedy at the seed's size. " + " ".join(parts)


def _where(outcome, size, axis: str) -> str:
    """Where the accelerator overtakes the CPU on ``axis``, in words."""
    if not isinstance(outcome, str):
        return "not measured"
    if outcome == "crossover" and _num(size) is not None:
        return f"at {axis} ≈ {_fmt_size(_num(size))}"
    return {
        "accelerator_faster_throughout": f"already at the smallest {axis}",
        "no_crossover": f"nowhere in the measured {axis} range",
        "indistinguishable": f"nowhere: indistinguishable within noise at every {axis} measured",
        "accelerator_faster_in_part": (
            f"nowhere it can be placed: faster only at part of the measured {axis} range"
        ),
    }.get(outcome, f"unknown ({outcome})")


def _n_star_text(value) -> str:
    value = _num(value)
    return "never" if value is None else f"after {_fmt_count(value)} steps"


def remedy_shift_sentence(shift: pd.DataFrame, case: str) -> str:
    """How far each remedy moves the crossover and N* for ``case``, in words.

    ``shift`` is :func:`crossover_study.crossover.remedy_shift`'s table. One clause per
    framework × variant × accelerator: the speed-up at the seed's size against the CPU
    program it is compared with (``cpu_variant``), the crossover on each axis with more
    than one common size next to eager's (with the ratio when both cross), and N* next
    to eager's. Says so when no remedy has accelerator data to compare.
    """
    rows = shift[shift["case"] == case] if not shift.empty else shift
    if rows.empty:
        return (
            "No remedy (a variant other than eager) has ok accelerator rows for this "
            "case, so no remedy's effect on the crossover or N* was measured here."
        )
    clauses = []
    for (framework, variant, acc), group in rows.groupby(
        ["framework", "variant", "accelerator"], sort=False
    ):
        name = _DEVICE_NAMES.get(acc, acc.upper())
        first = group.iloc[0]
        speedup = _num(first.get("speedup_at_seed"))
        text = f"{framework} {variant} on {name}"
        if speedup is not None:
            faster = (
                f"{_fmt_ratio(speedup)}{TIMES} faster"
                if speedup >= 1
                else (f"{_fmt_ratio(1 / speedup)}{TIMES} slower")
            )
            text += f" is {faster} than the CPU's {first.get('cpu_variant')} at the seed's size"
            if isinstance(first.get("program"), str):
                text += f" (both ran {first['program']})"
        crossings = []
        for _, r in group[group["outcome"] != "too_few_points"].iterrows():
            piece = (
                f"overtakes it {_where(r['outcome'], r['crossover_size'], r['axis'])} "
                f"(eager: {_where(r['eager_outcome'], r['eager_crossover_size'], r['axis'])}"
            )
            ratio = _num(r.get("crossover_shift"))
            if ratio is not None and ratio < 1:
                piece += f"; {_fmt_ratio(1 / ratio)}{TIMES} smaller"
            elif ratio is not None:
                piece += f"; {_fmt_ratio(ratio)}{TIMES} larger"
            crossings.append(piece + ")")
        if crossings:
            text += "; " + "; ".join(crossings)
        text += (
            f"; time-to-train wins {_n_star_text(first.get('n_star_steps'))} "
            f"(eager: {_n_star_text(first.get('eager_n_star_steps'))})"
        )
        clauses.append(text)
    return ". ".join(clauses) + "."


#: The two TensorFlow replica programs the replica sentence compares: the seed's Keras
#: ``fit`` under MirroredStrategy and the lean custom step under the same strategy.
FIT_PROGRAM, STEP_PROGRAM = "mirrored_fit", "mirrored"


def _replica_times(rows: pd.DataFrame) -> pd.Series:
    """Seconds per step of scaling-table rows: global_batch / samples_per_s (the
    runner's samples_per_s is global_batch / step_time_s)."""
    batch = pd.to_numeric(rows["global_batch"], errors="coerce")
    return batch / pd.to_numeric(rows["samples_per_s"], errors="coerce")


def replica_program_sentence(scaling: pd.DataFrame, case: str) -> str | None:
    """How much of the replicas' missing speed-up is Keras's ``fit`` machinery and how
    much is communication, in words: ``mirrored_fit`` (the seed's Keras ``fit`` under
    ``MirroredStrategy``) beside ``mirrored`` (a custom step on data placed per replica,
    the same strategy) at the same device, replicas and scaling.

    ``scaling`` is :func:`crossover_study.figures.scaling_table`'s table. Per device,
    one clause for one replica (the two programs' step times: what fit's pipeline and
    per-step log reads cost without any communication) and one per replica count x
    scaling measured for both: both step times, fit's extra time per step, one
    all-reduce of the gradients timed alone (``allreduce_share`` x fit's step time, an
    upper bound on the exposed communication) and each program's speed-up over its own
    one replica (a one-replica clause only where both programs' own one-replica points
    were measured, not an ``eager`` fallback). A pair of step times is followed by
    "(flagged noisy: ...)" when the table's ``noisy`` says either program's timing is.
    Step times are ``global_batch / samples_per_s``. Returns None when ``case`` has no
    ``mirrored_fit`` row; says so when ``mirrored`` was not measured beside it. Every
    number is read from the table.
    """
    if scaling.empty or "replica_variant" not in scaling:
        return None
    rows = scaling[scaling["case"] == case]
    fit = rows[rows["replica_variant"] == FIT_PROGRAM]
    if fit.empty:
        return None
    step = rows[rows["replica_variant"] == STEP_PROGRAM]
    parts = []
    for device in [d for d in ("cpu", *ACCELERATORS) if d in set(fit["device"])]:
        mine, lean = fit[fit["device"] == device], step[step["device"] == device]
        clauses = []
        for key, f_rows in mine.groupby(["replicas", "scaling"], sort=False):
            s_rows = lean[(lean["replicas"] == key[0]) & (lean["scaling"] == key[1])]
            if s_rows.empty:
                continue
            f, s_ = f_rows.iloc[0], s_rows.iloc[0]
            t_fit, t_step = (
                float(_replica_times(f_rows).iloc[0]),
                float(_replica_times(s_rows).iloc[0]),
            )
            extra = t_fit - t_step
            noisy = [
                name
                for name, r in (("fit", f), ("custom step", s_))
                if "noisy" in r.index and bool(r["noisy"])
            ]
            flag = f" (flagged noisy: {', '.join(noisy)})" if noisy else ""
            cost = (
                f"fit adds {format_seconds(extra)} per step ({extra / t_fit:.0%} of its step)"
                if extra >= 0
                else f"fit is {format_seconds(-extra)} per step faster"
            )
            if key[1] == "baseline":
                if (f["variant"], s_["variant"]) != (FIT_PROGRAM, STEP_PROGRAM):
                    continue  # an old table's eager fallback: not the two programs
                clauses.append(
                    f"on one replica Keras fit takes {format_seconds(t_fit)} per step and "
                    f"the custom step {format_seconds(t_step)}{flag}: {cost}, with one replica "
                    "and no all-reduce across devices"
                )
                continue
            text = (
                f"at {int(key[0])} replicas, {key[1]} scaling, fit takes "
                f"{format_seconds(t_fit)} per step and the custom step "
                f"{format_seconds(t_step)}{flag}: {cost}"
            )
            share = _num(f.get("allreduce_share"))
            if share is not None:
                text += (
                    f", while one all-reduce of the gradients alone takes "
                    f"{format_seconds(share * t_fit)}"
                )
            speedups = [
                f"{name} {_fmt_ratio(v)}{TIMES}"
                for name, v in (
                    ("fit", _num(f.get("speedup"))),
                    ("custom step", _num(s_.get("speedup"))),
                )
                if v is not None
            ]
            if speedups:
                text += "; speed-up over each program's own one replica: " + ", ".join(speedups)
            clauses.append(text)
        if clauses:
            parts.append(f"On {_DEVICE_NAMES.get(device, device)}, " + "; ".join(clauses) + ".")
    if not parts:
        return (
            f"{case}: mirrored_fit (Keras fit) was measured, but not mirrored (the custom "
            "step) at the same device, replicas and scaling, so the two are not compared."
        )
    return (
        "Keras fit as the seed ran it (mirrored_fit) beside a custom step under the same "
        "MirroredStrategy (mirrored). " + " ".join(parts)
    )
