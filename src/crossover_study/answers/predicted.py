"""The words of a prediction from a device card: what an accelerator the study did not
measure would do at the seed's size, always labelled as a prediction
(:mod:`crossover_study.analysis.card_prediction` gives the numbers).

A card's clause reads, e.g.: "on NVIDIA T4 (predicted from its card, not measured):
with torch about 746 µs per step (481 µs–1.35 ms), launch-bound: 38 host operations at
about 20 µs each, what an operation costs the host inside whole training steps on a GPU
(...); too close to call without measuring: the T4 would take 481 µs–1.35 ms against
the CPU's measured 686 µs (661–702 µs); as a CUDA graph about 73 µs (55–96 µs)". A
direction ("1.7× faster", "the CPU stays 2.3× faster") is said only where the whole band
lies on one side of the CPU's measured spread.
A prediction never enters a verdict, a crossover or a remedy ranking of the measured
answer: it stands beside them, in its own words.
"""

from __future__ import annotations

import pandas as pd

from crossover_study.analysis.card_prediction import (
    at_seed,
    direction,
    is_naive,
    is_other_variant,
)
from crossover_study.answers.phrasebook import (
    EN_DASH,
    card_label,
    faster_or_slower,
    fmt_size,
    ratio_band,
    times,
)
from crossover_study.answers.rows import to_number
from crossover_study.core.progress import format_seconds, one_line
from crossover_study.study.device_cards import Card
from crossover_study.study.spec import size_columns

#: How a predicted variant that cannot be the user's program starts its ``not_priced``
#: reason (:func:`crossover_study.analysis.card_prediction.not_same_program`,
#: :func:`crossover_study.stepmodel.card_model.capture_obstacle`).
NOT_POSSIBLE = "not possible for this step"
#: Why each predicted regime holds, and what moves it.
REGIME_WHY = {
    "launch-bound": "each operation costs its dispatch and launch, not its arithmetic",
    "host-bound": "the host's own work (Python, data loading, tracing, Keras's own work) sets the pace",
    "input-bound": "the input pipeline makes each batch on the host at its own pace",
    "compute-bound": "the products' arithmetic sets the pace",
    "memory-bound": "the element-wise traffic sets the pace",
    "sync-bound": "the round trips to read values back set the pace",
}
#: How a variant is named in a prediction.
VARIANT_WORDS = {
    "cuda_graph": "as a CUDA graph",
    "compile": "with torch.compile",
    "tf32": "with TF32",
    "function": "as a tf.function",
    "xla": "compiled with XLA",
    "loop": "as a loop of steps in one call",
    "steps_per_execution": "with steps_per_execution",
    "read_loss_every_step": "reading the loss every step",
    "read_loss_every_1000": "reading the loss every 1000 steps",
}


def interval_text(low: float, high: float) -> str:
    return f"{format_seconds(low)}{EN_DASH}{format_seconds(high)}"


def _why(row: pd.Series) -> str:
    """The regime with its numbers: for launch-bound the host's operations (or the
    device's kernels held to their floor), for host-bound the host's own work."""
    regime = row["regime"]
    host = row["host_s"] + row["host_launch_s"]
    if row.get("host_basis") == "step" and host >= row["device_s"]:
        per_op = host / row["host_ops"] if row["host_ops"] else float("nan")
        return (
            f"{regime}: {row['host_ops']:.0f} host operations at about "
            f"{format_seconds(per_op)} each, what an operation costs the host inside whole "
            "training steps on a GPU (published traces: the Python between operations, "
            "autograd's engine, the allocator and the launch)"
        )
    if regime == "launch-bound" and host >= row["device_s"]:
        what = f"{row['host_ops']:.0f} host operations cost {format_seconds(row['host_launch_s'])} to dispatch and launch"
        if row["host_s"] > 0:
            what += f", beside {format_seconds(row['host_s'])} of the host's own work"
        return f"launch-bound: {what}"
    if regime == "launch-bound":
        return f"launch-bound: {row['kernels']:.0f} kernels each held to the device's floor"
    if regime == "host-bound":
        return f"host-bound: {format_seconds(row['host_s'])} of the host's own work (Python, data loading, tracing, Keras's own work) measured here"
    if regime == "input-bound":
        return (
            f"input-bound: the input pipeline alone makes a batch every "
            f"{format_seconds(row['input_s'])} on this host, and the host still makes every batch"
        )
    if regime == "sync-bound" and (to_number(row.get("host_reads")) or 0) > 0:
        return (
            f"sync-bound: {row['syncs']:.3g} reads back per step ({row['host_reads']:.3g} of "
            "them your own code's), each waiting for the device"
        )
    return f"{regime}: {REGIME_WHY.get(regime, '')}"


