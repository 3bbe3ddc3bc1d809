"""An error says where it came from, and an allocation that fails is ``oom`` (issue 36,
item 6 and the OOM row): the row of a point whose program raised names the frame that
raised it and the plug-in's frame, with no machine path; the job's log holds the whole
traceback; a subclassed Keras model with its own ``train_step`` is measured through
``KerasFit`` like any other; a ``fit`` or ``compile`` key the study pins is refused once,
at config validation; the allocators' and the operating system's out-of-memory errors
are ``oom``."""

from __future__ import annotations

import errno
import math
import mmap
import re
from pathlib import Path

import pytest
from test_plugins import FAST, _bad, _plugin_config

from crossover_study.audit.hashes import MACHINE_PATH
from crossover_study.measure import frameworks
from crossover_study.measure.job import measure_job
from crossover_study.measure.point import frame_path, measure_point, raised_where
from crossover_study.plugin import KerasFit
from crossover_study.study import cases
from crossover_study.study.config import validate_config
from crossover_study.study.spec import PointSpec

SUBCLASSED = Path(__file__).parent / "plugins" / "subclassed_keras_fit.py"


def _raised(action) -> BaseException:
    try:
        action()
    except BaseException as exc:  # noqa: BLE001 - the exception is what is tested
        return exc
    raise AssertionError(f"{action} did not raise")


# -- out of memory ------------------------------------------------------------------------


def test_the_allocators_and_the_os_out_of_memory_errors_are_oom():
    import numpy as np
    import torch

    # Real errors, raised at once without allocating: 128 TiB is more than any machine
    # has (PyTorch's CPU allocator, NumPy, an anonymous mapping).
    torch_cpu = _raised(lambda: torch.empty(2**45))
    assert "DefaultCPUAllocator: can't allocate memory" in str(torch_cpu)
    assert type(torch_cpu) is RuntimeError  # not torch.OutOfMemoryError: text only
    numpy_error = _raised(lambda: np.empty(2**50))
    assert str(numpy_error).startswith("Unable to allocate")
    mapping = _raised(lambda: mmap.mmap(-1, 2**50))
    assert isinstance(mapping, OSError) and mapping.errno == errno.ENOMEM
    for exc in (torch_cpu, numpy_error, mapping, MemoryError()):
        assert frameworks.is_oom(exc), repr(exc)
    # The texts when another type carries them (a plug-in's wrapper, a C++ library).
    for text in (
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
        "memory: you tried to allocate 32212254720 bytes. Error code 12 (Cannot allocate "
        "memory)",
        "[Errno 12] Cannot allocate memory",
        "Unable to allocate 30.0 GiB for an array with shape (4026531840,) and data type float64",
        "std::bad_alloc",
        "OOM when allocating tensor with shape[4194304,4194304] and type float on "
        "/job:localhost/replica:0/task:0/device:CPU:0 by allocator mklcpu",
    ):
        assert frameworks.is_oom(RuntimeError(text)), text
    assert frameworks.is_oom(OSError(errno.ENOMEM, "Cannot allocate memory"))
    # Not every failure is one.
    for exc in (
        IndexError("list index out of range"),
        OSError(errno.ENOENT, "No such file or directory"),
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (3x3 and 2x1)"),
    ):
        assert not frameworks.is_oom(exc), repr(exc)


def test_tensorflows_cpu_allocation_failure_is_oom():
    tf = frameworks.import_framework("tensorflow", "cpu", 1)  # threads before TF starts
    exc = _raised(lambda: tf.zeros((2**22, 2**22)))  # 64 TiB of float32, refused at once
    assert "OOM when allocating" in str(exc)
    assert frameworks.is_oom(exc)


TORCH_OOM = """
import torch
from crossover_study.plugin import TorchStep


def build(device, batch, width):
    model = torch.nn.Linear(width, 1)

    def step():
        grown = torch.empty(2**45)  # 128 TiB: PyTorch's CPU allocator refuses it
        return model(grown[:width]).sum()

    return TorchStep(step)
"""


