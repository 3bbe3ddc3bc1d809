"""What one training step does, counted rather than timed: operations dispatched,
floating-point operations (FLOPs), bytes its element-wise operations touch and bytes
copied between host and device.

The answers say *when* the accelerator overtakes the CPU; these counts say *why*: a step
of a few hundred small operations costs a few hundred kernel launches on a GPU whatever
its FLOPs, so it stays launch-bound until its FLOPs outweigh the launches
(:mod:`crossover_study.step_model`). Counting runs one call of the training program
after the timed blocks (the counters slow the step they watch) and changes nothing the
harness timed (:func:`count_point`).

What is counted, and how:

- **ops**: PyTorch on the CPU: the ATen operators the step dispatches, counted by a
  ``TorchDispatchMode`` (every call that reaches the dispatcher below autograd, the
  backward's included; the profiler's ``record_function`` markers left out). PyTorch
  on CUDA: the device activities (kernels, memory copies and sets) the profiler
  records (``torch.profiler``, ``ProfilerActivity.CUDA``). TensorFlow: the operations
  executed, counted by an op callback (``tensorflow.python.framework.op_callbacks``,
  the hook ``tf.debugging.enable_check_numerics`` uses) while ``tf.function`` bodies run
  eagerly (``tf.config.run_functions_eagerly``), so that the ops inside a traced
  function, a while loop's iterations included, are seen with their shapes; a second
  call with functions left as they are tells how many of them run inside a compiled
  graph (``graph_ops``) rather than one by one from Python.
- **flops**: PyTorch: the shape formulas of ``torch.utils.flop_counter`` (matrix
  products, convolutions, attention; forward and backward; 2 FLOPs per multiply-add),
  plus the LSTM layers the counter does not reach (oneDNN's ``mkldnn_rnn_layer`` on the
  CPU, cuDNN's ``_cudnn_rnn``): 2 FLOPs per multiply-add of their gate matrices,
  2·T·B·(4H·(I + H)) forward per layer, twice that backward. TensorFlow: ``MatMul`` and
  ``BatchMatMul`` ops, 2·m·k·n each from their shapes (Keras's LSTM runs its gates as
  MatMuls, so they are included). Element-wise work is not FLOPs here: it is counted
  as bytes.
- **products**: the matrix products behind ``flops``, by shape and layout
  (:attr:`StepCounts.products`), which the measuring job then times one shape at a
  time (:func:`crossover_study.step_replay.replay_products`): a product's speed depends
  on its shape, not only its size (on the 2-core VM a 32 × 180 · 180 × 720 gate product
  ran at 58 GFLOP/s, a square product of the same FLOPs at 108, a 2000 × 4 · 4 × 2048
  one at 6; 2026-12-02).
- **rnn_layers**: PyTorch's LSTM layer ops by shape (:attr:`StepCounts.rnn_layers`),
  which the job times whole, a one-layer ``torch.nn.LSTM`` of the same shape, rather
  than as the gate products :func:`lstm_products` decomposes them into: a oneDNN layer
  is more than its products (the gates' element-wise arithmetic, the per-time-step
  loop); s004-lstm's three layers at 45 units took 17 ms forward and backward where
  their gate products replayed alone took 11.7 ms (2-core VM, 2026-12-02).
- **mem_bytes**: bytes read and written by the operations that are not FLOP-counted
  (element-wise, reductions, copies; views and scalar reads left out), the sizes of
  their tensor inputs and outputs: the memory traffic of the roofline's memory roof.
- **elementwise** (PyTorch): the calls behind ``mem_bytes`` by ATen overload and
  arguments, tensors by shape and dtype (:func:`encode_args`), which the measuring job
  then times one call at a time (:func:`crossover_study.step_replay.replay_elementwise`):
  an element-wise op's speed is not only its bytes (``softmax`` over 3 classes of 2 000
  rows took ten times as long as over 3 rows of 2 000 on the 2-core VM, 2026-12-04).
- **copy_bytes**: bytes copied between host memory and a device (PyTorch: ``_to_copy``
  and ``copy_`` across devices, ``item()`` of a device tensor; TensorFlow: inputs an op
  got from another device type than its output's). 0 on the CPU.

For s001-mlp the closed form :func:`mlp_matmul_flops` gives the same FLOPs, which the
tests check.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass

#: TensorFlow ops whose FLOPs are counted (2·m·k·n from their shapes).
TF_MATMUL_OPS = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"})

#: TensorFlow ops that move no tensor data (aliases, shapes, constants): no mem_bytes.
TF_NO_DATA_OPS = frozenset(
    {"Identity", "ReadVariableOp", "Reshape", "Const", "NoOp", "Shape", "ExpandDims", "Squeeze"}
)


@dataclass(frozen=True)
class StepCounts:
    """Counts of one training step (a call's counts divided by its steps).

    ops: operations per step (dimensionless; see ``ops_kind``).
    ops_kind: ``aten_ops`` (PyTorch, dispatcher), ``cuda_kernels`` (PyTorch on CUDA,
        the profiler's device activities) or ``tf_ops`` (TensorFlow, op callback).
    graph_ops: of ``ops``, those run inside a compiled graph (TensorFlow functions);
        the rest are dispatched one by one from Python. 0 for PyTorch.
    flops: FLOPs of matrix products and LSTM gates, forward and backward (2 per
        multiply-add).
    flops_source: how ``flops`` was counted.
    mem_bytes: bytes read and written by the other operations (bytes).
    copy_bytes: bytes copied between host and device (bytes).
    mem_ops: of ``ops``, those that moved the ``mem_bytes`` (mem_bytes / mem_ops is
        their mean traffic, which sets the bandwidth they get: cache or DRAM).
    flop_ops: the matrix products that make ``flops`` (an LSTM layer op counts its
        gate products, :func:`lstm_products`): flops / flop_ops is their mean size,
        which sets the FLOP rate they get.
    function_calls: calls of traced functions (TensorFlow ``tf.function``, Keras's
        train function) per step, each one eager op besides the ops it runs; 0 for
        PyTorch.
    products: the step's matrix products by shape, ``((batch, m, k, n, trans_a,
        trans_b, in_graph, per_step), ...)``: ``per_step`` products of (m × k)·(k × n),
        ``batch`` of them at once, an operand stored transposed where its flag is set
        (the layout changes the speed), run inside a compiled TensorFlow graph where
        ``in_graph`` is set (a graph may run a product on other kernels than eager
        mode); what :func:`crossover_study.step_replay.replay_products`
        times one shape at a time. Products whose shapes are not known (a convolution,
        attention, a dimension unknown at trace time) are in ``flops`` but not here,
        nor are an LSTM layer op's gate products (they are in ``rnn_layers``).
    rnn_layers: the step's LSTM layers as PyTorch ran them (one oneDNN
        ``mkldnn_rnn_layer`` op per layer on the CPU; a cuDNN ``_cudnn_rnn`` op's
        layers one by one), ``((steps, batch, inputs, hidden, backward, per_step),
        ...)``: ``per_step`` forward (``backward`` false) or backward passes of a layer
        of ``hidden`` units over ``steps`` time steps of ``batch`` sequences of
        ``inputs`` features, which
        :func:`crossover_study.step_replay.replay_products` times whole. Their FLOPs
        (:func:`lstm_layer_flops`) are in ``flops``.
    elementwise: PyTorch's operations behind ``mem_bytes`` by operator and arguments,
        ``((op, args, bytes, per_step), ...)``: ``per_step`` calls of ``op`` (an ATen
        overload, e.g. ``aten._softmax.default``) with ``args`` (JSON of its positional
        and keyword arguments, each tensor ``{"t": shape, "dtype": name}``; see
        :func:`encode_args`), each moving ``bytes``; what
        :func:`crossover_study.step_replay.replay_elementwise` times one call at a time.
        An operation whose arguments cannot be written so (a random generator) is in
        ``mem_bytes`` but not here.
    """

    ops: float
    ops_kind: str
    graph_ops: float
    flops: float | None
    flops_source: str
    mem_bytes: float | None
    copy_bytes: float
    function_calls: float = 0.0
    mem_ops: float | None = None
    flop_ops: float | None = None
    products: tuple = ()
    rnn_layers: tuple = ()
    elementwise: tuple = ()

    def columns(self) -> dict:
        """The timings table's columns (``step_ops``, ``step_ops_kind``, ...);
        ``step_products`` as JSON ``[[batch, m, k, n, trans_a, trans_b, in_graph,
        per_step], ...]`` and ``step_rnn_layers`` as JSON ``[[steps, batch, inputs,
        hidden, backward, per_step], ...]`` and ``step_elementwise`` as JSON ``[[op,
        args, bytes, per_step], ...]`` (each None when empty)."""
        columns = {f"step_{name}": value for name, value in asdict(self).items()}
        for name in ("products", "rnn_layers", "elementwise"):
            rows = [list(row) for row in getattr(self, name)]
            columns[f"step_{name}"] = json.dumps(rows) if rows else None
        return columns


def _per_step(counts: Counter, steps: float, *flags) -> tuple:
    """``counts`` (a Counter of a shape key, e.g. (batch, m, k, n, trans_a, trans_b),
    -> its calls in ``steps`` steps) as rows ``(*key, *flags, per_step)``, sorted:
    :attr:`StepCounts.products` with its ``in_graph`` flag, or
    :attr:`StepCounts.rnn_layers`."""
    rows = sorted(counts.items())
    # Above a millionth per step: a windowed count less a whole call's leaves rounding.
    return tuple((*key, *flags, count / steps) for key, count in rows if count / steps > 1e-6)


def mlp_matmul_flops(batch: int, d_in: int, hidden: int, d_out: int = 8) -> int:
    """FLOPs of the matrix products of one s001-mlp training step (dimensionless count,
    2 per multiply-add): x (batch × d_in) · w1 (d_in × hidden), · w2 (hidden × d_out),
    · w3 (d_out × d_out) forward; backward the gradients of w3, w2 and w1 and of the two
    hidden activations (h2 through w3, h1 through w2), none for the input x:

        2·N·(D·H + H·O + O²)  +  2·N·(O² + O²  +  H·O + H·O  +  D·H)
        = 2·N·(2·D·H + 3·H·O + 3·O²)

    with N = ``batch``, D = ``d_in``, H = ``hidden``, O = ``d_out`` (8 in the seed).
    Source: a product of (m × k) and (k × n) costs 2·m·k·n FLOPs; the backward of
    y = a·b needs a^T·dy and dy·b^T, each as costly as the forward product.
    Raises ValueError for a size below 1.
    """
    sizes = {"batch": batch, "d_in": d_in, "hidden": hidden, "d_out": d_out}
    for name, value in sizes.items():
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    n, d, h, o = (int(v) for v in sizes.values())
    return 2 * n * (2 * d * h + 3 * h * o + 3 * o * o)


#: PyTorch RNN ops outside torch.utils.flop_counter: op -> (its backward?, index of
#: its ``hx`` argument, whose second-to-last dimension is the batch). Signatures:
#: aten's native_functions.yaml (``mkldnn_rnn_layer(input, weight0, weight1, weight2,
#: weight3, hx_, ...)``, ``_cudnn_rnn(input, weight[], weight_stride0, weight_buf, hx,
#: ...)``, their backwards likewise).
RNN_OPS = {
    "aten.mkldnn_rnn_layer": (False, 5),
    "aten.mkldnn_rnn_layer_backward": (True, 5),
    "aten._cudnn_rnn": (False, 4),
    "aten._cudnn_rnn_backward": (True, 4),
}


def lstm_products(steps: int, batch: int, layers, backward: bool) -> Counter:
    """The gate products of LSTM layers over a sequence, as oneDNN and cuDNN run them
    (oneDNN's RNN primitive: one "layer" GEMM of the input over all time steps, one
    "iteration" GEMM of the hidden state per step; the weight gradients over all
    steps at once): ``layers`` is one (inputs I, hidden units H) pair per layer (its
    input-to-gates matrix is 4H × I, its hidden-to-gates one 4H × H), ``steps`` = T,
    ``batch`` = B.

    Forward, per layer: (T·B × I)·(I × 4H) once and (B × H)·(H × 4H) T times;
    2·T·B·4H·(I + H) FLOPs (the LSTM equations: Hochreiter and Schmidhuber 1997;
    torch.nn.LSTM's documentation). Backward: the input gradient (T·B × 4H)·(4H × I),
    the weight gradients (4H × T·B)·(T·B × I) and (4H × T·B)·(T·B × H), and the hidden
    state's gradient (B × 4H)·(4H × H) T times: twice the forward FLOPs. Biases and the
    element-wise gate arithmetic are not products. Returns a Counter of (batch, m, k,
    n, trans_a, trans_b) -> products."""
    products = Counter()
    rows = steps * batch
    for inputs, hidden in layers:
        gates = 4 * hidden
        if not backward:
            products[(1, rows, inputs, gates, False, True)] += 1
            products[(1, batch, hidden, gates, False, True)] += steps
        else:
            products[(1, rows, gates, inputs, False, False)] += 1
            products[(1, gates, rows, inputs, True, False)] += 1
            products[(1, gates, rows, hidden, True, False)] += 1
            products[(1, batch, gates, hidden, False, False)] += steps
    return products


def lstm_layer_flops(steps: int, batch: int, inputs: int, hidden: int, backward: bool) -> float:
    """FLOPs of one LSTM layer's forward (``backward`` false) or backward pass over
    ``steps`` time steps of ``batch`` sequences: its gate products
    (:func:`lstm_products`), 2·T·B·4H·(I + H) forward, twice that backward."""
    return product_flops(lstm_products(steps, batch, [(inputs, hidden)], backward))


def product_flops(products) -> float:
    """FLOPs of ``products`` (a Counter of (batch, m, k, n, ...) -> count, or
    :attr:`StepCounts.products` rows ending in their count): 2·batch·m·k·n each
    (2 FLOPs per multiply-add)."""
    rows = products.items() if isinstance(products, dict) else ((p[:4], p[-1]) for p in products)
    return sum(2.0 * b * m * k * n * count for (b, m, k, n, *_), count in rows)


def _torch_rnn_layers(packet_name: str, args) -> list | None:
    """The layers ``[(steps, batch, inputs, hidden, backward), ...]`` of an LSTM op
    that :mod:`torch.utils.flop_counter` does not count (:data:`RNN_OPS`), else None.
    ``mkldnn_rnn_layer`` (oneDNN on the CPU) is one layer: w0 and w1 its input- and
    hidden-to-gates matrices (4H × I, 4H × H); ``_cudnn_rnn`` holds every layer's
    matrices in one list, two 2-D matrices per layer. T·B is the input's rows (its
    layout, time- or batch-first, does not matter), B the batch dimension of ``hx``."""
    if packet_name not in RNN_OPS:
        return None
    backward, hx_at = RNN_OPS[packet_name]
    x, hx = args[0], args[hx_at]
    matrices = [args[1], args[2]] if "mkldnn" in packet_name else args[1]
    matrices = [w for w in matrices if w.dim() == 2]
    batch = int(hx.shape[-2])
    steps = (x.numel() // x.shape[-1]) // batch
    pairs = zip(matrices[::2], matrices[1::2], strict=True)
    return [(steps, batch, int(ih.shape[1]), int(hh.shape[1]), backward) for ih, hh in pairs]


def _torch_product(name: str, args) -> tuple | None:
    """(batch, m, k, n, trans_a, trans_b) of a PyTorch matrix product op (``mm``,
    ``addmm``, ``bmm``, ``baddbmm``), an operand transposed when stored column-major;
    None for another op."""
    if name in ("aten.mm", "aten.bmm"):
        a, b = args[0], args[1]
    elif name in ("aten.addmm", "aten.baddbmm"):
        a, b = args[1], args[2]
    else:
        return None

    def transposed(t) -> bool:
        return t.shape[-1] > 1 and t.stride(-2) == 1 and t.stride(-1) != 1

    batch = int(a.shape[0]) if a.dim() == 3 else 1
    m, k, n = (int(v) for v in (a.shape[-2], a.shape[-1], b.shape[-1]))
    return (batch, m, k, n, transposed(a), transposed(b))


class _Unencodable(Exception):
    """An operation argument :func:`encode_args` cannot write as JSON."""


def encode_args(args, kwargs) -> str:
    """JSON of a PyTorch operation's arguments ``[args, kwargs]`` from which
    :func:`crossover_study.step_replay.replay_elementwise` rebuilds a call of the same
    shapes: a tensor as ``{"t": shape, "dtype": name}`` (its values are not kept), a
    ``torch.dtype`` as ``{"dtype_arg": name}``, a device as ``{"device_arg": type}``, a
    memory format or layout as ``{"torch_attr": name}``; numbers, strings, booleans and
    None as they are, lists and tuples as lists. Raises :class:`_Unencodable` for any
    other argument (a ``torch.Generator``)."""
    import torch

    def encode(x):
        if isinstance(x, torch.Tensor):
            return {"t": list(x.shape), "dtype": str(x.dtype).removeprefix("torch.")}
        if isinstance(x, torch.dtype):
            return {"dtype_arg": str(x).removeprefix("torch.")}
        if isinstance(x, torch.device):
            return {"device_arg": x.type}
        if isinstance(x, (torch.memory_format, torch.layout)):
            return {"torch_attr": str(x).removeprefix("torch.")}
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, (list, tuple)):
            return [encode(v) for v in x]
        raise _Unencodable(type(x).__name__)

    return json.dumps([encode(list(args)), {k: encode(v) for k, v in kwargs.items()}])


def _torch_counter():
    """A ``TorchDispatchMode`` that counts ops, FLOPs, memory and copy bytes."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import flop_registry

    copies = {"aten._to_copy", "aten.copy_", "aten._local_scalar_dense"}

    def tensors(tree):
        return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]

    class OpCounter(TorchDispatchMode):
        """Counts every ATen operator call that reaches the dispatcher."""

        def __init__(self) -> None:
            super().__init__()
            self.ops = 0
            self.flops = 0.0
            self.flop_ops = 0
            self.mem_bytes = 0.0
            self.mem_ops = 0
            self.copy_bytes = 0.0
            self.products = Counter()
            self.rnn_layers = Counter()
            self.elementwise = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func._overloadpacket
            name = str(packet)
            if name.startswith("profiler."):  # record_function markers, not operations
                return out
            self.ops += 1
            rnn = _torch_rnn_layers(name, args)
            if packet in flop_registry:
                self.flops += flop_registry[packet](*args, **kwargs, out_val=out)
                self.flop_ops += 1
                product = _torch_product(name, args)
                if product is not None:
                    self.products[product] += 1
            elif rnn is not None:
                for steps, batch, inputs, hidden, backward in rnn:
                    gates = lstm_products(steps, batch, [(inputs, hidden)], backward)
                    self.flops += product_flops(gates)
                    self.flop_ops += sum(gates.values())
                    self.rnn_layers[(steps, batch, inputs, hidden, backward)] += 1
            elif not func.is_view and name != "aten._local_scalar_dense":
                moved = sum(t.numel() * t.element_size() for t in tensors((args, out)))
                self.mem_bytes += moved
                self.mem_ops += moved > 0
                if moved > 0:
                    try:
                        self.elementwise[(str(func), encode_args(args, kwargs), moved)] += 1
                    except _Unencodable:
                        pass  # its bytes stay priced at the bandwidth
            if name in copies:
                ins, outs = tensors(args), tensors(out)
                devices = {t.device.type for t in ins} | {t.device.type for t in outs}
                if len(devices) > 1 or (
                    name == "aten._local_scalar_dense" and "cpu" not in devices
                ):
                    self.copy_bytes += sum(t.numel() * t.element_size() for t in ins[-1:])
            return out

    return OpCounter()


