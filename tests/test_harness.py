"""Harness units: synchronised blocks, warm-up excluded, units of the result."""

import math
import os

import pytest

from crossover_study.measure.harness import Measurement, measure
from crossover_study.study.points import TimingPolicy


class FakeClock:
    """A clock advanced only by the fake workload (seconds)."""

    def __init__(self):
        self.now = 0.0
        self.reads = []

    def __call__(self):
        self.reads.append(self.now)
        return self.now


class FakeWorkload:
    """Steps cost ``step_s`` seconds of device time, ``warm_s`` for the first ``n_warm``
    steps; work is only "done" (the clock advanced) at sync, as on an async device."""

    steps_per_call = 1
    min_steps_per_block = 1
    loss_read_every = 1

    def __init__(self, clock, step_s=1e-3, warm_s=2e-2, n_warm=5, setup_s=2.0):
        self.clock, self.step_s, self.warm_s, self.n_warm = clock, step_s, warm_s, n_warm
        self.setup_s = setup_s
        self.pending = 0.0
        self.steps = 0
        self.events = []

    def setup(self):
        self.events.append("setup")
        self.pending += self.setup_s

    def run(self, n):
        self.events.append(("run", n))
        for _ in range(n):
            self.pending += self.warm_s if self.steps < self.n_warm else self.step_s
            self.steps += 1

    def sync(self):
        self.events.append("sync")
        self.clock.now += self.pending
        self.pending = 0.0

    def loss(self):
        return 0.5


def test_steady_state_in_seconds_per_step_excludes_warmup():
    clock = FakeClock()
    w = FakeWorkload(clock)
    m = measure(w, TimingPolicy(min_block_s=0.05, n_blocks=5, max_warmup_s=100), clock=clock)
    assert m.step_time_s == pytest.approx(1e-3)
    assert m.step_time_iqr_s == pytest.approx(0.0, abs=1e-12)
    assert all(t == pytest.approx(1e-3) for t in m.block_step_times_s)
    assert len(m.block_step_times_s) == 5
    assert m.warmup_steps >= 5 - 1  # every slow step after the first fell in the warm-up
    assert m.cold_start_s == pytest.approx(2.0)
    assert m.first_step_s == pytest.approx(0.02)  # the first call: one slow step
    assert m.steps_per_block * 1e-3 >= 0.05  # a block lasts at least min_block_s
    assert m.final_loss == 0.5


def test_clock_is_read_only_after_a_sync():
    clock = FakeClock()
    w = FakeWorkload(clock, n_warm=0)
    original_call = clock.__call__

    def checked():
        # No launched work may be pending when the clock is read.
        assert w.pending == 0.0, "clock read while device work was pending"
        return original_call()

    measure(w, TimingPolicy(min_block_s=0.01, n_blocks=3), clock=checked)
    # Inside a block there is exactly one sync: each run is followed by one sync.
    runs = [i for i, e in enumerate(w.events) if isinstance(e, tuple)]
    assert all(w.events[i + 1] == "sync" for i in runs)
    # Other syncs: the one closing the cold start and the 25 of the overhead probe,
    # all outside any block.
    assert sum(e == "sync" for e in w.events) == len(runs) + 1 + 25


def test_block_length_respects_the_workloads_granularity():
    clock = FakeClock()
    w = FakeWorkload(clock, n_warm=0)
    w.steps_per_call = 4
    w.min_steps_per_block = 40
    m = measure(w, TimingPolicy(min_block_s=1e-6, n_blocks=3), clock=clock)
    assert m.steps_per_block % 4 == 0 and m.steps_per_block >= 40
    assert all(e[1] % 4 == 0 for e in w.events if isinstance(e, tuple))


def test_noise_flag_uses_iqr_over_median():
    m = Measurement(0, 0, 0, 1, block_step_times_s=[1.0, 1.0, 1.5, 2.0, 2.0])
    assert m.step_time_s == 1.5
    assert m.step_time_iqr_s == pytest.approx(1.0)
    assert m.is_noisy(0.1)
    quiet = Measurement(0, 0, 0, 1, block_step_times_s=[1.0, 1.01, 1.0, 0.99, 1.0])
    assert not quiet.is_noisy(0.1)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n_blocks": 2}, "timing.blocks must be at least 3"),
        ({"min_block_s": 0}, "timing.min_block_s must be positive"),
        ({"noise_threshold": -1}, "timing.noise_threshold must be positive"),
        ({"max_point_s": 0}, "timing.max_point_s must be positive"),
    ],
)
def test_policy_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TimingPolicy(**kwargs)


