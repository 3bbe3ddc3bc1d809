"""A profiled block's events read into where its time went
(:mod:`crossover_study.measure.attribution` says what each category holds): the events
copied out of ``torch.profiler``'s tree (:func:`nested`) or, for a CPU profile, its flat
list (:func:`flat_block`, the same events at less cost) and nested again by time, each
event's exclusive time given to the category the outermost event above it claims
(:func:`attribute_tree`), and the ATen ops with the most time (:func:`top_ops`). Reads
events only: nothing here profiles, and nothing imports a framework.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crossover_study.measure.tracer_cost import CATEGORIES

#: Paths (as the tracer names a Python function: ``path(line): name``) whose calls are
#: data loading.
DATA_PATHS = ("torch/utils/data/", "tensorflow/python/data/")
#: Paths whose calls are tracing and compilation wherever they are called.
TRACE_PATHS = (
    "torch/_dynamo/convert_frame.py",
    "torch/_dynamo/symbolic_convert.py",
    "torch/_inductor/",
)
#: TensorFlow's tracing of a ``tf.function`` (a Python function's graph built afresh).
TF_TRACE = ("polymorphic_function/tracing_compilation.py", ": _create_concrete_function")
#: A tf.function call (its whole subtree is tracing when it traced).
TF_FUNCTION_CALL = "polymorphic_function/polymorphic_function.py"
#: Keras's entry points whose own work is ``fit``'s (Keras 3, TensorFlow backend).
FIT_ENTRIES = (
    "keras/src/backend/tensorflow/trainer.py",
    "keras/src/trainers/trainer.py",
)
FIT_NAMES = (
    ": fit",
    ": evaluate",
    ": predict",
    ": train_on_batch",
    ": test_on_batch",
    ": predict_on_batch",
)
#: Keras's wrapper that runs the compiled train step(s) inside fit: its calls are ops.
FIT_STEP = "keras/src/backend/tensorflow/trainer.py"
FIT_STEP_NAMES = (": function", ": one_step_on_data", ": multi_step_on_iterator")
#: ATen ops that copy between host and device (data loading on an accelerator).
COPY_OPS = ("aten::to", "aten::_to_copy", "aten::copy_")
#: Calls that wait on the device (on an accelerator).
WAIT_OPS = ("aten::_local_scalar_dense", "aten::item")


@dataclass(slots=True)
class Event:
    """One event of the profile's tree, copied once out of ``torch.profiler``'s (whose
    accessors build new objects at every call): ``tag`` (``TorchOp``, ``PyCall``,
    ``PyCCall``, ...), ``name``, ``start_time_ns``, ``duration_time_ns``, ``children``.
    Slotted: a Keras fit's block copies 240 000 of them."""

    tag: str
    name: str
    start_time_ns: int
    duration_time_ns: int
    children: list[Event] = field(default_factory=list)


#: The name given to an event whose name the profiler cannot give back. A module body run
#: inside the profiled block (an import on a step's first call) is a Python call whose
#: code object Python frees once the import is done; torch's tracer keeps a pointer to
#: its name, which then points at freed memory (torch 2.13: UnicodeDecodeError).
UNREADABLE = "<name not readable>"


def nested(block) -> Event:
    """The events under ``block`` (an event of ``torch.profiler``'s tree) copied once as
    :class:`Event` objects (its accessors build new objects at every call) and nested
    again by time: each event the child of the innermost event whose time holds its
    start; ``record_function`` ranges left out (:func:`_is_range`), and so are the
    trace's CUDA events (tag ``Kineto``: runtime calls, kernels and copies, which a
    profile with ``ProfilerActivity.CUDA`` holds; :mod:`device_trace` reads them). The
    profiler parents an ATen op called inside such a range to the range, beside the
    Python frames whose calls made it; by time the op sits under the binding that called
    it, where its cost was paid, and no time is counted twice. :func:`flat_block` reads
    the same events of a CPU profile from its flat list, at a third to half the cost."""
    flat, stack = [], list(block.children)
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        try:
            name = event.name
        except UnicodeDecodeError:
            name = UNREADABLE
        copy = Event(
            str(event.tag).rsplit(".", 1)[-1], name, event.start_time_ns, event.duration_time_ns
        )
        if not _is_range(copy) and copy.tag != "Kineto":
            flat.append(copy)
    root = Event("PyCall", block.name, block.start_time_ns, block.duration_time_ns)
    return _nest(root, flat)


def _nest(root: Event, flat: list[Event], presorted: bool = False) -> Event:
    """``root`` with the events of ``flat`` (all inside its time, none nested yet) nested
    under it by time (:func:`nested`). ``presorted``: ``flat`` is already in order of
    start and then of longest first (ties in their order in the profile)."""
    if not presorted:
        flat.sort(key=lambda e: (e.start_time_ns, -e.duration_time_ns))
    open_events = [root]
    for event in flat:
        while len(open_events) > 1 and (
            open_events[-1].start_time_ns + open_events[-1].duration_time_ns <= event.start_time_ns
        ):
            open_events.pop()
        open_events[-1].children.append(event)
        open_events.append(event)
    return root