def test_a_point_whose_allocation_fails_is_an_oom_row_naming_the_plugin_line(tmp_path):
    validate_config(_plugin_config(tmp_path, TORCH_OOM))
    frameworks.import_framework("torch", "cpu", 1)
    point = PointSpec("mine", "torch", "cpu", "eager", {"batch": 8, "width": 2})
    row = measure_point(point, FAST, 0.0, 0.0, 1)
    assert row["status"] == "oom", row["message"]
    assert "can't allocate memory" in row["message"]
    assert row["message"].endswith("(raised in the plug-in at plugin.py:10 in step)")


# -- where an error was raised ------------------------------------------------------------


def test_frame_paths_are_never_the_machines():
    assert frame_path("/opt/venv/lib/python3.11/site-packages/keras/src/x.py") == "keras/src/x.py"
    assert frame_path("/usr/lib/python3/dist-packages/numpy/core/a.py") == "numpy/core/a.py"
    assert frame_path("<frozen importlib._bootstrap>") == "<frozen importlib._bootstrap>"
    here = frame_path(__file__)
    assert here == "tests/test_point_errors.py"
    assert frame_path("/somewhere/else/my_model.py") == "my_model.py"
    import json

    assert frame_path(json.__file__) == "json/__init__.py"


TORCH_SHAPES = """
import torch
from crossover_study.plugin import TorchStep


def build(device, batch, width):
    model = torch.nn.Linear(width, 1)
    x = torch.randn(batch, width + 1)  # one feature too many

    def step(x):
        return model(x).sum()

    return TorchStep(step, data=(x,))
"""


def test_an_error_row_names_the_librarys_frame_and_the_plugins(tmp_path):
    validate_config(_plugin_config(tmp_path, TORCH_SHAPES))
    frameworks.import_framework("torch", "cpu", 1)
    point = PointSpec("mine", "torch", "cpu", "eager", {"batch": 8, "width": 2})
    row = measure_point(point, FAST, 0.0, 0.0, 1)
    assert row["status"] == "error"
    message = row["message"]
    assert message.startswith("RuntimeError: mat1 and mat2 shapes cannot be multiplied")
    assert re.search(
        r" \(raised at torch/nn/modules/linear\.py:\d+ in forward; plug-in: plugin\.py:11 "
        r"in step\)$",
        message,
    ), message
    assert not MACHINE_PATH.search(message), message


def test_raised_where_without_a_plugin_names_the_innermost_frame():
    def inner():
        return [][0]

    exc = _raised(inner)
    line = inner.__code__.co_firstlineno + 1
    assert raised_where(exc) == f"raised at tests/test_point_errors.py:{line} in inner"
    assert raised_where(exc, __file__) == (
        f"raised in the plug-in at tests/test_point_errors.py:{line} in inner"
    )
    assert raised_where(IndexError("never raised")) is None


def test_the_job_log_holds_the_whole_traceback(tmp_path):
    from test_plugins import BROKEN_TORCH

    study = _plugin_config(tmp_path, BROKEN_TORCH, axes={"batch": [8], "width": [2, 4]})
    study["timing"] = {
        "min_block_s": 0.01,
        "blocks": 3,
        "max_warmup_s": 0.1,
        "max_point_s": 1,
        "sync_check_s": 0,
    }
    out = {k: tmp_path / f"job.{k}" for k in ("csv", "probe", "journal", "log")}
    rows = measure_job(study, "mine", "torch", "cpu", 0, 1, *out.values())
    assert [r["status"] for r in rows] == ["ok", "error"]
    log = out["log"].read_text()
    assert "mine|torch|cpu|eager|batch=8,width=4: error, the exception's traceback:" in log
    trace = log.split("the exception's traceback:", 1)[1]
    assert trace.lstrip().startswith("Traceback (most recent call last):")
    assert "harness.py" in trace and "in time_block" in trace  # the library's frames
    assert 'plugin.py", line 17, in step' in trace  # and the plug-in's
    assert "RuntimeError: step failed at width 4" in trace


# -- a subclassed Keras model with its own train_step -------------------------------------


def _subclassed(tmp_path, source: str | None = None) -> None:
    validate_config(
        _plugin_config(
            tmp_path,
            source or SUBCLASSED.read_text(),
            framework="tensorflow",
            seed={"batch": 64, "units": 8},
            axes={"batch": [64], "units": [8]},
        )
    )
    frameworks.import_framework("tensorflow", "cpu", 1)


