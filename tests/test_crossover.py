"""Crossover on synthetic curves with a known crossover; N*; the table."""

import numpy as np
import pandas as pd
import pytest
from conftest import s001_rows

from crossover_study.analysis.crossover import (
    crossover_size,
    crossover_table,
    estimate_crossover,
    n_star,
)
from crossover_study.analysis.shifts import SHIFT_COLUMNS, remedy_shift
from crossover_study.core.origin import table_columns


def test_power_law_curves_cross_where_expected():
    # CPU time grows linearly with size, the accelerator's is flat (launch-bound):
    # t_cpu = 1e-5 x, t_acc = 1e-3 -> they cross at x* = 100 exactly (log-log linear).
    x = [10, 30, 300, 1000]
    t_cpu = [1e-5 * v for v in x]
    t_acc = [1e-3] * len(x)
    outcome, x_star = crossover_size(x, t_cpu, t_acc)
    assert outcome == "crossover"
    assert x_star == pytest.approx(100.0)


def test_no_crossover_and_faster_throughout():
    assert crossover_size([1, 2, 4], [1, 1, 1], [2, 2, 2]) == ("no_crossover", None)
    assert crossover_size([1, 2, 4], [2, 2, 2], [1, 1, 1]) == (
        "accelerator_faster_throughout",
        None,
    )


def test_equal_times_are_not_faster():
    # Equal at the first size, faster after: not "faster throughout", and no crossover
    # (the accelerator is never shown slower).
    assert crossover_size([1, 2, 4], [1, 1, 1], [1, 0.5, 0.5]) == (
        "accelerator_faster_in_part",
        None,
    )
    assert crossover_size([1, 2, 4], [1, 1, 1], [1, 1, 1]) == ("indistinguishable", None)
    # Faster at small sizes, slower at large ones: the CPU overtakes, not the accelerator.
    assert crossover_size([1, 2, 4], [1, 1, 1], [0.5, 1, 2]) == (
        "accelerator_faster_in_part",
        None,
    )


def test_a_crossover_needs_a_supported_sign_change():
    x, cpu = [1, 2, 4, 8], [1.0] * 4
    acc = [2.0, 1.1, 0.9, 0.5]  # the medians fall through 1 between 2 and 4
    assert crossover_size(x, cpu, acc)[0] == "crossover"
    # Slower at 1, tied at 2 and 4, faster at 8: the crossing is sought between 1 and 8
    # and found where the medians cross.
    outcome, size = crossover_size(x, cpu, acc, ["slower", "tied", "tied", "faster"])
    assert outcome == "crossover" and 2 < size < 4
    # Tied wherever the medians differ by noise: no crossover is made of it.
    assert crossover_size(x, cpu, acc, ["tied"] * 4) == ("indistinguishable", None)
    assert crossover_size(x, cpu, acc, ["slower", "tied", "tied", "tied"]) == (
        "no_crossover",
        None,
    )
    assert crossover_size(x, cpu, acc, ["tied", "tied", "tied", "faster"]) == (
        "accelerator_faster_in_part",
        None,
    )


def _noisy_blocks(experiment: str, seed: int):
    """Issue 14, item 6: 4 sizes, 5 blocks each, 5% lognormal noise per block."""
    rng = np.random.default_rng(seed)
    x = [32, 128, 512, 2048]
    cpu = [1e-5 * v for v in x]
    if experiment == "same":
        acc = cpu
    else:  # 2x slower at 32, 2x faster at 2048: ratio 2 (x/32)^(-1/3), crossing at 256
        acc = [t * 2.0 * (v / 32) ** (-1 / 3) for t, v in zip(cpu, x, strict=True)]
    blocks_cpu = [t * rng.lognormal(0, 0.05, size=5) for t in cpu]
    blocks_acc = [t * rng.lognormal(0, 0.05, size=5) for t in acc]
    return x, blocks_cpu, blocks_acc