def test_point_budget_keeps_at_least_three_blocks():
    clock = FakeClock()
    w = FakeWorkload(clock, step_s=1.0, n_warm=0, setup_s=0)
    m = measure(w, TimingPolicy(min_block_s=0.5, n_blocks=7, max_point_s=1.0), clock=clock)
    assert len(m.block_step_times_s) == 3
    assert not math.isnan(m.step_time_s)


class QueuedWorkload(FakeWorkload):
    """A device with a launch queue: run() only enqueues (costs ``launch_s`` of host
    time per step), sync() waits for the queued device work (``step_s`` per step)."""

    def __init__(self, clock, launch_s=1e-5, step_s=1e-3, sync_s=0.0):
        super().__init__(clock, step_s=step_s, n_warm=0, setup_s=0.0)
        self.launch_s, self.sync_s = launch_s, sync_s

    def run(self, n):
        self.events.append(("run", n))
        self.clock.now += n * self.launch_s  # the host only launches
        self.pending += n * self.step_s
        self.steps += n

    def sync(self):
        self.events.append("sync")
        self.clock.now += self.pending + self.sync_s
        self.pending = 0.0


def test_unsynced_timing_measures_the_launch_queue_not_the_work():
    clock = FakeClock()
    synced = measure(QueuedWorkload(clock), TimingPolicy(min_block_s=0.05, n_blocks=3), clock)
    clock2 = FakeClock()
    unsynced = measure(
        QueuedWorkload(clock2),
        TimingPolicy(min_block_s=0.05, n_blocks=3, synced=False),
        clock2,
    )
    # This fake device does not overlap launches with work: launch + work per step.
    assert synced.step_time_s == pytest.approx(1e-3 + 1e-5)
    assert unsynced.step_time_s == pytest.approx(1e-5)  # 100x too fast: the P3 error
    assert unsynced.sync_check == "skipped" and not unsynced.synced


def test_block_length_check_passes_when_per_step_time_is_stable():
    clock = FakeClock()
    m = measure(QueuedWorkload(clock), TimingPolicy(min_block_s=0.01, n_blocks=3), clock)
    assert m.sync_check == "passed"
    assert m.sync_check_steps >= 2 * m.steps_per_block
    assert m.sync_check_long_s == pytest.approx(m.step_time_s)


def test_block_length_check_fails_on_a_per_block_overhead():
    # A fixed 5 ms cost per sync that the overhead probe cannot see (it appears only
    # after work): short blocks carry it, the long block amortises it.
    class Costly(QueuedWorkload):
        def sync(self):
            had_work = self.pending > 0
            super().sync()
            if had_work:
                self.clock.now += 5e-3

    clock = FakeClock()
    m = measure(Costly(clock, step_s=1e-4), TimingPolicy(min_block_s=0.001, n_blocks=3), clock)
    assert m.sync_check == "failed"
    assert m.sync_check_long_s < 0.7 * m.step_time_s


def test_sync_check_tolerance_grows_with_noise():
    from crossover_study.measure.harness import sync_check_agrees

    assert sync_check_agrees(1.0, 1.05, iqr_s=0.0, threshold=0.1)
    assert not sync_check_agrees(1.0, 1.3, iqr_s=0.0, threshold=0.1)
    assert sync_check_agrees(1.0, 1.3, iqr_s=0.2, threshold=0.1)  # noisy: 2 x IQR/median


def test_blocks_last_a_hundred_times_the_timer_overhead():
    clock = FakeClock()
    w = QueuedWorkload(clock, sync_s=1e-3)  # every sync (and clock read pair) costs 1 ms
    m = measure(w, TimingPolicy(min_block_s=1e-6, n_blocks=3), clock)
    assert m.timer_overhead_s == pytest.approx(1e-3)
    block_s = m.steps_per_block * 1e-3
    assert block_s >= 100 * m.timer_overhead_s
    # ...so the overhead is below 1% of a block and the step time is right within 1%.
    assert m.step_time_s == pytest.approx(1e-3 + 1e-5, rel=0.011)


