"""The accelerator's own why, in the answer's words: what the device did in the step, read
from its trace (the ``attr_device_*`` columns of a CUDA row,
:mod:`crossover_study.measure.device_trace`), and what removes the cost it names.

"launch-bound (from its trace): the GPU was busy 8 % of the step: 96 kernels of median
4 µs, each waiting for the host to launch it (100 % of them shorter than their launch
call; the launches took 31 % of the step)". Every number is a column of the row, only
rounded here; a row without ``attr_device_regime`` (the CPU, a TPU, a table written
before it, a point not profiled) gets empty text, never an estimate.
"""

from __future__ import annotations

import pandas as pd

from crossover_study.answers.rows import to_number
from crossover_study.core.progress import format_seconds
from crossover_study.measure.device_trace import REGIMES

#: How the device of a device class is named in the sentence.
DEVICE_WORDS = {"cuda": "the GPU", "cuda_multi": "the GPUs"}
#: What removes the cost each regime names ("" where the host's categories say it, or
#: where only a different algorithm or a larger device would).
DEVICE_FIXES = {
    "launch-bound": (
        "fewer launches remove it: capture the step in a CUDA graph or compile it "
        "(torch.compile), or give each kernel more work (a larger batch)"
    ),
    "transfer-bound": (
        "keep the data on the device across steps, or copy from pinned memory "
        "asynchronously (non_blocking) while the device computes"
    ),
    "host-bound": "",
    "device-bound": "",
}


def _count(value: float) -> str:
    """A count per step: ``96``, ``1.5``, ``0.25`` (3 significant digits)."""
    return f"{value:.3g}"


def _bytes(value: float | None) -> str:
    """Bytes in readable units (``12.6 MB``); empty text for None."""
    if value is None:
        return ""
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.3g} {prefix}B"
    return f"{value:.3g} B"


def _kernels(row: pd.Series) -> str:
    """'96 kernels of median 4 µs' (per step)."""
    kernels = to_number(row.get("attr_kernels")) or 0.0
    median = to_number(row.get("attr_kernel_median_s"))
    text = f"{_count(kernels)} kernel{'' if kernels == 1 else 's'}"
    return text + (f" of median {format_seconds(median)}" if median is not None else "")


def _launch_detail(row: pd.Series, step: float) -> str:
    """'(100 % of them shorter than their launch call; the launches took 31 % of the step)'."""
    parts = []
    short = to_number(row.get("attr_short_kernel_share"))
    if short is not None:
        parts.append(f"{round(100 * short)} % of them shorter than their launch call")
    launch = to_number(row.get("attr_launch_s"))
    if launch is not None:
        parts.append(f"the launches took {round(100 * launch / step)} % of the step")
    return f" ({'; '.join(parts)})" if parts else ""


def _copies(row: pd.Series) -> str:
    """'2 host-to-device copies (12.6 MB) and 1 device-to-host copy (4 B) per step'."""
    parts = []
    for key, words in (("h2d", "host-to-device"), ("d2h", "device-to-host")):
        count = to_number(row.get(f"attr_{key}_copies")) or 0.0
        if count:
            size = _bytes(to_number(row.get(f"attr_{key}_bytes")))
            plural = "y" if count == 1 else "ies"
            parts.append(f"{_count(count)} {words} cop{plural}" + (f" ({size})" if size else ""))
    return " and ".join(parts) + " per step" if parts else "no copies"


def device_text(row: pd.Series) -> str:
    """The device's part of the why for one timings row (see the module's example), from
    ``attr_device_regime`` (:func:`device_trace.device_regime`) and the numbers behind
    it, as shares of the timed step (``step_time_s``); with the host's synchronising
    waits where the step has any. Empty text for a row without them."""
    regime = row.get("attr_device_regime")
    step = to_number(row.get("step_time_s"))
    busy = to_number(row.get("attr_device_busy_s"))
    if regime not in REGIMES or not step or busy is None:
        return ""
    device = DEVICE_WORDS.get(str(row.get("device")), "the device")
    busy_pct = min(100, round(100 * busy / step))
    if regime == "launch-bound":
        text = (
            f"launch-bound (from its trace): {device} was busy {busy_pct} % of the step: "
            f"{_kernels(row)}, each waiting for the host to launch it{_launch_detail(row, step)}"
        )
    elif regime == "device-bound":
        text = (
            f"compute- or memory-bound (from its trace; kernel times cannot tell which): "
            f"{device} was busy {busy_pct} % of the step: {_kernels(row)}"
        )
    elif regime == "transfer-bound":
        copy = to_number(row.get("attr_copy_s")) or 0.0
        text = (
            f"transfer-bound (from its trace): copies between the host and {device} took "
            f"{round(100 * copy / step)} % of the step: {_copies(row)}"
        )
    else:
        text = (
            f"host-bound (from its trace): {device} was idle {100 - busy_pct} % of the step, "
            f"waiting for the host ({_kernels(row)})"
        )
    syncs = to_number(row.get("attr_syncs"))
    if syncs:
        wait = to_number(row.get("attr_sync_wait_s")) or 0.0
        text += (
            f"; {_count(syncs)} synchronisation{'' if syncs == 1 else 's'} per step "
            f"waited {format_seconds(wait)}"
        )
    return text


def device_fix(row: pd.Series) -> str:
    """What removes the cost the device's regime names (:data:`DEVICE_FIXES`); empty
    text where the host's categories say it, or for a row without a device regime."""
    return DEVICE_FIXES.get(row.get("attr_device_regime"), "")