def test_noise_alone_makes_no_crossover():
    # Two devices drawn from the same distribution, 100 noise seeds: the point estimate
    # alone said crossover in 44 and "accelerator faster throughout" in 48, 40 with a 95%
    # interval (benchmarks/noise_crossover.py before this test existed).
    outcomes = []
    for seed in range(100):
        e = estimate_crossover(*_noisy_blocks("same", seed), n_boot=1000, seed=0)
        outcomes.append(e.outcome)
        assert e.outcome != "accelerator_faster_throughout"
        if e.outcome != "crossover":
            assert e.size is None and e.ci_low is None and e.ci_high is None
    with_interval = sum(o == "crossover" for o in outcomes)
    assert with_interval <= 5, outcomes
    assert outcomes.count("indistinguishable") >= 50


def test_a_real_2x_crossover_in_the_same_noise_is_found():
    found = 0
    for seed in range(100):
        x, cpu, acc = _noisy_blocks("2x", seed)
        e = estimate_crossover(x, cpu, acc, n_boot=1000, seed=0)
        if e.outcome == "crossover" and e.ci_low is not None:
            found += 1
            assert e.ci_low <= e.size <= e.ci_high
            assert 128 <= e.ci_low and e.ci_high <= 512  # inside the supported bracket
    assert found >= 95


def test_ratio_verdicts_say_where_the_ratio_interval_excludes_one():
    x, cpu, acc = _noisy_blocks("2x", 0)
    assert estimate_crossover(x, cpu, acc, n_boot=500, seed=0).verdicts == (
        "slower",
        "slower",
        "faster",
        "faster",
    )
    x, cpu, _ = _noisy_blocks("same", 0)
    same = [list(b) for b in cpu]  # the very same blocks on both devices
    assert estimate_crossover(x, cpu, same, n_boot=500, seed=0).verdicts == ("tied",) * 4
    # Deterministic for a given seed and replicate count (the audit computes it again).
    assert estimate_crossover(x, cpu, acc, 300, 7) == estimate_crossover(x, cpu, acc, 300, 7)


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="ascending"):
        crossover_size([2, 1], [1, 1], [1, 1])
    with pytest.raises(ValueError, match="positive"):
        crossover_size([1, 2], [0, 1], [1, 1])
    with pytest.raises(ValueError, match=">= 2"):
        crossover_size([1], [1], [1])


def test_bootstrap_interval_covers_the_true_crossover():
    rng = np.random.default_rng(1)
    x = [10, 30, 300, 1000]
    blocks_cpu = [1e-5 * v * rng.lognormal(0, 0.05, size=9) for v in x]
    blocks_acc = [1e-3 * rng.lognormal(0, 0.05, size=9) for _ in x]
    e = estimate_crossover(x, blocks_cpu, blocks_acc, n_boot=500, seed=0)
    lo, hi, share = e.ci_low, e.ci_high, e.bootstrap_found
    assert share == 1.0
    assert lo < 100 < hi
    assert hi / lo < 1.5  # 5% noise gives a tight interval


def test_bootstrap_is_seeded():
    x = [10, 1000]
    cpu = [[1e-4, 1.1e-4, 0.9e-4], [1e-2, 1.1e-2, 0.9e-2]]
    acc = [[1e-3, 1.1e-3, 0.9e-3]] * 2
    assert estimate_crossover(x, cpu, acc, 200, 3) == estimate_crossover(x, cpu, acc, 200, 3)


def test_n_star_counts_start_up_costs():
    cpu = {"cold_start_s": 0.0, "first_step_s": 0.0, "step_time_s": 2e-3}
    acc = {"cold_start_s": 0.5, "first_step_s": 0.5, "step_time_s": 1e-3}
    # T_acc(N) = 1 + 1e-3 N  <  T_cpu(N) = 2e-3 N  for N > 1000.
    assert n_star(cpu, acc) == 1000
    slower = {**acc, "step_time_s": 3e-3}
    assert n_star(cpu, slower) is None
    ahead = {"cold_start_s": 0.0, "first_step_s": 0.0, "step_time_s": 1e-3}
    assert n_star(cpu, ahead) == 0


