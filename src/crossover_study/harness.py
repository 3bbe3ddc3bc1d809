"""The timing harness: cold start, first step, warm-up and steady state, timed correctly.

The method follows ``shared/design/STUDY.md`` ("What one measurement is") and
``torch.utils.benchmark`` (``Timer.blocked_autorange``): the device is synchronised
before each clock read and nowhere else, steps are timed in blocks long enough for the
clock and sync overhead to vanish, warm-up is discarded, and the result is the median
and interquartile range over blocks.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


class Workload(Protocol):
    """A training program that the harness can time.

    ``steps_per_call`` is the granularity of ``run`` (Keras ``fit`` runs whole epochs);
    ``min_steps_per_block`` is the shortest block that is faithful to the seed (a Keras
    seed calls ``fit`` for many epochs, so a block is at least one such call and the
    per-call overhead is amortised as the user's was); ``run(n)`` launches ``n`` training steps (a multiple of ``steps_per_call``) and may
    return before the device has finished; ``sync()`` blocks until it has (it reads a
    result back to the host); ``setup()`` builds the model and places model, optimizer
    and data on the device; ``loss()`` returns the last loss as a float.
    """

    steps_per_call: int
    min_steps_per_block: int
    loss_read_every: int

    def setup(self) -> None: ...
    def run(self, n_steps: int) -> None: ...
    def sync(self) -> None: ...
    def loss(self) -> float: ...


@dataclass(frozen=True)
class TimingPolicy:
    """How long and how carefully to time one point.

    min_block_s: a timed block lasts at least this many seconds (block length doubles
        until it does), and at least ``100 x`` the measured timer+sync overhead, so that
        the overhead stays below 1% of a block (as ``blocked_autorange`` does).
    n_blocks: timed blocks per point (at least 3).
    max_warmup_s: warm-up stops after this many seconds even if not yet stable.
    stable_rel: warm-up is over when two consecutive blocks differ by less than this
        relative amount in seconds per step.
    noise_threshold: IQR/median above it flags the point as noisy (STUDY.md: 0.1).
    max_point_s: soft budget per point; fewer blocks (never under 3) when exceeded.
    sync_check_s: time budget of the block-length check's long block; it runs
        ``sync_check_factor`` blocks' worth of steps, fewer (never under 2) when one
        block already lasts longer than this budget allows.
    synced: False times the anti-pattern on purpose (clock read without a device
        sync); never the default.
    disable_gc: Python's garbage collector is collected once and switched off during
        warm-up and timed blocks, as ``timeit`` (and so ``torch.utils.benchmark``) does;
        autograd's many small objects otherwise trigger collections inside blocks.
    """

    min_block_s: float = 0.05
    n_blocks: int = 7
    max_warmup_s: float = 1.0
    stable_rel: float = 0.1
    noise_threshold: float = 0.1
    max_point_s: float = 10.0
    sync_check_s: float = 1.0
    sync_check_factor: int = 10
    synced: bool = True
    disable_gc: bool = True

    def __post_init__(self) -> None:
        if self.n_blocks < 3:
            raise ValueError(f"timing.blocks must be at least 3, got {self.n_blocks}")
        for name in ("min_block_s", "max_warmup_s", "noise_threshold", "max_point_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"timing.{name} must be positive, got {getattr(self, name)}")
        if self.sync_check_s < 0:
            raise ValueError(f"timing.sync_check_s must be >= 0, got {self.sync_check_s}")
        if self.sync_check_factor < 2:
            raise ValueError(
                f"timing.sync_check_factor must be at least 2, got {self.sync_check_factor}"
            )


@dataclass
class Measurement:
    """What came out of timing one point. All times in seconds.

    ``block_step_times_s`` has one entry per timed block: block seconds / steps_per_block.
    ``sync_check`` compares seconds per step of the short blocks (their median) with one
    long block of ``sync_check_steps`` steps: "passed" when they agree within noise,
    "failed" when they do not (the short blocks measured a launch queue, not the work),
    "skipped" when no long block fitted the budget. ``traces_*`` count tf.function
    traces / torch.compile graphs added after the first step, during warm-up and during
    the timed blocks (None when the program compiles nothing).
    """

    cold_start_s: float
    first_step_s: float
    warmup_steps: int
    steps_per_block: int
    block_step_times_s: list[float] = field(default_factory=list)
    final_loss: float = math.nan
    measured_s: float = 0.0
    timer_overhead_s: float = 0.0
    sync_check: str = "skipped"
    sync_check_long_s: float | None = None
    sync_check_steps: int | None = None
    traces_first_step: int | None = None
    traces_warmup: int | None = None
    traces_timed: int | None = None
    synced: bool = True

    @property
    def step_time_s(self) -> float:
        """Median seconds per step over the timed blocks."""
        return statistics.median(self.block_step_times_s)

    @property
    def step_time_iqr_s(self) -> float:
        """Interquartile range (seconds per step) over blocks, inclusive quantiles."""
        q = statistics.quantiles(self.block_step_times_s, n=4, method="inclusive")
        return q[2] - q[0]

    def is_noisy(self, threshold: float) -> bool:
        """True when IQR / median exceeds ``threshold`` (STUDY.md item 4)."""
        return self.step_time_iqr_s / self.step_time_s > threshold


def _round_up(n: int, multiple: int) -> int:
    return max(multiple, -(-n // multiple) * multiple)


def time_block(
    workload: Workload, n_steps: int, clock: Callable[[], float], synced: bool = True
) -> float:
    """Seconds for ``n_steps`` steps; the device must be idle (synchronised) on entry.

    The clock is read once before launching and once after ``sync()``: the only
    synchronisation inside a block is the one at its end. ``synced=False`` reads the
    clock without that sync (the anti-pattern of CASES.md P3, measured on purpose).
    """
    t0 = clock()
    workload.run(n_steps)
    if synced:
        workload.sync()
    return clock() - t0


def timer_overhead(workload: Workload, clock: Callable[[], float], repeats: int = 25) -> float:
    """Median seconds of one clock read plus one sync of an idle device (the fixed cost
    that every timed block carries)."""
    samples = []
    for _ in range(repeats):
        t0 = clock()
        workload.sync()
        samples.append(clock() - t0)
    return statistics.median(samples)


def _traces(workload: Workload) -> int | None:
    count = getattr(workload, "trace_count", None)
    return None if count is None else count()


def _delta(after: int | None, before: int | None) -> int | None:
    return None if after is None or before is None else after - before


def sync_check_agrees(short_s: float, long_s: float, iqr_s: float, threshold: float) -> bool:
    """True when seconds per step of a long block agree with the short blocks' median
    within noise: |long/short - 1| <= max(threshold, 2 x IQR/median)."""
    tolerance = max(threshold, 2.0 * iqr_s / short_s)
    return abs(long_s / short_s - 1.0) <= tolerance


def measure(
    workload: Workload,
    policy: TimingPolicy = TimingPolicy(),
    clock: Callable[[], float] = time.perf_counter,
    built: bool = False,
) -> Measurement:
    """Time one point: cold start, first step, warm-up (discarded), timed blocks, then
    the block-length check.

    ``built=True`` times a workload whose ``setup`` already ran (cold start then reads
    0; used to time one workload repeatedly). Returns a :class:`Measurement`.
    Exceptions from the workload propagate (the runner turns them into
    ``status=error``/``oom`` rows).
    """
    gc_was_enabled = gc.isenabled()
    try:
        return _measure(workload, policy, clock, built)
    finally:
        if gc_was_enabled:
            gc.enable()


def _measure(workload: Workload, policy: TimingPolicy, clock, built: bool) -> Measurement:
    start = clock()
    t0 = clock()
    if not built:
        workload.setup()
    workload.sync()
    cold_start_s = clock() - t0 if not built else 0.0

    g = workload.steps_per_call
    first_step_s = time_block(workload, g, clock)
    traces_after_first = _traces(workload)
    overhead_s = timer_overhead(workload, clock)
    min_block_s = max(policy.min_block_s, 100.0 * overhead_s)
    if policy.disable_gc:
        gc.collect()
        gc.disable()

    # Calibrate the block length as blocked_autorange does: double until a block lasts
    # at least min_block_s. These blocks are warm-up, as are the ones until two in a
    # row agree within stable_rel (or the warm-up budget is spent).
    warmup_steps = 0
    k = _round_up(max(g, getattr(workload, "min_steps_per_block", g)), g)
    warm_start = clock()
    previous = None
    while True:
        seconds = time_block(workload, k, clock)
        warmup_steps += k
        per_step = seconds / k
        if seconds < min_block_s:
            k = _round_up(int(k * max(2.0, 1.2 * min_block_s / max(seconds, 1e-9))), g)
            previous = None
            continue
        if previous is not None and abs(per_step - previous) <= policy.stable_rel * previous:
            break
        if clock() - warm_start > policy.max_warmup_s:
            break
        previous = per_step
    traces_after_warmup = _traces(workload)

    blocks: list[float] = []
    while len(blocks) < policy.n_blocks:
        blocks.append(time_block(workload, k, clock, synced=policy.synced) / k)
        if len(blocks) >= 3 and clock() - start > policy.max_point_s:
            break
    if not policy.synced:
        workload.sync()  # drain what the unsynchronised blocks left queued (untimed)

    result = Measurement(
        cold_start_s=cold_start_s,
        first_step_s=first_step_s,
        warmup_steps=warmup_steps,
        steps_per_block=k,
        block_step_times_s=blocks,
        timer_overhead_s=overhead_s,
        synced=policy.synced,
    )

    # Block-length check (STUDY.md item 2): seconds per step must not depend on the
    # block length; a long block of up to sync_check_factor x k steps must agree.
    block_s = result.step_time_s * k
    factor = min(policy.sync_check_factor, int(policy.sync_check_s // max(block_s, 1e-12)))
    if policy.synced and factor >= 2:
        steps = _round_up(factor * k, g)
        long_s = time_block(workload, steps, clock) / steps
        agrees = sync_check_agrees(
            result.step_time_s, long_s, result.step_time_iqr_s, policy.noise_threshold
        )
        result.sync_check = "passed" if agrees else "failed"
        result.sync_check_long_s, result.sync_check_steps = long_s, steps

    traces_end = _traces(workload)
    result.traces_first_step = traces_after_first
    result.traces_warmup = _delta(traces_after_warmup, traces_after_first)
    result.traces_timed = _delta(traces_end, traces_after_warmup)
    result.final_loss = workload.loss()
    result.measured_s = clock() - start
    return result
