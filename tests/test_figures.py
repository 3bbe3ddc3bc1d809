"""Tests of the report's figures, answer sentences and notebook on a synthetic table.

The fixture is a small seeded tidy table with known step times: the CPU's step time
grows linearly with every size axis, the accelerator's is flat, so crossovers are
known in closed form (e.g. s000-hjb torch along batch at 100 * 3.1 / 1.84 ≈ 168).
Block times are the model value times fixed factors, so the median is exact.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import nbformat
import numpy as np
import pandas as pd
import pytest
from conftest import (
    COMMITTED_CPU_RUN,
    SYNTHETIC_CPU_NAME,
    SYNTHETIC_GPU_NAME,
    SYNTHETIC_GPU_STEP,
    seal_reference,
    synthetic_reference_gpu,
)

from crossover_study.answers.sentences import answer_sentence
from crossover_study.figures import data as figure_data
from crossover_study.figures import draw as figure_draw
from crossover_study.figures import files as figure_files
from crossover_study.figures import grid as figure_grid
from crossover_study.figures import report as figures
from crossover_study.figures import style as figure_style
from crossover_study.study.cases import SEEDS

SEED_SIZES = {name: dict(case.seed) for name, case in SEEDS.items()}
SIZE_COLUMNS = tuple(dict.fromkeys(a for case in SEEDS.values() for a in case.axes))


REPO = Path(__file__).resolve().parents[1]
TIMES, DASH = "\u00d7", "\u2013"  # multiplication sign, en dash
NOTEBOOK = REPO / "workflow" / "notebooks" / "report.py.ipynb"

# Model of the fixture: CPU seconds per step at the seed's size (per framework),
# accelerator seconds per step (flat), cold start and first step per device.
CPU_AT_SEED = {
    ("s000-hjb", "torch"): 1.84e-3,
    ("s000-hjb", "tensorflow"): 2.5e-3,
    ("s001-mlp", "torch"): 522e-6,
}
CUDA_FLAT = {
    ("s000-hjb", "torch"): 3.1e-3,
    ("s000-hjb", "tensorflow"): 1.0e-3,
    ("s001-mlp", "torch"): 952e-6,
}
COLD = {"cpu": 0.05, "cuda": 1.2}
FIRST = {"cpu": 0.2, "cuda": 0.9}
STEADY_FACTORS = (0.97, 0.99, 1.0, 1.01, 1.03)  # IQR/median = 0.02
NOISY_FACTORS = (0.7, 0.9, 1.0, 1.1, 1.4)  # IQR/median = 0.2 -> noisy
NOISY_POINT = ("s000-hjb", "torch", "cpu", {"batch": 10000, "width": 8})
UNAVAILABLE_MESSAGE = "torch.cuda.is_available() is False"

SWEEPS = {
    # s000-hjb: a full grid over batch x width (it contains the one-axis sweeps).
    "s000-hjb": [
        dict(zip(("batch", "width"), p, strict=True))
        for p in itertools.product((10, 100, 1000, 10000), (8, 64, 512))
    ],
    # s001-mlp: one axis at a time, the others at the seed's size; no grid.
    "s001-mlp": [
        {**SEED_SIZES["s001-mlp"], axis: v}
        for axis, values in {
            "batch": (16, 64, 256, 1024),
            "d_in": (256, 512, 1024),
            "hidden": (32, 128, 512, 2048),
        }.items()
        for v in values
    ],
}


def _cpu_step(case: str, framework: str, sizes: dict) -> float:
    t = CPU_AT_SEED[(case, framework)]
    for axis, seed in SEED_SIZES[case].items():
        t *= sizes[axis] / seed
    return t


def make_timings(cuda_status: str = "ok", seed: int = 0) -> pd.DataFrame:
    """Tidy timings of s000-hjb (torch + tensorflow) and s001-mlp (torch), cpu + cuda.

    ``cuda_status="unavailable"`` gives the cuda rows as a CPU-only machine writes
    them: status unavailable, a message, no timings.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for case, points in SWEEPS.items():
        frameworks = sorted({f for c, f in CPU_AT_SEED if c == case})
        for framework, device, sizes in itertools.product(frameworks, ("cpu", "cuda"), points):
            row = {
                "case": case,
                "framework": framework,
                "device": device,
                "variant": "eager",
                **{c: sizes.get(c, np.nan) for c in SIZE_COLUMNS},
                "host": "fixture-host",
                "cpu_model": "Fixture Xeon 16-core",
                "device_name": "Fixture Xeon 16-core" if device == "cpu" else "Fixture GPU",
                "framework_version": "2.11.0" if framework == "torch" else "2.20.0",
                "python_version": "3.12.3",
                "threads": 4,
                "interop_threads": 1,
                "run_id": "fixture",
            }
            if device == "cuda" and cuda_status != "ok":
                row.update(status=cuda_status, message=UNAVAILABLE_MESSAGE, device_name=None)
                rows.append(row)
                continue
            model = (
                _cpu_step(case, framework, sizes)
                if device == "cpu"
                else CUDA_FLAT[(case, framework)]
            )
            noisy = (case, framework, device, sizes) == NOISY_POINT
            factors = rng.permutation(NOISY_FACTORS if noisy else STEADY_FACTORS)
            blocks = [model * f for f in factors]
            q1, med, q3 = np.percentile(blocks, [25, 50, 75])
            row.update(
                status="ok",
                message=None,
                step_time_s=med,
                step_time_iqr_s=q3 - q1,
                noisy=bool((q3 - q1) / med > 0.1),
                block_step_times_s=json.dumps(blocks),
                steps_per_block=100,
                n_blocks=len(blocks),
                warmup_steps=10,
                steps_per_call=1,
                loss_read_every=1,
                cold_start_s=COLD[device],
                first_step_s=FIRST[device],
                import_s=1.5,
                measured_s=0.5,
                final_loss=0.1,
                cuda_version="13.0" if device == "cuda" else None,
            )
            rows.append(row)
    return pd.DataFrame(rows)


