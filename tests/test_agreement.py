"""A tolerant version of benchmarks/timer_agreement.py: the harness and
torch.utils.benchmark's blocked_autorange agree on the same step (CPU)."""

import pytest

from crossover_study import frameworks
from crossover_study.agreement import agreement
from crossover_study.harness import TimingPolicy


@pytest.mark.slow
def test_harness_agrees_with_blocked_autorange_on_the_cpu():
    frameworks.pin_thread_env(1)
    frameworks.import_framework("torch", "cpu", 1)
    result = agreement(
        "torch",
        "cpu",
        "s001-mlp",
        {"batch": 64, "d_in": 256, "hidden": 128},
        threads=1,
        rounds=3,
        min_run_time=0.3,
        policy=TimingPolicy(min_block_s=0.05, n_blocks=5, max_warmup_s=0.3),
    )
    # Loose bounds: CI machines are shared; benchmarks/timer_agreement.py holds the
    # strict [0.95, 1.05] target and prints the measured ratios.
    assert 0.7 < result.ratio < 1.4, result.line()


@pytest.mark.slow
def test_harness_agrees_with_a_read_back_loop_in_tensorflow():
    frameworks.pin_thread_env(1)
    frameworks.import_framework("tensorflow", "cpu", 1)
    result = agreement(
        "tensorflow",
        "cpu",
        "s000-hjb",
        {"batch": 100, "width": 8},
        threads=1,
        rounds=3,
        min_run_time=0.3,
        policy=TimingPolicy(min_block_s=0.05, n_blocks=5, max_warmup_s=0.3),
    )
    assert 0.7 < result.ratio < 1.4, result.line()
