"""Cases of your own (issue 13): the plug-in contract, its checks at config validation,
broken plug-ins measured without losing anything, the variants derived from one step,
and the tables that carry any case's axes."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import OWN_MODELS, SNAKEMAKE

from crossover_study.analysis.tables import TableError, read_job_tables, validate_timings
from crossover_study.core import files
from crossover_study.core.paths import REPO_ROOT
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study import cases, programs
from crossover_study.study import points as study_points
from crossover_study.study.config import validate_config
from crossover_study.study.points import TimingPolicy
from crossover_study.study.spec import PointSpec, size_columns
from crossover_study.study.study_file import ConfigError

FAST = TimingPolicy(min_block_s=0.01, n_blocks=3, max_warmup_s=0.1, max_point_s=1, sync_check_s=0)

#: A torch plug-in that fails on purpose at some sizes: it cannot build width 3, its
#: step raises at width 4, it diverges (NaN loss) at width 5, and works otherwise.
BROKEN_TORCH = """
import torch
from crossover_study.plugin import TorchStep


def build(device, batch, width):
    if width == 3:
        raise ValueError("cannot build width 3")
    torch.manual_seed(0)
    model = torch.nn.Linear(width, 1).to(device)
    lr = 1e30 if width == 5 else 1e-3
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = torch.randn(batch, width), torch.randn(batch, 1)

    def step(x, y):
        if width == 4:
            raise RuntimeError("step failed at width 4")
        opt.zero_grad(set_to_none=True)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    return TorchStep(step, data=(x, y), optimizer=opt, loss_read_every=1)