def with_failed_checks(timings: pd.DataFrame) -> pd.DataFrame:
    """``timings`` with the block-length check's columns: passed everywhere but at the
    first s001-mlp row at the seed's sizes (each axis's sweep has one), which failed on
    cpu (long block 30% slower, the host loaded) and on cuda (long block 50% faster)."""
    timings = timings.assign(
        sync_check="passed",
        sync_check_long_s=timings["step_time_s"],
        host_load_start=1.0,
        host_load_end=1.0,
        host_cpus_others=0.0,
    )
    seed = (timings["case"] == "s001-mlp") & (timings["status"] == "ok")
    for axis, value in SEED_SIZES["s001-mlp"].items():
        seed &= timings[axis] == value
    for device, ratio in (("cpu", 1.3), ("cuda", 0.5)):
        at = timings.index[seed & (timings["device"] == device)][0]
        timings.loc[at, "sync_check"] = "failed"
        timings.loc[at, "sync_check_long_s"] = timings.loc[at, "step_time_s"] * ratio
        if device == "cpu":
            timings.loc[at, ["host_load_start", "host_load_end", "host_cpus_others"]] = [
                1.5,
                3.2,
                1.1,
            ]
    return timings


def make_crossover(cuda_status: str = "ok") -> pd.DataFrame:
    """The crossover table matching ``make_timings`` (values in closed form)."""
    base = {"accelerator": "cuda", "variant": "eager", "bootstrap_found": 1.0}
    if cuda_status != "ok":
        return pd.DataFrame(
            [
                {
                    **base,
                    "case": case,
                    "framework": framework,
                    "axis": axis,
                    "n_sizes": 0,
                    "outcome": "no_accelerator_data",
                    "seed_size": SEED_SIZES[case][axis],
                    "reason": UNAVAILABLE_MESSAGE,
                }
                for case, framework in CPU_AT_SEED
                for axis in SEED_SIZES[case]
            ]
        )
    rows = [
        (
            "s000-hjb",
            "torch",
            "batch",
            "crossover",
            168.48,
            140.2,
            201.7,
            1.84 / 3.1,
            None,
        ),
        (
            "s000-hjb",
            "torch",
            "width",
            "crossover",
            13.48,
            11.9,
            15.6,
            1.84 / 3.1,
            None,
        ),
        ("s000-hjb", "tensorflow", "batch", "crossover", 40.0, 31.0, 52.0, 2.5, 1233.0),
        (
            "s000-hjb",
            "tensorflow",
            "width",
            "accelerator_faster_throughout",
            None,
            None,
            None,
            2.5,
            1233.0,
        ),
        (
            "s001-mlp",
            "torch",
            "batch",
            "crossover",
            116.7,
            100.3,
            130.9,
            522 / 952,
            None,
        ),
        (
            "s001-mlp",
            "torch",
            "d_in",
            "no_crossover",
            None,
            None,
            None,
            522 / 952,
            None,
        ),
        (
            "s001-mlp",
            "torch",
            "hidden",
            "crossover",
            233.4,
            210.0,
            260.0,
            522 / 952,
            None,
        ),
    ]
    keys = (
        "case",
        "framework",
        "axis",
        "outcome",
        "crossover_size",
        "ci_low",
        "ci_high",
        "speedup_at_seed",
        "n_star_steps",
    )
    out = pd.DataFrame([{**base, **dict(zip(keys, r, strict=True))} for r in rows])
    out["seed_size"] = [SEED_SIZES[c][a] for c, a in zip(out["case"], out["axis"], strict=True)]
    out["n_sizes"] = 4
    return out