#: Kineto's activity types (``_KinetoEvent.activity_type()``) of the host's events that
#: :func:`flat_block` keeps, with the tag the profiler's tree gives them: a Python call
#: (``PyCall``, or ``PyCCall`` for a C function, which the tracer names ``<built-in ...>``)
#: and an ATen op (``TorchOp``). ``record_function`` ranges (``user_annotation``) and
#: the CUDA runtime's calls, kernels and copies are left out, as :func:`nested` leaves
#: them out.
FLAT_KINDS = ("python_function", "cpu_op")


def flat_block(events, block_name: tuple[str, str]) -> Event | None:
    """The profiled block read from the profile's flat event list and nested by time, as
    :func:`nested` reads it from the tree; None where no event is the block.

    ``events``: ``prof.profiler.kineto_results.events()`` (``_KinetoEvent`` objects, times
    in ns). The block is the first Python call whose name holds ``block_name[0]`` and
    ends with ``block_name[1]``; its events are the host's events of its thread
    (``start_thread_id``) that start inside its time (an event that starts as it ends
    too, as the tree keeps it). Why not the tree: its accessors build new objects at
    every call, and copying a Keras ``fit`` block's 240 000 events out of it took
    2.0-3.0 s on the 2-core VM where the flat list took 0.7-1.1 s (2026-12-05,
    s002-iris's 40-step block). For a profile of the CPU only: on a GPU, autograd runs
    the backward pass on a thread of its own per device, whose ops the tree hangs under
    the forward thread's call (their ``fwd_thread_id``) and this thread filter would
    leave out; read the tree with :func:`nested` there. Raises AttributeError for a
    torch whose events have no ``activity_type`` (read the tree there too)."""
    head, tail = block_name
    block = None
    for event in events:
        if event.activity_type() == "python_function":
            try:
                name = event.name()
            except UnicodeDecodeError:  # not the block (UNREADABLE)
                continue
            if head in name and name.endswith(tail):
                block = event
                break
    if block is None:
        return None
    tid, start = block.start_thread_id(), block.start_ns()
    end = start + block.duration_ns()
    # (start, longest first, place in the profile, tag, name, duration): sorted as plain
    # tuples, then copied as Event objects in that order (the loop runs once per event,
    # 240 000 times for a Keras fit's block, so the checks are written out here).
    kept = []
    for i, event in enumerate(events):
        kind = event.activity_type()
        if kind not in FLAT_KINDS:
            continue
        try:
            name = event.name()
        except UnicodeDecodeError:
            name = UNREADABLE
        if kind == "cpu_op":
            if "::" not in name:  # a record_function range (_is_range): not work
                continue
            tag = "TorchOp"
        else:
            tag = "PyCCall" if name.startswith("<built-in") else "PyCall"
        if event.start_thread_id() != tid:
            continue
        begins = event.start_ns()
        if begins < start or begins > end or event is block:
            continue
        duration = event.duration_ns()
        kept.append((begins, -duration, i, tag, name, duration))
    kept.sort()
    flat = [Event(tag, name, begins, duration) for begins, _, _, tag, name, duration in kept]
    root = Event("PyCall", block.name(), start, block.duration_ns())
    return _nest(root, flat, presorted=True)


def is_aten_op(event: Event) -> bool:
    """An ATen op (``aten::addmm``): a ``TorchOp`` event whose name has a namespace."""
    return event.tag == "TorchOp" and "::" in event.name


def _is_range(event: Event) -> bool:
    """A ``record_function`` range (``Optimizer.step#Adam.step``,
    ``enumerate(DataLoader)#...``): a marker, not work of its own. It is the child of the
    C call that entered it but outlives that call, overlapping the Python frames that
    do the work, so it counts no time and spans nothing (:func:`nested` leaves it out)."""
    return event.tag == "TorchOp" and not is_aten_op(event)


def _exclusive_ns(event: Event) -> int:
    """The event's duration less its children's (nested by time, :func:`nested`), ns,
    never below 0."""
    return max(0, event.duration_time_ns - sum(c.duration_time_ns for c in event.children))


def _has(event, predicate) -> bool:
    """True when ``event`` or an event under it satisfies ``predicate``."""
    stack = [event]
    while stack:
        node = stack.pop()
        if predicate(node):
            return True
        stack.extend(node.children)
    return False


