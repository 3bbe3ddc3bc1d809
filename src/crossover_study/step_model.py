"""A step-time model from counts: a roofline with a launch floor.

One training step is counted (:mod:`crossover_study.step_counts`, the measuring job's
``step_*`` columns) and priced by rates the job measured on its own device (its
``rate_*`` columns). The model's four terms, in seconds per step:

    ops     = (step_ops − step_graph_ops) × rate_eager_op_s
              + step_graph_ops × (rate_graph_op_s, else rate_eager_op_s)
              + step_function_calls × rate_function_call_s
              (Keras fit, called once per timed block: rate_fit_call_s /
              steps_per_block + (rate_fit_epoch_s + rate_fit_iterator_s /
              fit_epochs_per_iterator [+ rate_fit_validation_s]) / steps per epoch
              + rate_fit_step_s in place of the eager ops and the calls, which
              fit's loop makes: :func:`_fit_host`)
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
:func:`model_columns` adds the model to every row of a timings table that has its
inputs; a row without them gets empty model columns, never invented ones.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from crossover_study.programs import KERAS_FIT_PROGRAMS

#: Keras ``fit`` programs whose one ``fit`` call per timed block is one long epoch of
#: ``steps_per_block`` steps (a repeating ``tf.data`` pipeline), not epochs of
#: ``steps_per_call`` steps: fit's cost per epoch is spread over the block.
FIT_CALL_PER_BLOCK = ("keras_fit_repeat",)

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

#: The model's columns of a timings table (:func:`model_columns`), and the term of
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
    :func:`model_columns` (one Series per term, a value per row): their sum on a
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


def _term(count: pd.Series, rate: pd.Series, per_unit: bool) -> pd.Series:
    """One term per row: count × rate (``per_unit``: rate in seconds per unit) or
    count / rate (rate in units per second); 0 where the count is 0 (whatever the
    rate), NaN where the count is missing or a non-zero count has no positive rate."""
    rate = rate.where(rate > 0)
    value = count * rate if per_unit else count / rate
    return value.where(count != 0, 0.0).where(count.notna())


def curve_rate(curve_json, per_op: float) -> float:
    """The rate a curve gives at ``per_op`` units per operation: ``curve_json`` is JSON
    ``[[units per op, units/s], ...]`` (step_rates' ``rate_mem_curve``), interpolated
    linearly in log-log between its points and held at its ends. NaN for a missing or
    empty curve or a non-positive ``per_op``."""
    if not isinstance(curve_json, str) or not per_op > 0:
        return float("nan")
    pairs = sorted(json.loads(curve_json))
    if not pairs:
        return float("nan")
    x, y = np.log([p[0] for p in pairs]), np.log([p[1] for p in pairs])
    return float(np.exp(np.interp(np.log(per_op), x, y)))


def _from_curve(out: pd.DataFrame, number, amount: str, ops: str, curve: str, rate: str):
    """Each row's rate read off its job's ``curve`` column at ``amount`` / ``ops`` per
    op (:func:`curve_rate`), else the single ``rate`` column (a row counted or measured
    before the curves)."""
    per_op = number(amount) / number(ops)
    curves = out[curve] if curve in out else pd.Series(None, index=out.index)
    read = [curve_rate(c, p) for c, p in zip(curves, per_op, strict=True)]
    return pd.Series(read, index=out.index, dtype=float).fillna(number(rate))


def _bandwidth(out: pd.DataFrame, number) -> pd.Series:
    """Bytes/s each row's element-wise traffic gets: the job's bandwidth curve at the
    row's mean bytes per element-wise op (step_mem_bytes / step_mem_ops), else
    ``rate_mem_bytes_per_s``; never above the job's DRAM rate
    ``rate_mem_dram_bytes_per_s`` (operands out of cache: the roofline's memory roof)
    where the job measured it.

    Why the cap: the curve reuses one pair of operands, which stay in cache, but a
    step's tensors are written and read again with the rest of the step between, so
    its element-wise ops read most of their operands from DRAM. Capped, s001-mlp's and
    s000-hjb's large PyTorch steps (100 to 440 MB of element-wise traffic per step,
    priced at 136 to 150 GB/s off the curve) move within 30 % of their time. The
    default study on the 2-core VM (2026-12-04) had 84 of 127 synced CPU points within
    30 % uncapped (fe7377f) and 95 of 127 an hour later with the cap (b37ed60)."""
    args = ("step_mem_bytes", "step_mem_ops", "rate_mem_curve", "rate_mem_bytes_per_s")
    bandwidth = _from_curve(out, number, *args)
    dram = number("rate_mem_dram_bytes_per_s")
    return bandwidth.where(~(bandwidth > dram), dram)


def _flop_rate(out: pd.DataFrame, number) -> pd.Series:
    """FLOP/s each row's products get: the job's FLOP-rate curve at the row's mean
    FLOPs per product (step_flops / step_flop_ops), else ``rate_flop_per_s``."""
    args = ("step_flops", "step_flop_ops", "rate_flop_curve", "rate_flop_per_s")
    return _from_curve(out, number, *args)


def _replayed_or_priced(
    amount: pd.Series, covered: pd.Series, replayed_s: pd.Series, rate: pd.Series
) -> pd.Series:
    """One term per row, seconds: ``replayed_s`` (the part of the step replayed alone,
    covering ``covered`` of the row's ``amount``) plus the uncovered rest
    (amount − covered, floored at 0) at ``rate`` (units/s); the whole ``amount`` at
    ``rate`` on a row without a replay. NaN where the amount is missing."""
    priced = _term(amount, rate, False)
    rest = (amount - covered).clip(lower=0.0)
    return (replayed_s + _term(rest, rate, False)).where(
        replayed_s.notna() & amount.notna(), priced
    )


def _memory(out: pd.DataFrame, number) -> pd.Series:
    """Each row's memory term: its element-wise calls replayed (``step_elementwise_s``,
    PyTorch) plus the bytes they do not cover (step_mem_bytes −
    step_elementwise_bytes) at the bandwidth (:func:`_bandwidth`); a row without the
    replay prices all its bytes at the bandwidth."""
    return _replayed_or_priced(
        number("step_mem_bytes"),
        number("step_elementwise_bytes"),
        number("step_elementwise_s"),
        _bandwidth(out, number),
    )


def _page_faults(number) -> pd.Series:
    """Each row's page faults the replays did not take, seconds per step:
    (step_page_faults − step_products_faults − step_elementwise_faults, never below 0)
    × rate_page_fault_s. 0 on a row without the fault count or the rate (a table
    written before them, a prediction for another machine). Why: the replays' outputs
    reuse memory just freed, so their times hold no faults but those of outputs mmapped
    afresh each call (32 MiB or more, counted in their ``*_faults``), while a step's
    allocations fault in fresh pages (``host_load.faults_per_step``)."""
    replayed = number("step_products_faults").fillna(0.0) + number(
        "step_elementwise_faults"
    ).fillna(0.0)
    rest = (number("step_page_faults") - replayed).clip(lower=0.0)
    return _term(rest, number("rate_page_fault_s"), True).fillna(0.0)


def _compute(out: pd.DataFrame, number) -> pd.Series:
    """Each row's compute term: its products replayed (``step_products_s``) plus the
    FLOPs the replay did not cover (``step_flops`` − ``step_products_flops``: a
    convolution, a product of unknown shape) at the FLOP-rate curve; a row without a
    replay prices all its FLOPs at the curve (:func:`_flop_rate`)."""
    return _replayed_or_priced(
        number("step_flops"),
        number("step_products_flops"),
        number("step_products_s"),
        _flop_rate(out, number),
    )


def _allreduce(out: pd.DataFrame, number) -> pd.Series:
    """Each row's communication between replicas, seconds per step: ``allreduce_s``
    (one all-reduce of the step's gradients, measured alone after the point) on a row
    with more than one replica, 0 on a row without replicas, NaN (no model) on a
    replicated row without it. An upper bound on the exposed part: DDP and
    MirroredStrategy can overlap it with the backward pass (the schema's
    ``allreduce_share``)."""
    replicated = number("replicas").fillna(1.0) > 1
    return number("allreduce_s").where(replicated, 0.0)


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    """Column ``name`` of ``frame`` as floats (NaN where empty, not a number or absent)."""
    if name not in frame:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[name], errors="coerce").astype(float)


def fit_parts(frame: pd.DataFrame) -> pd.DataFrame:
    """Keras fit's own cost of each row of a timings table, in the parts the model
    prices it by (:func:`_fit_host`; a fit program's row, :data:`KERAS_FIT_PROGRAMS`),
    one row per row of ``frame``, in seconds and steps:

    - ``call_s`` (``rate_fit_call_s``) over ``call_steps``: every fit program calls fit
      once per timed block (``run(steps_per_block)``), so ``steps_per_block``;
    - ``epoch_s`` over ``epoch_steps``: ``rate_fit_epoch_s`` + ``rate_fit_iterator_s`` /
      ``fit_epochs_per_iterator`` (a new data iterator each epoch unless the program
      gives fit ``steps_per_epoch``; 1 where the column is empty; 0 for a table
      without ``rate_fit_iterator_s``, whose ``rate_fit_epoch_s`` holds it), plus
      ``rate_fit_validation_s`` where the program validates each epoch
      (``validates_each_epoch``), over an epoch's steps: ``steps_per_call`` (one epoch
      per block, ``steps_per_block``, for :data:`FIT_CALL_PER_BLOCK`);
    - ``step_s`` (``rate_fit_step_s``) every step.

    A row measured before fit's cost per epoch was (no ``rate_fit_epoch_s``) keeps the
    earlier form, one call per epoch: ``call_steps`` = ``epoch_steps`` and ``epoch_s``
    NaN. Both the model and the answer's sentence (:mod:`crossover_study.answer_regime`)
    read these, so that what is priced and what is said are one rule."""
    program = frame["program"] if "program" in frame else pd.Series("", index=frame.index)
    per_block = program.isin(FIT_CALL_PER_BLOCK)
    block = _column(frame, "steps_per_block")
    epoch_steps = _column(frame, "steps_per_call").mask(per_block, block)
    validated = frame.get("validates_each_epoch", pd.Series(False, index=frame.index))
    validated = validated.isin([True, "True", "true", 1, "1"])
    validation = _column(frame, "rate_fit_validation_s").fillna(0.0).where(validated, 0.0)
    iterators = _column(frame, "fit_epochs_per_iterator").fillna(1.0).clip(lower=1.0)
    iterator = (_column(frame, "rate_fit_iterator_s") / iterators).fillna(0.0)
    epoch_s = _column(frame, "rate_fit_epoch_s") + iterator + validation
    return pd.DataFrame(
        {
            "call_s": _column(frame, "rate_fit_call_s"),
            "call_steps": block.where(epoch_s.notna(), epoch_steps),
            "epoch_s": epoch_s,
            "epoch_steps": epoch_steps,
            "step_s": _column(frame, "rate_fit_step_s"),
        },
        index=frame.index,
    )


def _fit_host(out: pd.DataFrame) -> pd.Series:
    """Keras fit's own seconds per step (a fit program's row), from its
    :func:`fit_parts`: call_s / call_steps + epoch_s / epoch_steps (0 in the earlier
    form, without a cost per epoch) + step_s."""
    parts = fit_parts(out)
    per_epoch = (parts["epoch_s"] / parts["epoch_steps"]).where(parts["epoch_s"].notna(), 0.0)
    return parts["call_s"] / parts["call_steps"] + per_epoch + parts["step_s"]


def model_columns(timings: pd.DataFrame) -> pd.DataFrame:
    """``timings`` (a timings table, one row per point) with the model's columns
    :data:`MODEL_COLUMNS` set on every ok row that has the model's inputs, in seconds
    per step (module docstring):

    - ``model_ops_s`` = (step_ops − step_graph_ops) × rate_eager_op_s + step_graph_ops
      × rate_graph_op_s (rate_eager_op_s where rate_graph_op_s is empty) +
      step_function_calls × rate_function_call_s (TensorFlow: each call of a traced
      function costs a call besides its ops; 0 without calls); for a Keras ``fit``
      program (:data:`KERAS_FIT_PROGRAMS`) fit's own cost replaces the eager ops and the
      calls, which its loop makes (:func:`_fit_host`: rate_fit_call_s /
      steps_per_block + (rate_fit_epoch_s + rate_fit_validation_s where the program
      validates each epoch) / steps per epoch + rate_fit_step_s), plus the graph ops;
    - ``model_compute_s`` = step_products_s (the step's products timed alone, shape by
      shape, right after the point: step_replay.replay_products) + the FLOPs they do
      not cover (step_flops − step_products_flops) at the FLOP rate; a row without
      the replay: step_flops / FLOP rate, the rate read off the job's curve
      (``rate_flop_curve``) at step_flops / step_flop_ops FLOPs per product, else
      rate_flop_per_s;
    - ``model_memory_s`` = step_elementwise_s (PyTorch's element-wise calls timed
      alone: step_replay.replay_elementwise) + the bytes they do not cover
      (step_mem_bytes − step_elementwise_bytes) / bandwidth (without the replay:
      step_mem_bytes / bandwidth), the bandwidth read off the job's
      curve (``rate_mem_curve``, :func:`curve_rate`) at step_mem_bytes / step_mem_ops
      bytes per op, else rate_mem_bytes_per_s, and never above the DRAM rate
      rate_mem_dram_bytes_per_s (:func:`_bandwidth`); plus, on a synchronous device,
      the page faults per step the replays did not take × rate_page_fault_s
      (:func:`_page_faults`; on an asynchronous device they are host time and go to
      ``model_ops_s``);
    - ``model_copy_s`` = step_copy_bytes / rate_copy_bytes_per_s, 0 where no bytes are
      copied (and on the cpu, where nothing is), plus on a replicated row (``replicas``
      above 1) its ``allreduce_s``, the replicas' all-reduce of the gradients;
    - ``model_step_s``: their sum on a synchronous device (cpu), max(ops, compute +
      memory) + copy on an asynchronous one (cuda, cuda_multi, tpu; :data:`SYNCHRONOUS`);
    - ``model_regime``: the largest term named (:data:`REGIME_OF_TERM`);
    - ``model_share`` = model_step_s / step_time_s (dimensionless; empty without a
      positive ``step_time_s``, the other columns set: a prediction has no measurement).

    A term whose count is 0 is 0; a row missing a count, a rate a non-zero count needs,
    or a device class of :data:`SYNCHRONOUS`, or a row not ok, gets empty model columns (NaN, regime None), never invented ones; so does every row of a
    table without the input columns (a table written before they existed). Returns a
    copy, the model's columns replaced where present and appended where not; the input
    is not changed. Deterministic: the audit re-collects and compares.
    """
    out = timings.copy()

    def number(column: str) -> pd.Series:
        return _column(out, column)

    ops, graph = number("step_ops"), number("step_graph_ops")
    eager_rate = number("rate_eager_op_s")
    graph_rate = number("rate_graph_op_s").fillna(eager_rate)
    on_cpu = out["device"] == "cpu" if "device" in out else pd.Series(False, index=out.index)
    copy_bytes = number("step_copy_bytes").mask(on_cpu, 0.0)
    # Only TensorFlow calls traced functions: 0 for other frameworks' rows (and tables
    # counted before the column existed); a TensorFlow row without it stays empty.
    tf_rows = out["framework"].eq("tensorflow") if "framework" in out else on_cpu & False
    calls = number("step_function_calls").mask(~tf_rows, number("step_function_calls").fillna(0.0))
    fit = out["program"].isin(KERAS_FIT_PROGRAMS) if "program" in out else on_cpu & False
    fit_host = _fit_host(out)
    own_host = _term(ops - graph, eager_rate, True) + _term(
        calls, number("rate_function_call_s"), True
    )
    sync = out["device"].map(SYNCHRONOUS) if "device" in out else pd.Series(np.nan)
    sync = sync.reindex(out.index)
    # The host's page faults: memory traffic where the host computes the step, host
    # time that delays the launches where a device does.
    faults = _page_faults(number)
    t = {
        "launch": own_host.mask(fit, fit_host)
        + _term(graph, graph_rate, True)
        + faults.where(sync.eq(False), 0.0),
        "compute": _compute(out, number),
        "memory": _memory(out, number) + faults.where(sync.eq(True), 0.0),
        "transfer": _term(copy_bytes, number("rate_copy_bytes_per_s"), False)
        + _allreduce(out, number),
    }
    step = combine(t, True).where(sync.eq(True), combine(t, False)).where(sync.notna())
    measured = number("step_time_s")
    ok = out["status"] == "ok" if "status" in out else pd.Series(True, index=out.index)
    valid = ok & step.notna() & (ops >= graph)
    for term in t.values():
        valid &= term.notna() & (term >= 0)
    out["model_step_s"] = step.where(valid)
    for name, column in TERM_COLUMNS.items():
        out[column] = t[name].where(valid)
    frame = pd.DataFrame({name: t[name] for name in REGIME_OF_TERM}, index=out.index)
    largest = frame.fillna(-1.0).idxmax(axis=1).map(REGIME_OF_TERM)
    out["model_regime"] = largest.where(valid, None).astype(object)
    out["model_share"] = (step / measured.where(measured > 0)).where(valid)
    return out
