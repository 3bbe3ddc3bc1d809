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

Order within a round. The two sides run one after the other, so a load that rises or
falls over a round (another job starting or finishing on a shared machine) slows the
side that runs second or first, always the same one if the order were fixed. The order
is therefore swapped every round (ours first in rounds 0, 2, ..., the reference first in
rounds 1, 3, ...): a linear drift then falls on each side alike over each pair of rounds.
Measured on the 2-core VM with another engineer's tests running (load average 3.2 -> 4.3,
TensorFlow s000-hjb seed size, 20 rounds, ours always first): the round medians per step
ranged from 549 to 1 946 us and the per-round ratio from 0.46 to 2.79, while the rounds in
which both sides ran at the quiet speed agreed (562.1 vs 576.9 us, ratio 0.974; 563.5 vs
561.5 us, 1.004). Timing the reference's blocks with the garbage collector disabled, as
the harness does, changed nothing (60 alternating blocks of 256 steps: medians 1 033.4 vs
1 036.4 us, ratio 0.997; a full ``gc.collect()`` found 0 unreachable objects after 1 000
steps), and the block lengths differ in a cost that is negligible (the reference's 64
to 512 steps against the harness's 88 to 219 in those rounds; the one read-back closing a
block costs 1.9 us with the clock read, under 0.03 us per step). The ratio 1.095 seen
once at that point (ours 684.0, reference 624.8 us/step, ours run first in every round)
lies within that spread; nothing on the harness's side was found to explain it. With
the order rotated over 16 rounds (load 3.4-3.8), four ways of timing that point pooled
to: the harness 592.8 us/step, the harness with the collector left on 604.2, the loop
reference 591.2, the reference on the harness's k 609.9 (harness / loop 1.003).

A pause before the timed blocks. Until 2026-12-02 the harness ran a full
``gc.collect()`` before its warm-up; with TensorFlow loaded it took 0.52 s on the 2-core
VM, and TF's eager s001-mlp steps ran about 10 % slower for some 0.4 s after it, longer
than a round's warm-up of :data:`ROUND_WARMUP_S`. A sleep or a busy loop of the same
length before the loop reference slowed its blocks alike (H=128, 40 rounds: +10 % and
+9 %), switching the collector off without collecting did not (+0 %). That pause was
the harness's excess over the reference at TF s001-mlp (1.059 and 1.057 at H=128, 1.088
at H=512, in runs of 40 rounds); the harness no longer collects (as ``timeit`` does not).

The null comparison. ``agreement(..., against_itself=True)`` runs the same protocol
with the reference on both sides of every round (an A/A test). Its ratio can differ
from 1 only through the machine's noise, so the spread of the A/A ratios over points and
runs is the smallest spread any timer comparison of this length can show on that
machine: a harness/reference spread as wide as the A/A spread says nothing against the
harness, and a target such as every ratio within [0.95, 1.05] is reachable only where
the A/A ratios reach it. ``benchmarks/timer_agreement.py --against-itself`` prints both.

Rounds. A round is short (:data:`ROUND_BLOCKS` blocks a side, a fraction of a second),
and the figure of merit is paired (:func:`round_ratio`): the median over rounds of the
ratio of the two sides' medians within the round. On the 2-core VM the speed of the
machine moves in steps (torch s001-mlp H=512: 1 400 us/step for six rounds, then
1 700 us/step for the rest, 2026-12-01), which both sides of a round share; a ratio of
medians pooled over all rounds instead compares two bimodal samples and moves by several
per cent with the share of each side's blocks that fell in the slow period (it printed
0.88 to 1.14 for the same points in three runs of five long rounds).

