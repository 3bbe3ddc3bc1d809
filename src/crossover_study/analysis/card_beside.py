"""Device cards' predictions set beside a measurement of the same device: where a study
measured a card's device (a ``cuda`` row whose ``device_name`` is the card's), each
prediction beside the measured step (:func:`prediction_errors`) and the card's per-call
costs beside what the device's trace measured of them (:func:`trace_beside_cards`). The
cards' numbers are never changed by it: a miss is reported (``docs/VALIDATION.md``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from crossover_study.study.device_cards import Card
from crossover_study.study.spec import size_columns, synced


def _short_name(name: str) -> str:
    """A device's name without its vendor's (NVIDIA H200 -> H200), as a probe may
    record it with or without."""
    return str(name).replace("NVIDIA ", "").replace("Google ", "").strip()


def measured_cards(timings: pd.DataFrame, cards: Iterable[Card]) -> list[Card]:
    """The ``cards`` whose device ``timings`` measured: an ok row of the card's device
    class whose ``device_name`` contains the card's name (without the vendor's)."""
    if timings.empty or "device_name" not in timings:
        return []
    ok = timings[(timings["status"] == "ok") & (timings["device"] != "cpu")]
    found = []
    for card in cards:
        names = ok.loc[ok["device"] == card.device_class, "device_name"].dropna().astype(str)
        if names.str.contains(_short_name(card.name), regex=False).any():
            found.append(card)
    return found


#: A card's per-call costs set beside what a GPU's trace measured of them (issue 53):
#: the card's key, the measured quantity's words, and how it is read from a timings row
#: (seconds, column by column; the device attribution's columns, measure.device_trace).
TRACE_BESIDE_CARD = (
    ("kernel_launch_s", "a kernel launch (host)", lambda r: r["attr_launch_s"] / r["attr_kernels"]),
    ("kernel_floor_s", "a kernel's median time (device)", lambda r: r["attr_kernel_median_s"]),
    (
        "sync_s",
        "a synchronisation's wait (host)",
        lambda r: r["attr_sync_wait_s"] / r["attr_syncs"],
    ),
)


def trace_beside_cards(timings: pd.DataFrame, cards: Iterable[Card]) -> pd.DataFrame:
    """Each card whose device ``timings`` measured (:func:`measured_cards`), its
    per-call costs beside what the device's trace measured of them on the ok, synced
    rows with a device attribution: one row per card and cost, ``card``, ``cost`` (the
    card's key), ``what``, ``card_low_s``, ``card_high_s``, ``measured_s`` (the median
    over the rows, seconds), ``rows`` (how many) and ``within`` (the median inside the
    card's range). Empty where no card's device has such rows (every run before the
    first GPU run). The card's numbers are never changed by it: a miss is reported."""
    columns = ["card", "cost", "what", "card_low_s", "card_high_s", "measured_s", "rows", "within"]
    if timings.empty or "attr_kernels" not in timings:
        return pd.DataFrame(columns=columns)
    rows = synced(timings)
    rows = rows[(rows["status"] == "ok") & (rows["device"] != "cpu")]
    out = []
    for card in measured_cards(rows, cards):
        mine = rows[
            (rows["device"] == card.device_class)
            & rows["device_name"].astype(str).str.contains(_short_name(card.name), regex=False)
        ]
        for key, what, read in TRACE_BESIDE_CARD:
            cost = card.cost(key)
            if cost is None:
                continue
            needed = [
                "attr_launch_s",
                "attr_kernels",
                "attr_kernel_median_s",
                "attr_sync_wait_s",
                "attr_syncs",
            ]
            numbers = mine.reindex(columns=needed).apply(pd.to_numeric, errors="coerce")
            with np.errstate(divide="ignore", invalid="ignore"):
                values = read(numbers).astype(float)
            values = values[np.isfinite(values) & (values > 0)]
            if values.empty:
                continue
            median = float(values.median())
            out.append(
                {
                    "card": card.card,
                    "cost": key,
                    "what": what,
                    "card_low_s": cost.low,
                    "card_high_s": cost.high,
                    "measured_s": median,
                    "rows": len(values),
                    "within": cost.low <= median <= cost.high,
                }
            )
    return pd.DataFrame(out, columns=columns)


def prediction_errors(predicted: pd.DataFrame, timings: pd.DataFrame) -> pd.DataFrame:
    """Each predicted row whose card's device was measured in ``timings`` (an ok, synced
    row of its device class whose ``device_name`` contains the card's name, at the same
    case, framework, variant and sizes), with ``measured_step_s`` and
    ``prediction_error`` = predicted / measured − 1 (central; dimensionless) and
    ``within_band`` (the measurement between the low and high estimates). Empty where no
    card's device was measured."""
    if predicted.empty or timings.empty:
        return predicted.iloc[0:0].assign(measured_step_s=[], prediction_error=[], within_band=[])
    axes = [a for a in size_columns(timings) if a in predicted]
    measured = synced(timings)
    measured = measured[(measured["device"] != "cpu") & (measured["status"] == "ok")]
    frames = []
    for (name, device_class), group in predicted.groupby(["device_name", "device_class"]):
        mine = measured[
            (measured["device"] == device_class)
            & measured["device_name"]
            .astype(str)
            .str.contains(str(name).replace("NVIDIA ", ""), regex=False)
        ]
        if mine.empty:
            continue
        keys = ["case", "framework", "variant", *axes]
        right = mine[keys + ["step_time_s"]].rename(columns={"step_time_s": "measured_step_s"})
        left = group.copy()
        for a in axes:
            left[a] = pd.to_numeric(left[a], errors="coerce")
            right[a] = pd.to_numeric(right[a], errors="coerce")
        joined = left.merge(right, on=keys, how="inner")
        frames.append(joined)
    if not frames:
        return predicted.iloc[0:0].assign(measured_step_s=[], prediction_error=[], within_band=[])
    out = pd.concat(frames, ignore_index=True)
    out["prediction_error"] = out["predicted_step_s"] / out["measured_step_s"] - 1.0
    out["within_band"] = (out["predicted_low_s"] <= out["measured_step_s"]) & (
        out["measured_step_s"] <= out["predicted_high_s"]
    )
    return out


__all__ = ["measured_cards", "prediction_errors", "trace_beside_cards"]
