"""A step-time model from counts: a roofline with a launch floor.

One training step of ``ops`` operations and ``flops`` FLOPs, moving ``bytes`` between
host and device, is modelled as

    t_step ≈ max(ops × t_launch, flops / R) + bytes / B

with ``t_launch`` the cost of one minimal operation (a kernel launch on a GPU, a
dispatch on the CPU), ``R`` the achieved FLOP/s of a dense step and ``B`` the host–device
bandwidth. The first term is the larger of the two floors the device cannot go under:
issuing the operations, and doing their arithmetic; the copy is added, as a synchronous
copy does not overlap the step. Source: the roofline model (S. Williams, A. Waterman,
D. Patterson, "Roofline: an insightful visual performance model for multicore
architectures", CACM 52(4), 2009), with its memory-bandwidth roof replaced by the
per-operation overhead floor that dominates small steps (H. He, "Making Deep Learning Go
Brrrr From First Principles", 2022: the overhead-bound regime).

The regime of a step is the term that wins: ``launch-bound`` (the step costs its
operations, not its arithmetic: fewer or fused operations help, a faster device does
not), ``compute-bound`` or ``transfer-bound``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: The regime named by the model's largest term (:func:`terms`).
REGIME_OF_TERM = {
    "launch": "launch-bound",
    "compute": "compute-bound",
    "transfer": "transfer-bound",
}
REGIMES = tuple(REGIME_OF_TERM.values())


@dataclass(frozen=True)
class Rates:
    """What one device costs per unit of work.

    launch_s: seconds per operation (kernel launch or dispatch); > 0.
    flop_per_s: achieved FLOP/s of a dense step; > 0.
    bytes_per_s: host–device bytes per second; None where nothing is copied (the CPU).
    """

    launch_s: float
    flop_per_s: float
    bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        if not self.launch_s > 0:
            raise ValueError(f"launch_s must be positive, got {self.launch_s}")
        if not self.flop_per_s > 0:
            raise ValueError(f"flop_per_s must be positive, got {self.flop_per_s}")
        if self.bytes_per_s is not None and not self.bytes_per_s > 0:
            raise ValueError(f"bytes_per_s must be positive or None, got {self.bytes_per_s}")


def terms(ops: float, flops: float, rates: Rates, bytes_: float = 0.0) -> dict[str, float]:
    """The model's three terms in seconds per step: ``launch`` = ops × launch_s,
    ``compute`` = flops / flop_per_s, ``transfer`` = bytes / bytes_per_s (0 without a
    bandwidth or without bytes). Raises ValueError for a negative count."""
    for name, value in (("ops", ops), ("flops", flops), ("bytes", bytes_)):
        if value < 0:
            raise ValueError(f"{name} must not be negative, got {value}")
    transfer = bytes_ / rates.bytes_per_s if bytes_ and rates.bytes_per_s else 0.0
    return {
        "launch": ops * rates.launch_s,
        "compute": flops / rates.flop_per_s,
        "transfer": transfer,
    }


def predict_step_s(ops: float, flops: float, rates: Rates, bytes_: float = 0.0) -> float:
    """Predicted seconds per step: max(launch, compute) + transfer (module docstring)."""
    t = terms(ops, flops, rates, bytes_)
    return max(t["launch"], t["compute"]) + t["transfer"]


def regime(ops: float, flops: float, rates: Rates, bytes_: float = 0.0) -> str:
    """The largest of the model's terms, named: one of :data:`REGIMES`."""
    t = terms(ops, flops, rates, bytes_)
    return REGIME_OF_TERM[max(t, key=t.get)]


def fit_rates(ops: Sequence[float], flops: Sequence[float], step_s: Sequence[float]) -> Rates:
    """The launch cost and FLOP rate that best explain measured steps of one device:
    least squares on log(step_s) against log(max(ops × launch_s, flops / flop_per_s))
    over the points (``scipy.optimize.least_squares``, soft-L1 loss so that a noisy point
    pulls less), starting from the fastest point's launch cost and the best point's FLOP
    rate. Needs points on both sides of the bend (some launch-bound, some compute-bound)
    to pin both rates; with points on one side only the other rate is a bound, not a
    measurement. ``ops``, ``flops`` and ``step_s`` are equally long sequences (ops and
    FLOPs per step, seconds per step). Raises ValueError for fewer than 2 points,
    unequal lengths or a non-positive value.
    """
    from scipy.optimize import least_squares

    n_ops, n_flops, t = (np.asarray(v, dtype=float) for v in (ops, flops, step_s))
    if not len(n_ops) == len(n_flops) == len(t):
        raise ValueError(f"unequal lengths: {len(n_ops)} ops, {len(n_flops)} flops, {len(t)}")
    if len(t) < 2:
        raise ValueError(f"fit_rates needs at least 2 points, got {len(t)}")
    for name, values in (("ops", n_ops), ("flops", n_flops), ("step_s", t)):
        if not np.all(np.isfinite(values)) or np.any(values <= 0):
            raise ValueError(f"{name} must be positive and finite")

    def residuals(p: np.ndarray) -> np.ndarray:
        launch, rate = np.exp(p)
        return np.log(np.maximum(n_ops * launch, n_flops / rate)) - np.log(t)

    start = np.log([np.min(t / n_ops), np.max(n_flops / t)])
    fit = least_squares(residuals, start, loss="soft_l1", f_scale=0.05)
    launch, rate = np.exp(fit.x)
    return Rates(launch_s=float(launch), flop_per_s=float(rate))


def explained_share(predicted_s: float, measured_s: float) -> float:
    """predicted / measured seconds per step (dimensionless): 1 when the model explains
    the whole step, below 1 when the step holds more than the model counts. Raises
    ValueError for a non-positive measured time."""
    if not measured_s > 0:
        raise ValueError(f"measured_s must be positive, got {measured_s}")
    return predicted_s / measured_s