def _cuda_kernels(step: Callable[[], object]) -> int:
    """Device activities (kernels, memory copies and sets) the PyTorch profiler
    records on CUDA while ``step()`` runs, the device synchronised after it."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    return sum(1 for event in prof.events() if event.device_type == cuda)


def count_torch_step(step: Callable[[], object], steps: int = 1, device: str = "cpu") -> StepCounts:
    """Run ``step()`` (``steps`` training steps of a built PyTorch workload, e.g.
    ``lambda: workload.run(workload.steps_per_call)``) under the operator counter and
    return the :class:`StepCounts` of one step. On ``cuda`` the step runs once more
    under the profiler, whose device activities are ``ops``. The step really runs (its
    update is applied), so call it outside the timed blocks; it is slower while
    counted. Exceptions from the step propagate; ValueError for ``steps`` below 1.
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    counter = _torch_counter()
    with counter:
        step()
    ops, kind = counter.ops, "aten_ops"
    if device.startswith("cuda"):
        ops, kind = _cuda_kernels(step), "cuda_kernels"
    return StepCounts(
        ops=ops / steps,
        ops_kind=kind,
        graph_ops=0.0,
        flops=float(counter.flops) / steps,
        flops_source="torch.utils.flop_counter shapes + LSTM gates",
        mem_bytes=counter.mem_bytes / steps,
        mem_ops=counter.mem_ops / steps,
        flop_ops=counter.flop_ops / steps,
        copy_bytes=counter.copy_bytes / steps,
        products=_per_step(counter.products, steps, False),
        rnn_layers=_per_step(counter.rnn_layers, steps),
        elementwise=_per_step(counter.elementwise, steps),
    )


