"""What the accelerator did in the profiled block, read from its trace.

On a CUDA device class (:data:`CUDA_DEVICES`) the attribution's profiled block
(:mod:`crossover_study.measure.attribution`) records the device's activity beside the
host's (``torch.profiler`` with ``ProfilerActivity.CUDA``: Kineto over CUPTI): every
kernel, copy and memset as the device ran it, and every CUDA runtime or driver call the
host made, linked by a correlation id. Two sources of those records become one list of
:class:`TraceEvent`:

- :func:`from_kineto`: a live profile (``prof.profiler.kineto_results.events()``);
- :func:`from_chrome_trace`: a recorded Kineto Chrome trace, what
  ``prof.export_chrome_trace`` writes (``traceEvents`` of ``ph: "X"`` events with
  ``cat``, ``name``, ``ts`` and ``dur`` in µs and ``args`` holding ``correlation`` and,
  for a copy, ``bytes``),

and :func:`device_step` reads the step from that list alone, so a recorded trace is read
by the same code as a live profile. The window is the profiled block's own frame
(:data:`BLOCK_NAME`, a ``python_function`` event in both sources).

What is read per step (:class:`DeviceStep`), and where each definition comes from:

- busy time: the union of the intervals of the device's kernels, copies and memsets;
  idle time: the block's time outside them, with its longest gap. Holistic Trace
  Analysis (HTA, facebookresearch/HolisticTraceAnalysis) defines the GPU as idle when no
  kernel runs on it, and its temporal breakdown merges overlapping kernel intervals
  (``hta/utils/utils.py: merge_kernel_intervals``; idle = span − merged time,
  ``hta/analyzers/breakdown_analysis.py: _get_idle_time_for_kernels``), but over the
  span from the first device event to the last, not over the block (below);
- kernels, their median duration and the share of short kernels: HTA's "short GPU
  kernels" are those whose duration is less than that of the CUDA runtime call that
  launched them (``cudaLaunchKernel``/``cudaLaunchKernelExC``, joined on the
  correlation id: ``hta/analyzers/cuda_kernel_analysis.py: cuda_kernel_launch_stats``,
  docs "CUDA Kernel Launch Statistics"). HTA's plot of them also leaves out launch calls
  over its ``runtime_cutoff`` (50 µs) as outliers; they are kept here, since a kernel
  behind a slow launch waits for it all the same;
- the host's time in kernel launches (XProf's "Kernel Launch" time, below);
- host-to-device and device-to-host copies: Kineto's ``gpu_memcpy`` events named
  ``Memcpy HtoD``/``Memcpy DtoH`` (HTA reads the kind from the same prefix,
  ``hta/utils/utils.py: get_memory_kernel_type``), their count, bytes and device time;
- synchronisations: the host's ``cuda*Synchronize``/``cu*Synchronize`` calls and the time
  it waited in them.

The device's regime (:func:`device_regime`) is read from these with two thresholds of
XProf (openxla/xprof, ``xprof/convert/op_stats_to_input_pipeline_analysis.cc``) and the
plain meaning of "most" (:data:`MOST`). Under the profiler the host runs slower (the
Python tracer, CUPTI's callback in every CUDA call), the device does not: the regime
compares the device's times with the timed step (``step_time_s``), while
``idle_s`` is the idle time of the profiled block itself.

Why not Holistic Trace Analysis. HTA reads these quantities from a Kineto trace too,
but was checked (``holistictraceanalysis`` 0.5.0, the newest on PyPI, and its source of
2026-05-01, on this module's test traces and on HTA's own) and is not used, for what
it does differently:

- it rounds a trace's ns times to whole µs by default (start up, end down:
  ``hta/common/trace_parser.py: round_down_time_stamps``; off only with the environment
  variable ``HTA_DISABLE_NS_ROUNDING=1``). The small steps timed here launch 1-5 µs
  kernels: for kernels of 1.3-1.8 µs behind 2.6 µs launches it gives a median kernel
  of 1.0 µs (1.55 here), 16.0 µs busy per step (37.2) and 48 µs of launches (62.4),
  some kernels 0 µs. With rounding off it agrees with this module on kernels, their
  median, the short share, launch and busy time (HTA's ``ns_resolution_trace``:
  4350 kernels, 44 % short, 206.2 ms of launches, 472.5 ms busy);
- it reads a trace file per rank (``TraceAnalysis(trace_dir=...)``, files ending
  ``.json``/``.gz``; rank 0 unless ``distributedInfo.rank`` names another, which must
  then be passed as ``ranks``) and cuts it only at ``ProfilerStep#`` events, which the
  profiled block has none of. The measuring job reads the live profile
  (:func:`from_kineto`), writes no trace, and reads the block's window per step;
- its idle time spans the first to the last device event: the block's time before the
  first kernel and after the last is not idle to it (536 µs against 563 µs here on
  ``launch_bound``'s 2 steps). Its busy time is any event with a ``stream``: Kineto's
  ``cuda_sync`` events (186 µs more on HTA's alexnet trace) and a ``cpu_op`` that
  names its stream (94 µs busy for a 1.76 µs Triton kernel, HTA's ``triton_example``);
- its launch statistics (``get_cuda_kernel_launch_stats``) join kernels to
  ``cudaLaunchKernel``/``cudaLaunchKernelExC`` only: a Triton kernel of the compile
  variant, launched by ``cuLaunchKernel``, joins nothing and ``cudaGraphLaunch`` is
  not among its launches; by default they join ``cudaMemcpyAsync``/``cudaMemsetAsync`` to their
  copies as well, so a copy counts as a short kernel (a share of 0.14 on
  ``compute_bound`` and 0.33 on ``transfer_bound``, where no kernel is short). The short
  kernels themselves are a plot (``visualize``), not a number;
- it counts no host-device copies by direction or bytes, no synchronisations and their
  waits, no longest gap, nothing per step;
- it resolves against ``requirements.lock`` without a conflict, but adds itself and 37
  more distributions to it (39 MiB of wheels: jupyterlab, jupyter_server, httpx,
  plotly, pydot, ...; pytest a runtime need), and its import needs plotly and networkx,
  11.6 MiB more in the GPU bundle. Its speed is no reason: it reads a 69,000-event
  trace in 1.5-2.3 s (this module: 0.65 s) and a test trace here in 0.02 s.

HTA computes what this module lacks and might take up by hand: the idle time split
into the host's wait and the wait between back-to-back kernels
(``get_idle_time_breakdown``), each kernel's launch delay (its start less its launch
call's end), the launch queue's length per stream, copy bandwidth and the critical
path.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass

from crossover_study.core.files import read_chrome_trace

#: The device classes whose profiled block records CUDA activity.
CUDA_DEVICES = ("cuda", "cuda_multi")
#: How the tracer names the profiled block's frame (``attribution._profiled_block``):
#: a path part and the function's name; the window device activity is read in.
BLOCK_NAME = ("measure/attribution.py(", ": _profiled_block")
#: Kineto's categories (Chrome trace ``cat``, ``_KinetoEvent.activity_type()``) of what
#: the device ran, and of what the host called.
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_CATEGORIES = ("cuda_runtime", "cuda_driver")
#: Calls that launch one kernel each (HTA's ``cuda_kernel_launch_stats`` joins kernels to
#: ``cudaLaunchKernel`` and ``cudaLaunchKernelExC``; the driver API's calls, which
#: Triton and TensorFlow make, are their equivalents).
KERNEL_LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
#: Calls that launch a captured CUDA graph (many kernels, one call): launch time, never
#: a kernel's own launch.
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")
#: Calls in which the host waits for the device.
SYNC_CALLS = (
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "cuEventSynchronize",
)
#: XProf calls a step "highly" kernel-launch bound when the host's kernel-launch time is
#: at least 15 % of it (``kHighlyKernelLaunchBoundThresholdInPercent = 15``, over
#: ``host_prepare`` time / step time; openxla/xprof,
#: xprof/convert/op_stats_to_input_pipeline_analysis.cc).
LAUNCH_SHARE = 0.15
#: XProf calls a step "highly" input-bound when the host-to-device input is at least 20 %
#: of it, and output-bound likewise for the device-to-host output
#: (``kHighlyInfeedBoundThresholdInPercent = 20``,
#: ``kHighlyOutfeedBoundThresholdInPercent = 20``, the same file): here, the device's
#: time in host-device copies over the timed step.
TRANSFER_SHARE = 0.20
#: "Most of the step" (the device idle or busy for most of it) and "most kernels
#: short": more than half. Not a tool's threshold: HTA reports idle time and short
#: kernels but names no share at which a step is bound by them.
MOST = 0.5
#: The device's regimes (column ``attr_device_regime``).
REGIMES = ("launch-bound", "host-bound", "device-bound", "transfer-bound")
#: A version suffix CUPTI may give a runtime call's name (``cudaLaunchKernel_v7000``).
_VERSION = re.compile(r"_v\d+$")


@dataclass(frozen=True)
class TraceEvent:
    """One event of a Kineto trace, as both sources give it: ``cat`` (Kineto's activity
    type: ``kernel``, ``gpu_memcpy``, ``cuda_runtime``, ``python_function``, ...),
    ``name``, ``start_ns`` and ``dur_ns`` (nanoseconds on the trace's own clock),
    ``correlation`` (the CUPTI correlation id that joins a runtime call to what it
    launched; None where absent) and ``nbytes`` (a copy's or memset's bytes; None where
    the trace has none)."""

    cat: str
    name: str
    start_ns: int
    dur_ns: int
    correlation: int | None = None
    nbytes: int | None = None

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


def _is_block(name: str) -> bool:
    return BLOCK_NAME[0] in name and name.endswith(BLOCK_NAME[1])


def _kept(cat: str, name: str) -> bool:
    """Whether an event of category ``cat`` named ``name`` is read: the device's and the
    CUDA calls' events, and the profiled block's frame (the rest of the host's events are
    the attribution's, read from the profile's event tree)."""
    if cat in DEVICE_CATEGORIES or cat in HOST_CATEGORIES:
        return True
    return cat == "python_function" and _is_block(name)


def _event(cat: str, name: str, start_ns: int, dur_ns: int, args: dict) -> TraceEvent:
    """A :class:`TraceEvent` from a source's fields; ``args`` as Kineto writes them."""
    correlation, nbytes = args.get("correlation"), args.get("bytes")
    return TraceEvent(
        cat,
        name,
        int(start_ns),
        max(0, int(dur_ns)),
        int(correlation) if correlation is not None else None,
        int(nbytes) if nbytes is not None else None,
    )


def from_chrome_trace(trace) -> list[TraceEvent]:
    """The events of a Kineto Chrome trace: ``trace`` is its parsed JSON (a dict with
    ``traceEvents``) or the path of a ``.json`` or ``.json.gz`` file. Only complete
    events (``ph: "X"``) of the kinds :func:`device_step` reads are kept; ``ts``/``dur``
    (µs) become ns relative to the first event kept, so that a 16-digit epoch timestamp
    loses no precision as a float. Raises ValueError when ``trace`` has no
    ``traceEvents``, OSError/json.JSONDecodeError for an unreadable file."""
    trace = read_chrome_trace(trace)
    raw = [
        e
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and _kept(str(e.get("cat", "")), str(e.get("name", "")))
    ]
    base = min((float(e["ts"]) for e in raw), default=0.0)
    return [
        _event(
            e["cat"],
            e["name"],
            round((float(e["ts"]) - base) * 1000),
            round(float(e.get("dur", 0)) * 1000),
            e.get("args") or {},
        )
        for e in raw
    ]


def _live_category(event) -> str:
    """A live ``_KinetoEvent``'s category: ``activity_type()`` (Kineto's name, as the
    Chrome trace's ``cat``); a torch without it gets the category from the device type
    and the name (the device's copies and memsets are named ``Memcpy``/``Memset``)."""
    if hasattr(event, "activity_type"):
        return str(event.activity_type())
    name = event.name()
    if str(event.device_type()).endswith("CUDA"):
        if name.startswith("Memcpy"):
            return "gpu_memcpy"
        return "gpu_memset" if name.startswith("Memset") else "kernel"
    if event.is_python_function():
        return "python_function"
    return "cuda_runtime" if name.startswith("cuda") else "cpu_op"


def _live_args(event) -> dict:
    """A live event's Kineto metadata (the JSON fragment the Chrome trace's ``args``
    hold: ``correlation``, ``bytes``, ...), its correlation id where that lacks one."""
    text = event.metadata_json() if hasattr(event, "metadata_json") else ""
    try:
        args = json.loads("{" + text + "}") if text else {}
    except json.JSONDecodeError:
        args = {}
    if args.get("correlation") is None and event.correlation_id():
        args["correlation"] = event.correlation_id()
    return args


def from_kineto(events) -> list[TraceEvent]:
    """The events of a live profile: ``events`` is ``prof.profiler.kineto_results.events()``
    (``_KinetoEvent`` objects, times in ns on the trace's clock). The same kinds are kept
    as :func:`from_chrome_trace` keeps (:func:`_kept`)."""
    out = []
    for event in events:
        cat, name = _live_category(event), event.name()
        if _kept(cat, name):
            out.append(_event(cat, name, event.start_ns(), event.duration_ns(), _live_args(event)))
    return out


def _call(name: str) -> str:
    """A runtime or driver call's name without CUPTI's version suffix."""
    return _VERSION.sub("", name)


def _union(intervals) -> list[tuple[int, int]]:
    """The union of ``(start, end)`` intervals, merged and in order. Hand-rolled: a sort
    and one sweep, as HTA's ``merge_kernel_intervals`` does on a DataFrame (why not HTA
    itself: the module's docstring)."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _span(merged) -> int:
    return sum(end - start for start, end in merged)


@dataclass(frozen=True)
class DeviceStep:
    """The device's side of the profiled block, per step (seconds; counts per step as
    floats): ``busy_s`` (union of kernels, copies and memsets), ``idle_s`` (the block's
    time outside them), ``largest_gap_s`` (the block's longest idle stretch, whole, not
    per step), ``kernel_s`` (union of kernels, memsets and device-to-device copies: the
    device's own work), ``kernels``, ``kernel_median_s`` (None without kernels),
    ``short_kernel_share`` (share of the kernels with a launch call found that ran
    shorter than it; None where none has), ``launch_s`` (the host's time in kernel and
    graph launch calls), ``h2d_copies``, ``d2h_copies``, ``h2d_bytes``, ``d2h_bytes``
    (None where the trace gives no bytes), ``copy_s`` (union of the host-device copies
    on the device), ``syncs`` and ``sync_wait_s`` (the host's time in them), ``steps``
    and ``block_s`` (the block's seconds)."""

    busy_s: float
    idle_s: float
    largest_gap_s: float
    kernel_s: float
    kernels: float
    kernel_median_s: float | None
    short_kernel_share: float | None
    launch_s: float
    h2d_copies: float
    d2h_copies: float
    h2d_bytes: float | None
    d2h_bytes: float | None
    copy_s: float
    syncs: float
    sync_wait_s: float
    steps: int
    block_s: float


def block_window(events: list[TraceEvent]) -> tuple[int, int]:
    """``(start_ns, end_ns)`` of the profiled block's frame (:data:`BLOCK_NAME`) in
    ``events``; the first where several are. Raises LookupError where none is."""
    for event in events:
        if event.cat == "python_function" and _is_block(event.name):
            return event.start_ns, event.end_ns
    raise LookupError("the trace holds no event of the profiled block's frame")


def _direction(name: str) -> str:
    """A copy's kind from Kineto's name (``Memcpy HtoD (Pageable -> Device)``): ``HtoD``,
    ``DtoH``, ``DtoD``, ... (HTA: ``get_memory_kernel_type``, the name's prefix)."""
    return name[7:11] if name.startswith("Memcpy ") else ""


def _bytes(copies: list[TraceEvent], steps: int) -> float | None:
    known = [c.nbytes for c in copies if c.nbytes is not None]
    return sum(known) / steps if known else None


def device_step(events: list[TraceEvent], steps: int) -> DeviceStep:
    """The device's side of a profiled block of ``steps`` steps from its trace ``events``
    (:func:`from_kineto` or :func:`from_chrome_trace`): the device's activity clipped to
    the block's window (:func:`block_window`), the host's CUDA calls that start inside it.
    Raises LookupError where the block's frame is not in ``events``, ValueError for
    ``steps`` < 1."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, not {steps}")
    w0, w1 = block_window(events)
    device = [e for e in events if e.cat in DEVICE_CATEGORIES and e.start_ns < w1 and e.end_ns > w0]
    calls = [e for e in events if e.cat in HOST_CATEGORIES and w0 <= e.start_ns < w1]

    def clipped(group):
        return [(max(e.start_ns, w0), min(e.end_ns, w1)) for e in group]

    busy = _union(clipped(device))
    edges = [w0, *(t for interval in busy for t in interval), w1]
    gaps = [edges[i + 1] - edges[i] for i in range(0, len(edges), 2)]
    copies = [e for e in device if e.cat == "gpu_memcpy"]
    h2d = [c for c in copies if _direction(c.name) == "HtoD"]
    d2h = [c for c in copies if _direction(c.name) == "DtoH"]
    transfers = {id(c) for c in h2d + d2h}
    own = [e for e in device if id(e) not in transfers]
    kernels = [e for e in device if e.cat == "kernel"]
    launches = {
        e.correlation: e
        for e in calls
        if _call(e.name) in KERNEL_LAUNCHES and e.correlation is not None
    }
    launched = [(k, launches[k.correlation]) for k in kernels if k.correlation in launches]
    syncs = [e for e in calls if _call(e.name) in SYNC_CALLS]
    launch_calls = [e for e in calls if _call(e.name) in KERNEL_LAUNCHES + GRAPH_LAUNCHES]
    block_ns = w1 - w0
    return DeviceStep(
        busy_s=_span(busy) / 1e9 / steps,
        idle_s=(block_ns - _span(busy)) / 1e9 / steps,
        largest_gap_s=max(gaps) / 1e9,
        kernel_s=_span(_union(clipped(own))) / 1e9 / steps,
        kernels=len(kernels) / steps,
        kernel_median_s=statistics.median(k.dur_ns for k in kernels) / 1e9 if kernels else None,
        short_kernel_share=(
            sum(k.dur_ns < call.dur_ns for k, call in launched) / len(launched)
            if launched
            else None
        ),
        launch_s=sum(e.dur_ns for e in launch_calls) / 1e9 / steps,
        h2d_copies=len(h2d) / steps,
        d2h_copies=len(d2h) / steps,
        h2d_bytes=_bytes(h2d, steps),
        d2h_bytes=_bytes(d2h, steps),
        copy_s=_span(_union(clipped(h2d + d2h))) / 1e9 / steps,
        syncs=len(syncs) / steps,
        sync_wait_s=sum(e.dur_ns for e in syncs) / 1e9 / steps,
        steps=steps,
        block_s=block_ns / 1e9,
    )


def device_regime(step: DeviceStep, step_time_s: float) -> str:
    """The device's regime in the timed step of ``step_time_s`` seconds, one of
    :data:`REGIMES`, from ``step`` (:func:`device_step`), in this order:

    - ``transfer-bound``: the host-device copies take at least :data:`TRANSFER_SHARE`
      of the step on the device (XProf's highly input- or output-bound share) and no
      less than the device's own work (``kernel_s``): copies dominate;
    - ``device-bound``: the device is busy for :data:`MOST` of the step (compute- or
      memory-bound: a trace of kernel times cannot tell which);
    - ``launch-bound``: the device is idle for most of the step, between kernels most of
      which ran shorter than their launch call (HTA's short kernels), or while the host's
      launch calls took at least :data:`LAUNCH_SHARE` of the step (XProf's highly
      kernel-launch bound);
    - ``host-bound``: idle for most of the step while the host did other work (what
      work: the host-side categories of the attribution say).

    The device's times are not slowed by the profiler; the host's are, so the shares are
    of the timed step. Raises ValueError for ``step_time_s`` ≤ 0."""
    if step_time_s <= 0:
        raise ValueError(f"step_time_s must be positive, not {step_time_s}")
    if step.copy_s >= TRANSFER_SHARE * step_time_s and step.copy_s >= step.kernel_s:
        return "transfer-bound"
    if step.busy_s > MOST * step_time_s:
        return "device-bound"
    short = step.short_kernel_share is not None and step.short_kernel_share > MOST
    if short or step.launch_s >= LAUNCH_SHARE * step_time_s:
        return "launch-bound"
    return "host-bound"


def device_columns(events: list[TraceEvent], steps: int, step_time_s: float) -> dict:
    """The row's device columns (``attr_device_*``, ``attr_kernel*``, ...; schema:
    workflow/schemas/timings.schema.yaml) of a profiled block of ``steps`` steps whose
    timed step is ``step_time_s`` seconds, from its trace ``events``: :func:`device_step`
    per step, :func:`device_regime`, and ``attr_device_source`` saying where they come
    from. Raises what :func:`device_step` raises."""
    step = device_step(events, steps)
    return {
        "attr_device_busy_s": step.busy_s,
        "attr_device_idle_s": step.idle_s,
        "attr_device_largest_gap_s": step.largest_gap_s,
        "attr_device_kernel_s": step.kernel_s,
        "attr_kernels": step.kernels,
        "attr_kernel_median_s": step.kernel_median_s,
        "attr_short_kernel_share": step.short_kernel_share,
        "attr_launch_s": step.launch_s,
        "attr_h2d_copies": step.h2d_copies,
        "attr_d2h_copies": step.d2h_copies,
        "attr_h2d_bytes": step.h2d_bytes,
        "attr_d2h_bytes": step.d2h_bytes,
        "attr_copy_s": step.copy_s,
        "attr_syncs": step.syncs,
        "attr_sync_wait_s": step.sync_wait_s,
        "attr_device_regime": device_regime(step, step_time_s),
        "attr_device_source": "torch.profiler CUDA activity (Kineto/CUPTI) of the profiled block",
    }
