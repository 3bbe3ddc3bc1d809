"""Which variants a card predicts from a CPU point, and which of them cannot be the
user's program (split from :mod:`crossover_study.analysis.card_prediction` by concern).

A CPU point stands for each variant with a program on the card's device class whose CPU
side is that point's variant (``programs.cpu_variants``, the one pairing rule): the
point's own variant, and from the eager point the ways of running it that exist only on
an accelerator (:data:`DERIVED`). A predicted variant obeys the rule of a measured one,
the same program (:func:`not_same_program`).
"""

from __future__ import annotations

import pandas as pd

from crossover_study.study.programs import cpu_variants
from crossover_study.study.spec import VARIANTS, falsy

#: Accelerator-only variants a card prices from the CPU's eager point.
DERIVED = ("cuda_graph", "tf32")


def variants_for(case: str, framework: str, cpu_variant: str, device_class: str) -> list[str]:
    """The variants run on ``device_class`` whose CPU side is ``cpu_variant``: the
    variant itself where it has a program there, and for eager the accelerator-only
    ways of running it (:data:`DERIVED`), each only where ``cpu_variants`` pairs it with
    ``cpu_variant`` first."""
    candidates = [cpu_variant, *(DERIVED if cpu_variant == "eager" else ())]
    found = []
    for variant in candidates:
        if variant not in VARIANTS:
            continue
        try:
            pairs = cpu_variants(case, framework, variant, device_class)
        except (KeyError, ValueError):
            continue
        if pairs and (pairs[0] == cpu_variant or (variant in DERIVED and "eager" in pairs)):
            found.append(variant)
    return found


def not_same_program(cpu: pd.Series, variant: str, frozen: str | None = None) -> str | None:
    """Why ``variant``, predicted from the CPU row ``cpu``, is not the user's program, or
    None: a predicted variant obeys the measured ones' rule
    (:mod:`crossover_study.measure.same_program`). The CPU row's own check said it differs
    (``same_program`` False); or, for a CUDA graph (a capture: it freezes the step's
    Python-side state as a trace does), ``frozen``: a traced variant of the same program
    already differed from the step as written."""
    if variant == cpu.get("variant") and bool(falsy(pd.Series([cpu.get("same_program")])).iloc[0]):
        said = cpu.get("same_program_message")
        detail = f" ({said})" if isinstance(said, str) and said else ""
        return f"not possible for this step, because {variant} is not the same program{detail}"
    if variant == "cuda_graph" and frozen:
        return (
            "not possible for this step, because its Python-side state changes each call "
            f"(the traced {frozen} computed something else; a capture freezes it the same way)"
        )
    return None


def frozen_programs(timings: pd.DataFrame) -> dict[tuple[str, str], str]:
    """``(case, framework)`` → the variants (comma-separated) whose rows say they are not
    the same program as the step as written (``same_program`` False)."""
    if not len(timings) or "same_program" not in timings:
        return {}
    rows = timings[falsy(timings["same_program"])]
    found: dict[tuple[str, str], set] = {}
    for _, row in rows.iterrows():
        found.setdefault((str(row["case"]), str(row["framework"])), set()).add(str(row["variant"]))
    return {key: ", ".join(sorted(v)) for key, v in found.items()}
