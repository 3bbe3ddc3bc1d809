"""A tolerant version of benchmarks/timer_agreement.py: the harness agrees with the
reference timers on the same step (CPU): torch.utils.benchmark's blocked_autorange for
PyTorch, a loop closed by reading the result back for TensorFlow; and the bootstrap
interval of the ratio on synthetic block times."""

import numpy as np
import pytest

from crossover_study.measure import agreement as agreement_module
from crossover_study.measure import frameworks
from crossover_study.measure.agreement import Agreement, agreement, ratio_interval
from crossover_study.measure.harness import Measurement
from crossover_study.study.points import TimingPolicy


@pytest.mark.slow
@pytest.mark.parametrize(
    "framework, case, sizes",
    [
        ("torch", "s001-mlp", {"batch": 64, "d_in": 256, "hidden": 128}),
        ("tensorflow", "s000-hjb", {"batch": 100, "width": 8}),
    ],
)
def test_harness_agrees_with_the_reference_timer_on_the_cpu(framework, case, sizes):
    frameworks.pin_thread_env(1)
    frameworks.import_framework(framework, "cpu", 1)
    result = agreement(
        framework,
        "cpu",
        case,
        sizes,
        threads=1,
        rounds=3,
        min_run_time=0.3,
        policy=TimingPolicy(min_block_s=0.05, n_blocks=5, max_warmup_s=0.3),
    )
    # Loose bounds: CI machines are shared; benchmarks/timer_agreement.py holds the
    # strict [0.95, 1.05] target and prints the measured ratios.
    assert 0.7 < result.ratio < 1.4, result.line()
    assert result.steps_per_block >= 1
    if framework == "torch":
        # The reference also reports its own block choice, for the like-with-like story.
        assert result.own_block_steps >= 1 and result.own_mean_s > 0, result.line()


def _rounds(rng, scale: float, rounds: int = 5, blocks: int = 7) -> list[list[float]]:
    """Synthetic block times (seconds per step): lognormal around ``scale`` x 1 ms."""
    return [list(scale * 1e-3 * rng.lognormal(0.0, 0.05, size=blocks)) for _ in range(rounds)]


def test_ratio_interval_of_identical_distributions_contains_one():
    rng = np.random.default_rng(1)
    ours, reference = _rounds(rng, 1.0), _rounds(rng, 1.0)
    low, high = ratio_interval(ours, reference)
    assert low < 1.0 < high
    assert high - low < 0.2  # 5 % scatter per block, 35 blocks a side
    assert ratio_interval(ours, reference) == (low, high)  # fixed seed: deterministic


def test_ratio_interval_of_a_twice_slower_side_excludes_one():
    rng = np.random.default_rng(2)
    low, high = ratio_interval(_rounds(rng, 2.0), _rounds(rng, 1.0))
    assert 1.8 < low < 2.0 < high < 2.2


def test_ratio_interval_carries_the_drift_between_rounds():
    # Blocks alike within a round, but two of five rounds of ours ran under load. The
    # same blocks pooled into one round (a bootstrap of blocks alone) give an interval
    # of a point; resampling the rounds gives the spread that the load made.
    ours = [[1.0e-3] * 50, [1.5e-3] * 50, [1.0e-3] * 50, [1.5e-3] * 50, [1.0e-3] * 50]
    reference = [[1.0e-3] * 50] * 5
    assert ratio_interval(ours, reference) == pytest.approx((1.0, 1.5))
    pooled = [[t for blocks in ours for t in blocks]]
    assert ratio_interval(pooled, [[1.0e-3] * 250]) == pytest.approx((1.0, 1.0))


def test_ratio_interval_of_one_round_resamples_its_blocks():
    low, high = ratio_interval([[1.0, 1.0, 1.0, 3.0, 3.0]], [[1.0, 1.0, 1.0, 1.0, 1.0]])
    assert low == pytest.approx(1.0) and high == pytest.approx(3.0)


def test_ratio_interval_pools_rounds_of_different_lengths():
    low, high = ratio_interval([[2.0], [2.0, 2.0, 2.0]], [[1.0] * 7, [1.0, 1.0]])
    assert low == pytest.approx(2.0) and high == pytest.approx(2.0)


