"""A whole training step's costs on an accelerator, read from a published Kineto trace:
what the device cards' whole-step numbers (``torch_step_op_s``, ``kernel_floor_s``,
``cuda_graph_kernel_s`` in ``config/devices/families/cuda.yaml``) are computed from
(``benchmarks/step_trace_costs.py`` prints them for any trace).

The per-call costs published for single operations (one op timed in a loop from Python)
leave out what a training step pays around its operations: the Python between them, the
autograd engine's hand-off to its device thread, the caching allocator, the optimizer's
ops. A trace of a real training step holds all of that, on every CPU thread, beside the
device's kernels (PyTorch's profiler, Kineto: ``cpu_op``, ``cuda_runtime`` and ``kernel``
events, ``ts``/``dur`` in µs, ``pid``/``tid`` the process and thread).

What is read (:func:`trace_costs`), over the trace's ``ProfilerStep#N`` spans:

- **dispatched ops** (:func:`dispatched_ops`): the ATen ops the dispatcher hands to a
  kernel, as this study counts a step's ops on the CPU (a ``TorchDispatchMode``,
  :mod:`crossover_study.stepmodel.counts_torch`): an ``aten::`` op counts unless it is a
  composite that only calls other ops (:data:`COMPOSITE_IMPLICIT`, PyTorch's
  ``CompositeImplicitAutograd`` kernels of ``native_functions.yaml``), and ops called from
  inside a counted op do not count again;
- **host time per op**, per thread: the time from one dispatched op's start to the next
  one's, less the time the thread spent blocked in CUDA runtime calls of more than
  :data:`BLOCKED_CALL_US` (a launch into a full queue, a copy or a synchronisation that
  waits for the device: that is the device's time, not the host's), averaged over the
  intervals shorter than :data:`WAIT_US` (longer ones are the step waiting for data or
  for other ranks, not issuing ops). The thread that runs the forward pass and the
  optimizer dispatches its ops from Python; the autograd engine's thread from C++: each
  thread's mean is one of the trace's values (a program's ops divide between the two in
  its own proportion);
- **a short kernel in a queue**: over kernels queued back to back on one stream (the
  next one launched before this one started), the shortest tenth by duration: the median
  of duration plus the gap to the next kernel (the device's time per kernel of a stream of
  small kernels, ``kernel_floor_s``) and the median duration alone (a kernel's time with
  the launch gaps gone, as a CUDA graph replays it, ``cuda_graph_kernel_s``).

The traces are taken with the profiler on, whose own cost per recorded event is inside
the host times (an upper bias the cards' notes name).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from crossover_study.core.files import read_chrome_trace

#: ATen ops whose kernel is ``CompositeImplicitAutograd`` (PyTorch's
#: ``aten/src/ATen/native/native_functions.yaml``): they call other ops and reach no
#: kernel of their own, so a ``TorchDispatchMode`` sees the ops they call, not them.
#: Those that a training step of the traces read here calls (tests check each against the
#: installed PyTorch's dispatcher).
COMPOSITE_IMPLICIT = frozenset(
    {
        "aten::linear",
        "aten::matmul",
        "aten::dropout",
        "aten::batch_norm",
        "aten::_batch_norm_impl_index",
        "aten::layer_norm",
        "aten::group_norm",
        "aten::to",
        "aten::reshape",
        "aten::flatten",
        "aten::contiguous",
        "aten::softmax",
        "aten::log_softmax",
        "aten::cross_entropy_loss",
        "aten::nll_loss",
        "aten::nll_loss_nd",
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::embedding_bag",
        "aten::lstm",
        "aten::gru",
        "aten::einsum",
        "aten::chunk",
    }
)
#: A CUDA (or HIP) runtime call longer than this (µs) is the thread blocked on the device.
BLOCKED_CALL_US = 50.0
#: An interval between two ops longer than this (µs, after blocked calls) is a wait.
WAIT_US = 1000.0
#: The runtime calls that launch a kernel (CUDA runtime and driver, HIP).
LAUNCHES = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipModuleLaunchKernel",
    }
)
#: The least number of dispatched ops for a thread's mean to count.
MIN_OPS = 20


def read_events(trace) -> tuple[list[dict], list[str]]:
    """The complete events (``ph: "X"`` with a ``dur``) of a Kineto Chrome trace and its
    devices' names: ``trace`` is the parsed JSON or the path of a ``.json`` or
    ``.json.gz`` file. Raises ValueError when it has no ``traceEvents``."""
    trace = read_chrome_trace(trace)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    devices = [str(d.get("name")) for d in trace.get("deviceProperties") or []]
    return events, devices


def _start(e: dict) -> float:
    return float(e["ts"])


def _end(e: dict) -> float:
    return float(e["ts"]) + float(e["dur"])


def dispatched_ops(thread_events: list[dict]) -> list[dict]:
    """The dispatched ATen ops (module docstring) among one thread's events, in order:
    ``aten::`` ``cpu_op`` events that are not :data:`COMPOSITE_IMPLICIT` and whose
    enclosing ``aten::`` ops all are. Wrappers that are not ATen ops (the autograd
    engine's ``evaluate_function``, a ``...Backward0`` node, a user annotation) do not
    hide the ops inside them."""
    ordered = sorted(
        (e for e in thread_events if e.get("cat") == "cpu_op"),
        key=lambda e: (_start(e), -float(e["dur"])),
    )
    stack: list[dict] = []
    found = []
    for event in ordered:
        while stack and _end(stack[-1]) <= _start(event):
            stack.pop()
        name = str(event.get("name", ""))
        if name.startswith("aten::") and name not in COMPOSITE_IMPLICIT:
            enclosing = [p["name"] for p in stack if str(p["name"]).startswith("aten::")]
            if all(p in COMPOSITE_IMPLICIT for p in enclosing):
                found.append(event)
        stack.append(event)
    return found


@dataclass(frozen=True)
class ThreadCost:
    """One CPU thread's share of the trace's steps: ``tid``, ``ops`` (dispatched ops),
    ``host_per_op_s`` (the mean interval from one op's start to the next, less blocked
    runtime calls, over intervals under :data:`WAIT_US`; seconds), ``blocked_s`` (its
    time in blocked runtime calls) and ``kept`` (the share of intervals averaged)."""

    tid: object
    ops: int
    host_per_op_s: float
    blocked_s: float
    kept: float


@dataclass(frozen=True)
class TraceCosts:
    """What :func:`trace_costs` reads of one trace: ``devices`` (names), ``steps`` (the
    ``ProfilerStep`` spans read), ``ops_per_step``, ``launches_per_step``, ``threads``
    (:class:`ThreadCost`, the threads with at least :data:`MIN_OPS` ops),
    ``host_per_op_s`` (all threads' intervals together), ``queued_kernel_s`` (a short
    kernel plus its gap, in a queue) and ``short_kernel_s`` (its duration alone), both
    None without back-to-back kernels. Seconds."""

    devices: tuple[str, ...]
    steps: int
    ops_per_step: float
    launches_per_step: float
    threads: tuple[ThreadCost, ...]
    host_per_op_s: float | None
    queued_kernel_s: float | None
    short_kernel_s: float | None


def _thread_intervals(ops: list[dict], blocked: list[dict]) -> tuple[list[float], float]:
    """Start-to-start intervals of ``ops`` (µs) less the blocked calls inside each, and the
    blocked calls' total (µs)."""
    starts = [_start(o) for o in ops]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    total = 0.0
    for call in blocked:
        t = _start(call)
        # the interval holding the call: the last op started at or before it
        lo, hi = 0, len(starts)
        while lo < hi:
            mid = (lo + hi) // 2
            if starts[mid] <= t:
                lo = mid + 1
            else:
                hi = mid
        index = lo - 1
        if 0 <= index < len(gaps):
            gaps[index] -= float(call["dur"])
            total += float(call["dur"])
    return gaps, total


def _queued_kernels(events: list[dict]) -> tuple[float | None, float | None]:
    """(median duration + gap, median duration) of the shortest tenth of the kernels
    queued back to back (module docstring), µs; (None, None) without such kernels."""
    launched = {}
    for e in events:
        if e.get("cat") == "cuda_runtime":
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                launched[corr] = _start(e)
    streams: dict[tuple, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "kernel":
            streams[(e.get("pid"), e.get("tid"))].append(e)
    pairs = []
    for kernels in streams.values():
        kernels.sort(key=_start)
        for a, b in zip(kernels, kernels[1:], strict=False):
            when = launched.get((b.get("args") or {}).get("correlation"))
            if when is not None and when < _start(a):
                pairs.append((float(a["dur"]), _start(b) - _end(a)))
    if not pairs:
        return None, None
    pairs.sort()
    shortest = pairs[: max(1, len(pairs) // 10)]
    return (
        statistics.median(d + g for d, g in shortest),
        statistics.median(d for d, _ in shortest),
    )


def trace_costs(trace) -> TraceCosts:
    """The whole-step costs of one Kineto trace (module docstring); ``trace`` as
    :func:`read_events` takes it. Raises ValueError when the trace has no
    ``ProfilerStep`` span."""
    events, devices = read_events(trace)
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    if not steps:
        raise ValueError("the trace has no ProfilerStep span to read a step from")
    first, last = min(_start(s) for s in steps), max(_end(s) for s in steps)
    pid = steps[0].get("pid")
    window = [e for e in events if first <= _start(e) < last]
    inside = [e for e in window if e.get("pid") == pid]  # the host process's events
    by_thread: dict[object, list[dict]] = defaultdict(list)
    blocked: dict[object, list[dict]] = defaultdict(list)
    launches = 0
    for e in inside:
        if e.get("cat") == "cpu_op":
            by_thread[e.get("tid")].append(e)
        elif e.get("cat") == "cuda_runtime":
            launches += str(e.get("name")) in LAUNCHES
            if float(e["dur"]) > BLOCKED_CALL_US:
                blocked[e.get("tid")].append(e)
    threads, every, total_ops = [], [], 0
    for tid, thread_events in by_thread.items():
        ops = dispatched_ops(thread_events)
        total_ops += len(ops)
        if len(ops) < MIN_OPS:
            continue
        gaps, blocked_us = _thread_intervals(ops, blocked[tid])
        kept = [g for g in gaps if g < WAIT_US]
        if not kept:
            continue
        every.extend(kept)
        threads.append(
            ThreadCost(tid, len(ops), statistics.fmean(kept) * 1e-6, blocked_us * 1e-6,
                       len(kept) / len(gaps))
        )  # fmt: skip
    queued, short = _queued_kernels(window)  # kernels lie on the device's own pid
    return TraceCosts(
        devices=tuple(devices),
        steps=len(steps),
        ops_per_step=total_ops / len(steps),
        launches_per_step=launches / len(steps),
        threads=tuple(threads),
        host_per_op_s=statistics.fmean(every) * 1e-6 if every else None,
        queued_kernel_s=queued * 1e-6 if queued is not None else None,
        short_kernel_s=short * 1e-6 if short is not None else None,
    )
