"""A remedy is a ratio: variants timed in blocks interleaved with the step as written."""

import dataclasses
import math
import statistics

import pytest
import scipy.stats
from test_harness import FakeClock

from crossover_study.measure import pairing
from crossover_study.measure.harness import Partner, measure
from crossover_study.study.points import TimingPolicy
from crossover_study.study.spec import PointSpec


def test_interleave_order_is_balanced_randomised_and_reproducible():
    order = pairing.interleave_order(400, 2, seed=7)
    assert all(sorted(r) == [0, 1] for r in order)  # one block of each per round
    first = sum(r[0] == 0 for r in order)
    assert 150 < first < 250  # each program leads about half the rounds
    assert pairing.interleave_order(400, 2, seed=7) == order
    assert pairing.interleave_order(400, 2, seed=8) != order
    three = pairing.interleave_order(60, 3, seed=1)
    assert all(sorted(r) == [0, 1, 2] for r in three)
    assert len({tuple(r) for r in three}) > 3
    with pytest.raises(ValueError, match="rounds and members"):
        pairing.interleave_order(0, 2, seed=1)


def test_paired_speedup_is_the_median_ratio_with_its_interval():
    eager = [10.0, 12.0, 20.0, 11.0, 10.5]
    variant = [5.0, 6.0, 10.0, 5.5, 5.25]  # 2x faster in every round
    assert pairing.paired_speedup(eager, variant) == (2.0, 2.0, 2.0)
    ratios = [1.0, 1.1, 0.9, 1.05, 0.95, 1.2, 0.8]
    median, low, high = pairing.paired_speedup([r * 3 for r in ratios], [3.0] * 7)
    assert median == pytest.approx(1.0)
    assert 0.8 <= low < median < high <= 1.2
    # Student's t over the log ratios, written out: mean +- t(0.975, n-1) * s / sqrt(n).
    logs = [math.log(r) for r in ratios]
    mean, sd = statistics.mean(logs), statistics.stdev(logs)
    half = scipy.stats.t.ppf(0.975, len(logs) - 1) * sd / math.sqrt(len(logs))
    assert (low, high) == pytest.approx((math.exp(mean - half), math.exp(mean + half)))
    # the variant's speed-up over eager mirrors eager's over the variant
    _, low_inv, high_inv = pairing.paired_speedup([3.0] * 7, [r * 3 for r in ratios])
    assert (low_inv, high_inv) == pytest.approx((1 / high, 1 / low))


