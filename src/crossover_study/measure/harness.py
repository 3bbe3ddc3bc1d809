"""The timing harness: cold start, first step, warm-up and steady state, timed correctly.

The method follows ``docs/STUDY.md`` ("What one measurement is") and
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from crossover_study.core.host_load import cpus_others, faults_per_step, host_sample, minor_faults
from crossover_study.core.step_thread import StepThread
from crossover_study.measure.pairing import interleave_order
from crossover_study.study.points import TimingPolicy


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


@dataclass
class Measurement:
    """What came out of timing one point. All times in seconds.

    ``block_step_times_s`` has one entry per timed block: block seconds / steps_per_block.
    ``sync_check`` compares seconds per step of the short blocks (their median) with the
    long blocks, ``sync_check_steps`` steps in all (two halves around the timed blocks,
    or one after them; ``sync_check_long_s`` is their seconds per step): "passed" when they agree within noise,
    "failed" when they do not (what that means depends on the device:
    :func:`sync_check_cause`), "skipped" when no long block fitted the budget.
    ``traces_*`` count tf.function traces / torch.compile graphs added after the first
    step, during warm-up and during the timed blocks (None when the program compiles
    nothing). ``host_load_start`` / ``host_load_end`` are the host's 1-minute load
    average read just before the block-length check's first long block (or the first
    timed block) and just after its last, ``host_cpus_others`` the CPUs that other work kept busy in between on
    average (:func:`cpus_others`); all three are read outside the timed blocks, as is
    ``page_faults_per_step`` (minor page faults per step over the same steps,
    :func:`faults_per_step`).
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
    host_load_start: float | None = None
    host_load_end: float | None = None
    host_cpus_others: float | None = None
    page_faults_per_step: float | None = None
    #: Seconds per step of the :class:`Partner`'s blocks, one per round, interleaved with
    #: ``block_step_times_s`` (same index: same round); None when timed alone.
    partner_block_step_times_s: list[float] | None = None

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


@dataclass
class Partner:
    """The step as written (``eager``), built, timed and kept warm, whose blocks a
    variant's timed blocks are interleaved with (:mod:`crossover_study.measure.pairing`).

    ``steps_per_block`` is the block length its own measurement calibrated (steps);
    ``seed`` draws the order of each round (:func:`pairing.interleave_order`)."""

    workload: Workload
    steps_per_block: int
    seed: int = 0