@pytest.mark.parametrize(
    "ours, reference, kwargs, message",
    [
        ([[1.0]], [[1.0], [1.0]], {}, "1 rounds of ours but 2"),
        ([], [], {}, "no rounds"),
        ([[1.0], []], [[1.0], [1.0]], {}, "at least one block"),
        ([[1.0]], [[1.0]], {"level": 1.0}, "level"),
        ([[1.0]], [[1.0]], {"replicates": 0}, "replicates"),
    ],
)
def test_ratio_interval_refuses_bad_input(ours, reference, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ratio_interval(ours, reference, **kwargs)


def test_agreement_line_prints_the_interval():
    a = Agreement(
        "tensorflow",
        "cpu",
        "s000-hjb",
        {"batch": 100, "width": 8},
        ours_s=600e-6,
        reference_s=610e-6,
        steps_per_block=200,
        ratio_ci_low=0.95,
        ratio_ci_high=1.01,
        rounds=5,
    )
    assert "ratio 0.984 [0.950, 1.010] (k=200, 5 rounds)" in a.line()


class _Steps:
    """A workload of no work: each step takes no time (the harness's timing of it is
    not asserted, only what agreement() does with the rounds)."""

    steps_per_call = 1
    min_steps_per_block = 1
    loss_read_every = 1

    def __init__(self, device, sizes):
        pass

    def setup(self):
        pass

    def run(self, n_steps):
        pass

    def sync(self):
        pass

    def loss(self):
        return 0.0


def _fake_timers(monkeypatch, harness: str, reference_speeds) -> list:
    """Replace the harness (blocks of 2.0 s/step, k=10) and the TensorFlow loop reference
    (blocks of the next of ``reference_speeds``) on a workload of no work; returns the
    list each call appends to: ``(harness, built)`` or ``("reference", k)``."""
    order = []
    monkeypatch.setattr(agreement_module.frameworks, "workload_class", lambda f, c: _Steps)

    def fake_measure(workload, policy, built=False):
        order.append((harness, built))
        return Measurement(0.0, 0.0, 0, 10, block_step_times_s=[2.0, 2.0, 2.0])

    speeds = iter(reference_speeds)

    def fake_loop(workload, k, blocks):
        order.append(("reference", k))
        return [next(speeds)] * blocks

    monkeypatch.setattr(agreement_module, "measure", fake_measure)
    monkeypatch.setattr(agreement_module, "_loop_reference", fake_loop)
    return order


def test_agreement_swaps_the_order_every_round(monkeypatch):
    order = _fake_timers(monkeypatch, "ours", [1.0] * 3)
    result = agreement("tensorflow", "cpu", "s000-hjb", {"batch": 1, "width": 1}, 1, rounds=3)
    assert order == [
        ("ours", False),
        ("reference", 10),
        ("reference", 10),
        ("ours", True),
        ("ours", True),
        ("reference", 10),
    ]
    assert result.ratio == 2.0 and result.rounds == 3
    assert (result.ratio_ci_low, result.ratio_ci_high) == (2.0, 2.0)
    # Each round keeps its own blocks: three of the reference's, as many as the harness's.
    assert [len(r) for r in result.reference_rounds] == [3, 3, 3]


def test_the_ratio_pairs_the_sides_within_each_round():
    # The machine ran at 1.0 for two rounds, then at 1.5. Both sides see the same speed
    # in every round, but the reference timed more blocks while it was fast (its block
    # count varies, as blocked_autorange's does): the pooled medians land on different
    # levels, the per-round ratio does not.
    levels = [1.0, 1.0, 1.5, 1.5, 1.5]
    ours = [[v] * 3 for v in levels]
    reference = [[v] * (5 if v == 1.0 else 1) for v in levels]
    pooled = np.median([t for r in ours for t in r]) / np.median([t for r in reference for t in r])
    assert pooled == 1.5
    assert agreement_module.round_ratio(ours, reference) == 1.0
    assert ratio_interval(ours, reference) == (1.0, 1.0)


def test_against_itself_times_the_reference_on_both_sides(monkeypatch):
    # The null comparison (A/A): the harness builds and calibrates once, then every side
    # of every round is the reference, with the harness's k.
    order = _fake_timers(monkeypatch, "harness", [1.0, 1.1, 1.2, 1.2, 0.9, 1.0])
    result = agreement(
        "tensorflow", "cpu", "s000-hjb", {"batch": 1, "width": 1}, 1, rounds=3, against_itself=True
    )
    assert order == [("harness", False)] + [("reference", 10)] * 6
    # Round ratios: 1.0/1.1 (a first), 1.2/1.2 (b first: a is the second call), 0.9/1.0;
    # their median is the first.
    assert result.ratio == pytest.approx(1.0 / 1.1)
    assert result.against_itself and result.own_median_s is None
    line = result.line()
    assert "reference a" in line and "reference b" in line and "ours" not in line
    assert not Agreement("torch", "cpu", "s001-mlp", {}, 1.0, 1.0).against_itself
