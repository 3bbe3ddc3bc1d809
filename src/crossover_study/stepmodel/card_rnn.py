"""Recurrent layers on a device card as cuDNN runs them: a PyTorch or Keras recurrent
call that the CPU ran as many small ops (a GRU or RNN layer's ATen ops per time step, an
LSTM layer's oneDNN op) priced on an NVIDIA GPU as one dispatched call forward and one
backward with cuDNN's kernels (:func:`cudnn_rnn_work`, used by
:func:`crossover_study.stepmodel.card_model.price`). Split from ``card_model`` by
concern: the counted calls (:class:`RnnCall`, :func:`rnn_calls`) and cuDNN's kernels.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class RnnCall:
    """One recurrent module call of a step (``step_rnn_modules``, PyTorch's counter:
    :func:`crossover_study.stepmodel.counts_torch.count_rnn_call`): ``kind`` (``LSTM``,
    ``GRU``, ``RNN_TANH``, ``RNN_RELU``) over ``steps`` T time steps of ``batch`` B
    sequences of ``inputs`` I features, ``hidden`` H units, ``layers`` and
    ``directions`` (1, 2), ``backward`` taken or not, ``elem_bytes`` bytes per element;
    what one call accounts for among the CPU's counts: ``ops``, ``kernels``,
    ``mem_bytes`` (bytes), ``products`` ``((flops, calls), ...)``, ``elementwise``
    ``((bytes, calls), ...)``; ``per_step`` calls per step."""

    kind: str
    steps: int
    batch: int
    inputs: int
    hidden: int
    layers: int
    directions: int
    backward: bool
    elem_bytes: int
    ops: float
    kernels: float
    mem_bytes: float
    products: tuple
    elementwise: tuple
    per_step: float


#: Gate blocks G of each recurrent kind (torch.nn.RNN, GRU, LSTM documentation).
RNN_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "GRU": 3, "LSTM": 4}


def rnn_calls(text) -> tuple:
    """``step_rnn_modules`` JSON (a list of rows, each :class:`RnnCall`'s fields in the
    order of :data:`crossover_study.stepmodel.record.RNN_MODULE_KEYS`) as
    :class:`RnnCall` s; () for an empty cell (a row counted before the column, a step
    without recurrent modules). Raises ValueError for a kind not in :data:`RNN_GATES`."""
    from crossover_study.stepmodel.record import RNN_MODULE_KEYS

    if not isinstance(text, str) or not text.strip():
        return ()
    calls = []
    for values in json.loads(text):
        row = dict(zip(RNN_MODULE_KEYS, values, strict=True))
        if row["kind"] not in RNN_GATES:
            raise ValueError(f"step_rnn_modules: unknown recurrent kind {row['kind']!r}")
        calls.append(
            RnnCall(
                **{k: row[k] for k in ("kind", "steps", "batch", "inputs", "hidden", "layers")},
                directions=int(row["directions"]), backward=bool(row["backward"]),
                elem_bytes=int(row["elem_bytes"]), ops=float(row["ops"]),
                kernels=float(row["kernels"]), mem_bytes=float(row["mem_bytes"]),
                products=tuple((float(f), float(n)) for f, n in _listed(row["products"])),
                elementwise=tuple((float(b), float(n)) for b, n in _listed(row["elementwise"])),
                per_step=float(row["per_step"]),
            )
        )  # fmt: skip
    return tuple(calls)


def _listed(value) -> list:
    """A list field of a ``step_rnn_modules`` row: JSON text (as counted) or a list."""
    return json.loads(value) if isinstance(value, str) else list(value)


def cudnn_rnn_kernels(call: RnnCall) -> tuple[tuple, tuple]:
    """The kernels cuDNN runs for one call, ``(products, elementwise)``: ``((flops,
    kernels), ...)`` and ``((bytes, kernels), ...)``. Per layer and direction, with T, B,
    H, G gate blocks (:data:`RNN_GATES`) and I_l = I for the first layer, directions × H
    after it:

    - forward: the input projection as one GEMM over all time steps,
      (T·B × I_l)·(I_l × G·H), 2·T·B·I_l·G·H FLOPs; then per time step one recurrent
      GEMM (B × H)·(H × G·H), 2·B·H·G·H FLOPs, and one fused element-wise kernel (the
      gates' nonlinearities and the state update) reading both GEMMs' G·B·H outputs and
      the S previous states and writing S new ones (S = 2 for an LSTM's h and c, else
      1): (2G + 2S)·B·H elements;
    - backward: per time step one recurrent GEMM (B × G·H)·(G·H × H) and one fused
      element-wise kernel ((2G + 3S)·B·H elements: the saved gates, the incoming state
      gradients, the states read; the gate gradients and the state gradient written);
      then the input gradient as one GEMM over all steps, 2·T·B·G·H·I_l, and the weight
      gradients as two, 2·G·H·T·B·I_l and 2·G·H·T·B·H (cuDNN's backward-data and
      backward-weights calls).

    Source: J. Appleyard, T. Kočiský, P. Blunsom, "Optimizing Performance of Recurrent
    Neural Networks on GPUs", arXiv:1604.01946, 2016 (the cuDNN v5 RNN design: the
    input GEMM hoisted out of the recurrence, the element-wise gate work fused into one
    kernel per step, the weight gradients one GEMM over all steps); the element-wise
    traffic is this model's estimate from the equations (torch.nn.GRU/LSTM
    documentation). A persistent kernel (cuDNN's ``CUDNN_RNN_ALGO_PERSIST_*``, not
    PyTorch's default) would run fewer."""
    t, b, h, g = call.steps, call.batch, call.hidden, RNN_GATES[call.kind]
    states = 2 if call.kind == "LSTM" else 1
    e = call.elem_bytes
    products, elementwise = [], []
    for layer in range(call.layers):
        inputs = call.inputs if layer == 0 else call.directions * h
        for _ in range(call.directions):
            products += [(2.0 * t * b * inputs * g * h, 1.0), (2.0 * b * h * g * h, float(t))]
            elementwise.append(((2 * g + 2 * states) * b * h * e, float(t)))
            if call.backward:
                products += [
                    (2.0 * b * g * h * h, float(t)),
                    (2.0 * t * b * g * h * inputs, 1.0),
                    (2.0 * g * h * t * b * inputs, 1.0),
                    (2.0 * g * h * t * b * h, 1.0),
                ]
                elementwise.append(((2 * g + 3 * states) * b * h * e, float(t)))
    return tuple(products), tuple((float(n), c) for n, c in elementwise)


def _less(entries: tuple, removed: tuple, times: float) -> tuple:
    """``entries`` ``((size, calls), ...)`` less ``removed`` ``((size, calls), ...)``
    × ``times``, by equal size (never below 0 calls; emptied sizes dropped)."""
    left: dict[float, float] = {}
    for size, calls in entries:
        left[size] = left.get(size, 0.0) + calls
    for size, calls in removed:
        if size in left:
            left[size] = max(left[size] - calls * times, 0.0)
    return tuple((size, calls) for size, calls in left.items() if calls > 1e-9)


def cudnn_rnn_work(work):
    """``work`` (a :class:`crossover_study.stepmodel.card_model.Work`; not imported here,
    which imports this module) with each recurrent module call (its ``rnn``) run as cuDNN
    runs it on an NVIDIA GPU instead of as the CPU ran it: the call's counted ops, kernels,
    products, element-wise calls and element-wise bytes taken out (on the CPU a GRU or
    RNN layer is ATen ops per time step, an LSTM layer one oneDNN op), and in their
    place, per call, one dispatched host op forward (PyTorch's ``_cudnn_rnn``, Keras's
    ``CudnnRNNV3``) and one backward (``_cudnn_rnn_backward``, ``CudnnRNNBackpropV3``,
    each making cuDNN's backward-data and backward-weights calls), and the kernels of
    :func:`cudnn_rnn_kernels`; a TensorFlow step's calls that ran inside its graph (their
    ops among its graph ops) are replaced there. The step's
    other kernels are its counted ones less the calls' (``counted_kernels``: an LSTM
    layer op counts its gate products, more than its ops), at most its other ops. The
    FLOPs stay as counted. A work without recurrent calls is returned as it is."""
    if not work.rnn:
        return work
    counted = work.kernels if work.counted_kernels is None else work.counted_kernels
    ops, kernels, mem = work.ops, counted, work.mem_bytes
    products, elementwise = work.products, work.elementwise
    removed = sum(call.per_step * call.ops for call in work.rnn)
    kernels -= sum(call.per_step * call.kernels for call in work.rnn)
    ops = max(ops - removed, 0.0)
    kernels = min(max(kernels, 0.0), ops)
    # A Keras layer runs inside the step's graph (its ops were graph ops): so do its
    # CudnnRNNV3 ops there.
    in_graph = work.framework == "tensorflow" and work.graph_ops >= removed > 0
    graph_ops = work.graph_ops - removed if in_graph else work.graph_ops
    for call in work.rnn:
        per = call.per_step
        gemms, fused = cudnn_rnn_kernels(call)
        ops += per * (2.0 if call.backward else 1.0)
        graph_ops += per * (2.0 if call.backward else 1.0) if in_graph else 0.0
        kernels += per * sum(n for _, n in gemms + fused)
        mem += per * (sum(b * n for b, n in fused) - call.mem_bytes)
        products = _less(products, call.products, per) + tuple((f, n * per) for f, n in gemms)
        elementwise = _less(elementwise, call.elementwise, per) + tuple(
            (b, n * per) for b, n in fused
        )
    return replace(
        work, ops=ops, graph_ops=min(graph_ops, ops), kernels=kernels,
        mem_bytes=max(mem, 0.0), products=products, elementwise=elementwise,
        rnn=(), counted_kernels=None,
    )  # fmt: skip