def _roundtrip(df: pd.DataFrame, tmp_path: Path, name: str) -> pd.DataFrame:
    """Write and read back as CSV, so the tests see what the report reads."""
    path = tmp_path / name
    df.to_csv(path, index=False)
    return pd.read_csv(path)


@pytest.fixture
def timings(tmp_path):
    return _roundtrip(make_timings(), tmp_path, "timings.csv")


@pytest.fixture
def crossover(tmp_path):
    return _roundtrip(make_crossover(), tmp_path, "crossover.csv")


@pytest.fixture
def timings_unavailable(tmp_path):
    return _roundtrip(make_timings("unavailable"), tmp_path, "timings-unavailable.csv")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _lines(ax, gid):
    return [line for line in ax.get_lines() if line.get_gid() == gid]


# --------------------------------------------------------------------- step time
def test_step_time_vs_size_draws_groups_crossover_and_seed(timings, crossover):
    ax = figures.step_time_vs_size(timings, "s000-hjb", "batch", crossover=crossover)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    data = _lines(ax, "step-time")
    # cpu/cuda x torch/tensorflow, each with the 4 batch sizes at width = 8.
    assert len(data) == 4
    assert all(list(line.get_xdata()) == [10, 100, 1000, 10000] for line in data)
    labels = {line.get_label() for line in data}
    assert labels == {
        "cpu · torch",
        "cpu · tensorflow",
        "cuda · torch",
        "cuda · tensorflow",
    }
    cpu_torch = next(line for line in data if line.get_label() == "cpu · torch")
    np.testing.assert_allclose(cpu_torch.get_ydata()[1], 1.84e-3)

    (seed_line,) = _lines(ax, "seed-size")
    assert seed_line.get_xdata()[0] == 100
    assert seed_line.get_linestyle() == ":"

    cross = {line.get_label(): line.get_xdata()[0] for line in _lines(ax, "crossover")}
    assert len(cross) == 2  # torch and tensorflow both cross along batch
    assert cross["crossover cuda torch: batch ≈ 168"] == pytest.approx(168.48)
    assert cross["crossover cuda tensorflow: batch ≈ 40"] == pytest.approx(40.0)
    bands = [p for p in ax.patches if p.get_gid() == "crossover-ci"]
    assert len(bands) == 2
    xs = sorted((round(b.get_x(), 1), round(b.get_x() + b.get_width(), 1)) for b in bands)
    assert xs == [(31.0, 52.0), (140.2, 201.7)]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert f"95% CI 140{DASH}202" in legend and "seed size (batch=100)" in legend


def test_step_time_vs_size_fades_noisy_points(timings):
    ax = figures.step_time_vs_size(timings, "s000-hjb", "batch")
    noisy = [c for c in ax.collections if c.get_gid() == "noisy"]
    assert len(noisy) == 1
    assert noisy[0].get_alpha() == figure_style.NOISY_ALPHA
    np.testing.assert_allclose(noisy[0].get_offsets(), [[10000, 1.84e-3 * 100]])
    assert not _lines(ax, "crossover")  # no crossover table given


def test_step_time_vs_size_holds_other_axes_at_seed(timings, crossover):
    ax = figures.step_time_vs_size(timings, "s001-mlp", "d_in", crossover=crossover)
    data = _lines(ax, "step-time")
    assert len(data) == 2  # torch only, cpu + cuda
    assert all(list(line.get_xdata()) == [256, 512, 1024] for line in data)
    assert not _lines(ax, "crossover")  # outcome no_crossover: nothing drawn
    assert "hidden=128" in ax.get_title()


def test_step_time_vs_size_cpu_only(timings_unavailable):
    ax = figures.step_time_vs_size(timings_unavailable, "s001-mlp", "hidden")
    assert [line.get_label() for line in _lines(ax, "step-time")] == ["cpu · torch"]


