"""Harness units: synchronised blocks, warm-up excluded, units of the result."""

import math

import pytest

from crossover_study.harness import Measurement, TimingPolicy, measure


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
    assert sum(e == "sync" for e in w.events) == len(runs) + 1  # + the one after setup


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