@pytest.mark.parametrize("variant", ["eager", "xla", "steps_per_execution"])
def test_a_subclassed_keras_model_with_its_own_train_step_is_measured(tmp_path, variant):
    _subclassed(tmp_path)
    point = PointSpec("mine", "tensorflow", "cpu", variant, {"batch": 64, "units": 8})
    row = measure_point(point, FAST, 0.0, 0.0, 1)
    assert row["status"] == "ok", row["message"]
    assert row["step_time_s"] > 0 and row["steps_per_call"] == 4  # 256 samples / 64
    assert math.isfinite(row["final_loss"]) and row["nonfinite_loss"] is False
    assert row["traces_timed"] == 0


NO_LOSS = """
import numpy as np
import tensorflow as tf
from tensorflow import keras
from crossover_study.plugin import KerasFit


class Mine(keras.Model):
    def __init__(self, units):
        super().__init__()
        self.dense = keras.layers.Dense(units)

    def call(self, x):
        return self.dense(x)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            total = tf.reduce_mean((self(x) - y) ** 2)
        grads = tape.gradient(total, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"total": total}  # its loss under a name of its own


def build(device, batch, units):
    x = np.ones((128, 4), np.float32)
    return KerasFit(Mine(units), x, np.ones((128, units), np.float32), batch_size=batch,
                    compile={"optimizer": "sgd"})
"""


def test_a_train_step_that_reports_no_loss_is_not_called_diverged(tmp_path):
    _subclassed(tmp_path, NO_LOSS)
    point = PointSpec("mine", "tensorflow", "cpu", "eager", {"batch": 64, "units": 8})
    row = measure_point(point, FAST, 0.0, 0.0, 1)
    assert row["status"] == "ok", row["message"]
    assert row["final_loss"] is None and row["nonfinite_loss"] is None
    assert row["message"] is None


# -- builder arguments the study pins ------------------------------------------------------

KERAS_FIT = """
from crossover_study.plugin import KerasFit
from crossover_study import plugin

SETTINGS = {{"shuffle": True, "steps_per_epoch": 2}}


def build(device, batch, width):
    return {call}
"""


@pytest.mark.parametrize(
    "call, line, argument, key",
    [
        ('KerasFit(m, x, y, batch_size=batch, fit={"epochs": 5})', 9, "fit", "epochs"),
        ("KerasFit(m, x, y, batch, fit=dict(verbose=1, shuffle=False))", 9, "fit", "verbose"),
        ("KerasFit(m, x, y, batch, fit=SETTINGS)", 9, "fit", "steps_per_epoch"),
        ('KerasFit(m, x, y, batch, {}, {**SETTINGS, "epochs": 1})', 9, "fit", "epochs"),
        ("plugin.KerasFit(m, x, y, batch, fit=dict(initial_epoch=2))", 9, "fit", "initial_epoch"),
        (
            'KerasFit(m, x, y, batch, compile={"loss": "mse", "jit_compile": True})',
            9,
            "compile",
            "jit_compile",
        ),
    ],
)
def test_a_pinned_fit_or_compile_key_is_refused_at_validation(tmp_path, call, line, argument, key):
    message = _bad(tmp_path, KERAS_FIT.format(call=call))
    pinned = KerasFit.PINNED_FIT if argument == "fit" else KerasFit.PINNED_COMPILE
    assert message == (
        f"config error at cases.mine.workload: {cases.stored_path(tmp_path / 'plugin.py')} line "
        f"{line}: KerasFit's {argument} sets {key!r}, which the study pins "
        f"({', '.join(pinned)}: every device runs the same program); leave it out of {argument}"
    )


def test_unpinned_fit_and_compile_keys_pass_validation(tmp_path):
    for call in (
        'KerasFit(m, x, y, batch, fit={"shuffle": True, "validation_data": (x, y)})',
        'KerasFit(m, x, y, batch, compile={"loss": "mse"}, fit=dict(callbacks=[]))',
        "KerasFit(m, x, y, batch, fit=make_fit())",  # computed: KerasFit checks it
        "KerasFit(*args, fit=unknown)",
    ):
        validate_config(_plugin_config(tmp_path, KERAS_FIT.format(call=call)))


def test_keras_fit_refuses_initial_epoch_when_built():
    with pytest.raises(ValueError, match=r"KerasFit.fit must not set initial_epoch"):
        KerasFit(object(), [1], [1], batch_size=1, fit={"initial_epoch": 1})
