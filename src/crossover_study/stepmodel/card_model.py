"""A step priced on a device card: what this machine counted of a training step, at the
public numbers of an accelerator it does not have (:mod:`crossover_study.study.device_cards`).

What the CPU counted per step (:class:`Work`, from a timings row): the operations the
host dispatches (``step_ops``; of them ``step_graph_ops`` inside a compiled TensorFlow
graph), the traced-function calls (``step_function_calls``), the operations that do
device work and so launch a kernel (``step_flop_ops`` + ``step_mem_ops``: a view or a
scalar read launches none), each product's shape and each element-wise call's bytes
(``step_products``, ``step_elementwise``), the FLOPs and bytes the lists do not cover,
how often the loss is read back (``loss_read_every``: a synchronisation) and how many
values the user's own code reads back (``step_host_reads``: each a synchronisation
too), the host's own work beside the operations, as this machine's profile measured it
(the attribution's share of Python outside framework ops, data loading, tracing and
compilation, and Keras's own per-call work, times the measured step:
:func:`host_work_s`; a host runs that work whatever device it drives), and the input
pipeline's time per batch measured alone (``input_batch_s``: its threads make every
batch on the host whatever device trains on it).

How a card prices it (:func:`price`), an accelerator running asynchronously from its
host (the launch queue overlaps the host's issuing with the device's work):

    host   = own work measured here + Σ per-call costs the program pays on the host
             (eager ops × an eager op's dispatch and launch; graph ops × the graph
             executor's cost per op; calls of a traced or compiled function × its
             call cost; a CUDA-graph replay × its launch; a TPU program × its launch);
             for a PyTorch eager step, at least its ops × a whole training step's
             host time per op (published training traces: :func:`_whole_step_s`)
    device = Σ over the kernels of max(the kernel's floor, its work), the work a
             product's FLOPs at the card's peak (in the precision the step's products
             ran in: a bf16 or fp16 step at the card's peak for it where the card has
             one, else fp32's) × an achievable fraction, an
             element-wise call's bytes at its bandwidth × a fraction
    step   = max(host, device, input pipeline per batch) + syncs × a synchronisation's
             round trip

the roofline (S. Williams, A. Waterman, D. Patterson, CACM 52(4), 2009) with a floor
per kernel and the host's issuing cost beside it (H. He, "Making Deep Learning Go
Brrrr From First Principles", 2022: the overhead-bound regime; a kernel's launch
overhead in NVIDIA's CUDA Graphs post, 2019). Each per-call cost and fraction is a
range on the card: the **low** estimate takes every cost's low end and every
fraction's high end, the **high** estimate the opposite, the **central** one each
range's geometric mean. The regime is the largest part of the step that sets it
(:data:`REGIMES`).

Which way each variant runs (:func:`variant_mode`): eager ops one by one; a CUDA graph
replays the eager step's kernels with one launch and no Python, and so exists only for
a step whose work is all on the device (no value read back, no host-side data made in
the step: :func:`capture_obstacle`); ``torch.compile`` and
XLA fuse element-wise work (their kernels lie between the products alone plus one and
the eager step's kernels: that span joins the band); TF32 prices products at the
card's TF32 peak; a TPU runs one compiled program per traced call. A variant the card
cannot price gets a reason, never a number (:class:`NotPriced`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from crossover_study.stepmodel.card_rnn import cudnn_rnn_work, rnn_calls
from crossover_study.study.device_cards import Card, Range

#: The three estimates of a prediction.
ENDS = ("low", "central", "high")
#: The regimes a predicted step can be in, by the part of it that sets it.
REGIMES = {
    "launch": "launch-bound",
    "host": "host-bound",
    "compute": "compute-bound",
    "memory": "memory-bound",
    "sync": "sync-bound",
    "comm": "communication-bound",
    "input": "input-bound",
}
#: Variants that run only on an accelerator, priced from the CPU's eager row.
DERIVED_VARIANTS = {"cuda_graph": "torch", "tf32": None}
#: Variants that fuse element-wise work into fewer kernels (torch.compile, XLA).
FUSING_VARIANTS = ("compile", "xla")


class NotPriced(ValueError):
    """The card cannot price this program (the message says why: the count it lacks, a
    mode the device does not have)."""


@dataclass(frozen=True)
class Work:
    """What one training step does, per step, as this machine counted it.

    ops: operations the host dispatches (ATen ops, TensorFlow ops); graph_ops: of them,
    run inside a compiled graph; function_calls: traced-function calls (TensorFlow);
    kernels: operations that do device work (products + element-wise calls);
    products: ``((flops, per_step), ...)`` each product's FLOPs; elementwise:
    ``((bytes, per_step), ...)`` each element-wise call's bytes; flops and mem_bytes:
    the step's whole FLOPs and element-wise bytes (those the lists do not cover are
    priced at the card's rates); syncs: host-device round trips per step (loss reads);
    host_s: the host's own work beside the operations, seconds (measured here);
    framework, variant, program: what ran; host_reads: of the syncs, the reads the
    user's own code makes (``step_host_reads``), and ``host_reads_where``,
    ``host_data_where`` where in the user's code the reads and the host-side data are
    made (:mod:`crossover_study.stepmodel.host_calls`); precision: the one most FLOPs ran
    in (``step_flops_precision``: fp32, bf16, fp16); input_s: the input pipeline's
    seconds per batch, timed alone (0: none found or not timed); rnn: the step's
    recurrent module calls (:class:`~crossover_study.stepmodel.card_rnn.RnnCall`), which a CUDA card prices as cuDNN runs them
    (:func:`~crossover_study.stepmodel.card_rnn.cudnn_rnn_work`); counted_kernels: ``kernels`` as counted, before
    :func:`work_of_row` held it to ``ops`` (None: the same).
    """

    framework: str
    variant: str
    program: str
    ops: float
    graph_ops: float
    function_calls: float
    kernels: float
    flops: float
    mem_bytes: float
    syncs: float
    host_s: float
    products: tuple = field(default_factory=tuple)
    elementwise: tuple = field(default_factory=tuple)
    host_reads: float = 0.0
    precision: str = "fp32"
    host_reads_where: str | None = None
    host_data_where: str | None = None
    input_s: float = 0.0
    rnn: tuple = field(default_factory=tuple)
    counted_kernels: float | None = None


def _number(row: Mapping, key: str, default: float | None = None) -> float | None:
    value = row.get(key)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(value) else value


def _products(text) -> tuple:
    """``step_products`` JSON ``[[batch, m, k, n, ta, tb, in_graph, per_step], ...]``
    as ``((flops, per_step), ...)``: 2·batch·m·k·n FLOPs each."""
    if not isinstance(text, str) or not text.strip():
        return ()
    return tuple((2.0 * b * m * k * n, float(per)) for b, m, k, n, *_, per in json.loads(text))


def _elementwise(text) -> tuple:
    """``step_elementwise`` JSON ``[[op, args, bytes, per_step], ...]`` as ``((bytes,
    per_step), ...)``."""
    if not isinstance(text, str) or not text.strip():
        return ()
    return tuple((float(moved), float(per)) for _, _, moved, per in json.loads(text))


#: The attribution's categories (``attr_<category>_s``) and those that are the host's
#: own work beside the operations (:mod:`crossover_study.measure.attribution`).
ATTRIBUTION = ("ops", "python", "data", "trace", "fit", "wait", "unattributed")
HOST_WORK = ("python", "data", "trace", "fit")


def host_parts_s(row: Mapping) -> dict[str, float]:
    """The host's own work per step, seconds, by part (``python``, ``data``, ``trace``,
    ``fit``; tracing and compilation run on the host whatever device runs the graph):
    each the attribution's share of the profiled block (``attr_<part>_s`` over the sum
    of every ``attr_*_s`` category) times the measured step (``step_time_s``): the
    shares are the profile's, the scale the timed blocks' (a profiled block slower than
    the timed step, under the tracer or other work, then scales nothing). Zeros where
    the row has no attribution."""
    parts = {k: _number(row, f"attr_{k}_s") for k in ATTRIBUTION}
    whole = sum(v for v in parts.values() if v is not None)
    step = _number(row, "step_time_s")
    if not whole or step is None:
        return dict.fromkeys(HOST_WORK, 0.0)
    return {k: step * (parts[k] or 0.0) / whole for k in HOST_WORK}


def host_work_s(row: Mapping) -> float:
    """The host's own work per step, seconds: the sum of :func:`host_parts_s`."""
    return sum(host_parts_s(row).values())