def _tf_callback(state: dict, traced: bool = False):
    """An op callback that counts into ``state`` the ops it sees executed eagerly or,
    with ``traced``, the ops created while a function is traced (symbolic tensors with
    static shapes; inputs, constants and aliases left out)."""

    def callback(op_type, inputs, attrs, outputs, op_name=None, graph=None):
        if (graph is not None) != traced:
            return None
        if isinstance(op_type, bytes):
            op_type = op_type.decode()
        if traced and op_type in TF_NO_DATA_OPS | {"Placeholder"}:
            return None
        if op_type in TF_NEXT_BATCH_OPS and not traced:
            _window(state)
        state["ops"] += 1
        if op_type.startswith("__inference_") or op_type.startswith("__forward_"):
            state["calls"] += 1  # a call of a traced function: one eager op
            state["names"].append(op_type)
            return None
        sizes = [t for t in list(inputs) + list(outputs or []) if hasattr(t, "shape")]
        if op_type in TF_MATMUL_OPS and inputs and outputs:
            # Eager attrs are Python values; traced ones AttrValue protos (their .b).
            names = dict(zip(attrs[::2], attrs[1::2], strict=False)) if attrs else {}
            flag = {key: getattr(value, "b", value) for key, value in names.items()}
            a = inputs[0]
            trans_a = bool(flag.get("transpose_a") or flag.get("adj_x"))
            trans_b = bool(flag.get("transpose_b") or flag.get("adj_y"))
            k = a.shape[-2] if trans_a else a.shape[-1]
            try:
                state["flops"] += 2.0 * math.prod(outputs[0].shape) * int(k)
                state["flop_ops"] += 1
                out = [int(d) for d in outputs[0].shape]
                product = (math.prod(out[:-2]), out[-2], int(k), out[-1], trans_a, trans_b)
                state["products"][product] += 1
            except TypeError:  # a dimension unknown at trace time: the product left out
                pass
        elif op_type not in TF_NO_DATA_OPS:
            moved = sum(_tf_nbytes(t) for t in sizes)
            state["mem_bytes"] += moved
            state["mem_ops"] += moved > 0
        if outputs and not traced:
            out_device = _device_type(outputs[0])
            state["copy_bytes"] += sum(
                _tf_nbytes(t) for t in inputs if _device_type(t) not in (None, out_device)
            )
        return None

    return callback