The interval (:func:`ratio_interval`) is a two-stage percentile bootstrap: rounds are
resampled with replacement, each drawn round keeping its pair of sides, then each side's
blocks within a drawn round. Blocks of one round share that round's load and are not
independent, so resampling the pooled blocks alone gives an interval too narrow when the
machine drifts; resampling rounds carries the drift between rounds, and the second stage
keeps the blocks' own scatter (and gives an interval with a single round). It is
somewhat conservative (the within-round scatter is counted twice). On the 20 rounds
above, pooled ratio 1.031: blocks alone gave [0.981, 1.126], rounds [0.929, 1.346],
both stages [0.920, 1.353]; on rounds 10-14 alone (ratio 1.304) blocks alone gave
[0.988, 1.403], both stages [0.756, 2.065].
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from crossover_study.measure import device_probe, frameworks
from crossover_study.measure.harness import measure
from crossover_study.study.points import TimingPolicy

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
    ratio_ci_low: float | None = None
    ratio_ci_high: float | None = None
    rounds: int = 1
    #: Seconds per step of each block, per round: ``ours_rounds[i]`` the harness's
    #: blocks of round i, ``reference_rounds[i]`` the reference's.
    ours_rounds: tuple = ()
    reference_rounds: tuple = ()
    #: True for the null comparison (:func:`agreement` with ``against_itself``): the
    #: "ours" side is a second copy of the reference, so the ratio's spread is the
    #: machine's own resolution, with no difference between timers in it.
    against_itself: bool = False

    @property
    def ratio(self) -> float:
        """ours / reference (dimensionless): :func:`round_ratio` of the rounds when they
        are kept, else the ratio of ``ours_s`` and ``reference_s``."""
        if self.ours_rounds:
            return round_ratio(self.ours_rounds, self.reference_rounds)
        return self.ours_s / self.reference_s

    def line(self) -> str:
        """One line: both sides in us/step, the ratio with its 95 % interval in brackets
        (when known), k and the rounds, and the reference's own blocks (PyTorch)."""
        sizes = ",".join(f"{k}={v}" for k, v in self.sizes.items())
        ours = "reference a" if self.against_itself else "ours"
        reference = "reference b" if self.against_itself else "reference"
        return (
            f"{self.framework:<10} {self.device:<4} {self.case} {sizes}: "
            f"{ours} {self.ours_s * 1e6:9.1f} us/step, {reference} {self.reference_s * 1e6:9.1f} "
            f"us/step, ratio {self.ratio:.3f}{self._interval()} (k={self.steps_per_block}, "
            f"{self.rounds} rounds)" + self._own_blocks()
        )

    def _interval(self) -> str:
        if self.ratio_ci_low is None or self.ratio_ci_high is None:
            return ""
        return f" [{self.ratio_ci_low:.3f}, {self.ratio_ci_high:.3f}]"

    def _own_blocks(self) -> str:
        if self.own_median_s is None:
            return ""
        return (
            f"; reference's own blocks of {self.own_block_steps}: median "
            f"{self.own_median_s * 1e6:.1f}, mean {self.own_mean_s * 1e6:.1f} us/step"
        )


def round_ratio(ours: Sequence[Sequence[float]], reference: Sequence[Sequence[float]]) -> float:
    """The figure of merit: the median over rounds of median(ours_i) / median(reference_i),
    the ratio of the two sides' medians within round ``i`` (dimensionless).

    ``ours[i]`` and ``reference[i]`` are the blocks (seconds per step, any unit both sides
    share) each side timed in round ``i``. Pairing within rounds makes the figure immune
    to the machine's speed changing between rounds (measured on the 2-core VM,
    2026-12-01: torch s001-mlp H=512 ran at 1 400 us/step for 6 rounds, then at
    1 700 us/step; a median of each side's blocks pooled over the rounds jumps between the
    two levels when the sides hold slightly different shares of each, a pairwise ratio
    does not). Raises ValueError as :func:`ratio_interval` does.
    """
    _check_rounds(ours, reference)
    return statistics.median(
        statistics.median(o) / statistics.median(r) for o, r in zip(ours, reference, strict=True)
    )


def _check_rounds(ours, reference) -> None:
    if len(ours) != len(reference):
        raise ValueError(f"{len(ours)} rounds of ours but {len(reference)} of the reference")
    if not ours:
        raise ValueError("no rounds to resample")
    if any(len(blocks) == 0 for blocks in (*ours, *reference)):
        raise ValueError("every round needs at least one block on each side")