"""


def _plugin_config(tmp_path, source: str, name="mine", framework="torch", **case) -> dict:
    """A one-case study of a plug-in written to ``tmp_path/plugin.py``."""
    (tmp_path / "plugin.py").write_text(textwrap.dedent(source))
    spec = {
        "workload": str(tmp_path / "plugin.py"),
        "framework": framework,
        "question": "Mine: is the GPU worth it?",
        "seed": {"batch": 8, "width": 2},
        "axes": {"batch": [8], "width": [1, 2]},
        **case,
    }
    return {
        "study": "plugin-test",
        "sweep": {"frameworks": [framework], "devices": ["cpu"], "variants": ["eager"]},
        "cases": {name: spec},
    }


def _group(name: str, points, framework="torch") -> GroupSpec:
    return GroupSpec(name, framework, "cpu", tuple(points), 1, FAST, "skip", "h")


# -- the registry and the example study ------------------------------------------------


def test_the_seeds_are_registered_through_the_same_contract():
    for name, case in cases.SEEDS.items():
        assert case.builtin and case.question and case.seed
        for framework in case.frameworks:
            module, attr = case.entry_point(framework)
            assert module.startswith("crossover_study.workloads.") and attr
        assert cases.workload_file(name, "torch").name == "torch_cases.py"
    assert cases.names() == tuple(cases.SEEDS)


def test_own_models_study_registers_both_examples(own_models):
    assert cases.names()[-2:] == ("digits-cnn", "digits-keras-fit")
    cnn = cases.get("digits-cnn")
    assert cnn.frameworks == ("torch",) and cnn.axes == ("batch", "channels")
    assert cnn.question == "Small CNN on 8x8 digits: is the GPU worth it?"
    assert own_models["cases"]["digits-cnn"]["workload"] == "examples/digits_cnn.py"
    # A case of your own is measured in its own framework only.
    assert {(c, f) for c, f, _ in study_points.groups(own_models)} == {
        ("digits-cnn", "torch"),
        ("digits-keras-fit", "tensorflow"),
    }
    seed = [
        p for p in study_points.points(own_models, "digits-cnn", "torch", "cpu") if p.is_seed_size()
    ]
    assert {p.variant for p in seed} >= {"eager", "compile", "cuda_graph"}
    row = seed[0].as_row()
    assert row["axes"] == "batch,channels" and row["format_version"] == 3
    assert row["channels"] == 16 and "width" not in row
    # The program table: a plug-in's derivable variants run its own program.
    assert programs.program_of("digits-cnn", "torch", "cuda", "cuda_graph") == "plugin"
    assert "written for the seeds" in programs.not_applicable_reason(
        "digits-keras-fit", "tensorflow", "cpu", "train_on_batch"
    )
    assert programs.not_applicable_reason("digits-cnn", "tensorflow", "cpu", "eager")


def test_validating_a_validated_config_again_finds_the_plugin_from_the_repository(own_models):
    again = validate_config(copy.deepcopy(own_models))
    assert again["cases"] == own_models["cases"]


# -- bad plug-ins fail early, in one line naming the case and the key -------------------


def _bad(tmp_path, source="def build(device, batch, width):\n    pass\n", **case):
    cfg = _plugin_config(tmp_path, source, **case)
    with pytest.raises(ConfigError) as info:
        validate_config(cfg)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_missing_plugin_file_names_the_case_and_key(tmp_path):
    message = _bad(tmp_path, workload="no_such_plugin.py")
    assert message.startswith("config error at cases.mine.workload: plug-in file")
    assert "'no_such_plugin.py' not found" in message


def test_a_misspelled_entry_point_is_named_with_a_suggestion(tmp_path):
    message = _bad(tmp_path, "def biuld(device, batch, width):\n    pass\n")
    assert message.startswith("config error at cases.mine.entry:")
    assert "defines no function or class 'build'" in message
    assert "it defines 'biuld': rename it to 'build', or set cases.mine.entry: biuld" in message
    message = _bad(tmp_path, "def build(device, batch, width):\n    pass\n", entry="make")
    assert "no function or class 'make'" in message


def test_an_axis_the_entry_point_does_not_accept_is_named(tmp_path):
    message = _bad(tmp_path, "def build(device, batch):\n    pass\n")
    assert message.startswith("config error at cases.mine.axes.width:")
    assert "build(device, batch) in" in message and "takes no parameter 'width'" in message
    message = _bad(tmp_path, "def build(batch, width):\n    pass\n")
    assert "takes no parameter 'device'" in message
    message = _bad(tmp_path, "def build(device, batch, width, depth):\n    pass\n")
    assert "requires 'depth', which is neither device nor an axis" in message
    # **kwargs takes every axis; a default makes an extra parameter optional.
    for ok in (
        "def build(device, **sizes):\n    pass\n",
        "def build(device, batch, width, d=1): pass\n",
    ):
        validate_config(_plugin_config(tmp_path, ok))


def test_a_seed_size_missing_from_axes_is_named(tmp_path):
    message = _bad(tmp_path, axes={"batch": [8], "width": [1], "depth": [2]})
    assert message.startswith("config error at cases.mine.axes.depth:")
    assert "has no seed size" in message


def test_other_bad_cases_name_their_key(tmp_path):
    assert "does not parse (line 1" in _bad(tmp_path, "def build(:\n")
    unswept = _plugin_config(tmp_path, "def build(device, batch, width): pass\n")
    unswept["cases"]["mine"]["framework"] = "tensorflow"  # sweep.frameworks: [torch]
    with pytest.raises(ConfigError, match=r"^config error at cases.mine.framework: tensorflow"):
        validate_config(unswept)
    reserved = _bad(tmp_path, seed={"batch": 8, "status": 2}, axes={"batch": [8]})
    assert "cases.mine.seed.status: 'status' is a column of the study's timings table" in reserved
    # A field of a long table is a column too: the point's sizes are written beside it.
    for axis, table in (("op", "top_ops"), ("steps", "rnn_layers"), ("n", "products")):
        clash = _bad(tmp_path, seed={"batch": 8, axis: 2}, axes={"batch": [8]})
        assert f"cases.mine.seed.{axis}: '{axis}' is a column of the study's {table} table" in clash
    cfg = _plugin_config(tmp_path, "def build(device, batch, width): pass\n")
    cfg["cases"]["s001-mlp"] = {"workload": "x.py"}
    with pytest.raises(ConfigError, match=r"at cases.s001-mlp.workload: s001-mlp is a seed case"):
        validate_config(cfg)
    del cfg["cases"]["mine"]["seed"]
    cfg["cases"].pop("s001-mlp")
    with pytest.raises(ConfigError, match=r"at cases.mine: a case of your own needs seed"):
        validate_config(cfg)


@pytest.mark.slow
def test_snakemake_dry_run_stops_at_a_bad_plugin_with_one_line(tmp_path):
    cfg = _plugin_config(tmp_path, "def biuld(device, batch, width):\n    pass\n")
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(cfg))
    result = subprocess.run(
        [str(SNAKEMAKE), "-n", "--configfile", str(study), "--directory", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO_ROOT / "src")},
    )
    assert result.returncode != 0
    out = result.stdout + result.stderr
    lines = [line for line in out.splitlines() if "config error at cases.mine" in line]
    assert lines and "it defines 'biuld'" in lines[0], out[-2000:]
    assert not (tmp_path / "results").exists()  # nothing planned ran


# -- broken plug-ins while measuring: error rows, nothing else lost ---------------------


def test_a_plugin_that_raises_or_diverges_gives_its_rows_and_loses_nothing(tmp_path):
    cfg = validate_config(_plugin_config(tmp_path, BROKEN_TORCH, axes={"width": [1, 2, 3, 4, 5]}))
    journal, out = tmp_path / "j.jsonl", tmp_path / "out.csv"
    good = [PointSpec("mine", "torch", "cpu", "eager", {"batch": 8, "width": w}) for w in (1, 2)]
    first = run_group(_group("mine", good), journal, out, log=lambda _: None)
    assert [r["status"] for r in first] == ["ok", "ok"]

    every = study_points.points(cfg, "mine", "torch", "cpu")
    log = []
    rows = {r["width"]: r for r in run_group(_group("mine", every), journal, out, log=log.append)}
    # The points already journaled are kept, not measured again.
    assert rows[1]["run_id"] == first[0]["run_id"] and rows[2]["run_id"] == first[1]["run_id"]
    assert any("kept from run" in line for line in log)
    # A failure while building or stepping: an error row with the exception's last line
    # and where in the plug-in it was raised (issue 36).
    assert rows[3]["status"] == "error"
    assert rows[3]["message"] == (
        "ValueError: cannot build width 3 (raised in the plug-in at plugin.py:8 in build)"
    )
    assert rows[4]["status"] == "error"
    assert rows[4]["message"] == (
        "RuntimeError: step failed at width 4 (raised in the plug-in at plugin.py:17 in step)"
    )
    # A diverged program is recorded and flagged, not silently timed.
    assert rows[5]["status"] == "ok" and rows[5]["nonfinite_loss"] is True
    assert not math.isfinite(rows[5]["final_loss"]) and "diverged" in rows[5]["message"]
    assert rows[1]["nonfinite_loss"] is False
    # Every row names the plug-in file and its sha256; the table carries the axes.
    assert {r["workload_sha256"] for r in rows.values()} == {
        files.sha256_file(tmp_path / "plugin.py")
    }
    table = pd.read_csv(out)
    assert list(table["width"]) == [1, 2, 3, 4, 5] and set(table["axes"]) == {"batch,width"}
    assert "width" in table.columns[-2:].tolist() or "width" in table.columns


def test_a_plugin_that_fails_to_import_gives_error_rows(tmp_path):
    cfg = validate_config(
        _plugin_config(
            tmp_path,
            "raise ImportError('no module named mylib')\ndef build(device, batch, width): pass\n",
        )
    )
    rows = run_group(
        _group("mine", study_points.points(cfg, "mine", "torch", "cpu")),
        tmp_path / "j.jsonl",
        tmp_path / "out.csv",
        log=lambda _: None,
    )
    assert [r["status"] for r in rows] == ["error", "error"]
    assert {r["message"] for r in rows} == {
        "ImportError: no module named mylib (raised in the plug-in at plugin.py:1 in <module>)"
    }


def test_an_edited_plugin_is_measured_again(tmp_path):
    cfg = validate_config(_plugin_config(tmp_path, BROKEN_TORCH))
    journal, out = tmp_path / "j.jsonl", tmp_path / "out.csv"
    pts = study_points.points(cfg, "mine", "torch", "cpu")
    first = run_group(_group("mine", pts), journal, out, log=lambda _: None)
    (tmp_path / "plugin.py").write_text(BROKEN_TORCH + "\n# edited\n")
    second = run_group(_group("mine", pts), journal, out, log=lambda _: None)
    assert {r["run_id"] for r in first}.isdisjoint({r["run_id"] for r in second})


# -- variants derived from the user's step ----------------------------------------------


def _measure(case: str, framework: str, variant: str, sizes: dict, timing="synced") -> dict:
    from crossover_study.measure import frameworks
    from crossover_study.measure.point import measure_point

    frameworks.import_framework(framework, "cpu", 1)
    point = PointSpec(case, framework, "cpu", variant, sizes, timing)
    return measure_point(point, FAST, 0.0, 0.0, 1)


@pytest.mark.parametrize(
    "variant, status, expect",
    [
        ("eager", "ok", {"loss_read_every": 1}),
        ("read_loss_every_1000", "ok", {"loss_read_every": 1000}),
        ("read_loss_every_step", "not_applicable", "already reads the loss every 1 step"),
        ("copy_data_each_step", "ok", {"loss_read_every": 1}),
        ("cuda_graph", "not_applicable", "the CPU has none"),
        ("function", "not_applicable", "TensorFlow"),
        ("tf32", "not_applicable", "TF32"),
    ],
)
def test_torch_variants_are_derived_from_the_users_step(own_models, variant, status, expect):
    row = _measure("digits-cnn", "torch", variant, {"batch": 8, "channels": 4})
    assert row["status"] == status, row.get("message")
    if status == "ok":
        assert row["step_time_s"] > 0 and math.isfinite(row["final_loss"])
        assert row["nonfinite_loss"] is False
        for key, value in expect.items():
            assert row[key] == value
    else:
        assert expect in row["message"]


@pytest.mark.slow
def test_torch_compile_of_the_users_step(own_models):
    row = _measure("digits-cnn", "torch", "compile", {"batch": 8, "channels": 4})
    assert row["status"] == "ok", row.get("message")
    assert row["traces_first_step"] >= 1 and row["traces_timed"] == 0


@pytest.mark.parametrize(
    "variant, status, expect",
    [
        ("eager", "ok", None),
        ("xla", "ok", None),
        ("steps_per_execution", "ok", None),
        ("function", "not_applicable", "fit already runs its train step as a tf.function"),
        ("read_loss_every_1000", "not_applicable", "Keras 3 fit converts its logs"),
        ("copy_data_each_step", "not_applicable", "fit feeds its batches"),
        ("loop", "not_applicable", "fit has no step function"),
        ("compile", "not_applicable", "PyTorch"),
    ],
)
def test_keras_fit_variants(own_models, variant, status, expect):
    row = _measure("digits-keras-fit", "tensorflow", variant, {"batch": 256, "units": 8})
    assert row["status"] == status, row.get("message")
    if status == "ok":
        assert row["steps_per_call"] == 4  # 1 024 samples / 256 per step
        assert row["loss_read_every"] == (4 if variant == "steps_per_execution" else 1)
        assert math.isfinite(row["final_loss"])
    else:
        assert expect in row["message"]


TF_STEP = """
import numpy as np
import tensorflow as tf
from crossover_study.plugin import TFStep