#: TensorFlow ops that fetch a step's batch from a dataset iterator: one per step of
#: Keras fit (its train function starts with one), so they mark the steps while a
#: function runs eagerly.
TF_NEXT_BATCH_OPS = frozenset({"IteratorGetNext", "IteratorGetNextAsOptional"})

#: Steps counted between batch fetches when a program fetches its batches from an
#: iterator: a call of Keras fit runs an epoch of identical steps, of which these are
#: enough (s004-lstm's 38 to 150 steps per call took 50 s to count whole).
WINDOW_STEPS = 2

#: A program's batch fetches (while its data set is set up, per step) on one device:
#: none at set-up, one per step. What places the counting window (:func:`_window`)
#: unless the workload says otherwise (its ``batch_fetches``).
ONE_DEVICE_FETCHES = (0, 1)

_COUNTED = ("ops", "flops", "flop_ops", "mem_bytes", "mem_ops", "copy_bytes")


class _WindowFull(Exception):
    """Raised from the op callback once :data:`WINDOW_STEPS` steps are counted."""


def _window(state: dict) -> None:
    """At a batch fetch: the first fetch of the first step (after the data set's
    ``setup_fetches``) opens the window (counts so far kept aside), the first of the
    step :data:`WINDOW_STEPS` steps later (``fetches_per_step`` fetches a step) closes it
    and stops the step."""
    state["fetches"] += 1
    setup, per_step = state["setup_fetches"], state["fetches_per_step"]
    if state["fetches"] == setup + 1:
        state["before"] = {key: state[key] for key in _COUNTED}
        state["before"]["products"] = Counter(state["products"])
    elif state["fetches"] == setup + WINDOW_STEPS * per_step + 1 and state["windowed"]:
        raise _WindowFull