def work_of_row(row: Mapping, host_s: float | None = None) -> Work:
    """The :class:`Work` of one ok CPU row of a timings table (a mapping of its columns);
    its host's own work ``host_s`` (seconds per step) where the caller knows it better,
    else :func:`host_work_s` of the row. Raises :class:`NotPriced` naming a count the
    row lacks (a row counted before the column existed, a program the counters could
    not follow)."""
    needed = ("step_ops", "step_flops", "step_mem_bytes")
    missing = [k for k in needed if _number(row, k) is None]
    if missing:
        raise NotPriced(f"the CPU row has no {', '.join(missing)} (the step was not counted)")
    ops = _number(row, "step_ops")
    flop_ops = _number(row, "step_flop_ops", 0.0)
    mem_ops = _number(row, "step_mem_ops")
    kernels = flop_ops + mem_ops if mem_ops is not None else ops
    every = _number(row, "loss_read_every")
    reads = _number(row, "step_host_reads", 0.0)
    return Work(
        framework=str(row.get("framework")),
        variant=str(row.get("variant")),
        program=str(row.get("program") or ""),
        ops=ops,
        graph_ops=_number(row, "step_graph_ops", 0.0),
        function_calls=_number(row, "step_function_calls", 0.0),
        kernels=min(kernels, ops) if ops else kernels,
        flops=_number(row, "step_flops"),
        mem_bytes=_number(row, "step_mem_bytes"),
        syncs=(1.0 / every if every and every > 0 else 0.0) + reads,
        host_s=host_work_s(row) if host_s is None else host_s,
        products=_products(row.get("step_products")),
        elementwise=_elementwise(row.get("step_elementwise")),
        host_reads=reads,
        precision=_text(row, "step_flops_precision") or "fp32",
        host_reads_where=_text(row, "step_host_reads_where"),
        host_data_where=_text(row, "step_host_data_where"),
        input_s=_number(row, "input_batch_s", 0.0),
        rnn=rnn_calls(row.get("step_rnn_modules")),
        counted_kernels=kernels,
    )


