"""Where a measured step spends its time: one extra block, profiled after the timed ones.

After a point's timed blocks (never inside them) :func:`attribute_point` runs one more
block of the same program under ``torch.profiler`` with its Python tracer
(``with_stack=True``) and splits the block's time into what the step spent it on
(:data:`CATEGORIES`), read off the profile's events (its flat list on the CPU, its
tree on an accelerator: :func:`crossover_study.measure.event_tree.flat_block` says why):

- ``ops``: framework op dispatch and arithmetic. PyTorch: a call into the C++ library
  that reached an ATen op (``TorchOp`` events: the binding, the dispatcher and the
  kernel), and the autograd engine's ops; TensorFlow: the C calls of its eager runtime
  (``TFE_Py_FastPathExecute``, ``TFE_Py_Execute`` of a traced function's graph, the
  tape's C code: methods of TensorFlow's ``PyCapsule`` extension), and the train steps
  Keras ``fit`` runs (its ``train_function``).
- ``python``: Python outside framework ops: the user's code, module calls, optimizer
  loops, NumPy, the framework's own Python layers (every Python call and every C call
  of another library, by its exclusive time).
- ``data``: data loading: everything under a ``torch.utils.data`` DataLoader iterator or
  a ``tf.data`` iterator, and on an accelerator the host-device copies the step makes.
- ``trace``: tracing and compilation: a ``tf.function`` call that traced (its trace, and
  the first run of the graph it built, where TensorFlow instantiates and optimises it),
  ``torch._dynamo`` frame conversion and Inductor compilation.
- ``fit``: Keras ``fit``/``evaluate``/``predict``'s own per-call work (data adapter,
  iterator, callbacks, logs) wherever it is called, inside a plug-in's step too
  (``train_on_batch``, ``test_on_batch`` and ``predict_on_batch`` too); the train,
  test and predict steps it runs count as ``ops``. Which of these entry points the
  time was spent in is kept (``attr_fit_entry``), so that the answer names the call
  the step makes (a ``predict`` per sample is not a ``fit``) and its own remedy.
- ``wait``: waiting on the device (a synchronisation: ``.item()``, ``.numpy()``, the
  block's closing sync) on an accelerator; none on the CPU, whose ops are synchronous.
- ``unattributed``: the block's time the profile holds no event for (gaps between
  events: the profiler's own bookkeeping, C code called without a Python frame).

Every share is the exclusive time of the profile's events under the block, so the
shares sum to the profiled block (``attr_block_s``) by construction and
``unattributed`` is measured, not a remainder of a guess. A category is claimed by the
outermost event that names it (a ``tf.data`` pipeline built inside ``fit`` is ``fit``'s
work, a trace inside a DataLoader is data loading).

The tracer is the same for both frameworks: PyTorch's profiler records every Python and
C call of the process through CPython's profiling hook, whatever library made it (the
field's tool for this, Holistic Trace Analysis, reads the same traces). TensorFlow's
own profiler writes XPlane protobufs whose host events name ops but not the Python
around them, so a TensorFlow point is traced with PyTorch's tracer too (PyTorch is
imported once per job, when the first point is attributed). The tracer slows
Python-heavy code (each call is recorded): ``attr_overhead`` (profiled block per step
against the timed median) says by how much, and the shares are of the profiled block.

On a CUDA device class the block records the device's activity too
(``ProfilerActivity.CUDA``, where this PyTorch's profiler supports it): the device's
side of the step (busy and idle time, kernels, copies, synchronisations) and its regime
are read from it by :mod:`crossover_study.measure.device_trace`, while the host's
categories above are read from the event tree without the trace's CUDA events (the
launch calls stay inside the ops that made them, as on the CPU).

The events are read into the categories by :mod:`crossover_study.measure.event_tree`;
this module profiles the block, keeps it or a longer one, and writes the row's columns.
"""

from __future__ import annotations

import collections
import json
import time

from crossover_study.measure.device_trace import (
    BLOCK_NAME,
    CUDA_DEVICES,
    device_columns,
    from_kineto,
)
from crossover_study.measure.event_tree import attribute_tree, flat_block, nested, top_ops
from crossover_study.measure.tracer_cost import CATEGORIES, corrected, tracer_bias