def test_traces_are_counted_per_phase_and_a_retrace_in_the_timed_blocks_shows():
    class Retracing(QueuedWorkload):
        def trace_count(self):
            # one trace at the first step, one more once 3 000 steps have run
            return (self.steps >= 1) + (self.steps > 3_000)

    clock = FakeClock()
    steady = measure(Retracing(clock), TimingPolicy(min_block_s=0.01, n_blocks=3), clock)
    assert steady.traces_first_step == 1 and steady.traces_warmup == 0
    assert steady.traces_timed == 0
    clock = FakeClock()
    late = measure(Retracing(clock), TimingPolicy(min_block_s=1.0, n_blocks=5), clock)
    assert late.traces_timed == 1
    clock = FakeClock()
    untraced = measure(QueuedWorkload(clock), TimingPolicy(min_block_s=0.01, n_blocks=3), clock)
    assert untraced.traces_timed is None


def test_garbage_collector_is_off_inside_blocks_and_restored_after():
    import gc

    seen = []

    class Watching(QueuedWorkload):
        def run(self, n):
            seen.append(gc.isenabled())
            super().run(n)

    clock = FakeClock()
    assert gc.isenabled()
    measure(Watching(clock), TimingPolicy(min_block_s=0.01, n_blocks=3), clock)
    assert seen[0] is True  # the first step runs as the program would
    assert not any(seen[1:])  # warm-up, timed blocks and the check: off, as in timeit
    assert gc.isenabled()


def test_no_full_collection_pauses_the_steps_before_the_warm_up(monkeypatch):
    """A gc.collect() between the first step and the warm-up paused TensorFlow's steps
    for 0.5 s, after which they ran slower than the loop reference's (timer agreement
    1.05-1.12 at TF s001-mlp H=128 on the 2-core VM); timeit does not collect either."""
    import gc

    collections = []
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(a) or 0)
    clock = FakeClock()
    measure(QueuedWorkload(clock), TimingPolicy(min_block_s=0.01, n_blocks=3), clock)
    assert collections == []


# ------------------------------------------------------------- host load and causes
def test_host_load_is_read_just_outside_the_timed_blocks(monkeypatch):
    from crossover_study.core.host_load import HostSample
    from crossover_study.measure import harness

    clock = FakeClock()
    w = QueuedWorkload(clock)
    samples = iter(
        [
            HostSample(10.0, load_1m=1.5, busy_s=100.0, own_s=20.0, minor_faults=1000),
            HostSample(12.0, load_1m=2.5, busy_s=104.0, own_s=22.0, minor_faults=5000),
        ]
    )

    def sample():
        w.events.append("host")
        return next(samples)

    monkeypatch.setattr(harness, "host_sample", sample)
    m = measure(w, TimingPolicy(min_block_s=0.01, n_blocks=3), clock)
    first, last = (i for i, e in enumerate(w.events) if e == "host")
    runs = [e[1] for e in w.events[first:last] if isinstance(e, tuple)]
    # Between the two samples: the timed blocks sandwiched by the block-length check's
    # two long blocks, nothing else.
    half = m.sync_check_steps // 2
    assert runs == [half] + [m.steps_per_block] * 3 + [half]
    assert half >= 2 * m.steps_per_block
    assert not any(isinstance(e, tuple) for e in w.events[last:])
    assert (m.host_load_start, m.host_load_end) == (1.5, 2.5)
    # 4 CPU-seconds busy on the host, 2 of them this process's, over 2 s: 1 CPU.
    assert m.host_cpus_others == pytest.approx(1.0)
    # the process's page faults over the same window, per step that ran in it
    assert m.page_faults_per_step == pytest.approx(4000 / sum(runs))


def test_faults_per_step_needs_counts_and_steps():
    from crossover_study.core import host_load
    from crossover_study.core.host_load import HostSample, faults_per_step

    start, end = HostSample(0.0, None, None, 0.0, 10), HostSample(1.0, None, None, 0.0, 70)
    assert faults_per_step(start, end, 20) == 3.0
    assert faults_per_step(HostSample(0.0, None, None, 0.0), end, 20) is None
    assert faults_per_step(start, end, 0) is None
    assert host_load.host_sample().minor_faults > 0  # this process has faulted in pages


def test_host_sample_reads_this_host():
    from crossover_study.core.host_load import host_sample

    sample = host_sample()
    assert sample.own_s > 0
    if hasattr(os, "getloadavg"):
        assert sample.load_1m is not None and sample.load_1m >= 0
    if os.path.exists("/proc/stat"):
        assert sample.busy_s is not None and sample.busy_s > 0