def build(device, batch, width):
    w = tf.Variable(tf.zeros((width, 1)))
    opt = tf.keras.optimizers.SGD(0.01)
    x = np.ones((batch, width), np.float32)
    y = np.ones((batch, 1), np.float32)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((x @ w - y) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    return TFStep(step, data=(x, y), loss_read_every=10)
"""


@pytest.mark.parametrize(
    "variant, status, traced",
    [
        ("eager", "ok", False),
        ("function", "ok", True),
        ("xla", "ok", True),
        ("loop", "ok", True),
        ("read_loss_every_step", "ok", False),
        ("copy_data_each_step", "ok", False),
        ("steps_per_execution", "not_applicable", None),
    ],
)
def test_tensorflow_step_variants(tmp_path, variant, status, traced):
    validate_config(_plugin_config(tmp_path, TF_STEP, framework="tensorflow"))
    row = _measure("mine", "tensorflow", variant, {"batch": 8, "width": 2})
    assert row["status"] == status, row.get("message")
    if status == "ok":
        assert (row["traces_first_step"] is not None) == traced
        assert row["traces_timed"] in (None, 0)
        expected = {"read_loss_every_step": 1, "loop": 0}.get(variant, 10)
        assert row["loss_read_every"] == expected


# -- tables with any case's axes --------------------------------------------------------


def test_tables_carry_a_plugins_axes_and_validate_them(tmp_path, own_models):
    row = PointSpec("digits-cnn", "torch", "cpu", "eager", {"batch": 8, "channels": 4}).as_row()
    df = pd.DataFrame([{**row, "status": "ok"}])
    validate_timings(df)
    assert size_columns(df) == ("batch", "channels")
    with pytest.raises(TableError, match=r"column channels: '0' is not a positive whole size"):
        validate_timings(df.assign(channels="0"))
    with pytest.raises(TableError, match=r"undocumented column\(s\) \['depth'\]"):
        validate_timings(df.assign(depth=3))
    path = tmp_path / "job.csv"
    df.to_csv(path, index=False)
    back = read_job_tables([path])
    assert back["channels"].tolist() == [4] and back.columns[-1] == "channels"


def test_tables_of_format_1_read_the_seeds_axes():
    committed = pd.read_csv(REPO_ROOT / "results/reference/cpu-2core-2026-11-30/timings.csv")
    assert "axes" not in committed and "format_version" not in committed
    assert set(size_columns(committed)) <= {"batch", "width", "d_in", "hidden", "units", "seq_len"}
    assert "hidden" in size_columns(committed)
    json.dumps(list(size_columns(committed)))


def test_plugin_modules_import_neither_framework():
    code = "import sys; import crossover_study.plugin, crossover_study.study.cases; "
    code += "print('torch' in sys.modules, 'tensorflow' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={"PYTHONPATH": str(REPO_ROOT / "src")},
        timeout=60,
    )
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_own_models_study_file_is_the_readmes(own_models):
    readme = (REPO_ROOT / "README.md").read_text()
    assert "config/studies/own-models.yaml" in readme and "## Measure your own model" in readme
    assert OWN_MODELS.is_file()


def test_config_readme_lists_the_registrys_seed_sizes():
    text = (REPO_ROOT / "config" / "README.md").read_text()
    for name, case in cases.SEEDS.items():
        line = next(row for row in text.splitlines() if row.startswith(f"| `{name}` |"))
        for axis, value in case.seed.items():
            assert f"`{axis}` [{value}]" in line, (name, axis)


def test_adding_a_case_keeps_the_other_cases_config_hash(own_models):
    # Rows of a case carry its own hash: adding a case to the study (whose other cases
    # are not measured again) leaves their rows matching the manifest.
    alone = copy.deepcopy(own_models)
    del alone["cases"]["digits-keras-fit"]
    assert study_points.measurement_hash(alone, "digits-cnn") == study_points.measurement_hash(
        own_models, "digits-cnn"
    )
    assert study_points.measurement_hash(alone) != study_points.measurement_hash(own_models)
    edited = copy.deepcopy(own_models)
    edited["cases"]["digits-cnn"]["axes"]["batch"] = [8]
    assert study_points.measurement_hash(edited, "digits-cnn") != study_points.measurement_hash(
        own_models, "digits-cnn"
    )


@pytest.mark.parametrize(
    "fit, samples",
    [
        ({}, 100),
        ({"validation_split": 0.2}, 80),
        ({"validation_split": 0.25}, 75),
        # validation_data overrides the split (Keras trains on all of x then)
        ({"validation_split": 0.2, "validation_data": (np.zeros((3, 2)), np.zeros((3, 1)))}, 100),
    ],
)
def test_keras_fit_steps_count_only_the_training_samples(fit, samples):
    """fit(validation_split=s) trains on the first floor(len(x) * (1 - s)) samples: the
    steps per fit call (and so the step time) count those, not all of x."""
    pytest.importorskip("tensorflow")
    from crossover_study.plugin import KerasFit
    from crossover_study.workloads.plugin_tf import training_samples

    data = np.zeros((100, 2))
    program = KerasFit(model=None, x=data, y=data, batch_size=10, fit=fit)
    assert training_samples(program) == samples
