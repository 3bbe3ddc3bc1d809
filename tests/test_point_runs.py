"""Points measured in several separate processes (timing.repeats): merging the runs,
the two-level bootstrap and the prediction interval."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from crossover_study.analysis.crossover import estimate_crossover
from crossover_study.analysis.repeats import (
    merge_repeats,
    prediction_interval,
    resample_medians,
    row_runs,
)
from crossover_study.analysis.tables import collect_timings
from crossover_study.core.origin import table_columns
from crossover_study.study import points as study_points
from crossover_study.study import study_file
from crossover_study.study.config import validate_config
from crossover_study.study.spec import PointSpec

STUDY = {"study": "x", "cases": {"s001-mlp": {"axes": {"hidden": [128, 512]}}}}


def _run_row(repeat, blocks, status="ok", **extra):
    point = PointSpec(
        "s001-mlp", "torch", "cpu", "eager", {"batch": 64, "d_in": 1024, "hidden": 128}
    )
    row = {**point.as_row(), "repeat": repeat, "status": status}
    if status == "ok":
        row.update(
            step_time_s=float(np.median(blocks)),
            step_time_iqr_s=0.0,
            noisy=False,
            block_step_times_s=json.dumps(blocks),
            n_blocks=len(blocks),
            cold_start_s=1.0 + repeat,
            measured_s=2.0,
            sync_check="passed",
            global_batch=64,
        )
    return {**row, **extra}


def _frame(rows) -> pd.DataFrame:
    return pd.DataFrame(rows).reindex(columns=list(table_columns("timings")))


def test_runs_are_separate_jobs_after_the_first_runs_jobs_and_keep_its_keys():
    once = validate_config(STUDY)
    thrice = validate_config({**STUDY, "timing": {"repeats": 3}})
    assert "repeats" not in once["timing"]  # not filled in: hash and params unchanged
    assert study_points.measurement_hash(once) == study_points.measurement_hash(
        validate_config({**STUDY, "timing": {"repeats": 1}})
    )
    assert study_points.measurement_timing(thrice) == study_points.measurement_timing(once)
    first = study_points.batches(once, "s001-mlp", "torch", "cpu")
    runs = study_points.batches(thrice, "s001-mlp", "torch", "cpu")
    assert len(runs) == 3 * len(first) and runs[: len(first)] == first  # run 0 = the old jobs
    keys = [p.key() for b in runs for p in b]
    assert len(set(keys)) == len(keys) and keys[-1].endswith("|repeat=2")
    assert [study_points.batch_repeat(thrice, "s001-mlp", "torch", "cpu", i) for i in range(3)] == [
        0,
        1,
        2,
    ]


def test_a_run_waits_for_the_previous_run_on_every_device():
    config = validate_config(
        {
            **STUDY,
            "sweep": {"devices": ["cpu", "cuda"]},
            "devices": {"cpu": {"threads": 1}, "cuda": {"threads": 1, "gpu": 1}},
            "timing": {"repeats": 2},
        }
    )
    assert study_points.previous_round_jobs(config, "s001-mlp", "torch", "cuda", 0) == []
    waits = study_points.previous_round_jobs(config, "s001-mlp", "torch", "cuda", 1)
    assert waits == [("s001-mlp", "torch", "cpu", 0), ("s001-mlp", "torch", "cuda", 0)]


@pytest.mark.parametrize("repeats", [0, 1.5, "3"])
def test_bad_repeats_name_the_key(repeats):
    with pytest.raises(study_file.ConfigError, match=r"timing.repeats"):
        validate_config({**STUDY, "timing": {"repeats": repeats}})


def test_runs_of_a_point_merge_into_one_row():
    runs = _frame(
        [
            _run_row(0, [1.0, 1.1, 1.2], step_page_faults=0.0),
            _run_row(
                1,
                [2.0, 2.1, 2.2],
                sync_check="failed",
                sync_check_long_s=3.0,
                step_page_faults=900.0,
            ),
            _run_row(2, [1.5, 1.6, 1.7], step_page_faults=40.0),
        ]
    )
    merged = merge_repeats(runs, noise_threshold=0.1)
    assert len(merged) == 1
    row = merged.iloc[0]
    assert row["repeats"] == 3 and pd.isna(row["repeat"])
    assert json.loads(row["block_step_times_s"]) == [1.0, 1.1, 1.2, 2.0, 2.1, 2.2, 1.5, 1.6, 1.7]
    assert json.loads(row["blocks_per_run"]) == [3, 3, 3] and row["n_blocks"] == 9
    assert row["step_time_s"] == pytest.approx(1.6)  # the median of all blocks
    assert row["noisy"]  # the spread between runs counts
    assert row["cold_start_s"] == 2.0 and row["measured_s"] == 6.0  # median; sum
    assert row["step_page_faults"] == 40.0  # the median run's: each process faults its own
    assert row["sync_check"] == "failed" and row["sync_check_long_s"] == 3.0  # any run's
    assert row["samples_per_s"] == pytest.approx(64 / 1.6)
    assert row["step_time_pi_low_s"] < 1.1 and row["step_time_pi_high_s"] > 2.1
    assert row_runs(row) == [[1.0, 1.1, 1.2], [2.0, 2.1, 2.2], [1.5, 1.6, 1.7]]


def test_a_failed_run_is_named_and_the_others_kept():
    runs = _frame(
        [
            _run_row(0, [1.0, 1.1, 1.2]),
            _run_row(1, [], status="error", message="RuntimeError: boom", measured_s=0.5),
            _run_row(2, [1.2, 1.3, 1.4]),
        ]
    )
    row = merge_repeats(runs, noise_threshold=0.1).iloc[0]
    assert row["status"] == "ok" and row["repeats"] == 2
    assert (
        "2 of 3 runs ok" in row["message"] and "run 1: error: RuntimeError: boom" in row["message"]
    )


def test_a_point_measured_once_keeps_its_row_and_old_tables_stay_as_they_are(tmp_path):
    once = _run_row(0, [1.0, 1.1, 1.2])
    kept = merge_repeats(_frame([once]), noise_threshold=0.1).iloc[0]
    assert kept["repeats"] == 1 and kept["repeat"] == 0 and pd.isna(kept["step_time_pi_low_s"])
    assert kept["block_step_times_s"] == once["block_step_times_s"]
    # A table written before the repeat column: collected byte for byte as before.
    old_columns = [c for c in table_columns("timings") if c not in ("repeat", "repeats")]
    part = tmp_path / "batch-0.csv"
    pd.DataFrame([once], columns=old_columns).to_csv(part, index=False)
    collect_timings([part], tmp_path / "timings.csv", columns=old_columns)
    assert (tmp_path / "timings.csv").read_bytes() == part.read_bytes()


def test_one_run_bootstrap_draws_as_the_one_level_bootstrap():
    blocks = [1.0, 1.3, 0.9, 1.1, 1.2]
    ours = resample_medians([blocks], 200, np.random.default_rng(5))
    b = np.asarray(blocks)
    rng = np.random.default_rng(5)
    assert np.array_equal(ours, np.median(b[rng.integers(0, 5, size=(200, 5))], axis=1))


def test_the_two_level_bootstrap_draws_whole_runs_then_blocks():
    # Constant runs: a replicate's median is 1 when two or three of its three drawn runs
    # are the first: 3 (1/3)^2 (2/3) + (1/3)^3 = 7/27. Pooling the 9 blocks instead would
    # give P(5 or more of 9 draws are 1) = 0.145.
    runs = [[1.0] * 3, [2.0] * 3, [3.0] * 3]
    medians = resample_medians(runs, 4000, np.random.default_rng(0))
    assert set(np.unique(medians)) <= {1.0, 2.0, 3.0}
    assert np.mean(medians == 1.0) == pytest.approx(7 / 27, abs=0.025)
    # Runs of different lengths are resampled within their own blocks.
    uneven = resample_medians([[1.0, 1.0], [2.0, 2.0, 2.0, 2.0]], 500, np.random.default_rng(1))
    assert set(np.unique(uneven)) <= {1.0, 1.5, 2.0}


def test_prediction_interval_is_the_student_t_interval_of_log_run_medians():
    runs = [[1.0], [1.1], [1.2]]
    lo, hi = prediction_interval(runs)
    logs = np.log([1.0, 1.1, 1.2])
    half = 4.302652729911275 * logs.std(ddof=1) * math.sqrt(2 / 3)  # t(0.975; 2)
    assert (lo, hi) == pytest.approx((math.exp(logs.mean() - half), math.exp(logs.mean() + half)))
    assert prediction_interval([[1.0, 2.0, 3.0]]) is None  # one run: no run-to-run spread


def test_prediction_interval_covers_a_repeat_studys_median_at_its_level():
    # Simulated studies: 3 runs of 5 blocks, a run effect of 3% and 2% block noise.
    rng = np.random.default_rng(0)

    def study():
        return [list(np.exp(rng.normal(0, 0.03) + rng.normal(0, 0.02, 5))) for _ in range(3)]

    hits = 0
    for _ in range(400):
        lo, hi = prediction_interval(study())
        hits += lo <= np.median(np.concatenate(study())) <= hi
    assert hits / 400 >= 0.9


def test_crossover_bootstrap_takes_runs():
    sizes = [1, 10, 100]
    cpu = [[[1.0, 1.0], [1.0, 1.0]], [[10.0, 10.0], [10.0, 10.0]], [[100.0] * 2, [100.0] * 2]]
    acc = [[[5.0, 5.0], [5.0, 5.0]], [[10.0, 10.0], [10.0, 10.0]], [[5.0] * 2, [5.0] * 2]]
    estimate = estimate_crossover(sizes, cpu, acc, n_boot=200)
    assert estimate.outcome == "crossover" and 1 < estimate.size < 100
    # Runs that disagree widely make the middle size's verdict uncertain, not faster.
    wide = [[[1.0], [30.0]], [[10.0], [10.0]], [[100.0], [100.0]]]
    assert estimate_crossover([1, 10, 100], wide, acc, n_boot=200).verdicts[0] == "tied"
