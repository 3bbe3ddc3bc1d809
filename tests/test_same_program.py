"""A remedy is recommended only if it computes the same thing (issue 38, item 3).

A plug-in's derived variant (TensorFlow ``function``/``xla``/``loop``, torch ``compile``)
is run beside the step as written from the same seed and compared: a step whose Python
state freezes at the trace is flagged ``same_program=False`` (still timed), a step that
cannot be traced is ``not_applicable`` with the reason, an honest step agrees; the
answers never recommend a flagged row and say it was left out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import iris_row
from test_plugins import FAST, _plugin_config

from crossover_study.analysis.shifts import remedy_shift
from crossover_study.answers.check_text import _remedies, _remedy_text
from crossover_study.answers.remedies import remedy_sentence, remedy_shift_sentence
from crossover_study.measure import frameworks
from crossover_study.measure.point import measure_point
from crossover_study.measure.same_program import (
    TOLERANCE,
    Trace,
    compare,
    same_program_columns,
    stage,
)
from crossover_study.study.config import validate_config
from crossover_study.study.spec import PointSpec

PLUGINS = Path(__file__).parent / "plugins"
SIZES = {"batch": 16, "units": 8}

#: An honest TensorFlow step as the seeds write theirs: a Keras MLP, Adam, GradientTape.
HONEST_TF = """
import numpy as np
import tensorflow as tf
from crossover_study.plugin import TFStep