def _text(row: Mapping, key: str) -> str | None:
    value = row.get(key)
    return value if isinstance(value, str) and value.strip() else None


def capture_obstacle(work: Work) -> str | None:
    """Why a CUDA graph cannot replay ``work``'s step as written, or None: a graph
    captures the device's kernels once and replays them without the host, so a step
    that reads a value back (a synchronisation) or makes host-side data (NumPy, Python's
    random, a tensor from host data: it would be frozen at the capture) is not the same
    program replayed (PyTorch's CUDA semantics notes, "Constraints" of CUDA graphs:
    https://pytorch.org/docs/stable/notes/cuda.html#constraints)."""
    because = []
    if work.host_reads_where:
        because.append(f"it reads values back to the host ({work.host_reads_where})")
    if work.host_data_where:
        because.append(f"it makes host-side data ({work.host_data_where})")
    if not because:
        return None
    return "not possible for this step, because " + " and ".join(because)


def variant_mode(card: Card, framework: str, variant: str) -> str:
    """How ``variant`` of a ``framework`` program runs on ``card``: ``eager``,
    ``cuda_graph``, ``fused`` (compile, xla), ``tf32`` or ``tpu``. Raises
    :class:`NotPriced` where the device has no such mode (PyTorch on a TPU, a CUDA
    graph or TF32 off NVIDIA GPUs, a card without TF32)."""
    if variant == "copy_data_each_step":
        raise NotPriced("host-device copies are not priced: the CPU counts no batch bytes to copy")
    if card.device_class == "tpu":
        if framework != "tensorflow":
            raise NotPriced("PyTorch has no TPU backend in this study (TensorFlow only)")
        if variant in ("cuda_graph", "tf32", "compile"):
            raise NotPriced(f"{variant} is a mode of NVIDIA GPUs")
        return "tpu"
    if variant == "cuda_graph":
        if framework != "torch":
            raise NotPriced("CUDA graphs are captured from PyTorch steps here")
        return "cuda_graph"
    if variant == "tf32":
        if card.peak("tf32_flop_per_s") is None:
            raise NotPriced(f"{card.name} has no TF32 mode (before Ampere)")
        return "tf32"
    return "fused" if variant in FUSING_VARIANTS else "eager"


def per_call_cost(card: Card, key: str, end: str) -> float:
    """The card's per-call cost ``key`` (seconds) at ``end`` (low, central, high) of its
    range. Raises :class:`NotPriced` where the card gives none."""
    found: Range | None = card.cost(key)
    if found is None:
        raise NotPriced(f"the card {card.card} has no {key}")
    return found.pick(end)


