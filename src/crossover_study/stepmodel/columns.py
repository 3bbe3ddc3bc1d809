"""The step-time model applied to a timings table: each row's terms priced from its
``step_*`` counts and ``rate_*`` rates (the bandwidth and FLOP-rate curves, the
replays, page faults, Keras fit's host cost, the replicas' all-reduce), combined as
:mod:`crossover_study.stepmodel.model` says (:func:`model_columns`).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from crossover_study.stepmodel.model import REGIME_OF_TERM, SYNCHRONOUS, TERM_COLUMNS, combine
from crossover_study.study.programs import KERAS_FIT_PROGRAMS

#: Keras ``fit`` programs whose one ``fit`` call per timed block is one long epoch of
#: ``steps_per_block`` steps (a repeating ``tf.data`` pipeline), not epochs of
#: ``steps_per_call`` steps: fit's cost per epoch is spread over the block.
FIT_CALL_PER_BLOCK = ("keras_fit_repeat",)


def _term(count: pd.Series, rate: pd.Series, per_unit: bool) -> pd.Series:
    """One term per row: count × rate (``per_unit``: rate in seconds per unit) or
    count / rate (rate in units per second); 0 where the count is 0 (whatever the
    rate), NaN where the count is missing or a non-zero count has no positive rate."""
    rate = rate.where(rate > 0)
    value = count * rate if per_unit else count / rate
    return value.where(count != 0, 0.0).where(count.notna())


def curve_rate(curve_json, per_op: float) -> float:
    """The rate a curve gives at ``per_op`` units per operation: ``curve_json`` is JSON
    ``[[units per op, units/s], ...]`` (the rates' ``rate_mem_curve``, :mod:`crossover_study.stepmodel.rates`), interpolated
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
    NaN. Both the model and the answer's sentence (:mod:`crossover_study.answers.regime`)
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
