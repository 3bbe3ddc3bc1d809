"""The profiler's own cost, taken out of a profiled block's categories.

A deterministic profiler adds a fixed cost to every event it records; the Python
library's ``profile`` module subtracts such a calibrated bias per event (Python docs,
"The Python Profilers", Calibration). :func:`tracer_bias` measures the cost of each
event kind once per process; :func:`corrected` scales it to what a block's excess over
its timed steps says and takes it out of each category
(:mod:`crossover_study.measure.attribution`).
"""

from __future__ import annotations

import functools
import math
import time

#: The categories a profiled step's time is split into, in the order of the columns
#: (:mod:`crossover_study.measure.attribution` says what each holds).
CATEGORIES = ("ops", "python", "data", "trace", "fit", "wait", "unattributed")


def _count(events, predicate) -> int:
    """Events of a profile's tree (``events``: its roots) that satisfy ``predicate``."""
    found, stack = 0, list(events)
    while stack:
        event = stack.pop()
        found += bool(predicate(event))
        stack.extend(event.children)
    return found


def _loop_s(call, n: int) -> float:
    """Seconds of ``n`` calls of ``call`` (the best of 3 runs)."""
    best = math.inf
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(n):
            call()
        best = min(best, time.perf_counter() - started)
    return best


@functools.cache
def tracer_bias() -> dict[str, float]:
    """The tracer's own cost per recorded event, seconds, by event kind (``PyCall``,
    ``PyCCall``, ``TorchOp``), measured once per process: ``n`` calls of an empty
    Python function, of a C builtin and of a one-element ``torch.neg`` timed without
    the profiler, then again inside one profile, the difference over the events each
    call records. A property of the machine and the process, so it is measured once,
    not around every point (the Python library's ``profile`` module calibrates its bias
    the same way: Python docs, "The Python Profilers", Calibration)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    n = 300
    tensor = torch.zeros(1)

    def empty():
        return None

    calls = {"PyCall": empty, "PyCCall": lambda: len(()), "TorchOp": lambda: torch.neg(tensor)}
    plain = {kind: _loop_s(call, n) for kind, call in calls.items()}
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        traced = {kind: _loop_s(call, n) for kind, call in calls.items()}
    per_call = {kind: max(0.0, traced[kind] - plain[kind]) / n for kind in calls}
    tree = prof.profiler.kineto_results.experimental_event_tree()
    ops = _count(tree, lambda e: "TorchOp" in str(e.tag) and "::" in e.name) / (3 * n)
    bias = {"PyCall": per_call["PyCall"]}
    bias["PyCCall"] = max(0.0, per_call["PyCCall"] - bias["PyCall"])  # the lambda's frame
    # the lambda's frame and the binding's C call, then the ATen ops it records
    torch_op = per_call["TorchOp"] - bias["PyCall"] - bias["PyCCall"]
    bias["TorchOp"] = max(0.0, torch_op) / max(ops, 1.0)
    return bias


def corrected(
    seconds: dict[str, float],
    events: dict[str, dict[str, int]],
    steps: int,
    step_time_s: float,
    weights: dict[str, float],
) -> tuple[dict[str, float], float]:
    """Seconds per step of each category with the tracer's own cost taken out, and the
    scale the cost per event was measured at, from :func:`attribute_tree`'s
    ``seconds`` and ``events`` (per category, per event kind) of a block of ``steps``
    steps whose timed median step is ``step_time_s``.

    A deterministic profiler adds a fixed cost to every event it records; the Python
    library's ``profile`` module subtracts such a calibrated bias per event (Python
    docs, "The Python Profilers", Calibration). The tracer's cost is measured in the
    point itself: the block's excess over ``steps`` × ``step_time_s``. It is shared
    over the block's events in proportion to ``weights`` (:func:`tracer_bias`: each
    event kind's cost in a tight loop, whose absolute values run low in real code with
    its deeper stacks and colder caches, but whose ratios say which kind costs more);
    each category loses its events' part (never below 0). The categories then describe
    the timed step; ``unattributed`` is the block's time no event holds, per step."""
    total = sum(seconds.values())
    excess = max(0.0, total - steps * step_time_s)
    weighted = sum(
        weights.get(kind, 0.0) * n
        for category, kinds in events.items()
        if category != "unattributed"
        for kind, n in kinds.items()
    )
    scale = excess / weighted if weighted > 0 else 0.0
    per_step = {}
    for category in CATEGORIES:
        cost = sum(scale * weights.get(kind, 0.0) * n for kind, n in events[category].items())
        per_step[category] = max(0.0, seconds[category] - cost) / steps
    return per_step, scale