# ----------------------------------------------------------------- time to train
def test_time_to_train_lines_follow_the_formula(timings):
    ax = figures.time_to_train(timings, "s000-hjb", max_steps=1e5)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    lines = {line.get_label(): line for line in _lines(ax, "time-to-train")}
    assert set(lines) == {
        "cpu · torch",
        "cpu · tensorflow",
        "cuda · torch",
        "cuda · tensorflow",
    }
    line = lines["cuda · tensorflow"]
    n, t = line.get_xdata(), line.get_ydata()
    assert n[0] == 1 and n[-1] == pytest.approx(1e5)
    np.testing.assert_allclose(t, COLD["cuda"] + FIRST["cuda"] + n * 1.0e-3)
    # The tensorflow curves cross near N* = (2.1 - 0.25) / (2.5e-3 - 1e-3) = 1233.
    cpu = lines["cpu · tensorflow"].get_ydata()
    crossing = n[np.argmax(t < cpu)]
    assert 1100 < crossing < 1400


# ----------------------------------------------------------------------- heat map
def test_grid_axes(timings):
    assert figure_grid.grid_axes(timings, "s000-hjb") == ("batch", "width")
    assert figure_grid.grid_axes(timings, "s001-mlp") is None  # one-axis sweeps only
    assert figure_grid.grid_axes(timings, "s004-lstm") is None  # no rows at all


def test_speedup_heatmap_diverging_at_one(timings):
    ax = figure_draw.speedup_heatmap(timings, "s000-hjb", "batch", "width", framework="torch")
    (mesh,) = ax.collections
    assert mesh.norm.vcenter == 0.0  # log2(speedup) centred at speedup 1
    assert mesh.get_cmap().name == "RdBu"
    cells = [t for t in ax.texts if t.get_gid() == "cell"]
    assert len(cells) == 4 * 3
    # batch = 100, width = 8: CPU 1.84 ms / CUDA 3.1 ms = 0.59.
    assert f"0.59{TIMES}" in [t.get_text() for t in cells]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "10",
        "100",
        "1,000",
        "10,000",
    ]
    assert "speedup cuda over CPU" in ax.get_title()
    assert len(ax.get_figure().axes) == 2  # the heat map and its colour bar


def test_speedup_heatmap_falls_back_to_cpu_time(timings_unavailable):
    ax = figure_draw.speedup_heatmap(timings_unavailable, "s000-hjb", "batch", "width")
    assert ax.get_title().startswith("CPU step time (no cuda rows measured)")
    (mesh,) = ax.collections
    assert mesh.get_cmap().name == "viridis"
    cells = {t.get_text() for t in ax.texts if t.get_gid() == "cell"}
    assert len(cells) == 12 and "1.84" in cells  # ms per step at the seed's size


def test_save_figure_creates_parents_and_is_deterministic(tmp_path, timings):
    ax = figures.time_to_train(timings, "s001-mlp")
    a = figure_files.save_figure(ax.get_figure(), tmp_path / "a" / "b" / "one.png")
    b = figure_files.save_figure(ax.get_figure(), tmp_path / "two.png")
    assert a.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert a.read_bytes() == b.read_bytes()
    assert b"Software" not in a.read_bytes()


# ------------------------------------------------------------------------ answers
def test_answer_sentence_uses_measured_numbers(timings, crossover):
    text = answer_sentence(timings, crossover, "s000-hjb")
    assert text.startswith("At the seed's size (batch=100, width=8) the CPU takes 1.84 ms")
    assert "2.5 ms per step with tensorflow" in text
    assert f"with torch, CUDA is 1.7{TIMES} slower at the seed's size" in text
    assert f"it overtakes the CPU at batch ≈ 168 (95% CI 140{DASH}202)" in text
    assert f"and at width ≈ 13.5 (95% CI 11.9{DASH}15.6)" in text
    assert f"with tensorflow, CUDA is 2.5{TIMES} faster" in text
    assert "faster over the whole measured range of width" in text
    assert "after N* = 1,233 steps its time-to-train wins" in text
    assert "never beats the CPU's" in text  # torch: slower at the seed's size
    assert text.endswith(".") and text.count(".") >= 1

    mlp = answer_sentence(timings, crossover, "s001-mlp")
    assert "522 µs per step with torch" in mlp
    assert f"1.8{TIMES} slower" in mlp
    assert f"batch ≈ 117 (95% CI 100{DASH}131)" in mlp
    assert "does not overtake the CPU inside the measured range of d_in" in mlp


def test_answer_sentence_unavailable(timings_unavailable, tmp_path):
    crossover = _roundtrip(make_crossover("unavailable"), tmp_path, "x.csv")
    text = answer_sentence(timings_unavailable, crossover, "s001-mlp")
    assert "522 µs per step with torch" in text
    assert (
        f"no CUDA device was visible on this machine ({UNAVAILABLE_MESSAGE}), "
        "so no crossover was measured here" in text
    )
    assert "overtakes" not in text and f"{TIMES}" not in text


