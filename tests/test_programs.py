"""The program table (issue 12, items 1 and 5): one program per case x framework x device
x variant or a reason; the workloads run what it says; no comparison of two programs;
strategy_step on the CPU; the TPU's batch rounding."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from crossover_study.analysis.crossover import crossover_table
from crossover_study.answers.sentences import answer_sentence, program_legend
from crossover_study.core import errors
from crossover_study.figures import draw as figure_draw
from crossover_study.measure import frameworks
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study import applicability, cases, programs
from crossover_study.study.applicability import NotApplicable
from crossover_study.study.cases import SEEDS
from crossover_study.study.config import validate_config
from crossover_study.study.points import TimingPolicy, points
from crossover_study.study.spec import (
    ACCELERATORS,
    DEVICES,
    FRAMEWORKS,
    VARIANTS,
    PointSpec,
    tpu_global_batch,
)
from crossover_study.study.study_file import ConfigError
from crossover_study.workloads import Unavailable

CASES = tuple(SEEDS)  # the seed cases, from the registry
SEED_SIZES = {name: dict(case.seed) for name, case in SEEDS.items()}

FAST = TimingPolicy(min_block_s=0.01, n_blocks=3, max_warmup_s=0.1, max_point_s=1, sync_check_s=0)


# -- the table --------------------------------------------------------------------------


def test_every_point_has_exactly_one_program_or_a_reason(own_models):
    rows = programs.table()  # the seeds and own-models.yaml's two plug-ins
    assert len(rows) == (len(CASES) + 2) * len(FRAMEWORKS) * len(DEVICES) * len(VARIANTS)
    for row in rows:
        assert (row["program"] is None) != (row["not_applicable"] is None), row
        if row["program"] is not None:
            assert row["program"] in programs.PROGRAMS, row
        else:
            assert row["not_applicable"].strip(), row
    used = {r["program"] for r in rows} - {None}
    assert used == set(programs.PROGRAMS)  # no program is described but never run
    assert all(programs.PROGRAMS[p].strip() for p in used)


def test_every_variant_is_classified_once():
    own = {*applicability.KERAS_PROGRAM_OF_VARIANT, *programs.REPLICA_PROGRAMS, "strategy_step"}
    assert not set(programs.EXECUTION_VARIANTS) & own
    assert set(programs.EXECUTION_VARIANTS) | own == set(VARIANTS)
    with pytest.raises(ValueError, match="unknown variant 'tf64'"):
        programs.program_of("s001-mlp", "torch", "cpu", "tf64")


@pytest.mark.parametrize(
    "case, framework, device, variant, program",
    [
        ("s001-mlp", "torch", "cpu", "eager", "torch_step"),
        ("s004-lstm", "torch", "cuda", "cuda_graph", "torch_step"),  # the same step replayed
        ("s004-lstm", "torch", "cpu", "eager", "torch_step"),  # the port of fit: a bare loop
        ("s000-hjb", "tensorflow", "cuda", "xla", "tf_step"),
        ("s001-mlp", "tensorflow", "cpu", "loop", "tf_step"),
        ("s002-iris", "tensorflow", "cpu", "eager", "keras_fit"),
        ("s004-lstm", "tensorflow", "cuda", "cudnn", "keras_fit"),
        ("s004-lstm", "tensorflow", "cpu", "steps_per_execution", "keras_fit"),
        ("s002-iris", "tensorflow", "cuda", "train_on_batch", "keras_train_on_batch"),
        ("s004-lstm", "tensorflow", "cpu", "custom_step", "keras_custom_step"),
        ("s002-iris", "tensorflow", "cpu", "tf_data_repeat", "keras_fit_repeat"),
        ("s002-iris", "tensorflow", "cpu", "strategy_step", "strategy_step"),
        ("s000-hjb", "tensorflow", "tpu", "strategy_step", "strategy_step"),
        ("s004-lstm", "tensorflow", "cuda_multi", "mirrored", "strategy_step"),
        ("s001-mlp", "torch", "cpu", "ddp", "ddp_step"),
    ],
)
def test_programs_of_named_points(case, framework, device, variant, program):
    assert programs.program_of(case, framework, device, variant) == program


@pytest.mark.parametrize(
    "case, framework, device, variant, reason",
    [
        ("s002-iris", "tensorflow", "tpu", "eager", "only strategy_step runs.*keras_fit"),
        ("s000-hjb", "tensorflow", "tpu", "xla", "only strategy_step runs.*tf_step"),
        ("s002-iris", "torch", "tpu", "eager", "no TPU backend"),
        ("s002-iris", "torch", "cpu", "strategy_step", "TensorFlow/Keras program variant"),
        ("s001-mlp", "tensorflow", "cpu", "train_on_batch", "applies to Keras fit programs"),
        ("s001-mlp", "torch", "cuda_multi", "eager", "replicated points"),
        ("s000-hjb", "torch", "cpu", "ddp", "replicas are measured for"),
        ("s001-mlp", "tensorflow", "tpu", "mirrored", "runs on cpu or cuda_multi"),
    ],
)
def test_not_applicable_points_say_why(case, framework, device, variant, reason):
    with pytest.raises(NotApplicable, match=reason):
        programs.program_of(case, framework, device, variant)
    assert programs.program_or_none(case, framework, device, variant) is None


def test_the_same_variant_is_the_same_program_on_every_device():
    # What makes "same variant on the CPU" a fair CPU side, and eager a fair fallback
    # only where cpu_variants says so.
    for case in CASES:
        for framework in FRAMEWORKS:
            for variant in VARIANTS:
                for acc in ACCELERATORS:
                    on_acc = programs.program_or_none(case, framework, acc, variant)
                    on_cpu = programs.program_or_none(case, framework, "cpu", variant)
                    if on_acc is not None and on_cpu is not None:
                        assert on_acc == on_cpu, (case, framework, variant, acc)
                    for cpu_variant in programs.cpu_variants(case, framework, variant, acc):
                        assert programs.program_of(case, framework, "cpu", cpu_variant) == on_acc
    # Accelerator-only executions of the seed's program fall back to the CPU's eager ...
    assert programs.cpu_variants("s001-mlp", "torch", "cuda_graph", "cuda") == [
        "cuda_graph",
        "eager",
    ]
    assert programs.cpu_variants("s004-lstm", "tensorflow", "cudnn", "cuda")[-1] == "eager"
    # ... other programs never do.
    assert programs.cpu_variants("s002-iris", "tensorflow", "train_on_batch", "cuda") == [
        "train_on_batch"
    ]
    assert programs.cpu_variants("s002-iris", "tensorflow", "strategy_step", "tpu") == [
        "strategy_step"
    ]
    assert programs.cpu_variants("s002-iris", "tensorflow", "eager", "tpu") == []


# -- the workloads run what the table says ----------------------------------------------

#: The workload classes each program is run by (module.class).
RUN_BY = {
    "torch_step": {"torch_cases.HJB", "torch_cases.MLP", "torch_cases.Iris", "torch_cases.LSTM"},
    "tf_step": {"tf_cases.HJB", "tf_cases.MLP"},
    "keras_fit": {"tf_cases.Iris", "tf_cases.LSTM"},
    "keras_train_on_batch": {"tf_cases.Iris", "tf_cases.LSTM"},
    "keras_custom_step": {"tf_cases.Iris", "tf_cases.LSTM"},
    "keras_fit_repeat": {"tf_cases.Iris", "tf_cases.LSTM"},
    "strategy_step": {"tf_strategy_step.StrategyWorkload"},
    "ddp_step": {"torch_ddp.DDPWorkload"},
    "keras_fit_mirrored": {"tf_strategy.MirroredFitWorkload"},
    "plugin": {"plugin_torch.TorchPluginWorkload", "plugin_tf.TFPluginWorkload"},
}


def test_workloads_agree_with_the_table(own_models):
    """Every point the table calls not applicable is refused by make_workload, and every
    workload make_workload builds (cheap: constructors build nothing) runs the table's
    program (the finer reasons of the workloads, e.g. ``function`` on a step that is
    already a tf.function, refuse more points: those keep the seed's program)."""
    frameworks.import_framework("torch", "cpu", 1)
    frameworks.import_framework("tensorflow", "cpu", 1)
    built = set()
    for case in cases.names():  # the seeds and own-models.yaml's plug-ins
        for framework in FRAMEWORKS:
            for device in DEVICES:
                for variant in VARIANTS:
                    cores = 8 if variant == "strategy_step" else None
                    point = PointSpec(
                        case, framework, device, variant, cases.seed_sizes(case), tpu_cores=cores
                    )
                    program = programs.program_or_none(case, framework, device, variant)
                    try:
                        workload = frameworks.make_workload(point, 1)
                    except NotApplicable:
                        continue
                    except (Unavailable, errors.DeviceMissingError):
                        assert program is not None, point  # the table's NA come first
                        continue
                    assert program is not None, point
                    name = (
                        f"{type(workload).__module__.rsplit('.', 1)[-1]}.{type(workload).__name__}"
                    )
                    assert name in RUN_BY[program], (point, name)
                    if program.startswith("keras_"):
                        assert workload.keras_fit and workload.variant == variant
                    built.add(program)
    assert built == set(programs.PROGRAMS)  # every program was built at least once


# -- no comparison of two programs ------------------------------------------------------


def _row(framework, device, variant, batch, t, case="s002-iris", status="ok", **extra):
    sizes = dict(SEED_SIZES[case], batch=batch)
    return {
        "case": case,
        "framework": framework,
        "device": device,
        "variant": variant,
        "timing": "synced",
        **sizes,
        "status": status,
        "message": None if status == "ok" else "why",
        "step_time_s": t if status == "ok" else None,
        "block_step_times_s": json.dumps([t * 0.99, t, t * 1.01]) if status == "ok" else None,
        "cold_start_s": 0.5,
        "first_step_s": 0.01,
        **extra,
    }


def _curve(framework, device, variant, times, case="s002-iris", **extra):
    batches = (10, 20, 40, 80) if case == "s002-iris" else (16, 32, 64, 128)
    return [
        _row(framework, device, variant, b, t, case=case, **extra)
        for b, t in zip(batches, times, strict=True)
    ]


def test_no_crossover_row_compares_two_programs():
    cpu_fast, acc_flat = [1e-4, 2e-4, 4e-4, 8e-4], [3e-4] * 4
    rows = (
        # Keras fit on cpu and cuda: eager and xla (the same program).
        _curve("tensorflow", "cpu", "eager", cpu_fast)
        + _curve("tensorflow", "cuda", "eager", acc_flat)
        + _curve("tensorflow", "cuda", "xla", acc_flat)
        # train_on_batch on cuda only: the CPU's eager is fit, another program.
        + _curve("tensorflow", "cuda", "train_on_batch", acc_flat)
        # strategy_step on cpu and tpu (the TPU's comparison), the seed's fit not on tpu.
        + _curve("tensorflow", "cpu", "strategy_step", cpu_fast, program="strategy_step")
        + _curve("tensorflow", "tpu", "strategy_step", acc_flat, program="strategy_step")
        + _curve("tensorflow", "tpu", "eager", [None] * 4, status="not_applicable")
        # A table of the old code: tpu "eager" ran the strategy step (no program column):
        # its ok rows must not be compared with the CPU's fit.
        + _curve("tensorflow", "tpu", "custom_step", acc_flat)
        # torch: cuda_graph on cuda against the CPU's eager (the same step).
        + _curve("torch", "cpu", "eager", cpu_fast)
        + _curve("torch", "cuda", "cuda_graph", acc_flat)
        + _curve("torch", "cpu", "cuda_graph", [None] * 4, status="not_applicable")
        # s004: cudnn on cuda against the CPU's eager, a loss-read variant on both.
        + _curve("tensorflow", "cpu", "eager", cpu_fast, case="s004-lstm")
        + _curve("tensorflow", "cuda", "cudnn", acc_flat, case="s004-lstm")
        + _curve("torch", "cpu", "read_loss_every_step", cpu_fast, case="s004-lstm")
        + _curve("torch", "cuda", "read_loss_every_step", acc_flat, case="s004-lstm")
    )
    timings = pd.DataFrame(rows)
    table = crossover_table(timings, n_boot=50)
    compared = table[table["cpu_program"].notna()]
    assert len(compared) and (compared["program"] == compared["cpu_program"]).all()
    # Every row with accelerator data either compares one program or says why not.
    for _, row in table[table["outcome"] != "no_accelerator_data"].iterrows():
        if pd.isna(row["cpu_program"]):
            assert row["outcome"] == "no_cpu_program" and row["reason"], row.to_dict()
            assert pd.isna(row["crossover_size"]) and pd.isna(row["speedup_at_seed"])
        else:
            assert row["program"] == row["cpu_program"], row.to_dict()
    batch = table[table["axis"] == "batch"].set_index(
        ["case", "framework", "variant", "accelerator"]
    )
    assert batch.loc[("s002-iris", "tensorflow", "strategy_step", "tpu"), "outcome"] == "crossover"
    assert batch.loc[("s002-iris", "tensorflow", "strategy_step", "tpu"), "cpu_variant"] == (
        "strategy_step"
    )
    assert batch.loc[("s002-iris", "torch", "cuda_graph", "cuda"), "cpu_variant"] == "eager"
    assert batch.loc[("s004-lstm", "tensorflow", "cudnn", "cuda"), "cpu_program"] == "keras_fit"
    tob = batch.loc[("s002-iris", "tensorflow", "train_on_batch", "cuda")]
    assert tob["outcome"] == "no_cpu_program"
    assert "keras_fit, a different program" in tob["reason"]
    old_tpu = batch.loc[("s002-iris", "tensorflow", "custom_step", "tpu")]
    assert old_tpu["outcome"] == "no_cpu_program" and pd.isna(old_tpu["program"])
    # tpu eager: not applicable there, so no row at all.
    assert ("s002-iris", "tensorflow", "eager", "tpu") not in batch.index


def test_program_column_of_old_tables_comes_from_the_table():
    old = pd.DataFrame(
        [
            _row("tensorflow", "cpu", "eager", 20, 1e-3),
            _row("tensorflow", "tpu", "eager", 20, 1e-3),  # ran the strategy step then
            _row("torch", "cpu", "eager", 20, 1e-3),
        ]
    )
    assert list(programs.program_column(old)) == ["keras_fit", None, "torch_step"]
    mixed = old.assign(program=["keras_fit", "strategy_step", None])
    assert list(programs.program_column(mixed)) == ["keras_fit", "strategy_step", "torch_step"]


# -- strategy_step on the CPU and the TPU's batch ---------------------------------------


@pytest.mark.parametrize("n, cores, expected", [(100, 8, 104), (20, 8, 24), (32, 8, 32)])
def test_tpu_batch_is_the_nearest_multiple_of_the_cores(n, cores, expected):
    assert tpu_global_batch(n, cores) == expected


def test_tpu_batch_rounding_edges():
    assert tpu_global_batch(3, 8) == 8  # never below one sample per core
    assert tpu_global_batch(11, 8) == 8 and tpu_global_batch(13, 8) == 16  # nearest
    assert tpu_global_batch(12, 8) == 16  # a tie rounds up
    assert tpu_global_batch(7, 1) == 7
    with pytest.raises(ValueError, match="positive ints"):
        tpu_global_batch(0, 8)
    with pytest.raises(ValueError, match="positive ints"):
        tpu_global_batch(8, 0)


def test_strategy_step_points_carry_the_tpu_cores_and_say_what_they_measured():
    seed = SEED_SIZES["s000-hjb"]
    point = PointSpec("s000-hjb", "tensorflow", "cpu", "strategy_step", seed, tpu_cores=8)
    row = point.as_row()
    assert row["batch"] == 100 and row["global_batch"] == 104  # batch: the point's size
    assert row["note"] == "seed batch 100 → 104 to divide over 8 TPU cores"
    assert point.key().endswith("|tpu_cores=8") and point.is_seed_size()
    other = PointSpec(
        "s000-hjb", "tensorflow", "cpu", "strategy_step", {**seed, "batch": 50}, tpu_cores=8
    )
    assert other.as_row()["note"] == "batch 50 → 48 to divide over 8 TPU cores"
    plain = PointSpec("s000-hjb", "tensorflow", "cpu", "eager", seed)
    assert plain.as_row()["note"] is None and "tpu_cores" not in plain.key()
    with pytest.raises(ValueError, match="tpu_cores must be a positive int"):
        PointSpec("s000-hjb", "tensorflow", "cpu", "strategy_step", seed, tpu_cores=0)


def test_config_gives_strategy_step_points_the_tpu_cores():
    config = validate_config(
        {
            "study": "t",
            "sweep": {
                "frameworks": ["tensorflow"],
                "devices": ["cpu"],
                "variants": ["eager", "strategy_step"],
            },
            "cases": {"s002-iris": {}},
            "tpu_cores": 16,
        }
    )
    pts = points(config, "s002-iris", "tensorflow", "cpu")
    strategy = [p for p in pts if p.variant == "strategy_step"]
    assert [p.tpu_cores for p in strategy] == [16] and strategy[0].global_batch() == 16
    assert all(p.tpu_cores is None for p in pts if p.variant != "strategy_step")
    default = validate_config({k: v for k, v in config.items() if k != "tpu_cores"})
    assert "tpu_cores" not in default  # not filled in: the config hash of old studies holds
    assert points(default, "s002-iris", "tensorflow", "cpu")[-1].tpu_cores == 8
    with pytest.raises(ConfigError, match="tpu_cores"):
        validate_config({**config, "tpu_cores": 0})


@pytest.mark.parametrize(
    "case, sizes",
    [
        ("s000-hjb", {"batch": 12, "width": 8}),
        ("s001-mlp", {"batch": 16, "d_in": 32, "hidden": 16}),
        ("s002-iris", {"batch": 20, "hidden": 8}),
        ("s004-lstm", {"batch": 400, "units": 4, "seq_len": 5}),
    ],
)
def test_strategy_step_trains_on_the_cpu_under_one_device_strategy(tmp_path, case, sizes):
    point = PointSpec(case, "tensorflow", "cpu", "strategy_step", sizes, tpu_cores=8)
    group = GroupSpec(case, "tensorflow", "cpu", (point,), 1, FAST, "skip", "h")
    (row,) = run_group(group, tmp_path / "j.jsonl", tmp_path / "o.csv", log=lambda _: None)
    assert row["status"] == "ok", row["message"]
    assert row["program"] == "strategy_step" and row["device"] == "cpu"
    assert row["global_batch"] == tpu_global_batch(sizes["batch"], 8)
    assert row["batch"] == sizes["batch"]
    assert "OneDeviceStrategy" in row["replica_devices"] and row["replicas"] == 1
    assert row["step_time_s"] > 0 and math.isfinite(row["final_loss"])
    assert row["traces_timed"] == 0
    written = pd.read_csv(tmp_path / "o.csv")
    assert written.loc[0, "program"] == "strategy_step"
    if row["global_batch"] != sizes["batch"]:
        assert written.loc[0, "note"] == row["note"] and "TPU cores" in row["note"]


def test_measured_rows_record_the_program(tmp_path):
    sizes = {"batch": 8, "d_in": 8, "hidden": 8}
    pts = (
        PointSpec("s001-mlp", "torch", "cpu", "eager", sizes),
        PointSpec("s001-mlp", "torch", "cpu", "strategy_step", sizes, tpu_cores=8),
    )
    group = GroupSpec("s001-mlp", "torch", "cpu", pts, 1, FAST, "skip", "h")
    rows = run_group(group, tmp_path / "j.jsonl", tmp_path / "o.csv", log=lambda _: None)
    assert rows[0]["status"] == "ok" and rows[0]["program"] == "torch_step"
    assert rows[1]["status"] == "not_applicable" and rows[1]["program"] is None


def test_answer_sentence_names_the_program_and_never_pairs_two():
    cpu_fast, acc_flat = [1e-4, 2e-4, 4e-4, 8e-4], [3e-4] * 4
    timings = pd.DataFrame(
        _curve("tensorflow", "cpu", "eager", cpu_fast)
        + _curve("tensorflow", "tpu", "eager", [None] * 4, status="not_applicable")
        + _curve("tensorflow", "cpu", "strategy_step", cpu_fast, program="strategy_step")
        + _curve("tensorflow", "tpu", "strategy_step", acc_flat, program="strategy_step")
        + _curve("tensorflow", "cuda", "train_on_batch", acc_flat)
    )
    crossover = crossover_table(timings, n_boot=50)
    text = answer_sentence(timings, crossover, "s002-iris")
    assert "with tensorflow/strategy_step, TPU is" in text
    assert "both devices ran the program strategy_step" in text
    # The seed's fit does not run on the TPU: said, not compared.
    assert "with tensorflow/eager, no TPU point ran (not_applicable" in text
    # train_on_batch on the GPU has no CPU rows of its program: not compared with fit.
    assert (
        "with tensorflow/train_on_batch, the CPU has no ok rows of the same program "
        "(keras_train_on_batch), so CUDA is not compared with the CPU"
    ) in text
    legend = program_legend(timings, "s002-iris")
    assert legend.startswith("Programs measured: keras_fit (Keras Model.fit")
    assert "strategy_step (a tf.distribute custom step" in legend
    assert "keras_train_on_batch (a Python loop" in legend
    assert program_legend(timings, "s001-mlp") == ""


def _grid(framework, device, variant, t, status="ok"):
    return [
        {
            **_row(framework, device, variant, b, t * b / 20, status=status),
            "hidden": h,
        }
        for b in (10, 20, 40)
        for h in (16, 32, 64)
    ]


def test_speedup_heatmap_pairs_only_the_same_program():
    from crossover_study.figures import report as figures

    timings = pd.DataFrame(
        _grid("torch", "cpu", "eager", 1e-3)
        + _grid("torch", "cuda", "cuda_graph", 2e-4)
        + _grid("tensorflow", "cpu", "eager", 1e-3)
        + _grid("tensorflow", "cuda", "train_on_batch", 2e-4)
    )
    # cuda_graph is the torch step replayed: set against the CPU's eager (torch_step).
    ax = figure_draw.speedup_heatmap(
        timings, "s002-iris", "batch", "hidden", "cuda", framework="torch", variant="cuda_graph"
    )
    assert ax.get_title() == "s002-iris, torch/cuda_graph (torch_step): speedup cuda over CPU"
    cells = {t.get_text() for t in ax.texts if t.get_gid() == "cell"}
    assert cells == {figures._fmt_ratio(5.0)}
    # train_on_batch has no CPU rows of its program: no speed-up against fit.
    ax = figure_draw.speedup_heatmap(
        timings,
        "s002-iris",
        "batch",
        "hidden",
        "cuda",
        framework="tensorflow",
        variant="train_on_batch",
    )
    assert ax.get_title().startswith("CPU step time (no CPU rows of the program cuda ran)")