def test_table_reports_crossover_speedup_and_n_star_at_the_seed():
    sizes = [32, 128, 512, 2048]
    cpu = s001_rows("cpu", sizes, [1e-5 * s for s in sizes])
    acc = s001_rows("cuda", sizes, [2.56e-3] * 4)  # crosses at hidden = 256
    table = crossover_table(pd.DataFrame(cpu + acc), n_boot=200)
    assert list(table.columns) == list(table_columns("crossover"))
    row = table[table["axis"] == "hidden"].iloc[0]
    assert row["outcome"] == "crossover"
    assert row["crossover_size"] == pytest.approx(256.0)
    assert row["ci_low"] <= 256 <= row["ci_high"]
    assert row["size_verdicts"] == "32:slower 128:slower 512:faster 2048:faster"
    assert row["speedup_at_seed"] == pytest.approx(1.28e-3 / 2.56e-3)
    assert row["n_star_steps"] is None or np.isnan(row["n_star_steps"])  # slower at the seed
    # Axes without a sweep have one common size only.
    assert set(table.loc[table["axis"] != "hidden", "outcome"]) == {"too_few_points"}


def test_table_says_indistinguishable_where_every_ratio_interval_contains_one():
    sizes = [32, 128, 512, 2048]
    cpu = s001_rows("cpu", sizes, [1e-5 * s for s in sizes])
    # The accelerator's medians sit 0.5% off the CPU's, well inside the 1% block spread.
    acc = s001_rows(
        "cuda", sizes, [1e-5 * s * f for s, f in zip(sizes, [1.005, 0.995] * 2, strict=True)]
    )
    table = crossover_table(pd.DataFrame(cpu + acc), n_boot=200)
    row = table[table["axis"] == "hidden"].iloc[0]
    assert row["outcome"] == "indistinguishable"
    assert row["size_verdicts"] == "32:tied 128:tied 512:tied 2048:tied"
    for column in ("crossover_size", "ci_low", "ci_high", "bootstrap_found"):
        assert pd.isna(row[column]), column


def test_table_says_why_there_is_no_accelerator_data():
    sizes = [128, 512]
    cpu = s001_rows("cpu", sizes, [1e-3, 4e-3])
    acc = s001_rows("cuda", sizes, [None, None], status="unavailable", message="no CUDA device")
    table = crossover_table(pd.DataFrame(cpu + acc))
    assert set(table["outcome"]) == {"no_accelerator_data"}
    assert set(table["reason"]) == {"no CUDA device"}


def test_two_noisy_runs_give_overlapping_intervals():
    # The same machine measured twice: 10% lognormal block noise, 5 blocks per point.
    x = [16, 64, 256, 1024]

    def run(seed):
        rng = np.random.default_rng(seed)
        cpu = [2e-6 * v * rng.lognormal(0, 0.1, size=5) for v in x]
        acc = [2e-4 * rng.lognormal(0, 0.1, size=5) for _ in x]
        e = estimate_crossover(x, cpu, acc, n_boot=400, seed=0)
        return e.ci_low, e.ci_high, e.bootstrap_found

    lo1, hi1, share1 = run(11)
    lo2, hi2, share2 = run(12)
    assert share1 > 0.9 and share2 > 0.9
    assert lo1 <= hi2 and lo2 <= hi1  # the intervals overlap
    assert lo1 < 100 < hi1 and lo2 < 100 < hi2  # and both cover the true crossover


def test_unsynced_rows_never_enter_the_crossover():
    sizes = [32, 128, 512, 2048]
    cpu = s001_rows("cpu", sizes, [1e-5 * s for s in sizes])
    acc = s001_rows("cuda", sizes, [2.56e-3] * 4)
    wrong = [
        {**r, "timing": "unsynced", "step_time_s": 1e-9}
        for r in s001_rows("cuda", sizes, [1e-9] * 4)
    ]
    rows = [{**r, "timing": "synced"} for r in cpu + acc] + wrong
    table = crossover_table(pd.DataFrame(rows), n_boot=100)
    row = table[table["axis"] == "hidden"].iloc[0]
    assert row["crossover_size"] == pytest.approx(256.0)


def _variant(rows, variant):
    return [{**r, "variant": variant} for r in rows]


