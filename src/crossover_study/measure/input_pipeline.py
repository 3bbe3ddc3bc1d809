"""The input pipeline alone: how long it takes to make one batch, without the step.

A step that takes its batch from an iterator (a ``tf.data`` iterator, a PyTorch
``DataLoader``'s) waits for the batch only as long as the pipeline has not made it yet:
``tf.data``'s ``map`` with ``num_parallel_calls`` and ``prefetch``, and a DataLoader with
workers, make the next batches in other threads or processes while the step runs. The
profile of the step then shows little data loading, yet the pipeline's threads take CPU
from the step, and on an accelerator, where the step itself shrinks, every batch is
still made by the host at the pipeline's own pace: the step cannot run faster than one
batch per ``input_batch_s``.

So after the timed blocks (never inside them), :func:`pipeline_columns` looks for the
iterators the step reads from (:func:`find_iterators`: the objects the step's function
closes over or its module holds, one level into a plug-in's program) and times
``next()`` on each alone, as the field's tools time an input pipeline alone
(``tf.data``'s own advice: "iterate over the dataset without training", the TensorFlow
guide "Better performance with the tf.data API", section "The naive approach";
PyTorch's DataLoader timing in its performance tuning guide). It takes up to
:data:`MAX_BATCHES` batches and :data:`MAX_SECONDS`, the first one left out (a
DataLoader's first batch starts its workers), and keeps the median. The batches it takes
are the step's next ones: the iterator goes on from where the probe left it.
"""

from __future__ import annotations

import statistics
import time
import types

#: The most batches and seconds the probe takes from one iterator (after the first).
MAX_BATCHES = 24
MAX_SECONDS = 0.5


def _is_iterator(value) -> str | None:
    """What kind of input iterator ``value`` is (``tf.data``, ``DataLoader``), or None."""
    kind = type(value)
    module, name = kind.__module__ or "", kind.__name__
    if module.startswith("tensorflow.python.data") and "Iterator" in name:
        return "tf.data iterator"
    if module.startswith("torch.utils.data") and name.endswith("Iter"):
        return "DataLoader iterator"
    return None


def _holders(program) -> list:
    """The objects a plug-in's program reaches its data through: the program itself, its
    step function and the function's closure cells."""
    found = [program]
    step = getattr(program, "step", None)
    for fn in (step, getattr(step, "python_function", None), getattr(step, "__wrapped__", None)):
        if isinstance(fn, types.FunctionType):
            found.extend(c.cell_contents for c in fn.__closure__ or () if _has(c))
            module = fn.__globals__
            found.extend(v for k, v in module.items() if not k.startswith("__"))
    return found


def _has(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises ValueError
    except ValueError:
        return False
    return True


def find_iterators(workload) -> list[tuple[str, str, object]]:
    """The input iterators a workload's step reads from: ``(kind, name, iterator)`` for
    each, ``name`` the variable that holds it (a closure cell's or the module's), in the
    order found. Looks one level into the workload's plug-in program (``program``,
    ``fit_program``) and its step function's closure; a seed's workload holds none."""
    program = getattr(workload, "program", None) or getattr(workload, "fit_program", None)
    if program is None:
        return []
    found, seen = [], set()
    step = getattr(program, "step", None)
    names = {}
    if isinstance(step, types.FunctionType):
        cells = zip(step.__code__.co_freevars, step.__closure__ or (), strict=False)
        names.update({id(c.cell_contents): n for n, c in cells if _has(c)})
        names.update({id(v): k for k, v in step.__globals__.items()})
    for value in _holders(program):
        kind = _is_iterator(value)
        if kind and id(value) not in seen:
            seen.add(id(value))
            found.append((kind, names.get(id(value), "?"), value))
    return found


def time_batches(
    iterator, max_batches: int = MAX_BATCHES, max_s: float = MAX_SECONDS
) -> float | None:
    """Median seconds of ``next(iterator)`` over up to ``max_batches`` calls and
    ``max_s`` seconds, after one call left out (an epoch that ends first ends the probe);
    None with fewer than 3 timed calls or where the pipeline raised (the probe never fails
    a point)."""
    times: list[float] = []
    try:
        next(iterator)
        started = time.perf_counter()
        while len(times) < max_batches and time.perf_counter() - started < max_s:
            t0 = time.perf_counter()
            next(iterator)
            times.append(time.perf_counter() - t0)
    except StopIteration:  # an epoch's end: the batches timed before it stand
        pass
    except Exception:  # noqa: BLE001 - the pipeline's own error: no figure, never the point's
        return None
    return statistics.median(times) if len(times) >= 3 else None


def pipeline_columns(workload) -> dict:
    """``input_batch_s`` (seconds per batch of the slowest input iterator the step reads
    from, timed alone: :func:`time_batches`) and ``input_pipeline`` (which one, e.g.
    ``tf.data iterator `batches```); empty where the step reads from none."""
    slowest = None
    for kind, name, iterator in find_iterators(workload):
        seconds = time_batches(iterator)
        if seconds is not None and (slowest is None or seconds > slowest[0]):
            slowest = (seconds, f"{kind} `{name}`")
    if slowest is None:
        return {}
    return {"input_batch_s": slowest[0], "input_pipeline": slowest[1]}