def _new_state(windowed: bool = False, fetches: tuple[int, int] = ONE_DEVICE_FETCHES) -> dict:
    """A fresh count; ``fetches`` = (the data set's fetches while it is set up, fetches
    per step), which place the window (:func:`_window`)."""
    return {
        "fetches": 0,
        "setup_fetches": fetches[0],
        "fetches_per_step": fetches[1],
        "windowed": windowed,
        "before": None,
        "ops": 0,
        "calls": 0,
        "names": [],
        "flops": 0.0,
        "flop_ops": 0,
        "mem_bytes": 0.0,
        "mem_ops": 0,
        "copy_bytes": 0.0,
        "products": Counter(),
    }


def _tf_retraced(functions, names: list[str]) -> dict | None:
    """Counts of the calls ``names`` (traced functions' names, one per call) made to
    the ``tf.function`` objects ``functions``, each traced afresh from its Python
    function under the op callback with the input signature it was called with, its
    ops times its calls; None when some call is not of one of them. A loop inside a
    function counts its body once."""
    import tensorflow as tf
    from tensorflow.python.framework import op_callbacks

    per_name = {}
    for fn in functions:
        try:
            concretes = fn._list_all_concrete_functions()  # noqa: SLF001 - no public list
        except AttributeError:
            return None
        for concrete in concretes:
            name = concrete.name.decode() if isinstance(concrete.name, bytes) else concrete.name
            if name not in names or name in per_name:
                continue
            state = _new_state()
            callback = _tf_callback(state, traced=True)
            args, kwargs = concrete.structured_input_signature
            op_callbacks.add_op_callback(callback)
            try:
                tf.function(fn.python_function).get_concrete_function(*args, **kwargs)
            finally:
                op_callbacks.remove_op_callback(callback)
            per_name[name] = state
    if not names or any(name not in per_name for name in names):
        return None
    total = _new_state()
    for name in names:
        for key in _COUNTED:
            total[key] += per_name[name][key]
        total["products"].update(per_name[name]["products"])
    return total