def card_direction(row: pd.Series) -> str:
    """The row's ``direction``; where a table predates the column, read from its band and
    the CPU's step alone (``card_prediction.direction``)."""
    found = row.get("direction")
    if isinstance(found, str) and found:
        return found
    cpu = row["cpu_step_time_s"]
    return direction(row["predicted_low_s"], row["predicted_high_s"], cpu, cpu)


def cpu_spread_text(row: pd.Series) -> str:
    """'761 µs' or '761 µs (725–790 µs)': the CPU's step with its measured spread."""
    cpu = row["cpu_step_time_s"]
    low, high = row.get("cpu_low_s"), row.get("cpu_high_s")
    if pd.notna(low) and pd.notna(high) and format_seconds(high) != format_seconds(low):
        return f"{format_seconds(cpu)} ({interval_text(low, high)})"
    return format_seconds(cpu)


def _speed(row: pd.Series, short: str) -> str:
    """'the CPU measured 581 µs, so the T4 would be 1.7× faster (1.3–2.1×)' where the
    whole band lies on one side of the CPU's measured spread; otherwise 'too close to call
    without measuring: the T4 would take 414 µs–1.35 ms against the CPU's 686 µs'."""
    cpu = row.get("cpu_step_time_s")
    if pd.isna(cpu) or pd.isna(row.get("speedup")):
        return ""
    s, lo, hi = row["speedup"], row["speedup_low"], row["speedup_high"]
    flag = " (flagged: measured under contention)" if bool(row.get("cpu_contended")) else ""
    way = card_direction(row)
    if way == "faster":
        verdict = f"the {short} would be {times(s)} faster ({ratio_band(lo, hi)})"
    elif way == "slower":
        verdict = f"the CPU stays {times(1 / s)} faster ({ratio_band(1 / hi, 1 / lo)})"
    else:
        return (
            f"too close to call without measuring: the {short} would take "
            f"{interval_text(row['predicted_low_s'], row['predicted_high_s'])} against the CPU's "
            f"measured {cpu_spread_text(row)}{flag}"
        )
    return f"the CPU measured {cpu_spread_text(row)}{flag}, so {verdict}"


def crossover_words(rows: pd.DataFrame) -> str:
    """'along hidden it overtakes the CPU at hidden ≈ 900 (400–2,000, predicted)' per
    axis of :func:`card_prediction.predicted_crossovers`'s rows of one card and program
    ('(< 256–940, predicted)' where the fast end crosses below the smallest size)."""
    texts = []
    for _, r in rows.iterrows():
        axis = r["axis"]
        if r["outcome"] == "crossover" and pd.notna(r["crossover_size"]):
            # An end whose curve does not cross inside the range lies outside it.
            lo = (
                fmt_size(r["crossover_low"])
                if pd.notna(r["crossover_low"])
                else f"< {fmt_size(r['size_min'])}"
            )
            hi = (
                fmt_size(r["crossover_high"])
                if pd.notna(r["crossover_high"])
                else f"> {fmt_size(r['size_max'])}"
            )
            texts.append(
                f"along {axis} it overtakes the CPU at {axis} ≈ {fmt_size(r['crossover_size'])} ({lo}{EN_DASH}{hi}, predicted)"
            )
        elif r["outcome"] == "accelerator_faster_throughout":
            texts.append(f"along {axis} it is faster over the whole measured range (predicted)")
        elif r["outcome"] == "no_crossover":
            texts.append(
                f"along {axis} the CPU stays faster over the whole measured range (predicted)"
            )
        elif r["outcome"] == "accelerator_faster_in_part":
            texts.append(f"along {axis} it is faster at part of the range only (predicted)")
    return "; ".join(texts)


