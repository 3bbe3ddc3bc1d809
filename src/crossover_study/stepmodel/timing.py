"""How the step-time model's instruments time: median and IQR over timed blocks
(:func:`timed_blocks`), each device's own sync, a line through two timings, and the
op-cost timers built once per process (:func:`op_cost_timer`, :data:`_OP_COSTS`).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator

from crossover_study.core.step_thread import FRESH_STACK_FRAMEWORKS, StepThread

#: Timed blocks per rate (median and IQR over them).
BLOCKS = 5

#: The step thread :func:`timed_blocks` runs its blocks in while :func:`rates_stack` of
#: a framework in ``FRESH_STACK_FRAMEWORKS`` is active; None: the caller's thread.
_STEP_THREAD: StepThread | None = None


@contextlib.contextmanager
def rates_stack(framework: str) -> Iterator[None]:
    """While the block runs, :func:`timed_blocks` runs every block (the untimed first
    one too) of ``framework``'s rates in one step thread when ``framework`` is one whose
    ops capture the caller's stack (TensorFlow): a rate is then priced from the same
    shallow stack the measuring jobs time a step from
    (:mod:`crossover_study.core.step_thread`); else nothing changes. Nested use keeps
    the outer thread."""
    global _STEP_THREAD
    if framework not in FRESH_STACK_FRAMEWORKS or _STEP_THREAD is not None:
        yield
        return
    with StepThread("crossover-rates") as thread:
        _STEP_THREAD = thread
        try:
            yield
        finally:
            _STEP_THREAD = None


def timed_blocks(
    run: Callable[[int], None], sync: Callable[[], None], units: float, n: int
) -> dict:
    """Time ``BLOCKS`` blocks of ``run(n)`` (synchronised) after one untimed block;
    ``units`` per call of the work (seconds per unit: ``per``). Returns
    ``{"median": s, "iqr": s, "blocks": BLOCKS}`` in seconds per unit. Inside
    :func:`rates_stack` of TensorFlow the blocks run in its step thread."""

    def block() -> float:
        start = time.perf_counter()
        run(n)
        sync()
        return time.perf_counter() - start

    thread = _STEP_THREAD
    call = block if thread is None else (lambda: thread.call(block))
    call()
    per = [call() / (n * units) for _ in range(BLOCKS)]
    q = statistics.quantiles(per, n=4)
    return {"median": statistics.median(per), "iqr": q[2] - q[0], "blocks": BLOCKS}


def repeated(call: Callable[[], object]) -> Callable[[int], None]:
    """``run(n)`` for :func:`timed_blocks`: ``call()`` n times, each result dropped at once,
    as a training step drops its temporaries, so that the allocator hands the same
    memory back to the next call. Keeping every result until the block ends (a list
    comprehension, as the rates did until 2026-12-02) makes each call's output fresh
    memory, and the curve then times page faults: PyTorch's element-wise additions
    measured 6.8 GB/s at 393 KB and 6.3 GB/s at 3.1 MB per op that way, 47 and 97 GB/s
    with each output dropped (2-core VM, 2026-12-02), so the model priced s001-mlp's
    element-wise traffic several times too high (its CPU steps predicted at 1.3 to 2.3
    times the measured time)."""

    def run(n: int) -> None:
        for _ in range(n):
            call()

    return run


def per_second(rate: dict, units_name: str) -> dict:
    """Seconds per unit turned into units per second (median and IQR of the blocks'
    rates, from :func:`timed_blocks`' result, approximated by the reciprocal of the median
    and the relative spread)."""
    median = 1.0 / rate["median"]
    return {
        "median": median,
        "iqr": rate["iqr"] / rate["median"] * median,
        "blocks": rate["blocks"],
        "unit": units_name,
    }


def line_through(x_a: float, a: dict, x_b: float, b: dict, min_slope: float) -> tuple[dict, dict]:
    """The line through two timings (:func:`timed_blocks` results ``a`` and ``b``, seconds
    per call at ``x_a`` and ``x_b`` units of work per call): its slope (seconds per
    unit, at least ``min_slope``) and its intercept (seconds per call beyond the work,
    at least 0), each as ``{"median", "iqr", "blocks"}``; the slope's spread is the two
    IQRs over the distance between the points, the intercept's the first point's IQR."""
    slope = max((b["median"] - a["median"]) / (x_b - x_a), min_slope)
    return (
        {"median": slope, "iqr": (a["iqr"] + b["iqr"]) / (x_b - x_a), "blocks": a["blocks"]},
        {"median": max(a["median"] - x_a * slope, 0.0), "iqr": a["iqr"], "blocks": a["blocks"]},
    )


def torch_sync(device: str) -> tuple[str, Callable[[], None]]:
    """``(target, sync)``: torch's device name for ``device`` (``cuda`` or ``cpu``) and
    the wait for its queued work (``torch.cuda.synchronize`` on CUDA, nothing on the
    CPU, whose ops return when done)."""
    import torch

    target = "cuda" if device.startswith("cuda") else "cpu"

    def sync() -> None:
        if target == "cuda":
            torch.cuda.synchronize()

    return target, sync


def tf_device(device: str) -> str:
    """TensorFlow's device name for a device class: the host CPU for ``cpu`` (and
    ``tpu``, whose rates are the host's here), the first GPU otherwise."""
    return {"cpu": "/cpu:0", "tpu": "/cpu:0"}.get(device, "/gpu:0")


def tf_reader(tf, box: dict) -> Callable[[], None]:
    """TensorFlow's sync for the rates: read one element of the last result kept in
    ``box["y"]`` back to the host (nothing before the first result)."""

    def sync() -> None:
        if "y" in box:
            tf.reshape(box["y"], [-1])[0].numpy()

    return sync


#: Each (framework, device)'s op-cost timer already built in this process
#: (:func:`op_costs`), and Keras fit's (:func:`keras_fit_rates`): their minimal steps
#: and models are built, counted and traced once per process (:func:`op_cost_timer`).
_OP_COSTS: dict[tuple[str, str], Callable[[float], dict]] = {}


def op_cost_timer(key: tuple[str, str], build: Callable[[], Callable[[float], dict]]):
    """The ``measure(share)`` kept in :data:`_OP_COSTS` under ``key``, ``build()`` the
    first time."""
    if key not in _OP_COSTS:
        _OP_COSTS[key] = build()
    return _OP_COSTS[key]
