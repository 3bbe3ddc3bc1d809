"""PyTorch's step counted: ATen ops by a ``TorchDispatchMode`` on the CPU, device
activities by the profiler on CUDA, FLOPs by ``torch.utils.flop_counter`` plus the
LSTM layers it does not reach, element-wise calls by overload and arguments, and each
``torch.nn.RNN``/``GRU``/``LSTM`` module call with the ops and kernels it accounts for
(:func:`count_torch_step`, :func:`count_rnn_call`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable

from crossover_study.core.cpu_flags import DTYPE_PRECISION
from crossover_study.stepmodel.record import (
    StepCounts,
    lstm_products,
    product_flops,
    rnn_module_rows,
    rows_per_step,
)

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
    :func:`crossover_study.stepmodel.replay.replay_elementwise` rebuilds a call of the same
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


def _torch_counter(watch=None):
    """A ``TorchDispatchMode`` that counts ops, FLOPs, memory and copy bytes, and tells
    ``watch`` (a ``HostCalls``, optional) of each scalar read."""
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
            self.dtype_flops = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func._overloadpacket  # noqa: SLF001 - how torch names an op's overload packet
            name = str(packet)
            if name.startswith("profiler."):  # record_function markers, not operations
                return out
            self.ops += 1
            rnn = _torch_rnn_layers(name, args)
            if packet in flop_registry:
                flops = flop_registry[packet](*args, **kwargs, out_val=out)
                self.flops += flops
                self.flop_ops += 1
                found = tensors(args)
                if found:
                    self.dtype_flops[str(found[0].dtype).removeprefix("torch.")] += flops
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
            if name == "aten._local_scalar_dense" and watch is not None:
                watch.scalar_read()
            if name in copies:
                ins, outs = tensors(args), tensors(out)
                devices = {t.device.type for t in ins} | {t.device.type for t in outs}
                if len(devices) > 1 or (
                    name == "aten._local_scalar_dense" and "cpu" not in devices
                ):
                    self.copy_bytes += sum(t.numel() * t.element_size() for t in ins[-1:])
            return out

    return OpCounter()


#: Gate blocks of each ``torch.nn.RNNBase.mode``: its hidden-to-gates matrix is G·H × H
#: (torch.nn.RNN, GRU and LSTM documentation: one, three and four gates).
RNN_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "GRU": 3, "LSTM": 4}


def rnn_call_spec(module, args, output) -> tuple | None:
    """What rebuilds one call of a ``torch.nn.RNNBase`` module (``nn.RNN``, ``GRU``,
    ``LSTM``) for :func:`count_rnn_call`: ``(mode, input shape, batch_first, inputs I,
    hidden H, proj_size, layers, bidirectional, bias, dropout, training, dtype name,
    input requires grad, hx shapes, backward)``, ``backward`` true where the output
    requires grad (a training step takes its backward). None for another module, a
    ``PackedSequence`` input (its steps vary by sequence) or a module not on the CPU."""
    import torch
    from torch import nn

    if not isinstance(module, nn.RNNBase) or module.mode not in RNN_GATES:
        return None
    x = args[0] if args else None
    if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
        return None
    hx = args[1] if len(args) > 1 else None
    hx_shapes = None
    if isinstance(hx, torch.Tensor):
        hx_shapes = (tuple(hx.shape),)
    elif isinstance(hx, (tuple, list)):
        hx_shapes = tuple(tuple(h.shape) for h in hx)
    out = output[0] if isinstance(output, tuple) else output
    backward = bool(isinstance(out, torch.Tensor) and out.requires_grad)
    return (
        module.mode, tuple(x.shape), bool(module.batch_first), int(module.input_size),
        int(module.hidden_size), int(getattr(module, "proj_size", 0)), int(module.num_layers),
        bool(module.bidirectional), bool(module.bias), float(module.dropout),
        bool(module.training), str(x.dtype).removeprefix("torch."), bool(x.requires_grad),
        hx_shapes, backward,
    )  # fmt: skip


def count_rnn_call(spec: tuple) -> dict:
    """One call of an RNN module rebuilt from its :func:`rnn_call_spec` (a new module of
    the same configuration on the CPU, random input of the same shape and dtype, its
    output's gradient made before counting) counted forward and, where ``backward``,
    backward under the same operator counter as the step: what that call accounts for in
    the step's counts. Returns ``{"kind", "steps" (T), "batch" (B), "inputs" (I),
    "hidden" (H), "layers", "directions", "backward", "elem_bytes" (bytes per element),
    "ops", "kernels" (its products and element-wise calls), "flops", "mem_bytes" (its
    element-wise calls' bytes), "products" [[FLOPs,
    per call], ...], "elementwise" [[bytes, per call], ...]}``. The global random state
    is restored. Raises ValueError for an unknown mode."""
    import torch
    from torch import nn

    (mode, shape, batch_first, inputs, hidden, proj, layers, bidirectional, bias, dropout,
     training, dtype, x_grad, hx_shapes, backward) = spec  # fmt: skip
    if mode not in RNN_GATES:
        raise ValueError(f"not an RNN mode: {mode!r}")
    dtype = getattr(torch, dtype)
    kind = {"LSTM": nn.LSTM, "GRU": nn.GRU}.get(mode, nn.RNN)
    kwargs = {"nonlinearity": mode.removeprefix("RNN_").lower()} if kind is nn.RNN else {}
    if proj:
        kwargs["proj_size"] = proj
    with torch.random.fork_rng(devices=[]):
        module = kind(
            inputs, hidden, num_layers=layers, bias=bias, batch_first=batch_first,
            dropout=dropout, bidirectional=bidirectional, dtype=dtype, **kwargs,
        )  # fmt: skip
        module.train(training)
        x = torch.randn(shape, dtype=dtype, requires_grad=x_grad)
        hx = None
        if hx_shapes is not None:
            hx = tuple(torch.zeros(s, dtype=dtype) for s in hx_shapes)
            hx = hx if mode == "LSTM" else hx[0]
        with torch.no_grad():
            grad = torch.ones_like(module(x, hx)[0])
        counter = _torch_counter()
        with counter:
            out = module(x, hx)[0]
            if backward:
                out.backward(grad)
    batched = len(shape) == 3
    steps = shape[1] if batch_first and batched else shape[0]
    products, elementwise = Counter(), Counter()
    for (b, m, k, n, *_), count in counter.products.items():
        products[2.0 * b * m * k * n] += count
    for (_, _, moved), count in counter.elementwise.items():
        elementwise[float(moved)] += count
    return {
        "kind": mode, "steps": int(steps),
        "batch": int(shape[0] if batch_first else shape[1]) if batched else 1,
        "inputs": inputs, "hidden": hidden, "layers": layers,
        "directions": 2 if bidirectional else 1, "backward": backward,
        "elem_bytes": int(torch.empty((), dtype=dtype).element_size()),
        "ops": counter.ops, "kernels": counter.flop_ops + counter.mem_ops,
        "flops": float(counter.flops), "mem_bytes": float(counter.mem_bytes),
        "products": sorted([f, c] for f, c in products.items()),
        "elementwise": sorted([b, c] for b, c in elementwise.items()),
    }  # fmt: skip


def _rnn_modules(calls: Counter, steps: float) -> tuple:
    """:attr:`StepCounts.rnn_modules` of the RNN module calls a step made (``calls``:
    :func:`rnn_call_spec` -> calls in ``steps`` steps): each distinct call counted once
    alone (:func:`count_rnn_call`) with its ``per_step``, as a row of
    :data:`~crossover_study.stepmodel.record.RNN_MODULE_KEYS`, its ``products`` and
    ``elementwise`` as JSON text (a cell of ``rnn_modules.csv``). A call that cannot be
    rebuilt alone (an error from the module) is left out with a line on stderr: its ops
    are then priced as counted."""
    return rnn_module_rows(calls, steps, count_rnn_call, "{} call not counted alone")


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


def count_torch_step(
    step: Callable[[], object], steps: int = 1, device: str = "cpu", watch=None
) -> StepCounts:
    """Run ``step()`` (``steps`` training steps of a built PyTorch workload, e.g.
    ``lambda: workload.run(workload.steps_per_call)``) under the operator counter and
    return the :class:`StepCounts` of one step. On ``cuda`` the step runs once more
    under the profiler, whose device activities are ``ops``. The step really runs (its
    update is applied), so call it outside the timed blocks; it is slower while
    counted. Each ``torch.nn.RNN``/``GRU``/``LSTM`` call the step makes on the CPU is noted
    by a global module forward hook and counted again alone (:func:`count_rnn_call`:
    ``rnn_modules``), so that a device card can replace the ops and kernels it made by the
    ones cuDNN runs (:mod:`crossover_study.stepmodel.card_model`). ``watch`` (a
    :class:`~crossover_study.stepmodel.host_calls.HostCalls`, entered by the caller) is told
    of each scalar read the user's code makes. Exceptions from the
    step propagate; ValueError for ``steps`` below 1.
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    import torch

    counter, calls = _torch_counter(watch), Counter()

    def note(module, args, output):
        spec = rnn_call_spec(module, args, output)
        if spec is not None:
            calls[spec] += 1

    hook = torch.nn.modules.module.register_module_forward_hook(note)
    try:
        with counter:
            step()
    finally:
        hook.remove()
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
        products=rows_per_step(counter.products, steps, False),
        rnn_layers=rows_per_step(counter.rnn_layers, steps),
        rnn_modules=_rnn_modules(calls, steps),
        elementwise=rows_per_step(counter.elementwise, steps),
        flops_precision=_precision(counter.dtype_flops),
    )


def _precision(dtype_flops: Counter) -> str | None:
    """The precision (``fp32``, ``bf16``, ``fp16``) of the dtype most FLOPs ran in."""
    if not dtype_flops:
        return None
    dtype = dtype_flops.most_common(1)[0][0]
    return DTYPE_PRECISION.get(dtype, dtype)
