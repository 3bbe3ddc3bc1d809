"""Does the harness agree with the field's reference timers?

PyTorch: ``torch.utils.benchmark.Timer(...).blocked_autorange()`` (which synchronises
CUDA before each clock read, warms up, and picks a block length so timer overhead is
negligible). TensorFlow: a plain loop of k steps closed by reading the result back.
Both time the very same workload object as the harness, in one process, alternately, so
that a drift of the machine hits both sides alike; the ratio ours / reference is the
figure of merit (1.0 = perfect agreement).

Like with like. The harness reports the median over blocks of k steps of the block's
mean seconds per step (time to train is a sum of steps, so a block mean is the quantity
of interest). ``blocked_autorange`` on ``stmt="w.run(1)"`` picks its own block length:
one step per block once a step lasts longer than ~0.2 ms (its rule: timer overhead below
1e-4 of a block), and its median is then the median *single step*. When a few steps are
slow (allocator page faults, a preempted thread), the median single step is smaller than
the mean step, by 5-10 % for s001-mlp at H=2048 on a 2-core VM (measured: reference
median 4.46 ms, reference mean 4.87 ms, same run). That is a different statistic, not a
timer error. The reference is therefore run on ``stmt="w.run(k)"`` with the harness's
own k, so both sides time identical blocks with their own clock, sync, warm-up and
overhead handling; the reference's own-block median and mean are reported beside it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from . import frameworks
from .harness import TimingPolicy, measure

#: Points of the agreement check: s001-mlp at three hidden widths (seed D_in and N) and
#: s000-hjb at its seed size.
POINTS: tuple[tuple[str, dict[str, int]], ...] = (
    ("s001-mlp", {"batch": 64, "d_in": 1024, "hidden": 128}),
    ("s001-mlp", {"batch": 64, "d_in": 1024, "hidden": 512}),
    ("s001-mlp", {"batch": 64, "d_in": 1024, "hidden": 2048}),
    ("s000-hjb", {"batch": 100, "width": 8}),
)


@dataclass(frozen=True)
class Agreement:
    """Seconds per step by the harness and by the reference, for one point."""

    framework: str
    device: str
    case: str
    sizes: dict
    ours_s: float
    reference_s: float
    steps_per_block: int = 1
    own_block_steps: int | None = None
    own_median_s: float | None = None
    own_mean_s: float | None = None

    @property
    def ratio(self) -> float:
        """ours / reference (dimensionless)."""
        return self.ours_s / self.reference_s

    def line(self) -> str:
        sizes = ",".join(f"{k}={v}" for k, v in self.sizes.items())
        return (
            f"{self.framework:<10} {self.device:<4} {self.case} {sizes}: "
            f"ours {self.ours_s * 1e6:9.1f} us/step, reference {self.reference_s * 1e6:9.1f} "
            f"us/step, ratio {self.ratio:.3f} (k={self.steps_per_block})" + self._own_blocks()
        )

    def _own_blocks(self) -> str:
        if self.own_median_s is None:
            return ""
        return (
            f"; reference's own blocks of {self.own_block_steps}: median "
            f"{self.own_median_s * 1e6:.1f}, mean {self.own_mean_s * 1e6:.1f} us/step"
        )


def _torch_reference(workload, threads: int, min_run_time: float, steps: int = 1):
    """``blocked_autorange`` on ``w.run(steps)``: (seconds per step of each block it
    timed, steps per block it chose). Its default timer synchronises CUDA before each
    clock read."""
    from torch.utils.benchmark import Timer

    timer = Timer(stmt=f"w.run({steps})", globals={"w": workload}, num_threads=threads)
    m = timer.blocked_autorange(min_run_time=min_run_time)
    return [t / steps for t in m.times], m.number_per_run * steps


def _loop_reference(workload, min_run_time: float, repeats: int = 7) -> list[float]:
    """Plain loop: k steps then one read-back, k doubled until a loop lasts 1/repeats
    of ``min_run_time``; seconds per step of each of ``repeats`` loops."""
    k = workload.steps_per_call
    while True:
        t0 = time.perf_counter()
        workload.run(k)
        workload.sync()
        if time.perf_counter() - t0 >= min_run_time / repeats:
            break
        k *= 2
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        workload.run(k)
        workload.sync()
        samples.append((time.perf_counter() - t0) / k)
    return samples


def agreement(
    framework: str,
    device: str,
    case: str,
    sizes: dict[str, int],
    threads: int,
    rounds: int = 5,
    min_run_time: float = 1.0,
    policy: TimingPolicy | None = None,
) -> Agreement:
    """Time one point ``rounds`` times with the harness and with the reference,
    alternately, on one workload object; return the median seconds per step of each
    side's blocks pooled over the rounds (pooling damps a shared machine's drift).

    For PyTorch the reference times blocks of the harness's own length k (see the module
    docstring) and, once per round, blocks of its own choosing, whose median and mean
    per step are reported beside the ratio.

    The framework must already be imported with ``threads`` pinned
    (:func:`frameworks.import_framework`).
    """
    policy = policy or TimingPolicy(min_block_s=0.1, n_blocks=7, max_warmup_s=1.0)
    workload = frameworks.workload_class(framework, case)(device, dict(sizes))
    ours, reference, own = [], [], []
    own_steps = k = None
    for i in range(rounds):
        m = measure(workload, policy, built=i > 0)
        ours += m.block_step_times_s
        k = m.steps_per_block
        if framework == "torch":
            reference += _torch_reference(workload, threads, min_run_time, steps=k)[0]
            times, own_steps = _torch_reference(workload, threads, min_run_time)
            own += times
        else:
            reference += _loop_reference(workload, min_run_time)
    return Agreement(
        framework,
        device,
        case,
        dict(sizes),
        statistics.median(ours),
        statistics.median(reference),
        steps_per_block=k,
        own_block_steps=own_steps,
        own_median_s=statistics.median(own) if own else None,
        own_mean_s=statistics.fmean(own) if own else None,
    )
