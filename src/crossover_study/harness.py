"""The timing harness: cold start, first step, warm-up and steady state, timed correctly.

The method follows ``shared/design/STUDY.md`` ("What one measurement is") and
``torch.utils.benchmark`` (``Timer.blocked_autorange``): the device is synchronised
before each clock read and nowhere else, steps are timed in blocks long enough for the
clock and sync overhead to vanish, warm-up is discarded, and the result is the median
and interquartile range over blocks.
"""

from __future__ import annotations

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
        until it does), so that clock and sync overhead stay small against it.
    n_blocks: timed blocks per point (at least 3).
    max_warmup_s: warm-up stops after this many seconds even if not yet stable.
    stable_rel: warm-up is over when two consecutive blocks differ by less than this
        relative amount in seconds per step.
    noise_threshold: IQR/median above it flags the point as noisy (STUDY.md: 0.1).
    max_point_s: soft budget per point; fewer blocks (never under 3) when exceeded.
    """

    min_block_s: float = 0.05
    n_blocks: int = 7
    max_warmup_s: float = 1.0
    stable_rel: float = 0.1
    noise_threshold: float = 0.1
    max_point_s: float = 10.0

    def __post_init__(self) -> None:
        if self.n_blocks < 3:
            raise ValueError(f"timing.blocks must be at least 3, got {self.n_blocks}")
        for name in ("min_block_s", "max_warmup_s", "noise_threshold", "max_point_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"timing.{name} must be positive, got {getattr(self, name)}")


@dataclass
class Measurement:
    """What came out of timing one point. All times in seconds.

    ``block_step_times_s`` has one entry per timed block: block seconds / steps_per_block.
    """

    cold_start_s: float
    first_step_s: float
    warmup_steps: int
    steps_per_block: int
    block_step_times_s: list[float] = field(default_factory=list)
    final_loss: float = math.nan
    measured_s: float = 0.0

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


def time_block(workload: Workload, n_steps: int, clock: Callable[[], float]) -> float:
    """Seconds for ``n_steps`` steps; the device must be idle (synchronised) on entry.

    The clock is read once before launching and once after ``sync()``: the only
    synchronisation inside a block is the one at its end.
    """
    t0 = clock()
    workload.run(n_steps)
    workload.sync()
    return clock() - t0


def measure(
    workload: Workload,
    policy: TimingPolicy = TimingPolicy(),
    clock: Callable[[], float] = time.perf_counter,
) -> Measurement:
    """Time one point: cold start, first step, warm-up (discarded), then timed blocks.

    Returns a :class:`Measurement`. Exceptions from the workload propagate (the runner
    turns them into ``status=error``/``oom`` rows).
    """
    start = clock()
    t0 = clock()
    workload.setup()
    workload.sync()
    cold_start_s = clock() - t0

    g = workload.steps_per_call
    first_step_s = time_block(workload, g, clock)

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
        if seconds < policy.min_block_s:
            k = _round_up(int(k * max(2.0, 1.2 * policy.min_block_s / max(seconds, 1e-9))), g)
            previous = None
            continue
        if previous is not None and abs(per_step - previous) <= policy.stable_rel * previous:
            break
        if clock() - warm_start > policy.max_warmup_s:
            break
        previous = per_step

    blocks: list[float] = []
    while len(blocks) < policy.n_blocks:
        blocks.append(time_block(workload, k, clock) / k)
        if len(blocks) >= 3 and clock() - start > policy.max_point_s:
            break

    return Measurement(
        cold_start_s=cold_start_s,
        first_step_s=first_step_s,
        warmup_steps=warmup_steps,
        steps_per_block=k,
        block_step_times_s=blocks,
        final_loss=workload.loss(),
        measured_s=clock() - start,
    )