# ----------------------------------------------------------------------- notebook
def _expected_pngs() -> set[str]:
    return {
        "s000-hjb-step-time-batch.png",
        "s000-hjb-step-time-width.png",
        "s000-hjb-time-to-train.png",
        "s000-hjb-speedup-batch-width.png",
        "s001-mlp-step-time-batch.png",
        "s001-mlp-step-time-d_in.png",
        "s001-mlp-step-time-hidden.png",
        "s001-mlp-time-to-train.png",
    }


def test_notebook_is_stored_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert nb.metadata.kernelspec.name == "python3"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    assert all(not c.outputs and c.execution_count is None for c in code)


def run_report_notebook(papermill, tmp_path, results, figures_dir, **parameters) -> Path:
    """Execute the report notebook with papermill on the study tables in ``results``,
    writing figures into ``figures_dir``; ``parameters`` are added (reference_dir).
    Returns the executed notebook's path."""
    out = tmp_path / "report.ipynb"
    papermill.execute_notebook(
        str(NOTEBOOK),
        str(out),
        parameters={
            "timings": str(results / "timings.csv"),
            "crossover": str(results / "crossover.csv"),
            "figures_dir": str(figures_dir),
            "study": "fixture",
            **parameters,
        },
        kernel_name="python3",
        cwd=str(tmp_path),
        progress_bar=False,
    )
    return out


