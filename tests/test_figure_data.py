"""The figures' data (crossover_study.figures.data, figure_grid, figure_scaling): pure
pandas frames, tested on small synthetic timings tables without matplotlib. The figure
files module (save, sources) is importable without a plotting library too, so that the
manifest and the audit read figures without one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crossover_study.figures import data as figure_data
from crossover_study.figures import grid as figure_grid
from crossover_study.figures import scaling as figure_scaling
from crossover_study.figures.style import fmt_ratio, fmt_size

REPO = Path(__file__).resolve().parents[1]
MLP = {"batch": 64, "d_in": 1024, "hidden": 128}  # s001-mlp's seed sizes
HJB = {"batch": 100, "width": 8}  # s000-hjb's seed sizes


def _row(case, framework, device, variant, sizes, t, **extra) -> dict:
    """One ok row of a timings table: ``t`` seconds per step, IQR 10% of it."""
    return {
        "case": case,
        "framework": framework,
        "device": device,
        "variant": variant,
        **sizes,
        "status": "ok",
        "step_time_s": t,
        "step_time_iqr_s": t / 10,
        "noisy": False,
        "cold_start_s": 0.1 if device == "cpu" else 1.0,
        "first_step_s": 0.01,
        **extra,
    }


def _mlp(device="cpu", variant="eager", framework="torch", **sizes_and_extra) -> dict:
    sizes = {k: sizes_and_extra.pop(k) for k in list(sizes_and_extra) if k in MLP}
    t = sizes_and_extra.pop("t")
    return _row("s001-mlp", framework, device, variant, {**MLP, **sizes}, t, **sizes_and_extra)


@pytest.fixture
def timings() -> pd.DataFrame:
    """s001-mlp along hidden (the other axes at the seed's size) on cpu and cuda, one
    size measured twice on cpu, a point off the seed (d_in = 512) that no hidden sweep
    draws, a noisy and a failed-check point, an unsynced cuda row, an error row."""
    rows = [
        _mlp(hidden=32, t=1e-3),
        _mlp(hidden=128, t=2e-3),
        _mlp(hidden=128, t=4e-3),  # measured twice: the median is 3e-3
        _mlp(hidden=512, t=8e-3, noisy=True, sync_check="failed"),
        _mlp(hidden=512, d_in=512, t=1.0),  # off the seed along d_in
        _mlp("cuda", hidden=32, t=5e-3),
        _mlp("cuda", hidden=512, t=5e-3),
        _mlp("cuda", hidden=512, t=1e-4, timing="unsynced"),
        {**_mlp(hidden=2048, t=np.nan), "status": "error"},
    ]
    return pd.DataFrame(rows)


def test_data_and_files_modules_import_without_a_plotting_library():
    code = (
        "import sys\n"
        "import crossover_study.figures.data, crossover_study.figures.grid\n"
        "import crossover_study.figures.scaling, crossover_study.figures.style\n"
        "from crossover_study.figures.files import FIGURE_FORMATS, figure_sources\n"
        "from crossover_study.figures.style import fmt_size\n"
        "fmt_size(1000)\n"
        "heavy = sorted(m for m in ('matplotlib', 'seaborn') if m in sys.modules)\n"
        "print(heavy)\n"
        "sys.exit(1 if heavy else 0)\n"
    )
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": str(Path(sys.executable).parent)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr


def test_step_time_frame_one_row_per_curve_and_size(timings):
    frame = figure_data.step_time_frame(figure_data.programs(timings), "s001-mlp", "hidden")
    assert list(frame.columns) == figure_data.CURVE_COLUMNS
    # Two variants (eager and its unsynced relabelling): the variant is in the label.
    unsynced = "eager" + figure_data.UNSYNCED_LABEL
    assert list(frame["curve"]) == [
        "cpu · torch · eager",
        "cpu · torch · eager",
        "cpu · torch · eager",
        "cuda · torch · eager",
        "cuda · torch · eager",
        f"cuda · torch · {unsynced}",
    ]
    cpu = frame[frame["device"] == "cpu"]
    assert list(cpu["size"]) == [32, 128, 512]  # d_in = 512 and the error row left out
    np.testing.assert_allclose(cpu["step_time_s"], [1e-3, 3e-3, 8e-3])
    np.testing.assert_allclose(cpu["iqr_s"], [1e-4, 3e-4, 8e-4])
    assert list(cpu["noisy"]) == [False, False, True]
    assert list(cpu["check_failed"]) == [False, False, True]


def test_step_time_frame_one_variant_and_nothing_to_draw(timings):
    naive = figure_data.programs(timings, include_unsynced=False)
    frame = figure_data.step_time_frame(naive, "s001-mlp", "hidden")
    assert set(frame["curve"]) == {"cpu · torch", "cuda · torch"}
    empty = figure_data.step_time_frame(naive.assign(status="error"), "s001-mlp", "batch")
    assert empty.empty and list(empty.columns) == figure_data.CURVE_COLUMNS
    with pytest.raises(KeyError):
        figure_data.step_time_frame(naive, "s001-mlp", "width")


def test_sweep_title_names_the_axes_held_at_the_seed():
    assert figure_data.sweep_title("s001-mlp", "hidden") == (
        "s001-mlp: step time vs hidden (batch=64, d_in=1024)"
    )


def test_crossover_marks_keep_crossovers_of_the_case_and_axis():
    crossover = pd.DataFrame(
        [
            {
                "case": "s001-mlp",
                "axis": "hidden",
                "outcome": "crossover",
                "crossover_size": 200.0,
                "ci_low": 150.0,
                "ci_high": 260.0,
                "accelerator": "cuda",
                "framework": "torch",
                "variant": "eager",
            },
            {
                "case": "s001-mlp",
                "axis": "hidden",
                "outcome": "no_crossover",
                "crossover_size": None,
                "accelerator": "cuda",
                "framework": "tensorflow",
                "variant": "eager",
            },
            {
                "case": "s001-mlp",
                "axis": "batch",
                "outcome": "crossover",
                "crossover_size": 9.0,
                "accelerator": "cuda",
                "framework": "torch",
                "variant": "eager",
            },
        ]
    )
    marks = figure_data.crossover_marks(crossover, "s001-mlp", "hidden")
    assert marks.to_dict("records") == [
        {
            "accelerator": "cuda",
            "framework": "torch",
            "variant": "eager",
            "size": 200.0,
            "ci_low": 150.0,
            "ci_high": 260.0,
        }
    ]
    assert figure_data.crossover_marks(None, "s001-mlp", "hidden").empty
    # A table without a crossover may lack the size columns altogether (CSV of empties).
    none = crossover.iloc[1:2].drop(columns=["crossover_size", "ci_low", "ci_high"])
    assert figure_data.crossover_marks(none, "s001-mlp", "hidden").empty


def test_cross_machine_frame_keeps_machines_apart(timings):
    other = timings.assign(step_time_s=timings["step_time_s"] / 2, device_name="Fixture CPU")
    frame = figure_data.cross_machine_frame(
        [("here", timings), ("there", other), ("nothing", timings.iloc[:0])], "s001-mlp", "hidden"
    )
    assert list(frame.columns) == ["machine", *figure_data.CURVE_COLUMNS]
    assert list(dict.fromkeys(frame["machine"])) == ["here", "there"]
    assert list(dict.fromkeys(frame["curve"])) == [
        "here: cpu (device name not recorded)",
        "here: cuda (device name not recorded)",
        "there: cpu (Fixture CPU)",
        "there: cuda (Fixture CPU)",
    ]
    # Only the naive program: the unsynced cuda row is not drawn.
    here = frame[(frame["machine"] == "here") & (frame["device"] == "cuda")]
    np.testing.assert_allclose(here["step_time_s"], [5e-3, 5e-3])
    there = frame[(frame["machine"] == "there") & (frame["device"] == "cpu")]
    np.testing.assert_allclose(there["step_time_s"], [0.5e-3, 1.5e-3, 4e-3])
    tf = pd.concat([timings, timings.assign(framework="tensorflow")], ignore_index=True)
    labels = set(figure_data.cross_machine_frame([("m", tf)], "s001-mlp", "hidden")["curve"])
    assert "m: cpu (device name not recorded) · tensorflow" in labels


def test_swept_axes_of_the_naive_program(timings):
    assert figure_data.swept_axes([timings], "s001-mlp") == ["hidden"]
    assert figure_data.most_swept_axis([timings], "s001-mlp") == "hidden"
    assert figure_data.most_swept_axis([], "s001-mlp") == "batch"


def test_time_to_train_frame_follows_the_formula(timings):
    frame = figure_data.time_to_train_frame(timings, "s001-mlp", max_steps=1e4, n_points=5)
    assert list(frame.columns) == [
        "device",
        "framework",
        "variant",
        "curve",
        "steps",
        "time_s",
        "start_s",
        "step_s",
    ]
    # At the seed's size: cpu (2 and 4 ms: median 3 ms), cuda has no row there.
    assert list(frame["curve"]) == ["cpu · torch"] * 5
    np.testing.assert_allclose(frame["steps"], [1, 10, 100, 1000, 1e4])
    np.testing.assert_allclose(frame["time_s"], 0.1 + 0.01 + frame["steps"] * 3e-3)


def _grid_rows(device: str, t: float, variant: str = "eager") -> list[dict]:
    return [
        _row("s000-hjb", "torch", device, variant, {"batch": b, "width": w}, t * b / 100)
        for b in (10, 100, 1000)
        for w in (8, 64)
    ]


def test_speedup_grid_cells_and_speedup():
    timings = pd.DataFrame(_grid_rows("cpu", 1e-3) + _grid_rows("cuda", 1e-3 / 4))
    assert figure_grid.grid_axes(timings, "s000-hjb") == ("batch", "width")
    grid = figure_grid.speedup_grid(timings, "s000-hjb", "batch", "width")
    assert grid.missing is None and grid.program.startswith("s000-hjb, torch/eager")
    assert (grid.xs, grid.ys) == ([10, 100, 1000], [8, 64])
    assert list(grid.cells.columns) == ["x", "y", "cpu_s", "accelerator_s", "speedup"]
    assert list(zip(grid.cells["y"], grid.cells["x"], strict=True)) == [
        (8, 10),
        (8, 100),
        (8, 1000),
        (64, 10),
        (64, 100),
        (64, 1000),
    ]
    np.testing.assert_allclose(grid.cells["speedup"], 4.0)


def test_speedup_grid_without_accelerator_rows_keeps_the_cpu_times():
    grid = figure_grid.speedup_grid(
        pd.DataFrame(_grid_rows("cpu", 1e-3)), "s000-hjb", "batch", "width"
    )
    assert grid.missing == "no cuda rows measured"
    assert grid.cells["speedup"].isna().all() and grid.cells["accelerator_s"].isna().all()
    np.testing.assert_allclose(grid.cells["cpu_s"], [1e-4, 1e-3, 1e-2] * 2)


def test_variant_frame_naive_program_first(timings):
    extra = pd.DataFrame(
        [_mlp(variant="copy_data_each_step", t=5e-3), _mlp("cuda", variant="cuda_graph", t=1e-3)]
    )
    frame = figure_data.variant_frame(pd.concat([timings, extra], ignore_index=True), "s001-mlp")
    assert list(frame.columns) == [
        "program",
        "framework",
        "variant",
        "device",
        "step_time_s",
        "iqr_s",
        "noisy",
        "check_failed",
        "retraced",
        "contended",
        "not_same_program",
        "speedup",
        "speedup_low",
        "speedup_high",
    ]
    assert frame["speedup"].isna().all()  # no row was measured side by side
    assert list(zip(frame["program"], frame["device"], strict=True)) == [
        ("torch · eager", "cpu"),
        ("torch · copy_data_each_step", "cpu"),
        ("torch · cuda_graph", "cuda"),
    ]
    np.testing.assert_allclose(frame["step_time_s"], [3e-3, 5e-3, 1e-3])
    assert figure_data.variant_frame(timings.assign(status="error"), "s001-mlp").empty


def test_the_variant_comparison_writes_a_paired_speedup_beside_its_point(timings):
    import matplotlib

    matplotlib.use("Agg")
    from crossover_study.figures.draw import variant_comparison

    paired = _mlp(variant="copy_data_each_step", t=3.1e-3)
    paired.update(interleaved=True, speedup=0.97, speedup_low=0.9, speedup_high=1.05)
    frame = pd.concat([timings, pd.DataFrame([paired])], ignore_index=True)
    assert figure_data.variant_frame(frame, "s001-mlp")["speedup"].tolist()[1] == 0.97
    ax = variant_comparison(frame, "s001-mlp")
    texts = [t.get_text() for t in ax.texts if t.get_gid() == "paired-speedup"]
    assert texts == ["0.97× (0.90–1.05)"]


def _replicated() -> pd.DataFrame:
    base = {"timing": "synced", "batch": 64, "global_batch": 64}
    rows = [
        _mlp(t=1e-3, replicas=1, **base),
        _mlp(variant="ddp", t=1e-3, replicas=1, **base),
        _mlp(
            variant="ddp",
            t=2e-3,
            replicas=2,
            scaling="strong",
            samples_per_s=32000.0,
            allreduce_share=0.25,
            **base,
        ),
        _mlp(
            variant="ddp",
            t=1e-3,
            replicas=4,
            scaling="strong",
            samples_per_s=40000.0,
            allreduce_share=0.5,
            **base,
        ),
    ]
    return pd.DataFrame(rows)


def test_scaling_lines_start_at_the_baseline():
    table = figure_scaling.scaling_table(_replicated(), "s001-mlp")
    lines = figure_scaling.scaling_lines(table)
    assert list(lines.columns) == figure_scaling.LINE_COLUMNS
    assert set(lines["line"]) == {"cpu torch strong"}
    assert list(lines["replicas"]) == [1, 2, 4]
    assert list(lines["baseline"]) == [True, False, False]
    np.testing.assert_allclose(lines["samples_per_s"], [64000, 32000, 40000])
    np.testing.assert_allclose(lines["efficiency"], [1.0, 0.25, 0.15625])
    assert not lines["hollow"].any()
    ideal = figure_scaling.ideal_scaling(table)
    assert ideal.to_dict("records") == [
        {"baseline": 0, "replicas": 1, "samples_per_s": 64000.0},
        {"baseline": 0, "replicas": 4, "samples_per_s": 256000.0},
    ]
    none = figure_scaling.scaling_lines(figure_scaling.scaling_table(_replicated().iloc[:2]))
    assert none.empty and list(none.columns) == figure_scaling.LINE_COLUMNS


def test_number_formats():
    assert [fmt_size(v) for v in (8, 13.48, 168.48, 10000)] == ["8", "13.5", "168", "10,000"]
    assert [fmt_ratio(r) for r in (0.59, 4.7, 38.2, 3800)] == [
        "0.59\u00d7",
        "4.7\u00d7",
        "38\u00d7",
        "3,800\u00d7",
    ]