#: What each category is, in the answer's words.
CATEGORY_WORDS = {
    "ops": "framework ops (dispatch and arithmetic)",
    "python": "Python outside framework ops (your code, module calls, optimizer loops, NumPy)",
    "data": "data loading (the DataLoader/tf.data iterator, host-device copies)",
    "trace": "tracing and compilation",
    "fit": "Keras fit's own per-call work (data adapter, iterator, callbacks, logs)",
    "wait": "waiting on the device",
    "unattributed": "time the profile holds no event for",
}
#: Where each category's time is read from.
SOURCES = {
    "ops": "torch.profiler: ATen op events (PyTorch); C calls into TensorFlow's runtime",
    "python": "torch.profiler's Python tracer: exclusive time of Python and other C calls",
    "data": "Python tracer: calls under torch.utils.data / tensorflow.python.data iterators",
    "trace": "Python tracer: tf.function traces with their graph's first run, torch._dynamo",
    "fit": "Python tracer: calls under Keras fit/evaluate/predict, less its train steps",
    "wait": "torch.profiler: synchronising calls on an accelerator",
    "unattributed": "gaps between the profile's events",
}
#: The attribution's share of a point's measured seconds: the kept block is as long as
#: its profiling and reading fit in it. The tracer records up to about one event per
#: microsecond of Python-heavy code and reading the tree back costs 10-20 µs per event
#: (the 2-core VM, 2026-12-05: 130 000 events of 100 DataLoader steps, 0.12 s profiled,
#: 2.5 s to read), so the cost is set by the events, not by the block's seconds
#: (issue 38 allows the profile 15 % of a point).
COST_SHARE = 0.08
#: The kept block's most steps: this share of the point's measured seconds at the timed
#: step time (a cheap step need not be profiled for long).
BLOCK_SHARE = 0.02

#: The lead (share of the identified categories' sum) by which the first profiled call's
#: dominant category must beat the runner-up for that call to be kept and no longer
#: block profiled (:func:`first_block_settles`). ``benchmarks/attribution_settle.py``
#: (2-core VM, 2026-12-05, torch seeds and plug-ins): leads of 0.64-0.96 named the
#: longer block's category every time; s001-mlp's first call (lead 0.29) once named
#: Python where the longer block named framework ops, so the bar is well above that.
SETTLED_LEAD = 0.5


def _profiled_block(workload, steps: int) -> None:
    """The profiled block: ``steps`` steps and the closing sync, in a frame of its own
    whose event in the tracer's tree (:data:`BLOCK_NAME`) holds all of the block."""
    workload.run(steps)
    workload.sync()


def find_block(events):
    """The :func:`_profiled_block` call in the profile's event tree, or None. Breadth
    first, so that the block's own subtree, which :func:`nested` reads next, is not
    walked here too (the block sits a few calls below the roots)."""
    queue = collections.deque(events)
    while queue:
        event = queue.popleft()
        if BLOCK_NAME[0] in event.name and event.name.endswith(BLOCK_NAME[1]):
            return event
        queue.extend(event.children)
    return None


def _least_steps(workload) -> tuple[int, int]:
    """``(per_call, least)``: the workload's steps per call and the fewest steps a block
    may have (one call; a Keras program's ``min_steps_per_block``)."""
    per_call = max(1, int(getattr(workload, "steps_per_call", 1) or 1))
    least = max(per_call, int(getattr(workload, "min_steps_per_block", 1) or 1))
    return per_call, -(-least // per_call) * per_call


def block_steps(
    step_time_s: float, measured_s: float, workload, first_steps: int, first_cost_s: float
) -> int:
    """Steps of the profiled block, after a first block of ``first_steps`` steps cost
    ``first_cost_s`` seconds to profile and read (which sets this machine's cost per
    profiled step for this program): as many as fit :data:`COST_SHARE` of the point's
    ``measured_s`` (seconds) with the first block's cost, and no more than
    :data:`BLOCK_SHARE` of it at ``step_time_s``; a multiple of ``steps_per_call``.
    Returns 0 where no block longer than the first fits (the first block is the one
    kept)."""
    per_call, least = _least_steps(workload)
    per_step = first_cost_s / first_steps
    left = COST_SHARE * measured_s - first_cost_s
    steps = int(left / per_step) if per_step > 0 else 0
    if step_time_s > 0:
        steps = min(steps, int(BLOCK_SHARE * measured_s / step_time_s))
    steps = steps // per_call * per_call
    return steps if steps > first_steps else 0


def first_block_lead(per_step: dict[str, float], data_s: float) -> float | None:
    """How far the first profiled call's largest identified category (``per_step``:
    seconds per step by category of :data:`CATEGORIES`, as :func:`corrected` gives
    them) leads the runner-up, as a share of the identified categories' sum (0 to 1);
    None where the call read data (``data_s`` > 0: a pipeline's first call drains what
    it had prepared, so its share there is not its steady one) or has no identified
    time."""
    identified = sorted((v for c, v in per_step.items() if c != "unattributed"), reverse=True)
    whole = sum(identified)
    if data_s > 0 or whole <= 0 or len(identified) < 2:
        return None
    return (identified[0] - identified[1]) / whole


def first_block_settles(lead: float | None) -> bool:
    """Whether the first profiled call already names the step's dominant cost: its
    :func:`first_block_lead` is at least :data:`SETTLED_LEAD`."""
    return lead is not None and lead >= SETTLED_LEAD


def _profile(workload, steps: int, device: str, read: bool = True, fit_entries=None):
    """Profile a block of ``steps`` steps: ``(block, seconds, events, trace)``, the first
    three as :func:`nested` and :func:`attribute_tree` give them; ``trace`` the device's
    and the CUDA calls' events (:func:`device_trace.from_kineto`) on a CUDA device class
    whose profiler records CUDA activity, else None. ``read`` False: the block is
    profiled and the profile dropped unread (the tracer's warm-up), returning None.
    ``fit_entries``: a dict filled with the ``fit`` seconds of the block by Keras entry
    point (:func:`attribute_tree`)."""
    from torch.profiler import ProfilerActivity, profile, supported_activities

    activities = [ProfilerActivity.CPU]
    if device in CUDA_DEVICES and ProfilerActivity.CUDA in supported_activities():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, with_stack=True) as prof:
        _profiled_block(workload, steps)
    if not read:
        return None
    results = prof.profiler.kineto_results
    flat = results.events()
    if device not in CUDA_DEVICES and flat and hasattr(flat[0], "activity_type"):
        block = flat_block(flat, BLOCK_NAME)
    else:  # the tree: on a GPU (flat_block says why) or a torch without activity types
        block = find_block(results.experimental_event_tree())
        block = None if block is None else nested(block)
    if block is None or block.duration_time_ns <= 0:
        raise RuntimeError("the profile holds no event of the profiled block's frame")
    seconds, events = attribute_tree(block, device, fit_entries)
    trace = from_kineto(flat) if len(activities) > 1 else None
    return block, seconds, events, trace


