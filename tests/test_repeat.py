"""Comparing two runs of one study (benchmarks/repeat_study.py's logic)."""

import json

import numpy as np
import pandas as pd
import pytest

from crossover_study.analysis.compare_runs import compare_runs


def _timings(times: dict[int, list[float]], status="ok") -> pd.DataFrame:
    rows = []
    for hidden, blocks in times.items():
        rows.append(
            {
                "case": "s001-mlp",
                "framework": "torch",
                "device": "cpu",
                "variant": "eager",
                "timing": "synced",
                "batch": 64,
                "d_in": 1024,
                "hidden": hidden,
                "status": status,
                "step_time_s": float(np.median(blocks)),
                "block_step_times_s": json.dumps(blocks),
            }
        )
    return pd.DataFrame(rows)


def test_points_are_matched_and_iqr_overlap_is_judged():
    a = _timings({128: [1.0, 1.1, 1.2, 1.3], 512: [4.0, 4.1, 4.2, 4.3]})
    # 128: same spread shifted by 5%: overlaps. 512: 50% slower: disjoint.
    b = _timings({128: [1.05, 1.15, 1.25, 1.35], 512: [6.0, 6.1, 6.2, 6.3], 2048: [9.0] * 3})
    summary = compare_runs(a, b)
    points = summary.points.set_index("hidden")
    assert list(points.index) == [128, 512]  # 2048 is in run b only
    assert points.loc[128, "ratio"] == pytest.approx(1.2 / 1.15, rel=1e-2)
    assert points.loc[128, "iqr_overlap"] and not points.loc[512, "iqr_overlap"]
    assert "width" not in points.columns  # s001 has no width axis: only its own columns
    assert "within 10% at 1 of 2; IQRs overlap at 1 of 2" in summary.summary()
    assert any("DISJOINT" in line for line in summary.lines())


def test_only_rows_ok_in_both_runs_count():
    a = _timings({128: [1.0, 1.0, 1.0]})
    b = _timings({128: [1.0, 1.0, 1.0]}, status="error")
    assert compare_runs(a, b).summary().startswith("repeat: no point measured ok in both runs")


def test_crossover_intervals_are_compared():
    base = {"case": "s001-mlp", "framework": "torch", "variant": "eager", "accelerator": "cuda"}
    a = pd.DataFrame(
        [
            {**base, "axis": "hidden", "outcome": "crossover", "ci_low": 200, "ci_high": 300},
            {**base, "axis": "d_in", "outcome": "crossover", "ci_low": 10, "ci_high": 20},
        ]
    )
    b = pd.DataFrame(
        [
            {**base, "axis": "hidden", "outcome": "crossover", "ci_low": 280, "ci_high": 350},
            {**base, "axis": "d_in", "outcome": "crossover", "ci_low": 25, "ci_high": 30},
        ]
    )
    t = _timings({128: [1.0, 1.0, 1.0]})
    cross = compare_runs(t, t, a, b).crossovers.set_index("axis")
    assert cross.loc["hidden", "ci_overlap"] and not cross.loc["d_in", "ci_overlap"]
    assert "crossover intervals overlap at 1 of 2" in compare_runs(t, t, a, b).summary()


def test_replicated_points_are_matched_on_replicas_and_scaling():
    one = _timings({128: [1.0, 1.0, 1.0]}).assign(variant="ddp")
    rows = pd.concat(
        [
            one.assign(replicas=1, scaling=None),
            one.assign(replicas=2, scaling="strong", step_time_s=2.0),
            one.assign(replicas=2, scaling="weak", step_time_s=3.0),
        ]
    )
    points = compare_runs(rows, rows).points
    assert len(points) == 3 and (points["ratio"] == 1.0).all()


def test_prediction_interval_coverage_is_counted_where_run_a_has_one():
    a = _timings({128: [1.0, 1.1, 1.2], 512: [4.0, 4.1, 4.2], 2048: [8.0, 8.1, 8.2]})
    b = _timings({128: [1.05, 1.15, 1.25], 512: [6.0, 6.1, 6.2], 2048: [8.0, 8.1, 8.2]})
    a["step_time_pi_low_s"] = [1.0, 3.9, None]  # 2048 measured once: no interval
    a["step_time_pi_high_s"] = [1.3, 4.3, None]
    summary = compare_runs(a, b)
    covers = summary.points.set_index("hidden")["pi_covers"]
    assert covers[128] is True and covers[512] is False and covers[2048] is None
    assert "a's prediction interval covers b's median at 1 of 2 (50.0%)" in summary.summary()
    # Tables without the columns (measured once) say so instead of a share.
    assert "no prediction interval in run a" in compare_runs(b, b).summary()