def _tf_function_ops(name: str, seen: dict | None = None) -> int:
    """Operations in the definition of the traced TensorFlow function ``name`` (its
    ``FunctionDef`` in the eager context), the functions it calls (attributes naming a
    function: calls, loop bodies, branches) expanded once each; constants, identities
    and no-ops left out. A static count: a loop body counts once."""
    from tensorflow.python.eager import context

    seen = {} if seen is None else seen
    if name in seen:
        return seen[name]
    seen[name] = 0
    total = 0
    for node in context.context().get_function_def(name).node_def:
        called = [v.func.name for v in node.attr.values() if v.func.name]
        if called:
            total += sum(_tf_function_ops(f, seen) for f in called)
        elif node.op not in TF_NO_DATA_OPS:
            total += 1
    seen[name] = total
    return total


def _device_type(tensor) -> str | None:
    """``CPU``, ``GPU`` or ``TPU`` of an eager tensor's device, None when unknown."""
    device = getattr(tensor, "device", None) or ""
    parts = device.upper().split("DEVICE:")
    return parts[-1].split(":")[0] if len(parts) > 1 else None


def _tf_nbytes(tensor) -> int:
    """Bytes of an eager tensor (0 for an unknown shape or a string)."""
    try:
        return int(math.prod(tensor.shape)) * tensor.dtype.size
    except (TypeError, ValueError, AttributeError):
        return 0