def card_clause(
    predicted: pd.DataFrame, crossovers: pd.DataFrame | None, case: str, card: str
) -> str:
    """One card's clause for ``case`` at its seed's size (module docstring), each
    framework's naive program then its fastest other variant; empty where the card
    priced nothing of the case (the reasons are then said instead)."""
    rows = at_seed(predicted[predicted["card"] == card], case)
    if rows.empty:
        return ""
    name = rows["device_name"].iloc[0]
    short = card_label(name)
    parts = []
    for framework, group in rows.groupby("framework", sort=False):
        priced = group[group["predicted_step_s"].notna()]
        naive = priced[is_naive(priced)]
        if naive.empty:
            reasons = group["not_priced"].dropna()
            if len(reasons):
                parts.append(f"with {framework} not predicted ({reasons.iloc[0]})")
            continue
        row = naive.iloc[0]
        text = (
            f"with {framework} about {format_seconds(row['predicted_step_s'])} per step "
            f"({interval_text(row['predicted_low_s'], row['predicted_high_s'])}), {_why(row)}"
        )
        speed = _speed(row, short)
        if speed:
            text += f"; {speed}"
        if crossovers is not None and not crossovers.empty:
            mine = crossovers[
                (crossovers["card"] == card)
                & (crossovers["case"] == case)
                & (crossovers["framework"] == framework)
                & (crossovers["variant"] == row["variant"])
            ]
            words = crossover_words(mine)
            if words:
                text += f"; {words}"
        others = priced[is_other_variant(priced)].sort_values("predicted_step_s")
        if not others.empty and others.iloc[0]["predicted_step_s"] < row["predicted_step_s"]:
            best = others.iloc[0]
            how = VARIANT_WORDS.get(best["variant"], f"as {best['variant']}")
            text += (
                f"; {how} about {format_seconds(best['predicted_step_s'])} "
                f"({interval_text(best['predicted_low_s'], best['predicted_high_s'])})"
            )
        parts.append(text)
    if not parts:
        return ""
    return f"on {name} (predicted from its card, not measured): " + "; ".join(parts)


def predicted_sentence(predicted: pd.DataFrame, crossovers: pd.DataFrame | None, case: str) -> str:
    """Every card's clause for ``case``, one sentence each, in the order of the table;
    empty without predictions."""
    if predicted is None or predicted.empty:
        return ""
    clauses = [
        card_clause(predicted, crossovers, case, c) for c in dict.fromkeys(predicted["card"])
    ]
    return " ".join(c[0].upper() + c[1:] + "." for c in clauses if c)


def beside_sentence(errors: pd.DataFrame, within: float = 0.25) -> str:
    """Each card's predictions set beside the measurements of its device
    (:func:`card_beside.prediction_errors`): 'the NVIDIA H200 card's prediction was
    within 25 % at 14 of 18 points and inside its band at 12; farthest: s001-mlp eager
    at hidden=8192, predicted 1.2 ms, measured 870 µs (+38 %)'. Empty without rows."""
    if errors is None or errors.empty:
        return ""
    texts = []
    for name, group in errors.groupby("device_name", sort=False):
        close = int((group["prediction_error"].abs() <= within).sum())
        inside = int(group["within_band"].sum())
        worst = group.loc[group["prediction_error"].abs().idxmax()]
        axes = [a for a in size_columns(group) if a in group]
        where = ", ".join(f"{a}={fmt_size(worst[a])}" for a in axes if pd.notna(worst.get(a)))
        texts.append(
            f"the {name} card's prediction was within {within:.0%} of the measurement at "
            f"{close} of {len(group)} points and inside its band at {inside}; farthest: "
            f"{worst['case']} {worst['framework']}/{worst['variant']}"
            + (f" at {where}" if where else "")
            + f", predicted {format_seconds(worst['predicted_step_s'])}, measured "
            f"{format_seconds(worst['measured_step_s'])} ({worst['prediction_error']:+.0%})"
        )
    return "; ".join(texts)


def trace_sentence(table: pd.DataFrame) -> str:
    """The cards' per-call costs beside a GPU trace's
    (:func:`card_beside.trace_beside_cards`): 'the h200 card gives 2.6–9.1 µs for a
    kernel launch (host), the trace measured 5 µs (inside); ...'. Empty without rows."""
    if table is None or table.empty:
        return ""
    texts = []
    for card, group in table.groupby("card", sort=False):
        parts = [
            f"{interval_text(r.card_low_s, r.card_high_s)} for {r.what}, the trace measured "
            f"{format_seconds(r.measured_s)} ({'inside' if r.within else 'outside: a miss'})"
            for r in group.itertuples()
        ]
        texts.append(f"the {card} card gives " + "; ".join(parts))
    return "; ".join(texts)


def check_line(predicted: pd.DataFrame, case: str, card: str) -> str:
    """One line for ``crossover-study check``: 'T4 (predicted): 348 µs (278–456 µs),
    launch-bound, 1.7× faster than the CPU; cuda_graph 55 µs'."""
    rows = at_seed(predicted[predicted["card"] == card], case)
    if rows.empty:
        return ""
    short = card_label(rows["device_name"].iloc[0])
    priced = rows[rows["predicted_step_s"].notna()]
    naive = priced[is_naive(priced)]
    if naive.empty:
        reason = rows["not_priced"].dropna()
        return f"{short} (predicted): not priced ({reason.iloc[0] if len(reason) else 'no program runs there'})"
    row = naive.iloc[0]
    text = (
        f"{short} (predicted from its card): {format_seconds(row['predicted_step_s'])} per step "
        f"({interval_text(row['predicted_low_s'], row['predicted_high_s'])}), {row['regime']}"
    )
    if pd.notna(row.get("speedup")):
        way = card_direction(row)
        if way == "undecided":
            text += f", too close to call against the CPU's {cpu_spread_text(row)}"
        else:
            text += f", {faster_or_slower(row['speedup'])} than the CPU"
    others = priced[is_other_variant(priced)].sort_values("predicted_step_s")
    if not others.empty and others.iloc[0]["predicted_step_s"] < row["predicted_step_s"]:
        best = others.iloc[0]
        text += f"; {best['variant']} {format_seconds(best['predicted_step_s'])}"
    impossible = rows[rows["not_priced"].fillna("").str.startswith(NOT_POSSIBLE)]
    for variant, reason in zip(impossible["variant"], impossible["not_priced"], strict=True):
        text += f"; {variant} {one_line(reason, 200)}"
    return text