def test_accelerator_only_remedy_is_compared_with_the_cpu_eager_program():
    # eager: the GPU costs 2.56 ms flat, the CPU 10 us x H -> crossover at H = 256.
    # cuda_graph: the GPU step drops to 0.64 ms -> crossover at H = 64; on the CPU the
    # variant is not_applicable, so the GPU is compared with the CPU's eager program.
    sizes = [32, 128, 512, 2048]
    cpu = s001_rows("cpu", sizes, [1e-5 * s for s in sizes])
    acc = s001_rows("cuda", sizes, [2.56e-3] * 4)
    graph = _variant(s001_rows("cuda", sizes, [6.4e-4] * 4), "cuda_graph")
    cpu_na = _variant(
        s001_rows("cpu", sizes, [None] * 4, status="not_applicable", message="needs CUDA"),
        "cuda_graph",
    )
    table = crossover_table(pd.DataFrame(cpu + acc + graph + cpu_na), n_boot=100)
    hidden = table[table["axis"] == "hidden"].set_index("variant")
    assert hidden.loc["cuda_graph", "cpu_variant"] == "eager"
    assert hidden.loc["eager", "cpu_variant"] == "eager"
    assert hidden.loc["cuda_graph", "crossover_size"] == pytest.approx(64.0)

    shift = remedy_shift(table)
    assert list(shift.columns) == list(SHIFT_COLUMNS)
    row = shift[(shift["axis"] == "hidden") & (shift["variant"] == "cuda_graph")].iloc[0]
    assert row["eager_crossover_size"] == pytest.approx(256.0)
    assert row["crossover_size"] == pytest.approx(64.0)
    assert row["crossover_shift"] == pytest.approx(0.25)
    # N* at the seed (H = 128): eager never catches up (GPU slower); cuda_graph does.
    assert pd.isna(row["eager_n_star_steps"])
    assert row["n_star_steps"] > 0


def test_remedy_that_also_runs_on_the_cpu_is_compared_like_with_like():
    sizes = [32, 128, 512, 2048]
    cpu = s001_rows("cpu", sizes, [1e-5 * s for s in sizes])
    acc = s001_rows("cuda", sizes, [2.56e-3] * 4)
    # The variant halves the CPU's step too: the GPU at 0.64 ms now meets 5 us x H at 128.
    cpu_v = _variant(s001_rows("cpu", sizes, [5e-6 * s for s in sizes]), "compile")
    acc_v = _variant(s001_rows("cuda", sizes, [6.4e-4] * 4), "compile")
    table = crossover_table(pd.DataFrame(cpu + acc + cpu_v + acc_v), n_boot=100)
    row = table[(table["axis"] == "hidden") & (table["variant"] == "compile")].iloc[0]
    assert row["cpu_variant"] == "compile"
    assert row["crossover_size"] == pytest.approx(128.0)
    shift = remedy_shift(table)
    assert shift.loc[shift["axis"] == "hidden", "crossover_shift"].iloc[0] == pytest.approx(0.5)


def test_remedy_shift_leaves_out_devices_without_data():
    sizes = [128, 512]
    cpu = s001_rows("cpu", sizes, [1e-3, 4e-3])
    acc = s001_rows("cuda", sizes, [None, None], status="unavailable", message="no CUDA device")
    table = crossover_table(pd.DataFrame(cpu + acc + _variant(acc, "cuda_graph")))
    assert remedy_shift(table).empty


def test_a_variant_that_does_not_exist_on_the_accelerator_gets_no_row():
    sizes = [128, 512]
    cpu = s001_rows("cpu", sizes, [1e-3, 4e-3])
    na = "xla is a TensorFlow/Keras program variant"
    xla = _variant(
        s001_rows("cpu", sizes, [None] * 2, status="not_applicable", message=na)
        + s001_rows("cuda", sizes, [None] * 2, status="not_applicable", message=na),
        "xla",
    )
    table = crossover_table(pd.DataFrame(cpu + s001_rows("cuda", sizes, [2e-3, 2e-3]) + xla))
    assert set(table["variant"]) == {"eager"}