def count_tf_step(
    step: Callable[[], object],
    steps: int = 1,
    functions=(),
    fetches: tuple[int, int] = ONE_DEVICE_FETCHES,
) -> StepCounts:
    """Run ``step()`` (``steps`` training steps of a built TensorFlow workload) twice
    under an op callback and return the :class:`StepCounts` of one step: once as the
    program runs (its eager ops, a traced function's call counted as one), once with
    ``tf.function`` bodies run eagerly (every op executed, with its shapes: ``ops``,
    ``flops``, ``mem_bytes``, ``copy_bytes``). ``graph_ops`` = ops of the second call
    minus the eager ops of the first that were not function calls.

    A function that cannot run eagerly (s000-hjb's step calls ``tf.gradients``) is
    counted from its trace instead: each of ``functions`` (the workload's
    ``tf.function`` objects) traced afresh under the callback with the signature it was
    called with, its ops and static shapes times its calls (a loop body once); failing
    that, the ops of the traced functions' definitions, without FLOPs or bytes.

    A call of more than :data:`WINDOW_STEPS` steps that fetches its batches from an
    iterator (Keras fit) is counted over a window of that many steps, its start and end
    found by the batch fetches: ``fetches`` = (fetches while the data set is set up,
    before the first step; fetches per step), :data:`ONE_DEVICE_FETCHES` for one device. Under
    MirroredStrategy the distributed data set fetches once per replica at set-up and at
    every step: (replicas, replicas); taken as (0, 1), the window of a 2-replica fit
    held nothing but set-up (20 ops, no FLOPs per step of s004-lstm, default study of
    2026-12-03) and a 1-replica fit's about one step, spread over two.

    The steps really run, so call it outside the timed blocks. Exceptions from the step
    propagate; ValueError for ``steps`` below 1 or ``fetches`` not (≥ 0, ≥ 1).
    """
    import tensorflow as tf
    from tensorflow.python.framework import op_callbacks

    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if fetches[0] < 0 or fetches[1] < 1:
        raise ValueError(f"fetches must be (>= 0, >= 1), got {fetches}")

    def run(functions_eagerly: bool) -> dict:
        state = _new_state(windowed=functions_eagerly and steps > WINDOW_STEPS, fetches=fetches)
        callback = _tf_callback(state)
        was = tf.config.functions_run_eagerly()
        tf.config.run_functions_eagerly(functions_eagerly)
        op_callbacks.add_op_callback(callback)
        try:
            step()
        except _WindowFull:  # enough identical steps seen: per step from the window
            for key in _COUNTED:
                state[key] = (state[key] - state["before"][key]) * steps / WINDOW_STEPS
            window = state["products"] - state["before"]["products"]
            state["products"] = Counter(
                {key: count * steps / WINDOW_STEPS for key, count in window.items()}
            )
        finally:
            op_callbacks.remove_op_callback(callback)
            tf.config.run_functions_eagerly(was)
        return state

    as_run = run(False)
    eager = as_run["ops"] - as_run["calls"]
    source = "MatMul shapes of the ops executed"
    try:
        every = run(True)
        graph_ops = max(0, every["ops"] - eager)
    except Exception:  # noqa: BLE001 - a function that only runs traced (tf.gradients)
        every = _tf_retraced(functions, as_run["names"])
        if every is None:  # the definitions' ops, without shapes
            graph_ops = sum(_tf_function_ops(name) for name in as_run["names"])
            return StepCounts(
                ops=(eager + graph_ops) / steps,
                ops_kind="tf_ops",
                graph_ops=graph_ops / steps,
                flops=None,
                flops_source="not counted: the step's tf.function cannot run eagerly",
                mem_bytes=None,
                copy_bytes=as_run["copy_bytes"] / steps,
                function_calls=as_run["calls"] / steps,
            )
        graph_ops = every["ops"]
        every["ops"] += eager
        every["copy_bytes"] = as_run["copy_bytes"]
        every["products"] += as_run["products"]  # the traced ones and the eager ones
        source = "MatMul shapes of the step's tf.function traced afresh (a loop body once)"
    return StepCounts(
        ops=every["ops"] / steps,
        ops_kind="tf_ops",
        graph_ops=graph_ops / steps,
        flops=every["flops"] / steps,
        flops_source=source,
        mem_bytes=every["mem_bytes"] / steps,
        mem_ops=every["mem_ops"] / steps,
        flop_ops=every["flop_ops"] / steps,
        copy_bytes=every["copy_bytes"] / steps,
        function_calls=as_run["calls"] / steps,
        # The first call saw only the products run eagerly; the rest ran in a graph.
        products=tuple(
            sorted(
                _per_step(as_run["products"], steps, False)
                + _per_step(every["products"] - as_run["products"], steps, True)
            )
        ),
    )