def test_the_paired_interval_of_three_rounds_holds_every_round_and_the_median():
    """Three rounds (a slow point's): a percentile bootstrap of the median can span no
    more than the lowest to the highest ratio, which holds the true one at 75 % (all
    three on one side of it: 2 x 1/8); Student's t over three rounds reaches past both."""
    eager = [1.00, 1.03, 0.98]
    variant = [1.01, 1.00, 0.99]
    ratios = [a / b for a, b in zip(eager, variant, strict=True)]
    median, low, high = pairing.paired_speedup(eager, variant)
    boot = scipy.stats.bootstrap(
        (ratios,), statistics.median, n_resamples=2000, method="percentile", random_state=0
    ).confidence_interval
    assert low < min(ratios) <= boot.low and high > max(ratios) >= boot.high
    assert low <= median <= high
    # one far round moves the mean, never the interval off the median
    median, low, high = pairing.paired_speedup(
        [1.0, 1.0, 1.0, 1.0, 9.0], [1.0, 1.01, 0.99, 1.0, 1.0]
    )
    assert low <= median <= high
    with pytest.raises(ValueError, match="differ in number"):
        pairing.paired_speedup([1.0, 1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="at least 3 rounds"):
        pairing.paired_speedup([1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="positive"):
        pairing.paired_speedup([1.0, 1.0, math.nan], [1.0, 1.0, 1.0])


class Stretched:
    """Steps of ``step_s`` seconds, ``slow`` times longer while the shared clock is in
    [slow_from, slow_to): the machine slowed for a stretch of time (another process, a
    clock change), as on the 2-core VM where neighbouring points move 1.3-1.6x."""

    steps_per_call = 1
    min_steps_per_block = 1
    loss_read_every = 1

    def __init__(self, clock, step_s, slow_from, slow_to, slow=1.6):
        self.clock, self.step_s = clock, step_s
        self.slow_from, self.slow_to, self.slow = slow_from, slow_to, slow
        self.pending = 0.0

    def setup(self):
        self.pending += 0.1

    def run(self, n):
        for _ in range(n):
            now = self.clock.now + self.pending
            factor = self.slow if self.slow_from <= now < self.slow_to else 1.0
            self.pending += self.step_s * factor

    def sync(self):
        self.clock.now += self.pending
        self.pending = 0.0

    def loss(self):
        return 0.5


POLICY = TimingPolicy(min_block_s=0.05, n_blocks=7, max_warmup_s=100, sync_check_s=0)


def test_a_slow_stretch_cancels_interleaved_and_not_measured_apart():
    """The same step twice (speed-up 1 by construction). Measured apart, the second runs
    inside the slow stretch: its median says 1.6x. Interleaved, each round holds one
    block of each in the same stretch: the paired speed-up is 1 and its interval
    covers 1."""
    # Apart: eager timed first (fast), the "variant" afterwards (slow from t = 1 s).
    clock = FakeClock()
    eager = Stretched(clock, 1e-3, slow_from=1.0, slow_to=1e9)
    first = measure(eager, POLICY, clock=clock)
    clock.now = max(clock.now, 1.0)
    variant = Stretched(clock, 1e-3, slow_from=1.0, slow_to=1e9)
    second = measure(variant, POLICY, clock=clock)
    assert first.step_time_s / second.step_time_s == pytest.approx(1 / 1.6, rel=0.02)

    # Interleaved: the slow stretch starts in the middle of the rounds.
    clock = FakeClock()
    eager = Stretched(clock, 1e-3, slow_from=0.0, slow_to=0.0)
    m0 = measure(eager, POLICY, clock=clock)
    start = clock.now
    eager.slow_from = start + 0.7
    eager.slow_to = 1e9
    variant = Stretched(clock, 1e-3, slow_from=start + 0.7, slow_to=1e9)
    partner = Partner(eager, m0.steps_per_block, seed=3)
    m = measure(variant, POLICY, clock=clock, partner=partner)
    assert len(m.partner_block_step_times_s) == len(m.block_step_times_s) == 7
    slow_blocks = [t for t in m.block_step_times_s if t > 1.3e-3]
    assert slow_blocks and len(slow_blocks) < 7  # the stretch fell inside the rounds
    speedup, low, high = pairing.paired_speedup(m.partner_block_step_times_s, m.block_step_times_s)
    assert speedup == pytest.approx(1.0, abs=0.02)
    assert low <= 1.0 <= high


def test_the_partner_runs_one_block_a_round_in_the_drawn_order():
    clock = FakeClock()
    calls = []

    class Logged(Stretched):
        def __init__(self, name, *args):
            super().__init__(*args)
            self.name = name

        def run(self, n):
            calls.append(self.name)
            super().run(n)

    eager = Logged("eager", clock, 1e-3, 0.0, 0.0)
    m0 = measure(eager, POLICY, clock=clock)
    variant = Logged("variant", clock, 5e-4, 0.0, 0.0)
    calls.clear()
    m = measure(variant, POLICY, clock=clock, partner=Partner(eager, m0.steps_per_block, 11))
    timed = calls[-14:]  # the rounds (no block-length check: sync_check_s 0)
    rounds = [timed[i : i + 2] for i in range(0, 14, 2)]
    drawn = pairing.interleave_order(7, 2, 11)
    assert rounds == [["variant" if i == 0 else "eager" for i in r] for r in drawn]
    assert m.step_time_s == pytest.approx(5e-4)
    assert pairing.paired_speedup(m.partner_block_step_times_s, m.block_step_times_s)[0] == (
        pytest.approx(2.0)
    )


def _point(variant="compile", **kw):
    return PointSpec("s001-mlp", "torch", "cpu", variant, {"d_in": 1024, "hidden": 128}, **kw)


def test_points_that_cannot_share_a_process_say_why():
    assert pairing.not_interleaved_reason(_point()) is None
    assert pairing.not_interleaved_reason(_point("eager")) is None
    assert "replicated" in pairing.not_interleaved_reason(
        _point("ddp", replicas=2, scaling="strong")
    )
    assert "TF32" in pairing.not_interleaved_reason(_point("tf32"))
    assert "unsynced" in pairing.not_interleaved_reason(_point(timing="unsynced"))
    columns = pairing.alone_columns("why")
    assert columns["interleaved"] is False and columns["interleaved_reason"] == "why"
    assert set(columns) == set(pairing.PAIRED_COLUMNS)


def test_a_job_measures_each_sizes_eager_before_its_variants():
    from crossover_study.measure.partners import paired_order

    small, large = {"d_in": 1024, "hidden": 32}, {"d_in": 1024, "hidden": 128}
    points = (
        dataclasses.replace(_point("compile"), sizes=small),
        dataclasses.replace(_point("eager"), sizes=large),
        dataclasses.replace(_point("eager"), sizes=small),
        dataclasses.replace(_point("copy_data_each_step"), sizes=small),
        dataclasses.replace(_point("compile"), sizes=large),
    )
    order = paired_order(points, [False] * 5)
    assert [points[i].variant for i in order] == [
        "eager",
        "compile",
        "copy_data_each_step",
        "eager",
        "compile",
    ]
    assert points[order[0]].sizes == small
    # A point that ended its process before still goes last.
    assert paired_order(points, [False, False, True, False, False])[-1] == 2


class _Journal:
    def __init__(self, rows):
        self.rows = rows

    def final_row(self, key):
        return self.rows.get(key)


class _Closing:
    closed = 0

    def close(self):
        _Closing.closed += 1


def _job(rows, wanted=()):
    from crossover_study.measure.partners import KeptPartner

    return KeptPartner(journal=_Journal(rows), threads=1, wanted=set(wanted))


def test_the_job_keeps_eager_for_its_variants_and_rebuilds_it_from_the_journal(monkeypatch):
    from crossover_study.measure import partners

    eager, compile_ = _point("eager"), _point("compile")
    job = _job({}, wanted=[eager.key()])
    assert job.pairing_for(eager).keep
    kept = Partner(_Closing(), 64, 1)
    pairing_of_eager = job.pairing_for(eager)
    pairing_of_eager.kept = kept
    job.after_point(eager, pairing_of_eager)
    assert job.pairing_for(compile_).partner is kept
    assert "TF32" in job.pairing_for(_point("tf32")).alone
    # Another size: the kept workload is closed before its points run.
    other = dataclasses.replace(compile_, sizes={"d_in": 1024, "hidden": 32})
    before = _Closing.closed
    assert "no ok measurement" in job.pairing_for(other).alone
    assert _Closing.closed == before + 1 and job.partner is None

    # Eager kept from an earlier run's journal: built again for its variants.
    built = []
    monkeypatch.setattr(
        partners,
        "rebuild_partner",
        lambda point, row, threads: (
            built.append((point.key(), row["steps_per_block"]))
            or Partner(_Closing(), row["steps_per_block"], 2)
        ),
    )
    job = _job({eager.key(): {"status": "ok", "steps_per_block": 32}})
    assert job.pairing_for(compile_).partner.steps_per_block == 32
    assert built == [(eager.key(), 32)]
    job.pairing_for(_point("copy_data_each_step"))
    assert len(built) == 1  # built once for the size