def _is_trace(event) -> bool:
    """True for a call that traces or compiles (:data:`TRACE_PATHS`, :data:`TF_TRACE`)."""
    if event.tag != "PyCall":
        return False
    name = event.name
    return any(path in name for path in TRACE_PATHS) or (
        TF_TRACE[0] in name and name.endswith(TF_TRACE[1])
    )


def _context(event, device: str) -> str | None:
    """The category ``event`` claims for its whole subtree, or None (inherit)."""
    tag, name = event.tag, event.name
    if tag == "TorchOp":
        if name.startswith("enumerate(DataLoader)"):
            return "data"
        if "::" not in name:  # a record_function range (Optimizer.step#Adam.step)
            return None
        if device != "cpu" and name in COPY_OPS:
            return "data"
        if device != "cpu" and name in WAIT_OPS:
            return "wait"
        return "ops"
    if tag == "PyCCall":
        if device != "cpu" and "synchronize" in name:
            return "wait"
        if "PyCapsule object" in name or "EagerTensor" in name:
            return "ops"  # TensorFlow's runtime: eager ops, graph runs, the tape
        if any(is_aten_op(e) for e in event.children):
            return "ops"  # a PyTorch binding that called an ATen op
        return None
    if tag != "PyCall":
        return None
    if any(path in name for path in DATA_PATHS):
        return "data"
    if _is_trace(event):
        return "trace"
    if TF_FUNCTION_CALL in name and name.endswith(": __call__") and _has(event, _is_trace):
        return "trace"
    if any(path in name for path in FIT_ENTRIES) and name.endswith(FIT_NAMES):
        return "fit"
    return None


def fit_entry(name: str) -> str:
    """The Keras entry point a ``fit`` event's name (``keras/src/...trainer.py(314):
    predict``) calls: ``fit``, ``evaluate``, ``predict``, ``train_on_batch``,
    ``test_on_batch`` or ``predict_on_batch`` (:data:`FIT_NAMES`). Raises ValueError for
    a name that ends with none of them."""
    for suffix in FIT_NAMES:
        if name.endswith(suffix):
            return suffix[2:]
    raise ValueError(f"not a Keras entry point: {name!r}")


def attribute_tree(
    block: Event, device: str, fit_entries: dict[str, float] | None = None
) -> tuple[dict[str, float], dict[str, dict[str, int]]]:
    """``(seconds, events)`` of each of :data:`CATEGORIES` in the profiled block
    ``block`` (:func:`nested`): every event's exclusive time goes to the category the
    outermost claiming event above it (or itself) names (:func:`_context`), else
    ``python`` for Python and C calls, ``ops`` for ATen ops; inside ``fit``, Keras's
    train-step wrapper (:data:`FIT_STEP`) and what it calls are ``ops``. ``events``
    counts the events each category's time came from, by event kind. The block's own exclusive time
    is ``unattributed``; the seconds sum to the block's duration.

    ``fit_entries``: a dict that, given, is filled with the ``fit`` category's seconds
    by the Keras entry point that claimed them (:func:`fit_entry` of the outermost
    claiming event: a ``predict`` called per sample is ``predict``'s, an ``evaluate``
    that ``fit`` runs for validation is ``fit``'s); they sum to ``seconds["fit"]``."""
    seconds = dict.fromkeys(CATEGORIES, 0.0)
    events = {category: {} for category in CATEGORIES}
    seconds["unattributed"] += _exclusive_ns(block) / 1e9
    stack = [(child, None, None) for child in block.children]
    while stack:
        event, context, entry = stack.pop()
        if context is None:
            context = _context(event, device)
            if context == "fit":
                entry = fit_entry(event.name)
        elif context == "fit" and event.tag == "PyCall":
            if FIT_STEP in event.name and event.name.endswith(FIT_STEP_NAMES):
                context = "ops"  # the train steps fit runs: the program's own work
        category = context or ("ops" if event.tag == "TorchOp" else "python")
        if event.tag not in ("TorchOp", "PyCall", "PyCCall"):
            category = "unattributed"
        exclusive = _exclusive_ns(event) / 1e9
        seconds[category] += exclusive
        if category == "fit" and fit_entries is not None:
            fit_entries[entry] = fit_entries.get(entry, 0.0) + exclusive
        events[category][event.tag] = events[category].get(event.tag, 0) + 1
        stack.extend((child, context, entry) for child in event.children)
    return seconds, events


def top_ops(block, steps: int, top: int = 5) -> dict[str, float]:
    """The ``top`` ATen ops under ``block`` by inclusive seconds per step (outermost
    op events only, so nested ops are not counted twice)."""
    totals: dict[str, float] = {}
    stack = list(block.children)
    while stack:
        event = stack.pop()
        if is_aten_op(event):
            totals[event.name] = totals.get(event.name, 0.0) + event.duration_time_ns / 1e9
            continue
        stack.extend(event.children)
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:top]
    return {name: round(value / steps, 9) for name, value in ranked}