def build(device, batch, units):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 16)).astype(np.float32)
    y = rng.standard_normal((batch, 1)).astype(np.float32)
    model = tf.keras.Sequential([tf.keras.Input(shape=(16,)),
                                 tf.keras.layers.Dense(units, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.Adam(1e-3)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return TFStep(step, data=(x, y))
"""


def _tf_case(tmp_path, source: str) -> None:
    validate_config(
        _plugin_config(tmp_path, source, framework="tensorflow", seed=SIZES, axes={"batch": [16]})
    )
    frameworks.import_framework("tensorflow", "cpu", 1)


def _point(variant: str, framework: str = "tensorflow", sizes=SIZES) -> PointSpec:
    return PointSpec("mine", framework, "cpu", variant, dict(sizes))


# -- the comparison ----------------------------------------------------------------------


def test_a_one_percent_smaller_learning_rate_differs_and_rounding_does_not():
    delta = [np.full((4, 3), 0.01, np.float32), np.full(3, -0.02, np.float32)]
    eager = Trace([1.0, 0.9, 0.8], delta)
    rounded = Trace([1.0 + 1e-7, 0.9, 0.8], [d * (1 + 1e-6) for d in delta])
    assert compare(eager, rounded, "tensorflow") == (True, None)
    smaller = Trace([1.0, 0.9, 0.8], [d * 0.99 for d in delta])  # θ moves by 1e-4 only
    same, message = compare(eager, smaller, "tensorflow")
    assert same is False
    assert message.startswith("its parameter changes over 3 steps differ from the step as")
    assert "1.0e-02" in message and "stays at its first value" in message
    assert TOLERANCE < 1e-2


def test_nan_losses_in_both_agree_and_in_one_differ():
    assert compare(Trace([1.0, np.nan]), Trace([1.0, np.nan]), "torch")[0] is True
    same, message = compare(Trace([1.0, np.nan]), Trace([1.0, 0.5]), "torch")
    assert same is False and message.startswith("its losses over 2 steps")


def test_seeds_and_other_variants_are_not_checked():
    class SeedWorkload:  # a seed's workload: ours, the same program by construction
        pass

    assert stage(_point("xla"), SeedWorkload()) is None
    assert same_program_columns(_point("xla"), SeedWorkload(), "before") == {}


# -- measured points of plug-ins ---------------------------------------------------------


@pytest.mark.parametrize("variant", ["function", "xla", "loop"])
def test_a_learning_rate_decayed_in_python_freezes_when_traced(tmp_path, variant):
    _tf_case(tmp_path, (PLUGINS / "tf_decaying_lr.py").read_text())
    row = measure_point(_point(variant), FAST, 0.0, 0.0, 1)
    assert row["status"] == "ok", row["message"]  # still timed
    assert row["same_program"] is False
    message = row["same_program_message"]
    assert "differ from the step as written" in message
    assert "traced once" in message and "a learning rate" in message
    assert row["same_program_s"] > 0


def test_the_step_as_written_is_not_checked(tmp_path):
    _tf_case(tmp_path, (PLUGINS / "tf_decaying_lr.py").read_text())
    row = measure_point(_point("eager"), FAST, 0.0, 0.0, 1)
    assert row["status"] == "ok" and "same_program" not in row


@pytest.mark.parametrize("variant", ["function", "xla"])
def test_an_honest_step_traces_to_the_same_program(tmp_path, variant):
    _tf_case(tmp_path, HONEST_TF)
    row = measure_point(_point(variant), FAST, 0.0, 0.0, 1)
    assert row["status"] == "ok", row["message"]
    assert row["same_program"] is True and row["same_program_message"] is None


@pytest.mark.parametrize("variant", ["function", "xla", "loop"])
def test_keras_fit_inside_the_step_cannot_be_traced(tmp_path, variant):
    _tf_case(tmp_path, (PLUGINS / "tf_fit_per_batch.py").read_text())
    row = measure_point(_point(variant), FAST, 0.0, 0.0, 1)
    assert row["status"] == "not_applicable", row
    assert row["message"].startswith(
        f"the step cannot be traced into a tf.function ({variant}): it calls Keras fit, "
        "which runs only eagerly"
    )
    assert "OperatorNotAllowedInGraphError" in row["message"]


def test_torch_compile_of_an_honest_step_is_the_same_program(tmp_path):
    from crossover_study.workloads.plugin_torch import TorchPluginWorkload
    from crossover_study.workloads.torch_base import compile_toolchain_missing

    missing = compile_toolchain_missing("cpu")
    if missing:
        pytest.skip(missing)
    import torch

    def build(device, batch, width):
        model = torch.nn.Sequential(
            torch.nn.Linear(width, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
        )
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        x, y = torch.randn(batch, width), torch.randn(batch, 1)

        def step(x, y):
            optimizer.zero_grad(set_to_none=True)
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()
            return loss

        from crossover_study.plugin import TorchStep

        return TorchStep(step, data=(x, y), optimizer=optimizer)

    sizes = {"batch": 8, "width": 4}
    workload = TorchPluginWorkload(build, "cpu", sizes, "compile")
    point = _point("compile", "torch", sizes)
    assert same_program_columns(point, workload, "before") == {}  # after the timed blocks
    columns = same_program_columns(point, workload, "after")
    assert columns["same_program"] is True, columns["same_program_message"]


# -- the answers -------------------------------------------------------------------------


def _row(variant, t, same=None, framework="tensorflow"):
    return iris_row(framework, variant, t, same_program=same)


def test_the_best_remedy_is_never_a_variant_that_computes_something_else():
    df = pd.DataFrame(
        [
            _row("eager", 20e-3),
            _row("loop", 0.07e-3, same=False),  # the fastest, but not the user's program
            _row("xla", 0.09e-3, same=False),
            _row("function", 2e-3, same=True),
        ]
    )
    # paired with eager (a remedy measured apart is never offered: issue 62)
    df = df.assign(interleaved=True, speedup=df["step_time_s"].rdiv(20e-3))
    df = df.assign(speedup_low=0.95 * df["speedup"], speedup_high=1.05 * df["speedup"])
    text = remedy_sentence(df, "s002-iris")
    assert (
        "tensorflow function takes 2 ms per step, 10.00\u00d7 faster than eager (20 ms; 95 % CI "
        "9.50–10.50)" in text
    )
    assert "loop, xla left out: they compute something else than the step as written" in text
    assert "tensorflow loop takes" not in text and "tensorflow xla takes" not in text


def test_only_differing_variants_leave_no_remedy_and_say_why():
    df = pd.DataFrame([_row("eager", 20e-3), _row("loop", 0.07e-3, same="False")])  # CSV text
    text = remedy_sentence(df, "s002-iris")
    assert "no tensorflow variant is a remedy (loop left out: it computes something else" in text
    assert "faster than eager" not in text


def test_the_checks_remedy_list_marks_a_differing_variant_not_a_remedy():
    df = pd.DataFrame([_row("eager", 20e-3), _row("loop", 0.07e-3, same=False)])
    listed = _remedies(df)["cpu"]
    loop = next(r for r in listed if r["variant"] == "loop")
    assert loop["remedy"] is False and loop["differs"] is True
    assert "not a remedy: it computes something else than the step as written" in (
        _remedy_text(loop)
    )


def test_the_remedy_shift_table_leaves_a_differing_variant_out():
    base = {"case": "s001-mlp", "framework": "tensorflow", "accelerator": "cuda"}
    crossover = pd.DataFrame(
        [
            {
                **base,
                "axis": "hidden",
                "variant": v,
                "outcome": "crossover",
                "crossover_size": s,
                "n_star_steps": 100.0,
                "speedup_at_seed": 2.0,
                "cpu_variant": v,
            }
            for v, s in (("eager", 512.0), ("loop", 64.0), ("xla", 256.0))
        ]
    )
    timings = pd.DataFrame(
        [
            {
                "case": "s001-mlp",
                "framework": "tensorflow",
                "variant": "loop",
                "same_program": False,
            },
            {"case": "s001-mlp", "framework": "tensorflow", "variant": "xla", "same_program": True},
        ]
    )
    assert set(remedy_shift(crossover)["variant"]) == {"loop", "xla"}
    shift = remedy_shift(crossover, timings)
    assert list(shift["variant"]) == ["xla"]
    text = remedy_shift_sentence(shift, "s001-mlp", timings)
    assert "tensorflow loop left out: it computes something else" in text
    assert "tensorflow loop on" not in text
