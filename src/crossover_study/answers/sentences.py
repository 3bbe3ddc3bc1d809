"""The report's answer to each seed question, in one sentence of measured numbers.

Every number in a sentence is read from the tables (``timings.csv`` and
``crossover.csv``) and only rounded for display; nothing is estimated here. The rows a
sentence quotes are selected in :mod:`crossover_study.answers.rows` and written as
:mod:`crossover_study.answers.phrasebook` says; the remedy sentences
(:mod:`crossover_study.answers.remedies`) and the replica sentence
(:mod:`crossover_study.answers.replicas`) are in their own modules.
"""

from __future__ import annotations

import pandas as pd

from crossover_study.answers.phrasebook import (
    EN_DASH,
    INDISTINGUISHABLE,
    TIED,
    device_label,
    faster_or_slower,
    fmt_count,
    fmt_size,
    not_run_text,
    not_visible_text,
)
from crossover_study.answers.regime import model_crossover_text, regime_clause
from crossover_study.answers.rows import (
    failed_at_seed,
    first_number,
    flag_text,
    seed_rows,
    seed_verdict,
    size_verdicts,
    to_number,
)
from crossover_study.core.progress import format_seconds
from crossover_study.study import cases
from crossover_study.study.programs import PROGRAMS, program_column, program_of_rows
from crossover_study.study.programs import cpu_rows as same_program_cpu_rows
from crossover_study.study.spec import (
    ACCELERATORS,
    FRAMEWORKS,
    case_axes,
    contended_apart,
    seed_sizes,
    select_rows,
    without_replicas,
)

__all__ = [
    "case_assumption",
    "case_question",
    "answer_sentence",
    "program_legend",
]


def case_question(case: str) -> str:
    """The question ``case`` asks, as its section heading in the report says it (the
    case registry's: a seed's, or the ``question`` of a case of the study's own)."""
    return cases.question(case)


def case_assumption(case: str) -> str | None:
    """What ``case`` assumes where its seed is silent (shown beside its answer), or None
    when the seed gives everything its program needs (the case registry's)."""
    return cases.get(case).assumption_text()


def _program(framework: str, variant: str, several_variants: bool) -> str:
    return f"{framework}/{variant}" if several_variants else framework


def _measured_clause(
    name: str,
    program: str,
    rows: pd.DataFrame,
    speedup: float | None,
    ran: str | None = None,
    model: str = "",
    verdict: str | None = None,
) -> str:
    """'with torch, CUDA is 1.7x slower at the seed's size; it overtakes ...; both ran
    torch_step' (``rows``: the program's crossover rows; ``ran``: the training program
    both devices ran, ``programs.PROGRAMS``; ``model``: the crossover the step-time model
    predicts, set after the measured one, :func:`answer_regime.model_crossover_text`;
    ``verdict``: the accelerator against the CPU at the seed's size,
    :func:`answer_rows.seed_verdict`, ``tied`` said as indistinguishable)."""
    parts = []
    if speedup is None:
        parts.append(f"with {program}, {name} has no step time at the seed's size")
    elif verdict == TIED or speedup == 1:
        by_medians = "equal medians" if speedup == 1 else f"medians {faster_or_slower(speedup)}"
        parts.append(
            f"with {program}, {name} is {INDISTINGUISHABLE} at the seed's size ({by_medians})"
        )
    else:
        parts.append(f"with {program}, {name} is {faster_or_slower(speedup)} at the seed's size")
    if rows.empty:
        parts.append("no crossover was computed")
    parts += _crossings(rows)
    if model:
        parts.append(model)
    parts += _other_outcomes(rows)
    n_star = first_number(rows["n_star_steps"]) if "n_star_steps" in rows else None
    if n_star is not None:
        parts.append(f"after N* = {fmt_count(n_star)} steps its time-to-train wins")
    elif speedup is not None and speedup < 1:
        parts.append("its time-to-train never beats the CPU's at the seed's size")
    if ran is not None:
        parts.append(f"both devices ran the program {ran}")
    return "; ".join(parts)


def _crossings(rows: pd.DataFrame) -> list[str]:
    """'it overtakes the CPU at hidden ≈ 1900 (95% CI 1500–2400)': the crossovers of
    ``rows`` (crossover-table rows of one program and accelerator), every axis joined
    with "and at"; none where no row has a crossover size."""
    crossings = []
    for _, row in rows[rows["outcome"] == "crossover"].iterrows():
        size = to_number(row.get("crossover_size"))
        if size is None:
            continue
        text = f"{row['axis']} ≈ {fmt_size(size)}"
        lo, hi = to_number(row.get("ci_low")), to_number(row.get("ci_high"))
        if lo is not None and hi is not None:
            text += f" (95% CI {fmt_size(lo)}{EN_DASH}{fmt_size(hi)})"
        crossings.append(text)
    return ["it overtakes the CPU at " + " and at ".join(crossings)] if crossings else []