def _fraction(card: Card, key: str, end: str) -> float:
    """An achievable fraction: its high end for the low estimate (a faster device)."""
    flipped = {"low": "high", "central": "central", "high": "low"}[end]
    return card.fraction(key).pick(flipped)


def _device_s(work: Work, card: Card, end: str, mode: str) -> dict[str, float]:
    """The device's time per step, split into the kernels' floors (``launch``), their
    arithmetic (``compute``) and their traffic (``memory``): each kernel takes the
    longer of its floor and its work (module docstring)."""
    peak_key = "tf32_flop_per_s" if mode == "tf32" else "fp32_flop_per_s"
    if work.precision in ("bf16", "fp16") and card.peak(f"{work.precision}_flop_per_s"):
        peak_key = f"{work.precision}_flop_per_s"  # the card's native reduced precision
    if mode == "tpu":
        peak_key = "bf16_flop_per_s"  # a TPU's products run in bf16 passes at its default precision
    peak = card.peak(peak_key)
    bandwidth = card.peak("memory_bandwidth_bytes_per_s")
    if not peak or not bandwidth:
        raise NotPriced(f"the card {card.card} has no {peak_key} or memory bandwidth")
    flop_rate = peak * _fraction(card, "compute_fraction", end)
    byte_rate = bandwidth * _fraction(card, "memory_fraction", end)
    floor_key = "cuda_graph_kernel_s" if mode == "cuda_graph" else "kernel_floor_s"
    floor = per_call_cost(card, floor_key, end) if card.cost(floor_key) else 0.0
    parts = {"launch": 0.0, "compute": 0.0, "memory": 0.0}

    def add(work_s: float, per_step: float, kind: str) -> None:
        if work_s >= floor:
            parts[kind] += work_s * per_step
        else:
            parts["launch"] += floor * per_step

    covered_flops = covered_bytes = counted = 0.0
    for flops, per in work.products:
        add(flops / flop_rate, per, "compute")
        covered_flops, counted = covered_flops + flops * per, counted + per
    elementwise = work.elementwise
    if mode in ("fused", "tpu"):
        elementwise = ()  # fused into fewer kernels: priced by their bytes below
    for moved, per in elementwise:
        add(moved / byte_rate, per, "memory")
        covered_bytes, counted = covered_bytes + moved * per, counted + per
    parts["compute"] += max(work.flops - covered_flops, 0.0) / flop_rate
    parts["memory"] += max(work.mem_bytes - covered_bytes, 0.0) / byte_rate
    parts["launch"] += max(_kernels(work, mode, end) - counted, 0.0) * floor
    return parts


def _kernels(work: Work, mode: str, end: str) -> float:
    """Kernels per step: the counted ones; fused (compile, XLA, a TPU program) between
    the products plus one (every element-wise op fused into one kernel) for the low
    estimate and the eager count for the high one, their geometric mean central."""
    if mode not in ("fused", "tpu"):
        return work.kernels
    products = sum(per for _, per in work.products) or 0.0
    fewest = min(products + 1.0, work.kernels) if work.kernels else 0.0
    return Range(max(fewest, 1e-9), max(work.kernels, fewest, 1e-9), ()).pick(end)


def _host_s(work: Work, card: Card, end: str, mode: str) -> dict:
    """The host's time per step: its own work measured here (``host``) and what the
    program pays per call on this device (``launch``)."""
    eager = max(work.ops - work.graph_ops, 0.0)
    tf = work.framework == "tensorflow"
    if mode == "cuda_graph":
        return {"host": 0.0, "launch": per_call_cost(card, "cuda_graph_launch_s", end)}
    if mode == "tpu":
        calls = work.function_calls or 1.0
        launch = calls * per_call_cost(card, "tpu_step_launch_s", end)
        return {"host": work.host_s, "launch": launch}
    op_key = "tf_eager_op_s" if tf else "torch_eager_op_s"
    if mode == "fused":
        calls = work.function_calls if tf else 2.0  # torch.compile: a forward and a backward graph
        call_key = "xla_call_s" if tf else "compiled_call_s"
        kernels = _kernels(work, mode, end)
        launch = calls * per_call_cost(card, call_key, end) + kernels * per_call_cost(
            card, "kernel_launch_s", end
        )
        if tf:
            launch += eager * per_call_cost(card, op_key, end)
        return {"host": work.host_s, "launch": launch}
    launch = eager * per_call_cost(card, op_key, end)
    if work.graph_ops:
        launch += work.graph_ops * per_call_cost(card, "tf_graph_op_s", end)
    if work.function_calls:
        launch += work.function_calls * per_call_cost(card, "tf_function_call_s", end)
    whole = _whole_step_s(work, card, end) if not tf else None
    if whole is not None and whole > work.host_s + launch:
        # The sources' whole steps hold the Python between ops, which work.host_s also
        # measures: the larger of the two estimates, never their sum.
        own = min(work.host_s, whole)
        return {"host": own, "launch": whole - own, "basis": "step"}
    return {"host": work.host_s, "launch": launch}