def _device_part(trace, steps: int, step_time_s: float) -> dict:
    """The device columns of a CUDA point (:func:`device_trace.device_columns`), or only
    ``attr_device_source`` saying why there are none (a profiler without CUDA activity,
    a trace without the block's frame): the host's attribution is kept either way."""
    if trace is None:
        return {"attr_device_source": "no device activity: this PyTorch profiles no CUDA"}
    try:
        return device_columns(trace, steps, step_time_s)
    except (LookupError, ValueError) as exc:
        return {"attr_device_source": f"not read: {exc}"}


#: True once this process has run its warm-up profile (:func:`attribute_point`).
_WARM = False


def attribute_point(workload, device: str, step_time_s: float, measured_s: float) -> dict:
    """Profile one extra block of ``workload`` (set up, warm, its timed blocks done) and
    return the row's attribution columns:

    - ``attr_<category>_s`` for each of :data:`CATEGORIES`: seconds per timed step
      spent on it (:func:`attribute_tree`, the tracer's cost per event taken out by
      :func:`corrected`), ``attr_unattributed_s`` the block's time no event holds;
    - ``attr_block_s``: seconds per step of the profiled block (the profiler's clock);
    - ``attr_steps``: its steps; ``attr_events``: the events recorded; ``attr_bias_s``:
      JSON of the tracer's cost per event by kind, seconds, as taken out
      (:func:`corrected`);
    - ``attr_dominant``: the category with the largest share, unattributed aside;
    - ``attr_fit_entry``: the Keras entry point (``fit``, ``evaluate``, ``predict``,
      ``train_on_batch``, ``test_on_batch``, ``predict_on_batch``) whose own work holds
      the most of ``attr_fit_s`` (:func:`event_tree.fit_entry`), None where the block
      called none;
    - ``attr_coverage``: the identified categories' sum over all categories' (the
      share of the profiled block, its tracer cost taken out, that events name; the
      rest is ``attr_unattributed_s``);
    - ``attr_accounted``: all categories' sum over ``step_time_s``: 1 where the
      tracer's cost came out whole, below 1 where the profiled block ran faster than
      the timed median (a data pipeline that had filled its buffer), above 1 where
      the correction could not take all of the tracer's cost out (a category with
      more events than time);
    - ``attr_overhead``: attr_block_s / ``step_time_s`` − 1, how much the tracer slowed
      the step;
    - ``attr_cost_s``: seconds the attribution took this point (profiling and reading);
      ``attr_setup_s``: the once-per-process part at the process's first point
      (importing PyTorch into a TensorFlow job, :func:`tracer_bias`, a warm-up profile
      of one call that is not kept), else 0;
    - ``attr_top_ops``: JSON ``{op name: seconds per step}`` of the 5 ATen ops with the
      most inclusive time (PyTorch; ``{}`` where no ATen op ran);
    - ``attr_source``: JSON of :data:`SOURCES`;
    - on a CUDA device class, the device's side of the step and its regime
      (:func:`device_trace.device_columns`: ``attr_device_*``, ``attr_kernels``, ...),
      or only ``attr_device_source`` saying why there is none.

    Two blocks: one call first, profiled (it also drains what a data pipeline had
    prepared while the point was being counted, so the kept block sees the pipeline's
    steady rate), then, where the first block's cost says a longer one fits
    (:func:`block_steps`), a longer one, which is kept; none where the first call
    already names the dominant cost (:func:`first_block_settles`; ``attr_first_settled``
    True), to keep the attribution's cost down. ``device``: the point's device
    class (``cpu``, ``cuda``, ...). Runs ``workload.run`` and ``workload.sync`` only.
    Raises what the workload raises; ImportError when PyTorch is not installed."""
    global _WARM
    started = time.perf_counter()
    bias = tracer_bias()
    per_call, steps = _least_steps(workload)
    if not _WARM:
        # The process's first profile pays the tracer's first sight of every function
        # (a job's first point: 2-3x the cost per event of later profiles, most of it
        # in Python calls, which the per-kind correction cannot tell apart), so it is
        # a warm-up, never kept, and counted with the once-per-process set-up. One call
        # of the program's fewest steps sees every function a longer call would (a Keras
        # fit of one epoch where the kept block is a fit of 20: s002-iris's warm-up
        # profile took 6.4 s at 40 steps). Its profile is not read back: the tracer has
        # seen every function once the block is profiled, and reading a Keras fit's
        # 240 000 events took 1.5 s of the 3 s a kept profile costs (2026-12-05).
        _profile(workload, per_call, device, read=False)
        _WARM = True
    setup_s = time.perf_counter() - started  # 0 once the process has warmed the tracer
    started = time.perf_counter()
    entries: dict[str, float] = {}
    block, seconds, events, trace = _profile(workload, steps, device, fit_entries=entries)
    lead = first_block_lead(
        corrected(seconds, events, steps, step_time_s, bias)[0], seconds.get("data", 0.0)
    )
    settled = first_block_settles(lead)
    longer = (
        0
        if settled
        else block_steps(step_time_s, measured_s, workload, steps, time.perf_counter() - started)
    )
    if longer:
        steps = longer
        entries = {}
        block, seconds, events, trace = _profile(workload, steps, device, fit_entries=entries)
    per_step, scale = corrected(seconds, events, steps, step_time_s, bias)
    columns = {f"attr_{c}_s": per_step[c] for c in CATEGORIES}
    identified = [c for c in CATEGORIES if c != "unattributed"]
    total = block.duration_time_ns / 1e9
    accounted = sum(per_step.values())
    columns.update(
        attr_block_s=total / steps,
        attr_steps=steps,
        attr_events=sum(sum(kinds.values()) for kinds in events.values()),
        attr_bias_s=json.dumps({kind: round(scale * value, 10) for kind, value in bias.items()}),
        attr_dominant=max(identified, key=per_step.get),
        attr_fit_entry=max(entries, key=entries.get) if entries else None,
        attr_coverage=sum(per_step[c] for c in identified) / accounted if accounted else None,
        attr_accounted=accounted / step_time_s,
        attr_overhead=(total / steps) / step_time_s - 1.0,
        attr_top_ops=json.dumps(top_ops(block, steps)),
        attr_source=json.dumps(SOURCES, sort_keys=True),
        attr_setup_s=setup_s if setup_s > 0.01 else 0.0,
        attr_first_settled=settled,
        attr_first_lead=lead,
    )
    if device in CUDA_DEVICES:
        columns.update(_device_part(trace, steps, step_time_s))
    columns["attr_cost_s"] = time.perf_counter() - started
    return columns


def attribution_columns(point, workload, measurement) -> dict:
    """The attribution columns of ``point`` (a PointSpec) whose timed blocks gave
    ``measurement`` (a ``harness.Measurement``): :func:`attribute_point`'s, or, for a
    point not profiled, only ``attr_source`` saying why (an unsynced timing, which
    times the anti-pattern; replicas, whose work runs in other processes too; a
    failure of the profiled block, which never loses the point's measurement)."""
    if point.timing != "synced":
        return {"attr_source": "not attributed: an unsynced timing"}
    if (point.replicas or 1) > 1 or point.variant in ("mirrored", "mirrored_fit", "ddp"):
        return {"attr_source": "not attributed: a replicated program"}
    try:
        return attribute_point(
            workload, point.device, measurement.step_time_s, measurement.measured_s
        )
    except Exception as exc:  # noqa: BLE001 - the point's timing is kept whatever happens
        return {"attr_source": f"not attributed: {type(exc).__name__}: {exc}"[:300]}