def _round_up(n: int, multiple: int) -> int:
    return max(multiple, -(-n // multiple) * multiple)


def time_block(
    workload: Workload,
    n_steps: int,
    clock: Callable[[], float],
    synced: bool = True,
    thread: StepThread | None = None,
) -> float:
    """Seconds for ``n_steps`` steps; the device must be idle (synchronised) on entry.

    The clock is read once before launching and once after ``sync()``: the only
    synchronisation inside a block is the one at its end. ``synced=False`` reads the
    clock without that sync (the anti-pattern of CASES.md P3, measured on purpose).
    With a ``thread`` (a :class:`~crossover_study.core.step_thread.StepThread`) the
    block, both clock reads included, runs there: the steps see the shallow stack of a
    user's loop, not the job's.
    """

    def block() -> float:
        t0 = clock()
        workload.run(n_steps)
        if synced:
            workload.sync()
        return clock() - t0

    return block() if thread is None else thread.call(block)


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


#: Device classes whose training step returns when its work is done: the clock read after
#: a block already follows the work, so no launch queue can hide in a short block.
SYNCHRONOUS_DEVICES = frozenset({"cpu"})


def sync_check_cause(device: str, long_faster: bool | None = None) -> str:
    """What a failed block-length check means on ``device`` (a device class of the
    timings table: cpu, cuda, cuda_multi, tpu).

    On a synchronous device (:data:`SYNCHRONOUS_DEVICES`: the CPU) a step returns when
    its work is done, so seconds per step that differ between the short blocks and the
    long block mean the speed itself changed between them: other processes took CPU
    time or the clock frequency changed (the host load columns tell the first). One
    cause is not drift: a block is one ``run(n)`` call, so a cost paid once per call
    (Keras ``fit`` sets up its epoch loop, callbacks and data iterator once per call; a
    compiled loop of n steps is entered once) is spread over more steps in the long
    block, which then runs *faster* per step. ``long_faster`` (True when the long block
    ran faster per step than the short blocks, False when slower, None when unknown)
    therefore adds that cause on the CPU when True, and leaves it out when False (a
    per-call cost cannot make the long block slower). On an asynchronous device (a GPU,
    a TPU) a step only launches work; there the short blocks may have measured a launch
    queue or an overhead paid once per block instead of the work.
    """
    if device in SYNCHRONOUS_DEVICES:
        drift = (
            "the speed drifted between the short blocks and the long block (load from "
            "other processes, CPU frequency changes)"
        )
        if long_faster:
            drift += (
                ", or a cost paid once per call of the training program (a Keras fit "
                "call, a compiled loop entered once per block) that the long block "
                "spreads over more steps"
            )
        return (
            f"{drift}; a CPU step returns when its work is done, so there is no launch "
            "queue to miss"
        )
    return (
        f"on an asynchronous device ({device}) the short blocks measured a launch queue "
        "or an overhead paid once per block (a sync, a call) rather than the work alone, "
        "or the speed drifted between the blocks (noise)"
    )


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _load_text(row: Mapping) -> str:
    start, end = _number(row.get("host_load_start")), _number(row.get("host_load_end"))
    threads = _number(row.get("threads"))
    own = f", the job's {threads:g} thread(s) included" if threads is not None else ""
    if start is not None and end is not None:
        text = f"host load (1-min average{own}) {start:.2f} -> {end:.2f}"
        others = _number(row.get("host_cpus_others"))
        if others is not None:
            text += f", other work kept {others:.2f} CPU(s) busy meanwhile"
        return text
    at_end = _number(row.get("host_load_1m"))
    if at_end is not None:
        return f"host load (1-min average{own}) {at_end:.2f} when the point finished"
    return "host load not recorded (a table written before it was)"


def sync_check_explanation(row: Mapping) -> str:
    """One line on a failed block-length check of a timings row (a mapping of its
    columns; missing or empty ones are left out): the long block against the short
    blocks, the cause for the row's device (:func:`sync_check_cause`) and, on a
    synchronous device, the host load recorded beside it."""
    device = str(row.get("device") or "")
    short, long_ = _number(row.get("step_time_s")), _number(row.get("sync_check_long_s"))
    parts = []
    if short and long_ is not None:
        change = long_ / short - 1.0
        direction = "slower" if change >= 0 else "faster"
        parts.append(f"long block {abs(change):.0%} {direction} per step than the short blocks")
    long_faster = None if not short or long_ is None else long_ < short
    parts.append(sync_check_cause(device, long_faster))
    if device in SYNCHRONOUS_DEVICES:
        parts.append(_load_text(row))
    return "; ".join(parts)


def measure(
    workload: Workload,
    policy: TimingPolicy = TimingPolicy(),  # noqa: B008 - frozen: never changed
    clock: Callable[[], float] = time.perf_counter,
    built: bool = False,
    partner: Partner | None = None,
    thread: StepThread | None = None,
) -> Measurement:
    """Time one point: cold start, first step, warm-up (discarded), timed blocks, then
    the block-length check.

    ``built=True`` times a workload whose ``setup`` already ran (cold start then reads
    0; used to time one workload repeatedly). With a ``partner`` (the step as written,
    already measured), after the warm-up one untimed block of the partner warms it
    again, and each timed block is one round: a block of the workload and a block of the
    partner, in the order :func:`pairing.interleave_order` draws; the partner's seconds
    per step go to ``partner_block_step_times_s``, and the page faults a step count the
    workload's own blocks only. Returns a :class:`Measurement`.
    With ``policy.fresh_stack`` every block after the first step runs in one
    :class:`~crossover_study.core.step_thread.StepThread`: ``thread`` (the point's,
    so that everything of the point that runs steps runs them in one thread with one
    malloc arena) or, without one, a thread of this call's own. The first step runs in
    the thread that built the workload, as a user's does.
    Exceptions from the workload propagate (the runner turns them into
    ``status=error``/``oom`` rows).
    """
    gc_was_enabled = gc.isenabled()
    own = StepThread() if policy.fresh_stack and thread is None else None
    try:
        return _measure(
            workload, policy, clock, built, partner, (thread or own) if policy.fresh_stack else None
        )
    finally:
        if own is not None:
            own.close()
        if gc_was_enabled:
            gc.enable()


def _measure(
    workload: Workload,
    policy: TimingPolicy,
    clock,
    built: bool,
    partner: Partner | None = None,
    thread: StepThread | None = None,
) -> Measurement:
    start = clock()
    t0 = clock()
    if not built:
        workload.setup()
    workload.sync()
    cold_start_s = clock() - t0 if not built else 0.0

    g = workload.steps_per_call
    first_step_s = time_block(workload, g, clock)  # in the thread that built it, as a user's
    traces_after_first = _traces(workload)
    overhead_s = timer_overhead(workload, clock)
    min_block_s = max(policy.min_block_s, 100.0 * overhead_s)
    if policy.disable_gc:
        # Switched off, not collected first, as timeit does: with TensorFlow loaded a
        # full gc.collect() took 0.52 s on the 2-core VM, a pause after which TF's eager
        # s001-mlp steps ran ~10 % slower for some 0.4 s (a sleep or a busy loop of the
        # same length did the same), longer than a short warm-up (2026-12-02).
        gc.disable()

    # Calibrate the block length as blocked_autorange does: double until a block lasts
    # at least min_block_s. These blocks are warm-up, as are the ones until two in a
    # row agree within stable_rel (or the warm-up budget is spent).
    warmup_steps = 0
    k = _round_up(max(g, getattr(workload, "min_steps_per_block", g)), g)
    warm_start = clock()
    previous = None
    while True:
        seconds = time_block(workload, k, clock, thread=thread)
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

    # Block-length check (STUDY.md item 2): seconds per step must not depend on the block
    # length. Its long blocks sandwich the timed blocks: half of the steps (up to
    # sync_check_factor / 2 x k) just before the first timed block and half just after
    # the last, so that a speed drifting steadily over the point (another process, a
    # clock change: the cause of nearly every failed check on a CPU) moves the long
    # blocks' mean as much as the short blocks' median. With room for fewer than two
    # long blocks of 2 x k steps, one long block follows the timed blocks.
    # The budget is set from the warm-up's blocks of length k (the faster of its last two:
    # one slow block, such as a process's very first steps, must not shrink the check).
    estimate = per_step if previous is None else min(per_step, previous)
    factor = min(policy.sync_check_factor, int(policy.sync_check_s // max(estimate * k, 1e-12)))
    checked = policy.synced and factor >= 2
    halves = 2 if checked and factor >= 4 else 1
    long_steps = _round_up((factor // halves) * k, g) if checked else 0

    if partner is not None:  # warm the step as written again after the variant's warm-up
        time_block(partner.workload, partner.steps_per_block, clock, thread=thread)
    host_start = host_sample()  # outside the timed blocks, as is host_end
    long_s = (
        time_block(workload, long_steps, clock, thread=thread) if checked and halves == 2 else 0.0
    )
    blocks: list[float] = []
    partner_blocks: list[float] = []
    own_faults = 0  # the workload's own page faults (a partner's are not its)
    order = interleave_order(policy.n_blocks, 2, partner.seed) if partner else None
    while len(blocks) < policy.n_blocks:
        for member in order[len(blocks)] if order else (0,):
            if member == 1:
                n = partner.steps_per_block
                partner_blocks.append(time_block(partner.workload, n, clock, thread=thread) / n)
                continue
            before = minor_faults()
            seconds = time_block(workload, k, clock, synced=policy.synced, thread=thread)
            blocks.append(seconds / k)
            after = minor_faults()
            own_faults += 0 if None in (before, after) else after - before
        if len(blocks) >= 3 and clock() - start > policy.max_point_s * (2 if partner else 1):
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
        partner_block_step_times_s=partner_blocks if partner else None,
    )
    if checked:
        long_s += time_block(workload, long_steps, clock, thread=thread)
        steps = halves * long_steps
        agrees = sync_check_agrees(
            result.step_time_s, long_s / steps, result.step_time_iqr_s, policy.noise_threshold
        )
        result.sync_check = "passed" if agrees else "failed"
        result.sync_check_long_s, result.sync_check_steps = long_s / steps, steps
    host_end = host_sample()
    result.host_load_start, result.host_load_end = host_start.load_1m, host_end.load_1m
    result.host_cpus_others = cpus_others(host_start, host_end)
    between = (halves * long_steps if checked else 0) + k * len(blocks)
    if partner is None:
        result.page_faults_per_step = faults_per_step(host_start, host_end, between)
    elif host_start.minor_faults is not None:
        result.page_faults_per_step = own_faults / (k * len(blocks))

    traces_end = _traces(workload)
    result.traces_first_step = traces_after_first
    result.traces_warmup = _delta(traces_after_warmup, traces_after_first)
    result.traces_timed = _delta(traces_end, traces_after_warmup)
    result.final_loss = workload.loss()
    result.measured_s = clock() - start
    return result