def card_verdict(predicted: pd.DataFrame, case: str, card: str) -> dict | None:
    """The naive program's prediction on ``card`` at ``case``'s seed size as plain
    numbers for ``answer.json``: ``direction`` (faster, slower or undecided: said only
    where the band lies on one side of the CPU's measured spread), ``step_s``,
    ``low_s``, ``high_s``, ``cpu_s``, ``cpu_low_s``, ``cpu_high_s`` (seconds per step) and
    ``regime``; None where the card priced none."""
    rows = at_seed(predicted[predicted["card"] == card], case)
    rows = rows[is_naive(rows) & rows["predicted_step_s"].notna()]
    if rows.empty or pd.isna(rows.iloc[0].get("cpu_step_time_s")):
        return None
    row = rows.iloc[0]

    def number(key: str) -> float | None:
        value = row.get(key)
        return None if pd.isna(value) else float(value)

    return {
        "direction": card_direction(row),
        "step_s": number("predicted_step_s"),
        "low_s": number("predicted_low_s"),
        "high_s": number("predicted_high_s"),
        "cpu_s": number("cpu_step_time_s"),
        "cpu_low_s": number("cpu_low_s"),
        "cpu_high_s": number("cpu_high_s"),
        "regime": str(row["regime"]),
    }


def card_listing(cards: list[Card]) -> list[str]:
    """``crossover-study devices``: per card its name, class and datasheet numbers, its
    per-call costs as ranges, then every source with its address."""
    lines = []
    for card in cards:
        d = card.raw["datasheet"]

        def peak(key: str, unit: float = 1e12, suffix: str = " TFLOP/s", d=d) -> str:
            value = d[key]["value"]
            if value is None:
                return "-"
            shown = value / unit
            return f"{shown:.3g}{suffix}" if shown < 1000 else f"{shown:,.0f}{suffix}"

        lines.append(f"{card.card}: {card.name} ({card.device_class}) - {card.raw['summary']}")
        lines.append(
            f"  FP32 {peak('fp32_flop_per_s')}, TF32 {peak('tf32_flop_per_s')}, BF16 "
            f"{peak('bf16_flop_per_s')}, FP16 {peak('fp16_flop_per_s')}; memory "
            f"{peak('memory_bytes', 1e9, ' GB')} at {peak('memory_bandwidth_bytes_per_s', 1e9, ' GB/s')}; "
            f"host link {d['host_link']}"
        )
        costs = [
            f"{key[:-2]} {interval_text(entry['low'], entry['high'])}"
            for key, entry in sorted(card.raw["per_call"].items())
        ]
        lines.append("  per call: " + ("; ".join(costs) or "none published"))
        for key, source in sorted(card.raw["sources"].items()):
            if key in card.source_ids():
                lines.append(
                    f"  [{key}] {source['title']} ({source['publisher']}, {source['date']}) {source['url']}"
                )
        lines.extend(f"  unknown: {text}" for text in card.raw["unknowns"])
    return lines


def main(argv: list[str] | None = None, prog: str = "crossover-study devices") -> int:
    """``crossover-study devices [CARD ...]``: list the device cards (all, or those
    named) with their numbers and sources (:func:`card_listing`). Exits 2 with one line
    for an unknown or invalid card."""
    import argparse
    import sys

    from crossover_study.study.device_cards import CardError, all_cards, load_cards

    parser = argparse.ArgumentParser(
        prog=prog,
        description="The device cards predictions are priced on: datasheet numbers, "
        "per-call costs and their sources (config/devices/).",
    )
    parser.add_argument("cards", nargs="*", metavar="CARD", help="cards to show (default: all)")
    args = parser.parse_args(argv)
    try:
        cards = load_cards(args.cards) if args.cards else list(all_cards().values())
    except CardError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 2
    print("\n".join(card_listing(cards)))
    return 0