def count_point(workload, framework: str, device: str, steps_per_block: int | None = None) -> dict:
    """The ``step_*`` columns of a measured point: one call of its training program
    (``workload.steps_per_call`` steps) counted by :func:`count_torch_step` or
    :func:`count_tf_step`, after the timed blocks and the loss read back (the counted
    steps are applied to the model but are never timed); the measuring job then replays
    its products (:func:`crossover_study.step_replay.replay_columns`). Never raises: a
    program the counters cannot follow gives empty columns and a line on stderr (the
    job log) saying why.

    A workload whose ``run(n)`` makes one traced-function call for all n steps
    (``one_call_per_block``: TensorFlow's loop variant, a ``tf.while_loop`` of n steps)
    is counted with one step in that call, but its timed blocks ran ``steps_per_block``
    (the measurement's k) steps per call: ``step_function_calls`` is then the counted
    calls over k, the call's cost spread over the block as the timing spread it (one
    call per step overpriced s000-hjb's loop at twice its measured step).
    """
    steps = int(workload.steps_per_call)

    def step() -> None:
        workload.run(steps)
        workload.sync()

    try:
        if framework == "torch":
            counts = count_torch_step(step, steps, device)
        else:
            import tensorflow as tf

            functions = [
                v
                for v in vars(workload).values()
                if isinstance(v, tf.types.experimental.GenericFunction)
            ]
            fetches = getattr(workload, "batch_fetches", ONE_DEVICE_FETCHES)
            counts = count_tf_step(step, steps, functions, fetches)
    except Exception as exc:  # noqa: BLE001 - counting must never lose a measured row
        print(f"step counts: not counted ({type(exc).__name__}: {exc})", file=sys.stderr)
        return {}
    columns = counts.columns()
    calls = columns.get("step_function_calls")
    if getattr(workload, "one_call_per_block", False) and steps_per_block and calls:
        columns["step_function_calls"] = calls * steps / steps_per_block
    return columns
