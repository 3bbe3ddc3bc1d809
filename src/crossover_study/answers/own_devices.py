"""Each seed on its own accelerators: what its user saw there
(:mod:`crossover_study.study.seed_devices`) beside what the device cards predict, and
whether the two agree (:func:`own_device_sentence`, a seed's section); for a seed asked
about several GPUs, their data-parallel prediction against one of them
(:func:`replicated_pair`, also the first screen's). Always labelled as predictions.
"""

from __future__ import annotations

import pandas as pd

from crossover_study.analysis.card_prediction import (
    at_sizes,
    direction,
    is_naive,
    replicated_at_seed,
)
from crossover_study.answers.phrasebook import times
from crossover_study.answers.predicted import card_direction, cpu_spread_text, interval_text
from crossover_study.core.progress import format_seconds
from crossover_study.study import cases
from crossover_study.study.spec import seed_sizes

#: Whether a prediction's direction agrees with what the seed's user saw.
AGREES = {
    ("slower", "slower"): "agrees with what its user saw",
    ("faster", "faster"): "agrees with what its user saw",
    ("no faster", "undecided"): "agrees with what its user saw",
    ("no faster", "slower"): "agrees with what its user saw",
}


def _agreement(saw: str, way: str) -> str:
    """'agrees with what its user saw', 'does not contradict ...' or 'disagrees ...'."""
    if (saw, way) in AGREES:
        return AGREES[(saw, way)]
    if way == "undecided":
        return (
            "does not contradict what its user saw but cannot confirm it: the band holds "
            "the step it is set against"
        )
    return (
        "disagrees with what its user saw: a miss of the card's, whose costs come from "
        "other hosts and software than the user's (docs/VALIDATION.md)"
    )


def _own_single(predicted: pd.DataFrame, case: str, own) -> str:
    """One own device on one GPU: the prediction at its sizes against this machine's CPU,
    and whether it agrees with what the user saw there."""
    sizes = {**seed_sizes(case), **own.sizes}
    rows = predicted[
        (predicted["card"] == own.card)
        & (predicted["case"] == case)
        & (predicted["framework"] == own.framework)
        & is_naive(predicted)
        & predicted["predicted_step_s"].notna()
    ]
    rows = at_sizes(rows, sizes)  # is_naive keeps no data-parallel variant
    at = ", ".join(f"{k} {v}" for k, v in own.sizes.items())
    where = f" at {at}" if at else ""
    head = f"{own.device}{where}: its user saw the accelerator {own.saw}, {own.measured}"
    if rows.empty:
        return f"{head}; not predicted here (the study has no {own.framework} CPU point there)"
    row = rows.iloc[0]
    way = card_direction(row)
    said = {
        "faster": f"{times(row['speedup'])} faster",
        "slower": f"{times(1 / row['speedup'])} slower",
        "undecided": "too close to call",
    }[way]
    return (
        f"{head}; predicted from the {own.card} card {interval_text(row['predicted_low_s'], row['predicted_high_s'])} "
        f"a step against this machine's CPU's {cpu_spread_text(row)}: {said}, which "
        f"{_agreement(own.saw, way)}"
    )


def replicated_pair(
    predicted: pd.DataFrame, case: str, card: str, replicas: int, framework: str
) -> dict | None:
    """The data-parallel prediction of ``case`` on ``replicas`` GPUs of ``card`` (strong
    scaling: the seed's batch as the global batch) beside the same program on one GPU of
    it, for ``framework``: ``{"variant", "many", "one", "direction"}`` (the two rows,
    and ``faster``/``slower``/``undecided``: several GPUs against one, said only where
    the bands do not overlap), the first variant found of mirrored_fit, mirrored and ddp;
    None without both rows."""
    rows = replicated_at_seed(predicted[predicted["card"] == card], case)
    rows = rows[(rows["framework"] == framework) & rows["predicted_step_s"].notna()]
    for variant in ("mirrored_fit", "mirrored", "ddp"):
        mine = rows[rows["variant"] == variant]
        count = pd.to_numeric(mine["replicas"], errors="coerce")
        many = mine[(count == replicas) & (mine["scaling"] == "strong")]
        one = mine[count == 1]
        if many.empty or one.empty:
            continue
        m, o = many.iloc[0], one.iloc[0]
        way = direction(m["predicted_low_s"], m["predicted_high_s"], o["predicted_low_s"],
                        o["predicted_high_s"])  # fmt: skip
        return {"variant": variant, "many": m, "one": o, "direction": way}
    return None


def replicated_words(pair: dict) -> str:
    """'no faster than one within the bands', '1.6× faster than one', ...: several GPUs
    against one, as :func:`replicated_pair` decided it."""
    m, o = pair["many"], pair["one"]
    return {
        "faster": f"{times(o['predicted_step_s'] / m['predicted_step_s'])} faster than one",
        "slower": f"{times(m['predicted_step_s'] / o['predicted_step_s'])} slower than one",
        "undecided": "no faster than one within the bands",
    }[pair["direction"]]


def _own_replicated(predicted: pd.DataFrame, case: str, own) -> str:
    """Several GPUs: the replicated step against the same program on one GPU of the card
    (strong scaling, the global batch the seed's), and whether it is any faster."""
    head = f"{own.device}: its user saw them {own.saw} than one, {own.measured}"
    pair = replicated_pair(predicted, case, own.card, own.replicas, own.framework)
    if pair is None:
        return (
            f"{head}; not predicted here (the study measured no replicated {own.framework} point)"
        )
    m, o = pair["many"], pair["one"]
    return (
        f"{head}; predicted for {own.replicas} {own.card}s under {pair['variant']} (the same "
        f"global batch) {interval_text(m['predicted_low_s'], m['predicted_high_s'])} a step, of "
        f"which the gradients' all-reduce {format_seconds(m['allreduce_s'])}, against one "
        f"{own.card}'s {interval_text(o['predicted_low_s'], o['predicted_high_s'])} "
        f"({m['regime']}): {replicated_words(pair)}, which "
        f"{_agreement(own.saw, pair['direction'])}"
    )


def own_device_sentence(predicted: pd.DataFrame | None, case: str) -> str:
    """What the seed's user saw on their own accelerators
    (:class:`~crossover_study.study.cases.OwnDevice`) beside what the cards predict there,
    and whether the two agree: one clause per own device, joined; empty for a case
    without own devices or a study without predictions."""
    if predicted is None or predicted.empty:
        return ""
    try:
        owns = cases.get(case).own_devices
    except KeyError:
        return ""
    clauses = [
        _own_replicated(predicted, case, d) if d.replicas > 1 else _own_single(predicted, case, d)
        for d in owns
    ]
    text = "; ".join(clauses)
    return text[0].upper() + text[1:] + "." if text else ""