def ratio_interval(
    ours: Sequence[Sequence[float]],
    reference: Sequence[Sequence[float]],
    level: float = 0.95,
    replicates: int = 1000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`round_ratio`.

    ``ours[i]`` and ``reference[i]`` are the blocks (seconds per step, any unit as long
    as both sides share it) that each side timed in round ``i``. Each of ``replicates``
    replicates draws as many rounds as there are, with replacement, keeping each round's
    two sides together, then resamples each side's blocks within each drawn round with
    replacement, takes each drawn round's ratio of medians and the median of those
    (two-stage bootstrap; why: the module docstring). Returns ``(low, high)``, the
    ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the replicates
    (dimensionless). Deterministic for a given ``seed`` (``numpy.random.default_rng``).
    Source: Efron & Tibshirani, *An Introduction to the Bootstrap* (1993), ch. 13
    (percentile interval); Davison & Hinkley, *Bootstrap Methods and their Application*
    (1997), sec. 3.8 (two-stage resampling of clustered data).

    Raises ValueError when the sides have different numbers of rounds, when there is no
    round or a round without blocks, when ``level`` is not in (0, 1) or ``replicates``
    is below 1.
    """
    _check_rounds(ours, reference)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if replicates < 1:
        raise ValueError(f"replicates must be at least 1, got {replicates}")
    rng = np.random.default_rng(seed)
    n = len(ours)
    drawn = rng.integers(0, n, size=(replicates, n))  # rounds of each replicate
    ours_m, ref_m = (_resampled_round_medians(side, drawn, rng) for side in (ours, reference))
    ratios = np.median(ours_m / ref_m, axis=1)
    low, high = np.quantile(ratios, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(low), float(high)


def _resampled_round_medians(
    rounds: Sequence[Sequence[float]], drawn: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Median of the resampled blocks of every drawn round (replicates x rounds):
    ``drawn`` names the rounds drawn; each drawn round's blocks are resampled with
    replacement (as many as it has). Rounds of different lengths are padded with NaN and
    the padding ignored."""
    lengths = np.array([len(blocks) for blocks in rounds])
    padded = np.full((len(rounds), lengths.max()), np.nan)
    for i, blocks in enumerate(rounds):
        padded[i, : lengths[i]] = blocks
    n_drawn = lengths[drawn][..., None]  # replicates x rounds x 1
    picks = (rng.random((*drawn.shape, padded.shape[1])) * n_drawn).astype(int)
    values = padded[drawn[..., None], picks]
    values[np.broadcast_to(np.arange(padded.shape[1]) >= n_drawn, values.shape)] = np.nan
    return np.nanmedian(values, axis=2)


def _torch_reference(workload, threads: int, min_run_time: float, steps: int = 1):
    """``blocked_autorange`` on ``w.run(steps)``: (seconds per step of each block it
    timed, steps per block it chose). Its default timer synchronises CUDA before each
    clock read."""
    from torch.utils.benchmark import Timer

    timer = Timer(stmt=f"w.run({steps})", globals={"w": workload}, num_threads=threads)
    m = timer.blocked_autorange(min_run_time=min_run_time)
    return [t / steps for t in m.times], m.number_per_run * steps


def _loop_reference(workload, k: int, blocks: int) -> list[float]:
    """Plain loop: ``blocks`` loops of ``k`` steps, each closed by one read-back;
    seconds per step of each loop."""
    samples = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        workload.run(k)
        workload.sync()
        samples.append((time.perf_counter() - t0) / k)
    return samples


#: The harness's policy inside one round of :func:`agreement` (after the first round,
#: which calibrates with the caller's policy): three timed blocks, a short warm-up and no
#: block-length check (its long block is not part of ``step_time_s``), so that a round
#: lasts a fraction of a second and the two sides alternate quickly.
ROUND_BLOCKS = 3
ROUND_WARMUP_S = 0.1
#: Rounds per point by default. The null comparison (the reference against itself) sets
#: the resolution: with 20 rounds its ratios spanned 0.952 to 1.026 over the eight
#: points of three runs on the 2-core VM (2026-12-02), so the machine's noise alone
#: nearly filled the target's +-5 %; twice the rounds narrow a median's spread by about
#: sqrt(2). With 40, 23 of 24 ratios of three runs lay within +-5 % (2026-12-02, 16:11
#: UTC); the one outside, torch s001-mlp H=2048 at 1.060, had an interval [0.995, 1.094]
#: containing 1, and the same point read 0.995 and 1.005 in the other two runs: 60 rounds
#: narrow the spread by another sqrt(1.5).
ROUNDS = 60


def agreement(
    framework: str,
    device: str,
    case: str,
    sizes: dict[str, int],
    threads: int,
    rounds: int = ROUNDS,
    min_run_time: float = 1.0,
    policy: TimingPolicy | None = None,
    against_itself: bool = False,
) -> Agreement:
    """Time one point ``rounds`` times with the harness and with the reference,
    alternately, on one workload object; return the median seconds per step of each
    side's blocks pooled over the rounds and the 95 % interval of their ratio
    (:func:`ratio_interval`, seed 0, 1 000 replicates).

    Round 0 builds the workload inside the harness (``policy``: cold start, warm-up,
    block length k). Every later round runs the harness's :func:`~harness.measure` again
    on the built workload with :data:`ROUND_BLOCKS` blocks, a warm-up of
    :data:`ROUND_WARMUP_S` and no block-length check, and the reference times as many
    blocks of the harness's k: ``blocked_autorange`` on ``w.run(k)`` for PyTorch (its
    ``min_run_time`` is what ``ROUND_BLOCKS`` such blocks take), a loop closed by a
    read-back for TensorFlow. Short rounds keep the two sides seconds apart at most, so
    that a shared machine's drift (its speed changed by a third within minutes on the
    2-core VM, 2026-12-01) falls on both alike; the order is swapped every round (ours
    first in even rounds). For PyTorch the reference's own choice of blocks (one step per
    block past ~0.2 ms, the median single step) is timed once after the rounds for
    ``min_run_time`` seconds and reported beside the ratio.

    ``against_itself=True`` is the null comparison (an A/A test): the harness builds and
    calibrates the workload once (its blocks are not used), then both sides of every
    round are the reference, timed as above. The two sides then run the same code, so
    their ratio differs from 1 only by the machine's noise over the same rounds: its
    spread is the resolution the machine allows a timer comparison of that length.

    The framework must already be imported with ``threads`` pinned
    (:func:`frameworks.import_framework`). Raises ValueError for fewer than 2 rounds.
    """
    if rounds < 2:
        raise ValueError(f"rounds must be at least 2 (a round of each order), got {rounds}")
    policy = policy or TimingPolicy(min_block_s=0.05, n_blocks=7, max_warmup_s=1.0)
    in_round = dataclasses.replace(
        policy, n_blocks=ROUND_BLOCKS, max_warmup_s=ROUND_WARMUP_S, sync_check_s=0.0
    )
    workload = frameworks.workload_class(framework, case)(device, dict(sizes))
    ours, reference = [], []
    k = None

    block_s = None  # seconds of one block of k steps, the torch reference's budget unit

    def harness(i: int) -> None:
        nonlocal k, block_s
        m = measure(workload, policy if i == 0 else in_round, built=i > 0)
        ours.append(m.block_step_times_s[:ROUND_BLOCKS] if i == 0 else m.block_step_times_s)
        k = m.steps_per_block
        block_s = k * statistics.median(ours[-1])

    def reference_blocks() -> list[float]:
        if framework == "torch":
            return _torch_reference(workload, threads, ROUND_BLOCKS * block_s, steps=k)[0]
        return _loop_reference(workload, k, ROUND_BLOCKS)

    def ours_side(i: int) -> None:
        if against_itself:
            ours.append(reference_blocks())
        else:
            harness(i)

    if against_itself:  # build and calibrate once; the harness's blocks are not a side
        calibration = measure(workload, policy)
        k = calibration.steps_per_block
        block_s = k * calibration.step_time_s
    for i in range(rounds):
        if i % 2 == 0:  # round 0 builds the workload inside the harness
            ours_side(i)
            reference.append(reference_blocks())
        else:
            reference.append(reference_blocks())
            ours_side(i)
    own, own_steps = (None, None)
    if framework == "torch" and not against_itself:
        own, own_steps = _torch_reference(workload, threads, min_run_time)
    low, high = ratio_interval(ours, reference)
    return Agreement(
        framework,
        device,
        case,
        dict(sizes),
        statistics.median([t for blocks in ours for t in blocks]),
        statistics.median([t for blocks in reference for t in blocks]),
        steps_per_block=k,
        own_block_steps=own_steps,
        own_median_s=statistics.median(own) if own else None,
        own_mean_s=statistics.fmean(own) if own else None,
        ratio_ci_low=low,
        ratio_ci_high=high,
        rounds=rounds,
        ours_rounds=tuple(tuple(r) for r in ours),
        reference_rounds=tuple(tuple(r) for r in reference),
        against_itself=against_itself,
    )


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Command line (``crossover-study agreement``, ``benchmarks/timer_agreement.py``):
    every point of :data:`POINTS` timed by :func:`agreement` on the CPU (and CUDA when
    a device is visible), one line each, ``--runs`` times; then
    ``timer agreement: min=<r> max=<r>`` over all runs' ratios (with
    ``--against-itself``, the null comparison's line before it). Returns 0."""
    parser = argparse.ArgumentParser(
        prog=prog, description="Our harness against the field's reference timers."
    )
    parser.add_argument(
        "--threads", type=_positive_int, default=2, help="CPU threads (both timers)"
    )
    parser.add_argument(
        "--frameworks", nargs="+", default=["torch", "tensorflow"], choices=["torch", "tensorflow"]
    )
    parser.add_argument(
        "--rounds", type=_positive_int, default=ROUNDS, help="alternating rounds per point"
    )
    parser.add_argument(
        "--min-run-time",
        type=_positive_float,
        default=1.0,
        help="seconds of the PyTorch reference's own blocks, timed once per point",
    )
    parser.add_argument(
        "--runs", type=_positive_int, default=1, help="times the whole set of points is measured"
    )
    parser.add_argument(
        "--against-itself",
        action="store_true",
        help="after each point, the same rounds with the reference on both sides (A/A)",
    )
    args = parser.parse_args(argv)

    frameworks.pin_thread_env(args.threads)
    devices: dict[str, list[str]] = {}
    ratios, null_ratios = [], []
    for run in range(1, args.runs + 1):
        run_ratios, run_null = [], []
        for framework, device in _targets(args.frameworks, args.threads, devices):
            for case, sizes in POINTS:
                for against_itself in (False, True) if args.against_itself else (False,):
                    result = agreement(
                        framework,
                        device,
                        case,
                        sizes,
                        args.threads,
                        rounds=args.rounds,
                        min_run_time=args.min_run_time,
                        against_itself=against_itself,
                    )
                    print(result.line(), flush=True)
                    (run_null if against_itself else run_ratios).append(result.ratio)
        null = f"; reference against itself: {_span(run_null)}" if run_null else ""
        print(f"run {run}/{args.runs}: {_span(run_ratios)}{null}", flush=True)
        ratios += run_ratios
        null_ratios += run_null
    if null_ratios:
        print(f"reference against itself: {_span(null_ratios)}")
    print(f"timer agreement: {_span(ratios)}")
    return 0


def _targets(names: list[str], threads: int, devices: dict[str, list[str]]):
    """(framework, device) pairs in order; a framework is imported (and its devices
    probed) when first reached, so its first run's points come before the next import,
    as in a single run."""
    for framework in names:
        if framework not in devices:
            frameworks.import_framework(framework, "cpu", threads)
            cuda = device_probe.probe(framework, "cuda").available
            devices[framework] = ["cpu"] + (["cuda"] if cuda else [])
        for device in devices[framework]:
            yield framework, device


def _span(ratios: list[float]) -> str:
    return f"min={min(ratios):.3f} max={max(ratios):.3f}"
