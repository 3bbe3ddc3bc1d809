"""Issue 51 item 4: ``KerasFit`` takes what Keras ``fit`` takes: ``x`` and ``y`` as one
array, a list or tuple of arrays (a model of several inputs) or a dict of named arrays,
``validation_data`` of the same structures, the sample count checked across all of them;
data of no known length (a generator, a ``tf.data.Dataset``) is refused in one line that
says what to pass instead."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from crossover_study.plugin import KerasFit, sample_count
from crossover_study.study.config import validate_config
from crossover_study.study.points import TimingPolicy
from crossover_study.study.spec import PointSpec

FAST = TimingPolicy(min_block_s=0.01, n_blocks=3, max_warmup_s=0.1, max_point_s=1, sync_check_s=0)

#: A functional model of two inputs, fitted as Keras documents it.
TWO_INPUTS = """
import numpy as np
from tensorflow import keras

from crossover_study.plugin import KerasFit


def build(device, batch, width):
    a_in, b_in = keras.Input((width,)), keras.Input((3,))
    merged = keras.layers.Concatenate()([keras.layers.Dense(4)(a_in), b_in])
    model = keras.Model([a_in, b_in], keras.layers.Dense(1)(merged))
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(64, width)), rng.normal(size=(64, 3))
    y = rng.normal(size=(64, 1))
    va, vb, vy = a[:16], b[:16], y[:16]
    return KerasFit(
        model, [a, b], y, batch_size=batch, compile={"optimizer": "sgd", "loss": "mse"},
        fit={"validation_data": ([va, vb], vy)},
    )
"""

#: A model whose inputs are named, fitted with a dict of arrays.
DICT_INPUTS = """
import numpy as np
from tensorflow import keras

from crossover_study.plugin import KerasFit


def build(device, batch, width):
    ins = {"feat": keras.Input((width,), name="feat"), "aux": keras.Input((2,), name="aux")}
    merged = keras.layers.Concatenate()([ins["feat"], ins["aux"]])
    model = keras.Model(ins, keras.layers.Dense(1)(merged))
    rng = np.random.default_rng(0)
    x = {"feat": rng.normal(size=(48, width)), "aux": rng.normal(size=(48, 2))}
    y = rng.normal(size=(48, 1))
    return KerasFit(model, x, y, batch_size=batch, compile={"optimizer": "sgd", "loss": "mse"})
"""


def _measure_plugin(tmp_path, source: str, name: str) -> dict:
    """The eager point of a one-case TensorFlow study of ``source`` at batch 16, width 4."""
    from crossover_study.measure import frameworks
    from crossover_study.measure.point import measure_point

    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    validate_config(
        {
            "study": "inputs",
            "sweep": {"frameworks": ["tensorflow"], "devices": ["cpu"], "variants": ["eager"]},
            "cases": {
                name: {
                    "workload": str(tmp_path / f"{name}.py"),
                    "framework": "tensorflow",
                    "seed": {"batch": 16, "width": 4},
                }
            },
        }
    )
    frameworks.import_framework("tensorflow", "cpu", 1)
    point = PointSpec(name, "tensorflow", "cpu", "eager", {"batch": 16, "width": 4})
    return measure_point(point, FAST, 0.0, 0.0, 1)


@pytest.mark.parametrize(
    ("source", "name", "steps"),
    [(TWO_INPUTS, "two-inputs", 4), (DICT_INPUTS, "dict-inputs", 3)],
)
def test_a_model_of_several_inputs_is_measured(tmp_path, source, name, steps):
    row = _measure_plugin(tmp_path, source, name)
    assert row["status"] == "ok", row.get("message")
    assert row["steps_per_call"] == steps  # 64 (48) samples in batches of 16
    assert row["step_time_s"] > 0 and row["loss_read_every"] == 1  # fit reads it every step


def test_sample_counts_of_every_structure_fit_takes():
    a, b = np.zeros((10, 3)), np.zeros((10, 1))
    assert sample_count(a) == 10
    assert sample_count([a, b]) == sample_count((a, b)) == sample_count({"p": a, "q": b}) == 10
    assert sample_count({"nested": [a, b]}) == 10


@pytest.mark.parametrize(
    ("x", "message"),
    [
        ([np.zeros((10, 3)), np.zeros((9, 1))], r"KerasFit.x: its arrays hold different sample counts \(0: 10, 1: 9\)"),
        ({"a": np.zeros((4, 1)), "b": np.zeros((5, 1))}, r"KerasFit.x: its arrays hold different sample counts \('a': 4, 'b': 5\)"),
        ((r for r in range(3)), r"KerasFit.x is a generator, whose length the library cannot know before fit runs"),
        ([], r"KerasFit.x is empty"),
        (3.0, r"KerasFit.x is a float, not an array"),
    ],
)  # fmt: skip
def test_data_fit_takes_but_the_library_cannot_time_is_refused_in_one_line(x, message):
    with pytest.raises(ValueError, match=message) as refused:
        KerasFit(model=None, x=x, y=np.zeros((10, 1)), batch_size=2)
    assert "\n" not in str(refused.value)
    assert "pass arrays" in str(refused.value) or "sample counts" in str(refused.value)


def test_a_tf_data_dataset_is_refused_and_says_what_to_pass():
    tf = pytest.importorskip("tensorflow")
    dataset = tf.data.Dataset.from_tensor_slices(np.zeros((8, 2))).batch(2)
    with pytest.raises(ValueError, match=r"KerasFit.x is a .*Dataset.*pass arrays"):
        KerasFit(model=None, x=dataset, y=np.zeros((8, 1)), batch_size=2)


def test_validation_data_is_checked_like_the_training_data():
    x, y = [np.zeros((8, 2)), np.zeros((8, 1))], np.zeros((8, 1))
    ok = KerasFit(
        None,
        x,
        y,
        2,
        fit={"validation_data": ([np.zeros((3, 2)), np.zeros((3, 1))], np.zeros((3, 1)))},
    )
    assert ok.batch_size == 2
    with pytest.raises(ValueError, match="validation_data's x has 3 samples but its y has 4"):
        KerasFit(
            None,
            x,
            y,
            2,
            fit={"validation_data": ([np.zeros((3, 2)), np.zeros((3, 1))], np.zeros((4, 1)))},
        )
    with pytest.raises(ValueError, match=r"give \(x_val, y_val\)"):
        KerasFit(None, x, y, 2, fit={"validation_data": np.zeros((3, 2))})
