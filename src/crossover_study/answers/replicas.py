"""The report's replica sentence: how much of the replicas' missing speed-up is Keras's
``fit`` machinery and how much is communication.

Every number is read from :func:`crossover_study.figures.scaling.scaling_table`'s table and
only rounded for display.
"""

from __future__ import annotations

import pandas as pd

from crossover_study.answers.phrasebook import device_label, times
from crossover_study.answers.rows import replica_times, to_number
from crossover_study.core.progress import format_seconds
from crossover_study.study.spec import ACCELERATORS

#: The two TensorFlow replica programs the replica sentence compares: the seed's Keras
#: ``fit`` under MirroredStrategy and the lean custom step under the same strategy.
FIT_PROGRAM, STEP_PROGRAM = "mirrored_fit", "mirrored"


def replica_program_sentence(scaling: pd.DataFrame, case: str) -> str | None:
    """How much of the replicas' missing speed-up is Keras's ``fit`` machinery and how
    much is communication, in words: ``mirrored_fit`` (the seed's Keras ``fit`` under
    ``MirroredStrategy``) beside ``mirrored`` (a custom step on data placed per replica,
    the same strategy) at the same device, replicas and scaling.

    ``scaling`` is :func:`crossover_study.figures.scaling.scaling_table`'s table. Per device,
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
            text = _pair_clause(key, f_rows, s_rows)
            if text:
                clauses.append(text)
        if clauses:
            parts.append(f"On {device_label(device)}, " + "; ".join(clauses) + ".")
    if not parts:
        return (
            f"{case}: mirrored_fit (Keras fit) was measured, but not mirrored (the custom "
            "step) at the same device, replicas and scaling, so the two are not compared."
        )
    return (
        "Keras fit as the seed ran it (mirrored_fit) beside a custom step under the same "
        "MirroredStrategy (mirrored). " + " ".join(parts)
    )


def _pair_clause(key: tuple, f_rows: pd.DataFrame, s_rows: pd.DataFrame) -> str:
    """One clause of :func:`replica_program_sentence`: ``mirrored_fit``'s rows
    ``f_rows`` beside ``mirrored``'s ``s_rows`` at one (replicas, scaling) ``key``:
    their step times (s, global_batch / samples_per_s), fit's extra time per step, one
    all-reduce alone and each program's speed-up over its own one replica; empty text
    for an old table's eager fallback at one replica."""
    f, s_ = f_rows.iloc[0], s_rows.iloc[0]
    t_fit, t_step = (
        float(replica_times(f_rows).iloc[0]),
        float(replica_times(s_rows).iloc[0]),
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
            return ""  # an old table's eager fallback: not the two programs
        return (
            f"on one replica Keras fit takes {format_seconds(t_fit)} per step and "
            f"the custom step {format_seconds(t_step)}{flag}: {cost}, with one replica "
            "and no all-reduce across devices"
        )
    text = (
        f"at {int(key[0])} replicas, {key[1]} scaling, fit takes "
        f"{format_seconds(t_fit)} per step and the custom step "
        f"{format_seconds(t_step)}{flag}: {cost}"
    )
    share = to_number(f.get("allreduce_share"))
    if share is not None:
        text += (
            f", while one all-reduce of the gradients alone takes {format_seconds(share * t_fit)}"
        )
    speedups = [
        f"{name} {times(v)}"
        for name, v in (
            ("fit", to_number(f.get("speedup"))),
            ("custom step", to_number(s_.get("speedup"))),
        )
        if v is not None
    ]
    if speedups:
        text += "; speed-up over each program's own one replica: " + ", ".join(speedups)
    return text