def test_busy_seconds_from_proc_stat(tmp_path):
    from crossover_study.core.host_load import _busy_s

    hz = os.sysconf("SC_CLK_TCK")
    stat = tmp_path / "stat"
    #                user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text(f"cpu  {hz} {hz} {hz} {50 * hz} {hz} {hz} {hz} {hz} {hz} 0\ncpu0 1 2 3\n")
    assert _busy_s(str(stat)) == pytest.approx(6.0)  # idle and iowait left out
    stat.write_text("intr 1 2 3\n")
    assert _busy_s(str(stat)) is None
    assert _busy_s(str(tmp_path / "absent")) is None


def test_cpus_others_subtracts_the_process_and_needs_a_long_enough_window():
    from crossover_study.core.host_load import HostSample, cpus_others

    start = HostSample(wall_s=0.0, load_1m=2.0, busy_s=50.0, own_s=10.0)
    alone = HostSample(wall_s=1.0, load_1m=2.0, busy_s=52.0, own_s=12.0)
    crowded = HostSample(wall_s=1.0, load_1m=3.0, busy_s=53.5, own_s=12.0)
    assert cpus_others(start, alone) == 0.0
    assert cpus_others(start, crowded) == pytest.approx(1.5)
    # Tick rounding can make the difference slightly negative: never below 0.
    assert cpus_others(start, HostSample(1.0, 2.0, 51.99, 12.0)) == 0.0
    assert cpus_others(start, HostSample(0.05, 2.0, 51.0, 10.0)) is None  # too short
    assert cpus_others(start, HostSample(1.0, 2.0, None, 12.0)) is None  # no /proc/stat


def test_a_failed_check_names_drift_on_the_cpu_and_a_launch_queue_elsewhere():
    from crossover_study.measure.harness import sync_check_cause

    cpu = sync_check_cause("cpu")
    assert "drifted" in cpu and "other processes" in cpu and "frequency" in cpu
    assert "no launch queue" in cpu  # says why the queue is ruled out, never blames it
    # A long block faster per step on the CPU can also be a per-call cost (one Keras fit
    # call per block); a slower one cannot, so only the faster wording names it.
    assert "once per call" not in cpu
    assert "once per call" not in sync_check_cause("cpu", long_faster=False)
    faster = sync_check_cause("cpu", long_faster=True)
    assert "once per call" in faster and "fit" in faster and "drifted" in faster
    assert "no launch queue" in faster
    for device in ("cuda", "cuda_multi", "tpu"):
        text = sync_check_cause(device)
        assert "launch queue" in text and "no launch queue" not in text
        assert "asynchronous" in text and device in text


def test_the_explanation_of_a_failed_cpu_row_shows_the_host_load():
    from crossover_study.measure.harness import sync_check_explanation

    row = {
        "device": "cpu",
        "threads": 2,
        "step_time_s": 1e-3,
        "sync_check_long_s": 1.25e-3,
        "host_load_start": 1.9,
        "host_load_end": 3.4,
        "host_cpus_others": 1.02,
        "host_load_1m": 3.5,
    }
    text = sync_check_explanation(row)
    assert text.startswith("long block 25% slower per step than the short blocks; ")
    assert "speed drifted" in text and "launch queue to miss" in text
    assert "host load (1-min average, the job's 2 thread(s) included) 1.90 -> 3.40" in text
    assert "other work kept 1.02 CPU(s) busy" in text
    # A table written before the start/end columns: the load when the point finished.
    older = {k: v for k, v in row.items() if not k.startswith("host_") or k == "host_load_1m"}
    assert "3.50 when the point finished" in sync_check_explanation(older)
    older.pop("host_load_1m")
    older["sync_check_long_s"] = 0.8e-3
    text = sync_check_explanation(older)
    assert "20% faster" in text and "host load not recorded" in text
    assert "once per call" in text  # faster: a per-call cost is a cause on the CPU too
    assert "once per call" not in sync_check_explanation(row)  # 25% slower: it is not
    # Empty cells as pandas reads them (NaN) count as missing.
    assert "host load not recorded" in sync_check_explanation(
        {**older, "host_load_start": math.nan, "host_load_end": math.nan}
    )


def test_the_explanation_of_a_failed_gpu_row_points_at_the_launch_queue():
    from crossover_study.measure.harness import sync_check_explanation

    row = {"device": "cuda", "step_time_s": 1e-3, "sync_check_long_s": 0.5e-3}
    row.update(threads=2, host_load_start=1.0, host_load_end=1.0)
    text = sync_check_explanation(row)
    assert text.startswith("long block 50% faster per step")
    assert "launch queue" in text and "host load" not in text
