"""A step's own shapes replayed on the job's device: its matrix products, LSTM
layers and element-wise calls, each timed once per job (:data:`_REPLAYED`), and the
timings table's replay columns (:func:`replay_columns`).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

from crossover_study.stepmodel.faults import faults_per_call
from crossover_study.stepmodel.timing import (
    repeated,
    tf_device,
    tf_reader,
    timed_blocks,
    torch_sync,
)

#: FLOPs of work per timed block of :func:`replay_products` (a product's repetitions per
#: block: this over its FLOPs, 1 to :data:`REPLAY_REPS`): about a millisecond on the
#: 2-core VM, so that a small product's block is not all clock reads.
REPLAY_FLOPS = 5e7


REPLAY_REPS = 200


#: Replays already timed in this process (a measuring job is one process), keyed by
#: what was replayed, the framework, the device and the shape or call: a point pays
#: only for the shapes new to its job; one replayed before gives its earlier timing
#: again, so the columns sum the same per-shape seconds (:func:`_replayed`).
_REPLAYED: dict[tuple, object] = {}


def _replayed(key: tuple, replay: Callable[[], object]):
    """``replay()``'s result kept in :data:`_REPLAYED` under ``key``: timed the first
    time a job meets ``key``, reused after. An exception is not kept (it propagates)."""
    if key not in _REPLAYED:
        _REPLAYED[key] = replay()
    return _REPLAYED[key]


def _torch_product_maker(device: str):
    """``(make, sync)`` for :func:`replay_products` in PyTorch on ``device``."""
    import torch

    target, sync = torch_sync(device)

    def operand(batch: int, rows: int, cols: int, transposed: bool):
        stored = (batch, cols, rows) if transposed else (batch, rows, cols)
        t = torch.randn(*stored, device=target)
        t = t.transpose(-1, -2) if transposed else t
        return t[0] if batch == 1 else t

    def make(batch, m, k, n, trans_a, trans_b):
        a, b = operand(batch, m, k, trans_a), operand(batch, k, n, trans_b)
        return repeated(lambda: a @ b)

    return make, sync


def _torch_lstm_layer_maker(device: str):
    """``make(steps, batch, inputs, hidden, backward)`` for :func:`replay_rnn_layers`:
    ``run(n)`` (:func:`timed_blocks`) of a one-layer ``torch.nn.LSTM(inputs, hidden)`` on
    ``device`` over a (steps × batch × inputs) input that needs its gradient (as every
    layer's but the first does in a stack), forward only, or forward and backward
    (``backward``) from a fixed output gradient."""
    import torch

    target = torch_sync(device)[0]

    def make(steps, batch, inputs, hidden, backward):
        layer = torch.nn.LSTM(inputs, hidden).to(target)
        x = torch.randn(steps, batch, inputs, device=target, requires_grad=True)
        grad = torch.randn(steps, batch, hidden, device=target)
        if backward:
            return repeated(lambda: layer(x)[0].backward(grad))
        return repeated(lambda: layer(x))

    return make


def replay_rnn_layers(device: str, layers) -> dict:
    """PyTorch's LSTM layers of a step (:attr:`crossover_study.stepmodel.record.StepCounts.
    rnn_layers`, rows ``(steps, batch, inputs, hidden, backward, per_step)``) timed
    whole on ``device`` with the job's threads: a shape's forward pass is its
    one-layer ``torch.nn.LSTM``'s forward call, its backward pass the forward and
    backward call less the forward (:func:`_torch_lstm_layer_maker`), each the median
    of :data:`BLOCKS` blocks (about :data:`REPLAY_FLOPS` FLOPs each) net of the same
    at one time step, one sequence, one input and one unit (the dispatch of the ops
    around the layer, which the model's ops term prices), never below 0.

    Why whole and not as its gate products: oneDNN's layer also runs the gates'
    element-wise arithmetic and a loop over the time steps, which its products alone
    leave out; s004-lstm's three layers at batch 32, 45 units, 60 time steps took 17 ms
    forward and backward, their gate products replayed alone 11.7 ms (2-core VM,
    2026-12-02).

    Returns ``{"products_s": seconds per step, "products_flops": the FLOPs per step of
    the layers' gate products (:func:`crossover_study.stepmodel.record.lstm_layer_flops`)}``.
    Exceptions from torch propagate. Hand-rolled: a timeit per shape is all it is."""
    from crossover_study.stepmodel.record import lstm_layer_flops

    make = _torch_lstm_layer_maker(device)
    sync = torch_sync(device)[1]

    def passes(steps, batch, inputs, hidden, reps) -> tuple[float, float]:
        forward = timed_blocks(make(steps, batch, inputs, hidden, False), sync, 1.0, reps)["median"]
        both = timed_blocks(make(steps, batch, inputs, hidden, True), sync, 1.0, reps)["median"]
        return forward, max(both - forward, 0.0)

    floor = (
        _replayed(("lstm floor", "torch", device), lambda: passes(1, 1, 1, 1, 50))
        if layers
        else (0.0, 0.0)
    )
    seconds = flops = 0.0
    for steps, batch, inputs, hidden, backward, per_step in layers:
        shape = (steps, batch, inputs, hidden)
        work = lstm_layer_flops(*shape, False) + lstm_layer_flops(*shape, True)
        reps = max(1, min(REPLAY_REPS, int(REPLAY_FLOPS / max(work, 1.0))))
        timed = _replayed(("lstm", "torch", device, shape), lambda s=shape, r=reps: passes(*s, r))
        at = int(bool(backward))
        seconds += per_step * max(timed[at] - floor[at], 0.0)
        flops += per_step * lstm_layer_flops(*shape, bool(backward))
    return {"products_s": seconds, "products_flops": flops}


def _tf_product_maker(device: str):
    """``(make, sync)`` for :func:`replay_products` in TensorFlow on ``device``."""
    import tensorflow as tf

    name = tf_device(device)
    box = {}
    sync = tf_reader(tf, box)

    def make(batch, m, k, n, trans_a, trans_b):
        lead = (batch,) if batch > 1 else ()
        with tf.device(name):
            a = tf.random.normal((*lead, *((k, m) if trans_a else (m, k))))
            b = tf.random.normal((*lead, *((n, k) if trans_b else (k, n))))

        def run(reps: int) -> None:
            with tf.device(name):
                for _ in range(reps):
                    box["y"] = tf.linalg.matmul(a, b, transpose_a=trans_a, transpose_b=trans_b)

        return run

    return make, sync


def replay_products(framework: str, device: str, products) -> dict:
    """The step's matrix products timed alone, one shape at a time, on the device and
    with the threads of the job that measured the step: ``products`` is
    :attr:`crossover_study.stepmodel.record.StepCounts.products` (rows ``(batch, m, k, n,
    trans_a, trans_b, in_graph, per_step)``; without ``in_graph``: eager). Each
    eager shape's operands (random, float32, stored transposed where flagged) are
    multiplied in :data:`BLOCKS` blocks (:func:`timed_blocks`, about :data:`REPLAY_FLOPS`
    FLOPs each); its time is the median block's per product, net of a 1 × 1 product's
    (the dispatch, which the model's ops term prices), never below 0. A shape (and the
    1 × 1 floor) is timed once per process (:func:`_replayed`); a later step with the
    same shape is priced at that timing.

    Products that ran inside a TensorFlow graph are not replayed (not in
    ``products_flops``: the model prices them at the FLOP-rate curve). Replayed alone
    in a ``tf.function``'s while loop they took 2 to 6 times the whole measured step
    (s000-hjb at batch 1000, width 128: 84 ms of products against a 16.8 ms step;
    default study, 2026-12-02), so a product alone in a loop is not how the graph runs
    it; priced at the curve, 64 of 103 synced CPU points of that run were within 30 %,
    replayed that way 59.

    Why a replay and not the FLOP-rate curve: a product's speed depends on its shape,
    not only its FLOPs (a thin product moves more bytes per FLOP, a transposed operand
    takes another kernel), and the step's products are timed on the machine as it is
    just after the step was (a shared VM's speed drifts within a job). Operation-level
    timing is how Habitat predicts a step (G. X. Yu et al., "Habitat: A Runtime-Based
    Computational Performance Predictor for Deep Neural Network Training", USENIX ATC
    2021).

    Returns ``{"products_s": seconds per step (the per-step counts times each shape's
    net seconds), "products_flops": the FLOPs per step they cover, "products_faults":
    the page faults per step their calls took in the replay (:func:`faults_per_call`),
    "seconds": how long the replay took}``. Exceptions from the framework propagate. Hand-rolled: a timeit
    per shape is all it is.
    """
    started = time.perf_counter()
    maker = _torch_product_maker if framework == "torch" else _tf_product_maker
    make, sync = maker(device)
    floor = None
    seconds = flops = faults = 0.0
    for *shape, per_step in products:
        batch, m, k, n, trans_a, trans_b, *graph = shape
        if graph and graph[0]:  # ran inside a graph: left to the FLOP-rate curve
            continue
        if floor is None:
            floor = _replayed(
                ("product floor", framework, device),
                lambda: timed_blocks(make(1, 1, 1, 1, False, False), sync, 1.0, 50)["median"],
            )
        work = 2.0 * batch * m * k * n
        reps = max(1, min(REPLAY_REPS, int(REPLAY_FLOPS / max(work, 1.0))))

        def replay(shape=(batch, m, k, n, trans_a, trans_b), reps=reps) -> tuple[float, float]:
            run = make(*shape)
            return timed_blocks(run, sync, 1.0, reps)["median"], faults_per_call(run, sync)

        key = ("product", framework, device, batch, m, k, n, bool(trans_a), bool(trans_b))
        median, faulted = _replayed(key, replay)
        seconds += per_step * max(median - floor, 0.0)
        flops += per_step * work
        faults += per_step * faulted
    return {
        "products_s": seconds,
        "products_flops": flops,
        "products_faults": faults,
        "seconds": time.perf_counter() - started,
    }


#: Bytes moved per timed block of :func:`replay_elementwise` (a call's repetitions
#: per block: this over its bytes, 1 to :data:`REPLAY_REPS`): about a millisecond at
#: the 2-core VM's DRAM bandwidth.
REPLAY_BYTES = 4e7


def _torch_op(name: str):
    """The ATen overload ``name`` (``str`` of an ``OpOverload``, e.g.
    ``aten._softmax.default``) from ``torch.ops``."""
    import torch

    namespace, packet, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), packet), overload)


def _torch_args(encoded: str, target: str, floor: bool):
    """``(args, kwargs)`` of a call rebuilt from :func:`crossover_study.stepmodel.counts.
    encode_args`' JSON on device ``target``: each tensor new, random normal (floating
    point), zeros (integers: valid indices) or ones (booleans), of its shape, or with
    every dimension 1 (``floor``: the call's dispatch, which the ops term prices)."""
    import torch

    def decode(x):
        if isinstance(x, list):
            return [decode(v) for v in x]
        if not isinstance(x, dict):
            return x
        if "t" in x:
            dtype = getattr(torch, x["dtype"])
            shape = [1] * len(x["t"]) if floor else x["t"]
            if dtype.is_floating_point:
                return torch.randn(shape, dtype=dtype, device=target)
            if dtype == torch.bool:
                return torch.ones(shape, dtype=dtype, device=target)
            return torch.zeros(shape, dtype=dtype, device=target)
        if "dtype_arg" in x:
            return getattr(torch, x["dtype_arg"])
        if "device_arg" in x:
            return torch.device(x["device_arg"])
        return getattr(torch, x["torch_attr"])

    args, kwargs = json.loads(encoded)
    return decode(args), {k: decode(v) for k, v in kwargs.items()}


def replay_elementwise(device: str, calls) -> dict:
    """PyTorch's operations behind a step's ``mem_bytes`` (element-wise ops,
    reductions, copies, indexing) timed alone, one distinct call at a time, on
    ``device`` with the job's threads: ``calls`` is :attr:`crossover_study.stepmodel.counts.
    StepCounts.elementwise` (rows ``(op, args, bytes, per_step)``). Each call is rebuilt
    on new random tensors of its shapes (:func:`_torch_args`) and timed in
    :data:`BLOCKS` blocks of about :data:`REPLAY_BYTES` moved; its time is the median
    block's per call net of the same call with every dimension 1 (its dispatch, which
    the ops term prices), never below 0. A call that fails to rebuild or run is left
    out (its bytes stay priced at the bandwidth). A distinct call is timed once per
    process (:func:`_replayed`: a failed one is not tried again).

    Why: a step's element-wise work is not all bandwidth. On the 2-core VM (2026-12-04)
    ``softmax`` over the 3 classes of 2 000 rows took 82 µs where the same 6 000 floats
    as 3 rows of 2 000 took 8 µs, and ``exp`` of 131 072 floats 94 µs where their bytes
    at DRAM speed take 24 µs; s000-hjb's ``tanh`` at batch 10 000, width 32 took 3.4 ms
    of a 13.7 ms step. This is the products' replay (:func:`replay_products`) carried
    over to every operation, as Habitat times a step operation by operation.

    Returns ``{"elementwise_s": seconds per step, "elementwise_bytes": the bytes per
    step of the calls timed, "elementwise_faults": the page faults per step their
    full-shape calls took in the replay (:func:`faults_per_call`)}``. Hand-rolled: a
    timeit per call is all it is."""
    target, sync = torch_sync(device)

    def call_s(op, encoded: str, floor: bool, reps: int) -> tuple[float, float]:
        args, kwargs = _torch_args(encoded, target, floor)
        run = repeated(lambda: op(*args, **kwargs))
        seconds = timed_blocks(run, sync, 1.0, reps)["median"]
        return seconds, 0.0 if floor else faults_per_call(run, sync)

    def replay(name: str, encoded: str, reps: int) -> tuple[float, float, float] | None:
        try:
            op = _torch_op(name)
            full, faulted = call_s(op, encoded, False, reps)
            floor, _ = call_s(op, encoded, True, 50)
        except Exception:  # noqa: BLE001 - a call that cannot be rebuilt stays with the bytes
            return None
        return full, faulted, floor

    seconds = moved = faults = 0.0
    for name, encoded, nbytes, per_step in calls:
        reps = max(1, min(REPLAY_REPS, int(REPLAY_BYTES / max(nbytes, 1.0))))
        key = ("elementwise", "torch", device, name, encoded)
        timed = _replayed(key, lambda n=name, e=encoded, r=reps: replay(n, e, r))
        if timed is None:
            continue
        full, faulted, floor = timed
        seconds += per_step * max(full - floor, 0.0)
        moved += per_step * nbytes
        faults += per_step * faulted
    return {"elementwise_s": seconds, "elementwise_bytes": moved, "elementwise_faults": faults}


def replay_columns(columns: dict, framework: str, device: str) -> dict:
    """``step_products_s`` and ``step_products_flops`` of a counted point (``columns``:
    its ``step_*`` columns from :func:`crossover_study.stepmodel.counts.count_point`): its
    ``step_products`` timed by :func:`replay_products` plus its ``step_rnn_layers``
    (PyTorch) by :func:`replay_rnn_layers`; both None without either, or with a line
    on stderr (the job log) when the replay fails. And ``step_elementwise_s`` and
    ``step_elementwise_bytes``: its ``step_elementwise`` (PyTorch) timed by
    :func:`replay_elementwise`, None without them or when that fails. Each replay's
    page faults per step beside it (``step_products_faults``,
    ``step_elementwise_faults``). Never raises."""
    return {
        **_replay_products_columns(columns, framework, device),
        **_replay_elementwise_columns(columns, framework, device),
    }


def _replay_products_columns(columns: dict, framework: str, device: str) -> dict:
    """:func:`replay_columns`' products."""
    empty = {"step_products_s": None, "step_products_flops": None, "step_products_faults": None}
    products, layers = columns.get("step_products"), columns.get("step_rnn_layers")
    if not products and not layers:
        return empty
    seconds = flops = faults = 0.0
    try:
        if products:
            replay = replay_products(framework, device, json.loads(products))
            seconds, flops = replay["products_s"], replay["products_flops"]
            faults = replay["products_faults"]
        if layers and framework == "torch":
            replay = replay_rnn_layers(device, json.loads(layers))
            seconds, flops = seconds + replay["products_s"], flops + replay["products_flops"]
    except Exception as exc:  # noqa: BLE001 - the replay must never lose the counts
        print(f"step products: not replayed ({type(exc).__name__}: {exc})", file=sys.stderr)
        return empty
    return {
        "step_products_s": seconds,
        "step_products_flops": flops,
        "step_products_faults": faults,
    }


def _replay_elementwise_columns(columns: dict, framework: str, device: str) -> dict:
    """:func:`replay_columns`' element-wise calls."""
    calls = columns.get("step_elementwise")
    empty = {
        "step_elementwise_s": None,
        "step_elementwise_bytes": None,
        "step_elementwise_faults": None,
    }
    if not calls or framework != "torch":
        return empty
    try:
        replay = replay_elementwise(device, json.loads(calls))
    except Exception as exc:  # noqa: BLE001 - the replay must never lose the counts
        print(f"step element-wise ops: not replayed ({type(exc).__name__}: {exc})", file=sys.stderr)
        return empty
    return {
        "step_elementwise_s": replay["elementwise_s"],
        "step_elementwise_bytes": replay["elementwise_bytes"],
        "step_elementwise_faults": replay["elementwise_faults"],
    }