def _other_outcomes(rows: pd.DataFrame) -> list[str]:
    """The outcomes of ``rows`` that place no crossover, one clause each: faster at part
    of the range (with the sizes), faster throughout, indistinguishable at every size,
    no crossover, too few common sizes."""
    parts: list[str] = []
    for _, row in rows[rows["outcome"] == "accelerator_faster_in_part"].iterrows():
        faster = [
            fmt_size(size) for size, v in size_verdicts(row.get("size_verdicts")) if v == "faster"
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
            f"it is {INDISTINGUISHABLE} at every size measured on {{}}",
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
    return parts


def answer_sentence(
    timings: pd.DataFrame,
    crossover: pd.DataFrame | None,
    case: str,
    predictions: pd.DataFrame | None = None,
) -> str:
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

    Where the table carries the step-time model's columns (``model_*``, set by collect),
    each accelerator's clause adds the crossover the model predicts
    (:func:`answer_regime.model_crossover_text`) and the sentence ends with the regime
    each device's step is in at the seed's size and the share the model explains
    (:func:`answer_regime.regime_clause`); without them nothing is added.
    ``predictions``: :func:`step_reference.predict_on_reference`'s table (this study's
    counts priced at a committed reference run's rates); its rows at the seed's size end
    the sentence, labelled as a prediction naming the reference and its device
    (:func:`prediction_text`).

    Rows measured under contention (``contended``) are quoted with their flag in the
    CPU's step times but kept out of every verdict, speed-up and regime
    (:func:`spec.contended_apart`): an accelerator clause whose rows all were says so.
    """
    crossover = crossover if crossover is not None else pd.DataFrame()
    timings = without_replicas(timings)  # replicated rows have their own section
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
    head = _cpu_head(timings, case, programs, several_variants)
    # Verdicts, speed-ups and the regime from rows measured without contention only.
    timings = contended_apart(timings)
    case_rows = timings[timings["case"] == case]
    clauses = []
    present = set(case_rows["device"]) | (
        set(crossover.loc[crossover["case"] == case, "accelerator"])
        if not crossover.empty
        else set()
    )
    for acc in [a for a in ACCELERATORS if a in present] or list(ACCELERATORS[:1]):
        clauses += _accelerator_clauses(timings, crossover, case, acc, programs, several_variants)
    why = regime_clause(timings, case)
    if why:
        clauses.append(why)
    if predictions is not None:
        predicted = prediction_text(predictions, case)
        if predicted:
            clauses.append(predicted)
    return head + ("; " + "; ".join(clauses) if clauses else "") + "."


def _cpu_head(timings: pd.DataFrame, case: str, programs: list, several_variants: bool) -> str:
    """'At the seed's size (batch=64, hidden=128) the CPU takes 3 ms per step with torch
    and ...': the CPU's median step time (s, as :func:`format_seconds` writes it) per
    program of ``programs`` ((framework, variant) pairs) at the seed's size, each with its
    flags (contended rows included); that none was measured, and why the point failed,
    where none was."""
    sizes = ", ".join(f"{a}={fmt_size(v)}" for a, v in seed_sizes(case).items())
    at_seed = seed_rows(timings, case)
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
                f"{_program(framework, variant, several_variants)}{flag_text(rows)}"
            )
    if cpu_times:
        return (
            f"At the seed's size ({sizes}) the CPU takes "
            + (", ".join(cpu_times[:-1]) + " and " if len(cpu_times) > 1 else "")
            + cpu_times[-1]
        )
    head = f"At the seed's size ({sizes}) no CPU step time was measured"
    failed = failed_at_seed(timings, case, "cpu")
    return head + (f" (the point failed: {failed})" if failed else "")


def _not_run(rows: pd.DataFrame, name: str, program: str | None = None) -> str:
    """Why none of ``rows`` (an accelerator's rows, of one program or of every program)
    ran: their first status and first message, :func:`phrasebook.not_run_text`."""
    messages = [str(m) for m in rows["message"].dropna() if str(m).strip()]
    return not_run_text(name, rows["status"].iloc[0], messages, program)


def _unavailable_reasons(unavailable: pd.DataFrame) -> dict[str, str]:
    """One reason per framework of ``unavailable`` rows (each framework can miss the
    device for its own reason: torch, no TPU backend; TensorFlow, no TPU found)."""
    reasons: dict[str, str] = {}
    for framework, message in zip(unavailable["framework"], unavailable["message"], strict=True):
        if pd.notna(message) and str(message).strip():
            reasons.setdefault(framework, str(message))
    return reasons


def _accelerator_clauses(
    timings: pd.DataFrame,
    crossover: pd.DataFrame,
    case: str,
    acc: str,
    programs: list,
    several_variants: bool,
) -> list[str]:
    """The clauses of accelerator ``acc`` in :func:`answer_sentence`, from ``timings``
    without contended rows: why it did not run, or per program the measured clause
    (:func:`_measured_clause`) with the crossover the model predicts."""
    name = device_label(acc)
    case_rows = timings[timings["case"] == case]
    acc_rows = case_rows[case_rows["device"] == acc]
    if acc_rows.empty:
        return [f"no {name} points were run for this case"]
    if not (acc_rows["status"] == "ok").any():
        unavailable = acc_rows[acc_rows["status"] == "unavailable"]
        if not unavailable.empty:
            return [not_visible_text(name, _unavailable_reasons(unavailable))]
        return [_not_run(acc_rows, name)]
    at_seed = seed_rows(timings, case)
    clauses = []
    for framework, variant in programs:
        program = _program(framework, variant, several_variants)
        group = acc_rows[(acc_rows["framework"] == framework) & (acc_rows["variant"] == variant)]
        if group.empty:
            continue
        if not (group["status"] == "ok").any():
            clauses.append(_not_run(group, name, program))
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
        cpu_rows = seed_rows(cpu_rows, case)
        pick = at_seed[(at_seed["framework"] == framework) & (at_seed["variant"] == variant)]
        acc_at_seed = pick[pick["device"] == acc]
        speedup = first_number(rows["speedup_at_seed"]) if "speedup_at_seed" in rows else None
        if speedup is None:
            cpu = pd.to_numeric(cpu_rows["step_time_s"]).median()
            fast = pd.to_numeric(acc_at_seed["step_time_s"]).median()
            speedup = float(cpu / fast) if pd.notna(cpu) and pd.notna(fast) and fast > 0 else None
        verdict = seed_verdict(
            rows,
            cpu_rows.iloc[0] if len(cpu_rows) else None,
            acc_at_seed.iloc[0] if len(acc_at_seed) else None,
        )
        model = model_crossover_text(timings, case, framework, variant, acc, case_axes(case))
        clauses.append(_measured_clause(name, program, rows, speedup, ran, model, verdict))
    return clauses


def program_legend(timings: pd.DataFrame, case: str) -> str:
    """'Programs measured: keras_fit (Keras Model.fit as the seed calls it ...); ...':
    one line per training program with an ok row of ``case`` in ``timings`` (its
    ``program`` column, else the program table), described as ``programs.PROGRAMS``
    does; empty when there is none. Replicated rows are asked for
    (:func:`spec.select_rows`): the legend names the programs of the case's whole
    section, its scaling figure's ``ddp_step`` and ``strategy_step`` included."""
    rows = select_rows(timings, case, at_seed=False, replicas=True)
    if rows.empty:
        return ""
    found = [p for p in dict.fromkeys(program_column(rows)) if isinstance(p, str)]
    if not found:
        return ""
    return "Programs measured: " + "; ".join(f"{p} ({PROGRAMS.get(p, p)})" for p in found) + "."


def prediction_text(predictions: pd.DataFrame, case: str) -> str:
    """'predicted on NVIDIA H200 from reference <name> (a prediction from this study's
    counts and the reference's measured rates, not a measurement): with torch 912 µs
    per step, launch-bound (the CPU measured 3 ms)' for the rows of ``case`` at the
    seed's size in :func:`predict_on_reference`'s table, eager first; empty text when
    there are none."""
    if predictions.empty:
        return ""
    rows = predictions[predictions["case"] == case]
    for axis, value in seed_sizes(case).items():
        if axis in rows:
            rows = rows[pd.to_numeric(rows[axis], errors="coerce") == value]
    if rows.empty:
        return ""
    rows = rows.sort_values(["variant"], key=lambda v: v != "eager", kind="stable")
    parts = []
    for (reference, device_name), group in rows.groupby(
        ["reference", "device_name"], sort=False, dropna=False
    ):
        machine = device_name if isinstance(device_name, str) else group["device"].iloc[0]
        texts = []
        for _, row in group.iterrows():
            label = (
                row["framework"]
                if row["variant"] == "eager"
                else (f"{row['framework']}/{row['variant']}")
            )
            measured = row["cpu_step_time_s"]
            cpu = f" (the CPU measured {format_seconds(measured)})" if pd.notna(measured) else ""
            texts.append(
                f"with {label} {format_seconds(row['predicted_step_s'])} per step, "
                f"{row['regime']}{cpu}"
            )
        parts.append(
            f"predicted on {machine} from reference {reference} (a prediction from this "
            "study's counts and the reference's measured rates, not a measurement): "
            + "; ".join(texts)
        )
    return "; ".join(parts)