def _whole_step_s(work: Work, card: Card, end: str) -> float | None:
    """A PyTorch eager step's host time from whole training steps: every dispatched op at
    the card's ``torch_step_op_s`` (the Python between ops, autograd, the allocator and
    the launch, read from published training traces), seconds; None where the card has
    no such cost. The card model prices the host at the larger of this and the program's
    own work measured here plus each op's bare dispatch (``torch_eager_op_s``): a host
    that runs more Python than the traces' programs did pays for it, and the traces' cost
    per op is paid however little Python a program has."""
    cost = card.cost("torch_step_op_s")
    if cost is None:
        return None
    return max(work.ops - work.graph_ops, 0.0) * cost.pick(end)


@dataclass(frozen=True)
class Priced:
    """One estimate of a step on a card, seconds per step: ``step_s`` and its parts
    (``host_s`` the host's own work, ``host_launch_s`` its per-call costs,
    ``device_s`` the device's time of which ``floor_s`` in kernels' floors,
    ``compute_s`` and ``memory_s``, ``sync_s`` the synchronisations), ``kernels`` per
    step, the ``regime`` and ``host_basis``: ``ops`` where the host is its own work plus
    each call's cost, ``step`` where it is the ops at a whole training step's cost per op
    (:func:`_whole_step_s`); ``allreduce_s`` the replicas' all-reduce of their gradients
    (:func:`~crossover_study.stepmodel.card_replicas.price_replicas`; 0 on one device)."""

    step_s: float
    host_s: float
    host_launch_s: float
    device_s: float
    floor_s: float
    compute_s: float
    memory_s: float
    sync_s: float
    kernels: float
    regime: str
    host_basis: str = "ops"
    allreduce_s: float = 0.0


def price(work: Work, card: Card, variant: str | None = None, end: str = "central") -> Priced:
    """``work`` (the CPU's counts of a step) run as ``variant`` (default: the work's
    own) on ``card``, one estimate (``end``: low, central or high; module docstring);
    on a CUDA card its recurrent module calls run as cuDNN runs them
    (:func:`cudnn_rnn_work`). Raises :class:`NotPriced` with the reason where the card
    cannot price it."""
    variant = variant or work.variant
    mode = variant_mode(card, work.framework, variant)
    if mode == "cuda_graph" and capture_obstacle(work):
        raise NotPriced(capture_obstacle(work))
    if card.device_class == "cuda" and work.rnn:
        work = cudnn_rnn_work(work)
    host = _host_s(work, card, end, mode)
    device = _device_s(work, card, end, mode)
    sync = work.syncs * per_call_cost(card, "sync_s", end) if work.syncs else 0.0
    host_total = host["host"] + host["launch"]
    device_total = sum(device.values())
    step = max(host_total, device_total, work.input_s) + sync
    if sync > max(host_total, device_total, work.input_s):
        regime = "sync"
    elif work.input_s > max(host_total, device_total):
        regime = "input"
    elif host_total >= device_total:
        regime = "host" if host["host"] > host["launch"] else "launch"
    else:
        regime = max(device, key=device.get)
    return Priced(
        step_s=step,
        host_s=host["host"],
        host_launch_s=host["launch"],
        device_s=device_total,
        floor_s=device["launch"],
        compute_s=device["compute"],
        memory_s=device["memory"],
        sync_s=sync,
        kernels=_kernels(work, mode, end),
        regime=REGIMES[regime],
        host_basis=host.get("basis", "ops"),
    )


def price_range(work: Work, card: Card, variant: str | None = None) -> dict[str, Priced]:
    """:func:`price` at each of :data:`ENDS` (low ≤ central ≤ high by construction)."""
    return {end: price(work, card, variant, end) for end in ENDS}


def cold_start_s(card: Card) -> Range | None:
    """The card's cold start (its context or runtime started by the first call), s; None
    where it gives none."""
    return card.cost("context_start_s")
