"""A step-time model from counts: a roofline with a launch floor.

One training step is counted (:mod:`crossover_study.stepmodel.counts`, the measuring job's
``step_*`` columns) and priced by rates the job measured on its own device (its
``rate_*`` columns). The model's four terms, in seconds per step:

    ops     = (step_ops − step_graph_ops) × rate_eager_op_s
              + step_graph_ops × (rate_graph_op_s, else rate_eager_op_s)
              + step_function_calls × rate_function_call_s
              (Keras fit, called once per timed block: rate_fit_call_s /
              steps_per_block + (rate_fit_epoch_s + rate_fit_iterator_s /
              fit_epochs_per_iterator [+ rate_fit_validation_s]) / steps per epoch
              + rate_fit_step_s in place of the eager ops and the calls, which
              fit's loop makes: :func:`crossover_study.stepmodel.columns._fit_host`)
    compute = step_products_s + (step_flops − step_products_flops) / rate_flop_per_s
              (the step's products replayed alone, shape by shape; without a replay,
              step_flops / rate_flop_per_s)
    memory  = step_elementwise_s + (step_mem_bytes − step_elementwise_bytes)
              / min(bandwidth curve at the mean bytes per op, rate_mem_dram_bytes_per_s)
              (PyTorch's element-wise calls replayed alone, call by call; without a
              replay, all of step_mem_bytes at the bandwidth)
              + (step_page_faults − the replays' own faults) × rate_page_fault_s
              (fresh pages the step's allocations fault in; host time in ops on an
              asynchronous device)
    copy    = step_copy_bytes / rate_copy_bytes_per_s      (0 without bytes)
              + allreduce_s on a replicated row (the replicas' all-reduce, measured)

combined by how the device runs a step:

- **synchronous** (``cpu``): the host issues an operation and waits for its arithmetic,
  so the terms add: t = ops + compute + memory + copy;
- **asynchronous** (``cuda``, ``cuda_multi``, ``tpu``): the launch queue overlaps issuing
  operations with the device's work, so the larger of the two wins:
  t = max(ops, compute + memory) + copy (a synchronous host–device copy overlaps
  nothing).

Source: the roofline model, whose compute and memory roofs are the ``compute`` and
``memory`` terms (S. Williams, A. Waterman, D. Patterson, "Roofline: an insightful
visual performance model for multicore architectures", CACM 52(4), 2009), with the
per-operation overhead floor that dominates small steps as the ``ops`` term (H. He,
"Making Deep Learning Go Brrrr From First Principles", 2022: the overhead-bound regime).

The regime of a step is its largest term (one vocabulary for every device):
``launch-bound`` (the step costs its operations, kernel launches on an accelerator and
dispatches on the CPU, not its arithmetic: fewer or fused operations help, a faster
device does not), ``compute-bound``, ``memory-bound`` or ``transfer-bound``.
:func:`crossover_study.stepmodel.columns.model_columns` adds the model to every row of a
timings table that has its inputs; a row without them gets empty model columns, never
invented ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: The regime named by the model's largest term (:func:`terms`).
REGIME_OF_TERM = {
    "launch": "launch-bound",
    "compute": "compute-bound",
    "memory": "memory-bound",
    "transfer": "transfer-bound",
}
REGIMES = tuple(REGIME_OF_TERM.values())

#: Whether a device class runs a step synchronously (the host waits for each
#: operation's arithmetic: the terms add) or asynchronously (a launch queue: the ops
#: term overlaps compute + memory). A device class not listed gets no model.
SYNCHRONOUS = {"cpu": True, "cuda": False, "cuda_multi": False, "tpu": False}

#: The model's columns of a timings table (:func:`crossover_study.stepmodel.columns.model_columns`), and the term of
#: :func:`terms` each ``model_*_s`` column holds.
TERM_COLUMNS = {
    "launch": "model_ops_s",
    "compute": "model_compute_s",
    "memory": "model_memory_s",
    "transfer": "model_copy_s",
}
MODEL_COLUMNS = ("model_step_s", *TERM_COLUMNS.values(), "model_regime", "model_share")


@dataclass(frozen=True)
class Rates:
    """What one device costs per unit of work.

    launch_s: seconds per eagerly dispatched operation (a kernel launch on an
        accelerator, a dispatch on the CPU); > 0.
    flop_per_s: achieved FLOP/s of a dense step; > 0.
    bytes_per_s: host–device copy bytes per second; None where nothing is copied (the
        CPU).
    graph_op_s: seconds per operation inside a compiled graph (a tf.function body);
        None: priced as ``launch_s``.
    mem_bytes_per_s: bytes per second of a large element-wise operation (the memory
        roof); None: not measured (a step with memory bytes then has no model).
    Raises ValueError for a rate that is not positive.
    """

    launch_s: float
    flop_per_s: float
    bytes_per_s: float | None = None
    graph_op_s: float | None = None
    mem_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("launch_s", "flop_per_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("bytes_per_s", "graph_op_s", "mem_bytes_per_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive or None, got {value}")


def terms(
    ops: float,
    flops: float,
    rates: Rates,
    bytes_: float = 0.0,
    *,
    graph_ops: float = 0.0,
    mem_bytes: float = 0.0,
) -> dict[str, float]:
    """The model's four terms in seconds per step (module docstring): ``launch`` =
    (ops − graph_ops) × launch_s + graph_ops × (graph_op_s or launch_s), ``compute`` =
    flops / flop_per_s, ``memory`` = mem_bytes / mem_bytes_per_s, ``transfer`` = bytes_ /
    bytes_per_s (each 0 without its count; ``transfer`` also 0 without a bandwidth).
    Counts per step: ``ops`` operations of which ``graph_ops`` run inside a compiled
    graph, ``flops`` FLOPs, ``mem_bytes`` bytes moved by the non-matmul operations,
    ``bytes_`` bytes copied host <-> device. Raises ValueError for a negative count,
    graph_ops above ops, or memory bytes without a memory rate."""
    counts = (("ops", ops), ("flops", flops), ("bytes", bytes_))
    for name, value in (*counts, ("graph_ops", graph_ops), ("mem_bytes", mem_bytes)):
        if value < 0:
            raise ValueError(f"{name} must not be negative, got {value}")
    if graph_ops > ops:
        raise ValueError(f"graph_ops ({graph_ops}) must not exceed ops ({ops})")
    if mem_bytes and rates.mem_bytes_per_s is None:
        raise ValueError("mem_bytes needs rates.mem_bytes_per_s")
    graph_s = rates.graph_op_s if rates.graph_op_s is not None else rates.launch_s
    transfer = bytes_ / rates.bytes_per_s if bytes_ and rates.bytes_per_s else 0.0
    return {
        "launch": (ops - graph_ops) * rates.launch_s + graph_ops * graph_s,
        "compute": flops / rates.flop_per_s,
        "memory": mem_bytes / rates.mem_bytes_per_s if mem_bytes else 0.0,
        "transfer": transfer,
    }


def combine(t: dict, synchronous: bool = False):
    """Seconds per step from the terms of :func:`terms` (floats) or of
    :func:`crossover_study.stepmodel.columns.model_columns` (one Series per term, a value per row): their sum on a
    synchronous device, max(launch, compute + memory) + transfer on an asynchronous
    one (``numpy.fmax``: element-wise, a missing term left to the caller's check)."""
    if synchronous:
        return t["launch"] + t["compute"] + t["memory"] + t["transfer"]
    return np.fmax(t["launch"], t["compute"] + t["memory"]) + t["transfer"]


def predict_step_s(
    ops: float,
    flops: float,
    rates: Rates,
    bytes_: float = 0.0,
    *,
    graph_ops: float = 0.0,
    mem_bytes: float = 0.0,
    synchronous: bool = False,
) -> float:
    """Predicted seconds per step (:func:`terms` combined by :func:`combine`; the
    default, asynchronous, is an accelerator's form). Raises as :func:`terms`."""
    t = terms(ops, flops, rates, bytes_, graph_ops=graph_ops, mem_bytes=mem_bytes)
    return float(combine(t, synchronous))


def regime(
    ops: float,
    flops: float,
    rates: Rates,
    bytes_: float = 0.0,
    *,
    graph_ops: float = 0.0,
    mem_bytes: float = 0.0,
) -> str:
    """The largest of the model's terms, named: one of :data:`REGIMES` (the same on
    either kind of device: the combination does not change which term is largest)."""
    t = terms(ops, flops, rates, bytes_, graph_ops=graph_ops, mem_bytes=mem_bytes)
    return REGIME_OF_TERM[max(t, key=t.get)]


def fit_rates(ops: Sequence[float], flops: Sequence[float], step_s: Sequence[float]) -> Rates:
    """The launch cost and FLOP rate that best explain measured steps of one device
    from their counts alone (the asynchronous form without memory or copy terms, for a
    device whose rates were not measured in the job): least squares on log(step_s) against log(max(ops × launch_s, flops / flop_per_s))
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