@pytest.mark.parametrize("cuda_status", ["ok", "unavailable"])
def test_notebook_runs_and_writes_figures(tmp_path, monkeypatch, cuda_status):
    papermill = pytest.importorskip("papermill")
    results = tmp_path / "results" / "fixture"
    results.mkdir(parents=True)
    timings = make_timings(cuda_status)
    if cuda_status == "ok":  # one failed block-length check on each device
        timings = with_failed_checks(timings)
    timings.to_csv(results / "timings.csv", index=False)
    make_crossover(cuda_status).to_csv(results / "crossover.csv", index=False)
    if cuda_status == "ok":
        (results / "wall.json").write_text(
            json.dumps(
                {
                    "study_wall_s": 300.0,
                    "measuring_jobs_wall_s": 200.0,
                    "rates_jobs_wall_s": 50.0,
                    "measured_work_s": 50.0,
                    "measured_share": 0.25,
                    "timed_share": 0.25,
                    "count_share": 0.1,
                    "replay_share": None,
                    "import_share": 0.15,
                    "other_share": 0.5,
                    "rates_share": 0.2,
                }
            )
        )
    figures_dir = tmp_path / "reports" / "fixture" / "figures"
    monkeypatch.setenv("CROSSOVER_STUDY_SRC", str(REPO / "src"))
    # Vector copies where asked for (figure_formats): both in one run, none in the other.
    vectors = ["svg", "pdf"] if cuda_status == "ok" else []
    out = run_report_notebook(papermill, tmp_path, results, figures_dir, figure_formats=vectors)
    # Each figure as PNG (shown in the report), and SVG and PDF where asked.
    stems = {name.removesuffix(".png") for name in _expected_pngs()}
    assert {p.name for p in figures_dir.iterdir()} == {
        f"{stem}.{fmt}" for stem in stems for fmt in ("png", *vectors)
    }

    nb = nbformat.read(out, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == len(_expected_pngs())
    text = "\n".join(
        o.get("text", "")
        + o.get("data", {}).get("text/markdown", "")
        + o.get("data", {}).get("text/plain", "")
        for o in outputs
    )
    assert "study: fixture" in text and "fixture-host" in text
    assert "device cpu: Fixture Xeon 16-core" in text
    assert "## s000-hjb — TF2 custom loop" in text
    assert "## s001-mlp — PyTorch MLP: GPU slower than CPU on Colab" in text
    assert "## s004-lstm" not in text  # no rows of that case in the fixture
    # No results/reference/ under the papermill cwd: the section says so in one line.
    assert "no reference run: no results/reference/<run>/timings.csv" in text
    # Remedy shift: the fixture measures eager only, and the report says so per case.
    assert "How far each remedy moves the crossover and N" in text
    assert "No remedy (a variant other than eager) has ok accelerator rows" in text
    if cuda_status == "ok":
        assert "wall-time share: 25%" in text
        assert (
            "study wall time: 300 s from the first job's start to the collect step; "
            "measuring jobs 200 s, rates jobs 50 s (20%)" in text
        )
        assert (
            "measuring jobs' time: timed 25%, count 10%, replay not recorded, attribution "
            "not recorded, import 15%, other 50%" in text
        )
        assert "after N* = 1,233 steps" in text
        # Each failed block-length check worded for its device, the CPU's with the load.
        assert "2 failed block-length check" in text
        assert (
            "- s001-mlp torch/eager on cpu (batch=64, d_in=1024, hidden=128): long block "
            "30% slower per step than the short blocks; the speed drifted" in text
        )
        assert "host load (1-min average, the job's 4 thread(s) included) 1.50 -> 3.20" in text
        assert "other work kept 1.10 CPU(s) busy" in text
        assert (
            "- s001-mlp torch/eager on cuda (batch=64, d_in=1024, hidden=128): long block "
            "50% faster per step than the short blocks; on an asynchronous device (cuda) "
            "the short blocks measured a launch queue" in text
        )
    else:
        assert "wall-time share: not recorded" in text
        assert "device cuda: no ok rows (status unavailable)" in text
        assert "no CUDA device was visible on this machine" in text


# ------------------------------------------------------------- cross-machine figure
@pytest.fixture
def machines(tmp_path):
    """(label, table) of a local CPU machine (the committed CPU run's rows, read as this
    machine's) and of the synthetic reference run with cpu and cuda rows."""
    local = pd.read_csv(COMMITTED_CPU_RUN / "timings.csv")
    reference = pd.read_csv(synthetic_reference_gpu(tmp_path / "reference"))
    return [("this machine", local), ("reference-gpu", reference)]


def test_cross_machine_step_time_one_line_per_machine_device_and_framework(machines):
    ax = figures.cross_machine_step_time(machines, "s001-mlp", "hidden")
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    lines = {line.get_label(): line for line in _lines(ax, "step-time")}
    xeon = "Intel(R) Xeon(R) Processor"  # the committed run's device_name
    assert set(lines) == {
        f"this machine: cpu ({xeon}) · torch",
        f"this machine: cpu ({xeon}) · tensorflow",
        f"reference-gpu: cpu ({SYNTHETIC_CPU_NAME}) · torch",
        f"reference-gpu: cpu ({SYNTHETIC_CPU_NAME}) · tensorflow",
        f"reference-gpu: cuda ({SYNTHETIC_GPU_NAME}) · torch",
        f"reference-gpu: cuda ({SYNTHETIC_GPU_NAME}) · tensorflow",
    }
    # Along hidden at d_in = 1024 (the seed's), the committed torch rows: 128 and 512.
    local_torch = lines[f"this machine: cpu ({xeon}) · torch"]
    assert list(local_torch.get_xdata()) == [128, 512]
    np.testing.assert_allclose(local_torch.get_ydata(), [0.001001, 0.008690], rtol=1e-3)
    ref_cpu = lines[f"reference-gpu: cpu ({SYNTHETIC_CPU_NAME}) · torch"]
    np.testing.assert_allclose(ref_cpu.get_ydata(), local_torch.get_ydata() / 2)
    ref_cuda = lines[f"reference-gpu: cuda ({SYNTHETIC_GPU_NAME}) · torch"]
    np.testing.assert_allclose(ref_cuda.get_ydata(), [SYNTHETIC_GPU_STEP] * 2)
    # Machine = line style and marker, device = colour, second framework hollow.
    palette = figures._palette()
    for label, line in lines.items():
        local = label.startswith("this machine")
        assert line.get_linestyle() == ("-" if local else "--"), label
        assert line.get_marker() == ("o" if local else "s"), label
        device = "cuda" if ": cuda (" in label else "cpu"
        assert matplotlib.colors.same_color(line.get_color(), palette[device]), label
        hollow = label.endswith("tensorflow")
        assert matplotlib.colors.same_color(line.get_markerfacecolor(), "white") == hollow
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert set(lines) <= set(legend) and "seed size (hidden=128)" in legend


def test_cross_machine_step_time_computes_no_crossover_across_machines(machines):
    # Synthetic: the reference GPU at 2 ms per step lies between this machine's torch
    # CPU at hidden 128 (1.0 ms) and 512 (8.7 ms), so the two machines' curves cross;
    # still no crossover (line or band) is drawn between machines.
    label, reference = machines[1]
    reference = reference.assign(
        step_time_s=reference["step_time_s"].where(reference["device"] == "cpu", 2.0e-3)
    )
    ax = figures.cross_machine_step_time([machines[0], (label, reference)], "s001-mlp", "hidden")
    lines = {line.get_label(): line for line in _lines(ax, "step-time")}
    local = lines["this machine: cpu (Intel(R) Xeon(R) Processor) · torch"].get_ydata()
    gpu = lines[f"reference-gpu: cuda ({SYNTHETIC_GPU_NAME}) · torch"].get_ydata()
    assert local[0] < gpu[0] and local[1] > gpu[1]  # the curves do cross
    assert not _lines(ax, "crossover")
    assert not [p for p in ax.patches if p.get_gid() == "crossover-ci"]
    assert not any("crossover" in t.get_text() for t in ax.get_legend().get_texts())
    marked = [line for line in ax.get_lines() if line.get_gid() not in (None, "step-time")]
    assert [line.get_gid() for line in marked] == ["seed-size"]
    assert marked[0].get_xdata()[0] == 128 and marked[0].get_linestyle() == ":"
    assert "cross-machine comparison (no crossover across machines)" in ax.get_title()
    note = ax.get_legend().get_title()
    assert note.get_gid() == "cross-machine-note"
    assert "no crossover is computed across machines" in note.get_text().replace("\n", " ")


def test_cross_machine_step_time_draws_only_the_naive_synced_program(machines):
    label, local = machines[0]
    extra = local[local["case"] == "s001-mlp"].copy()
    others = pd.concat(
        [
            extra.assign(variant="copy_data_each_step"),
            extra.assign(timing="unsynced"),
            extra.assign(variant="ddp", replicas=2, scaling="strong"),
            extra.assign(status="error", step_time_s=np.nan),
        ]
    )
    others["step_time_s"] = others["step_time_s"].fillna(1.0)  # would stand out if drawn
    curves = [(label, pd.concat([local, others], ignore_index=True)), machines[1]]
    ax = figures.cross_machine_step_time(curves, "s001-mlp", "hidden")
    mine = [line for line in _lines(ax, "step-time") if line.get_label().startswith(label)]
    assert len(mine) == 2  # torch and tensorflow, eager synced only
    assert all(max(line.get_ydata()) < 0.01 for line in mine)


def test_cross_machine_step_time_one_framework_omits_it_from_labels(machines):
    curves = [(label, df[df["framework"] == "torch"]) for label, df in machines]
    ax = figures.cross_machine_step_time(curves, "s000-hjb", "batch")
    assert sorted(line.get_label() for line in _lines(ax, "step-time")) == [
        f"reference-gpu: cpu ({SYNTHETIC_CPU_NAME})",
        f"reference-gpu: cuda ({SYNTHETIC_GPU_NAME})",
        "this machine: cpu (Intel(R) Xeon(R) Processor)",
    ]
    assert all(line.get_markerfacecolor() != "white" for line in _lines(ax, "step-time"))


def test_cross_machine_step_time_empty(machines, timings_unavailable):
    ax = figures.cross_machine_step_time([], "s001-mlp", "hidden")
    assert not _lines(ax, "step-time")
    assert [t.get_text() for t in ax.texts] == [
        "no ok rows of the naive program for s001-mlp along hidden"
    ]
    # Only unavailable rows of the case on one machine, none at all on the other.
    unavailable = timings_unavailable[timings_unavailable["device"] == "cuda"]
    no_mlp = machines[0][1][machines[0][1]["case"] != "s001-mlp"]
    curves = [("a", unavailable), ("b", no_mlp)]
    ax = figures.cross_machine_step_time(curves, "s001-mlp", "hidden")
    assert not _lines(ax, "step-time") and ax.texts


def test_swept_and_most_swept_axes(machines, timings):
    tables = [df for _, df in machines]
    assert figure_data.swept_axes(tables, "s001-mlp") == ["d_in", "hidden"]
    assert figure_data.swept_axes(tables, "s004-lstm") == ["units"]
    assert figure_data.most_swept_axis(tables, "s004-lstm") == "units"
    # A tie (two sizes each) goes to the first axis; the fixture's batch has 4 sizes.
    assert figure_data.most_swept_axis(tables, "s001-mlp") == "d_in"
    assert figure_data.most_swept_axis([*tables, timings], "s001-mlp") == "batch"
    assert figure_data.most_swept_axis([], "s002-iris") == "batch"
    assert figure_data.swept_axes([], "s002-iris") == []


def test_notebook_draws_the_reference_machines_beside_the_study(tmp_path, monkeypatch):
    """The report with one (synthetic) reference run: one cross-machine figure per axis
    swept in either run, recording this study's and the reference run's timings."""
    papermill = pytest.importorskip("papermill")
    results = tmp_path / "results" / "fixture"
    results.mkdir(parents=True)
    make_timings("unavailable").to_csv(results / "timings.csv", index=False)
    make_crossover("unavailable").to_csv(results / "crossover.csv", index=False)
    reference = synthetic_reference_gpu(tmp_path / "elsewhere")
    seal_reference(reference.parent)  # the report draws only runs that pass their audit
    # A hand-edited copy of it beside it: named in the report, left out.
    edited = tmp_path / "elsewhere" / "edited-copy"
    shutil.copytree(reference.parent, edited)
    rows = pd.read_csv(edited / "timings.csv")
    rows.loc[rows["device"] == "cuda", "step_time_s"] /= 10
    rows.to_csv(edited / "timings.csv", index=False)
    figures_dir = tmp_path / "figures"
    monkeypatch.setenv("CROSSOVER_STUDY_SRC", str(REPO / "src"))
    out = run_report_notebook(
        papermill,
        tmp_path,
        results,
        figures_dir,
        reference_dir=str(tmp_path / "elsewhere"),
        figure_formats=["svg", "pdf"],
    )
    cross = sorted(p.name for p in figures_dir.glob("*-cross-machine-*.png"))
    # The fixture sweeps every axis of s000-hjb and s001-mlp; s004-lstm is not in it.
    assert cross == [
        "s000-hjb-cross-machine-batch.png",
        "s000-hjb-cross-machine-width.png",
        "s001-mlp-cross-machine-batch.png",
        "s001-mlp-cross-machine-d_in.png",
        "s001-mlp-cross-machine-hidden.png",
    ]
    from crossover_study.core.files import sha256_file

    for name in cross:
        for fmt in figure_files.FIGURE_FORMATS:
            path = (figures_dir / name).with_suffix(f".{fmt}")
            assert figure_files.figure_sources(path) == {
                "timings.csv": sha256_file(results / "timings.csv"),
                "reference/reference-gpu/timings.csv": sha256_file(reference),
            }, path
    # The study's own figures still record this study's tables only.
    own = figure_files.figure_sources(figures_dir / "s001-mlp-step-time-hidden.png")
    assert set(own) == {"timings.csv", "crossover.csv"}
    nb = nbformat.read(out, as_version=4)
    text = "\n".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
    )
    assert "reference runs: reference-gpu\n" in text  # not the edited copy
    assert "no reference run" not in text
    assert "reference run edited-copy left out: it fails its audit" in text
    # No folder of this machine reaches the report's outputs (warnings included; the
    # parameters papermill injects are input, which the HTML leaves out).
    outputs = "".join(json.dumps(o) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert str(REPO) not in outputs and str(tmp_path) not in outputs


def test_report_warnings_are_kept_for_its_notes_and_name_no_file_of_this_machine():
    """A library's warning (matplotlib's, pandas') is not printed between the answers
    and the figures: the report keeps it, by its category and text only (the file it
    came from is a path on this machine), and says it once in its notes at the end."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    setup = next(c.source for c in nb.cells if "warnings.showwarning" in c.source)
    notes = next(c.source for c in nb.cells if c.get("id") == "notes")
    # In a process of its own: pytest records warnings instead of showing them.
    warn = "warnings.warn('no positive values', UserWarning)"
    raise_it = f"exec(compile({warn!r}, {str(REPO / 'src/crossover_study/figures/report.py')!r}, 'exec'))\n"
    script = f"import warnings\nsmk = None\n{setup}\n" + raise_it * 2 + notes
    result = subprocess.run(
        [sys.executable, "-W", "always", "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stderr == ""
    assert result.stdout == "- crossover-study (user): no positive values (2 times)\n"
    assert str(REPO) not in result.stdout


def test_a_single_size_keeps_its_panel_in_a_constrained_grid():
    """A run with one size on every axis of a case (the rehearsal's s002-iris) once
    drew blank panels in the paper's constrained layout, with a divide-by-zero warning:
    the log x axis collapsed to zero width."""
    import warnings

    from conftest import COMMITTED_CPU_RUN

    from crossover_study.figures import paper

    timings = pd.read_csv(COMMITTED_CPU_RUN / "timings.csv")
    seed_only = timings[
        (timings["case"] == "s002-iris") & (timings["hidden"] == 32) & (timings["batch"] == 20)
    ]
    empty = pd.DataFrame(columns=["case", "framework", "variant", "axis", "outcome"])
    run = paper.ReferenceRun("seed-only", COMMITTED_CPU_RUN, seed_only, empty)
    fig = paper.step_time_figure([run], "s002-iris")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        fig.canvas.draw()
    for ax, seed in zip(fig.axes, (20, 32), strict=True):
        low, high = ax.get_xlim()
        assert low < seed < high and high / low >= 4
    plt.close(fig)
