"""How the answers write the numbers they quote: durations in readable units, sizes,
counts of steps, ratios, the devices' names. Display only: every number is rounded
here, never estimated (the numbers come from :mod:`crossover_study.answers.rows`).
"""

from __future__ import annotations

#: Display characters (kept as escapes so linters do not mistake them for x and -).
TIMES = "\u00d7"
EN_DASH = "\u2013"

#: How a device class is named in a sentence.
DEVICE_NAMES = {"cpu": "CPU", "cuda": "CUDA", "cuda_multi": "several-GPU CUDA", "tpu": "TPU"}


def fmt_size(value: float) -> str:
    """A size: whole numbers as they are (``1024``), else 3 digits (``13.5``)."""
    value = float(value)
    return f"{round(value)}" if abs(value) >= 100 else f"{value:.3g}"


def fmt_count(value: float) -> str:
    """A count of steps with thousands separators (``12,345``)."""
    return f"{round(float(value)):,}"


def fmt_ratio(ratio: float) -> str:
    """A ratio (how many times faster): whole from 10 up (``25``), else one decimal
    (``1.7``)."""
    return f"{ratio:.0f}" if ratio >= 10 else f"{ratio:.1f}"
