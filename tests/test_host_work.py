"""Host work an accelerator cannot take stays in the answer (issue 62): the user's own
reads back and host-side data, counted with their lines; tracing and the input pipeline
in the predicted step; variants predicted only where they can be the same program;
emulated precision named; a failed variant's message in one line."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from test_device_cards import _card, _work
from test_plugins import FAST, _plugin_config

from crossover_study.analysis.card_prediction import predict_cards
from crossover_study.analysis.card_variants import not_same_program
from crossover_study.answers.check_text import _remedy_text
from crossover_study.answers.host_side import host_side_text, input_text, precision_text
from crossover_study.answers.predicted import check_line
from crossover_study.core import cpu_flags
from crossover_study.measure import frameworks, input_pipeline, precision_probe
from crossover_study.measure.point import error_line, measure_point
from crossover_study.stepmodel import host_calls
from crossover_study.stepmodel.card_model import (
    NotPriced,
    capture_obstacle,
    host_parts_s,
    price,
    work_of_row,
)
from crossover_study.stepmodel.counts import count_point
from crossover_study.stepmodel.counts_torch import count_torch_step
from crossover_study.study.config import validate_config
from crossover_study.study.device_cards import load_cards
from crossover_study.study.spec import PointSpec

PLUGINS = Path(__file__).parent / "plugins"


def _built(tmp_path, plugin: str, **sizes):
    """The eager CPU workload of a plug-in file, built and run for two steps."""
    source = (PLUGINS / plugin).read_text()
    axes = {k: [v] for k, v in sizes.items()}
    validate_config(_plugin_config(tmp_path, source, seed=sizes, axes=axes))
    workload = frameworks.make_workload(PointSpec("mine", "torch", "cpu", "eager", sizes), 1)
    workload.setup()
    workload.run(2)
    workload.sync()
    return workload


# -- item 3: the user's own reads, with their lines; item 2: host-side data ------------


def test_the_users_own_reads_and_host_data_are_counted_with_their_lines(tmp_path):
    workload = _built(tmp_path, "torch_replay_reads.py", batch=8, hidden=16)
    counts = count_point(workload, "torch", "cpu")
    source = (PLUGINS / "torch_replay_reads.py").read_text().splitlines()
    item_line = next(i for i, line in enumerate(source, 1) if "loss.item()" in line)
    # loss.item() and accuracy.item() on one line: two reads a step, the library's own
    # loss read (loss_read_every) not among them.
    assert counts["step_host_reads"] == 2
    assert counts["step_host_reads_where"] == f".item() at plugin.py:{item_line} (2 per step)"
    data = counts["step_host_data_where"]
    assert "NumPy at plugin.py:" in data and "Python's random at plugin.py:" in data
    assert "torch.as_tensor from host data at plugin.py:" in data


def test_a_step_that_reads_nothing_itself_counts_no_reads():
    """A step whose loss only the library reads: no read is the user's."""
    model = torch.nn.Linear(4, 1)
    x = torch.randn(8, 4)
    watch = host_calls.HostCalls()
    with watch:
        count_torch_step(lambda: model(x).sum().backward(), 1, "cpu", watch)
    assert sum(watch.reads.values()) == 0 and not watch.host_data
    # The same read made from a file of the user's is counted: float(t) through the op
    # counter, .numpy() through its C call.
    with watch:
        count_torch_step(
            lambda: (float(model(x).detach().sum()), model(x).detach().numpy()), 1, "cpu", watch
        )
    kinds = {what for what, _ in watch.reads}
    assert kinds == {"a scalar read (.item(), float(t), bool(t))", ".numpy()"}
    assert all(where.startswith("test_host_work.py:") for _, where in watch.reads)


def test_library_frames_are_not_the_users():
    assert not host_calls.is_user_file(np.__file__)
    assert not host_calls.is_user_file(host_calls.__file__)
    assert not host_calls.is_user_file("<string>")
    assert host_calls.is_user_file(__file__)


def test_reads_are_priced_as_syncs_and_named_in_the_why(tmp_path):
    card = _card(
        tmp_path, sync_s={"low": 1e-3, "high": 1e-3, "kind": "published", "sources": ["s"]}
    )
    row = {
        "framework": "torch", "variant": "eager", "step_ops": 40, "step_flops": 1e7,
        "step_mem_bytes": 8e4, "step_time_s": 0.01, "loss_read_every": 0,
        "step_host_reads": 2.0, "step_host_reads_where": ".item() at mine.py:49 (2 per step)",
    }  # fmt: skip
    work = work_of_row(row)
    assert work.syncs == 2.0 and work.host_reads == 2.0
    central = price(work, card, end="central")
    assert central.sync_s == pytest.approx(2e-3) and central.regime == "sync-bound"
    why = host_side_text(pd.Series(row))
    assert "your own code reads 2 values back each step (.item() at mine.py:49" in why
    assert "read-less remedy changes only its own loss read" in why


# -- item 2: a variant is predicted only where it can be the same program --------------


def test_a_cuda_graph_is_not_priced_for_a_step_with_host_work(tmp_path):
    card = _card(tmp_path)
    assert price(_work(), card, "cuda_graph").step_s > 0  # a step of device work only
    for changes in (
        {"host_reads_where": ".item() at mine.py:49 (2 per step)"},
        {"host_data_where": "NumPy at mine.py:37 (1 per step)"},
    ):
        work = _work(**changes)
        with pytest.raises(NotPriced, match="not possible for this step, because it"):
            price(work, card, "cuda_graph")
        assert capture_obstacle(work).endswith(
            "(2 per step))" if "reads" in str(changes) else "(1 per step))"
        )


def test_a_predicted_variant_that_differs_from_the_step_is_not_priced():
    cpu = pd.Series({"variant": "loop", "same_program": False, "same_program_message": "Δθ 72 %"})
    assert "loop is not the same program (Δθ 72 %)" in not_same_program(cpu, "loop")
    eager = pd.Series({"variant": "eager", "same_program": None})
    assert not_same_program(eager, "eager") is None
    assert not_same_program(eager, "cuda_graph") is None
    assert "Python-side state changes each call" in not_same_program(eager, "cuda_graph", "loop")


def test_the_check_line_says_why_a_cuda_graph_is_not_possible(tmp_path):
    validate_config(_plugin_config(tmp_path, "def build(device, batch, width): pass"))
    head = {"batch": 8, "width": 2, "device_class": "cuda","card": "t4", "device_name": "NVIDIA T4", "case": "mine", "framework": "torch",
            "cpu_variant": "eager", "predicted_low_s": 1e-3, "predicted_high_s": 3e-3,
            "regime": "launch-bound", "speedup": 2.0, "speedup_low": 1.5, "speedup_high": 3.0,
            "cpu_step_time_s": 4e-3, "direction": "faster", "kind": "prediction"}  # fmt: skip
    predicted = pd.DataFrame(
        [
            {**head, "variant": "eager", "predicted_step_s": 2e-3, "not_priced": None},
            {**head, "variant": "cuda_graph", "predicted_step_s": None,
             "not_priced": "not possible for this step, because it reads values back"},
        ]
    )  # fmt: skip
    line = check_line(predicted, "mine", "t4")
    assert line.endswith("; cuda_graph not possible for this step, because it reads values back")


# -- item 1: host work stays on the host ------------------------------------------------


def test_tracing_is_host_work_and_the_input_pipeline_bounds_the_step(tmp_path):
    row = {"attr_ops_s": 1.0, "attr_python_s": 0.0, "attr_data_s": 0.0, "attr_trace_s": 3.0,
           "attr_fit_s": 0.0, "attr_wait_s": 0.0, "attr_unattributed_s": 0.0,
           "step_time_s": 0.04}  # fmt: skip
    assert host_parts_s(row)["trace"] == pytest.approx(0.03)
    card = _card(tmp_path)
    fast = price(_work(), card, end="central")
    slow_input = price(_work(input_s=5e-3), card, end="central")
    assert fast.step_s < 1e-3
    assert slow_input.step_s == pytest.approx(5e-3) and slow_input.regime == "input-bound"


def test_the_input_pipeline_is_timed_alone_and_named(tmp_path):
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(640, 4)), batch_size=8
    )
    batches = iter(loader)

    def step():
        return next(batches)

    class Program:
        pass

    program = Program()
    program.step = step
    workload = type("W", (), {"program": program})()
    found = input_pipeline.find_iterators(workload)
    assert [(kind, name) for kind, name, _ in found] == [("DataLoader iterator", "batches")]
    columns = input_pipeline.pipeline_columns(workload)
    assert columns["input_pipeline"] == "DataLoader iterator `batches`"
    assert 0 < columns["input_batch_s"] < 0.1
    row = pd.Series(
        {"input_batch_s": 3e-3, "step_time_s": 4e-3, "input_pipeline": "tf.data iterator `batches`"}
    )
    assert input_text(row).startswith(
        "the input pipeline alone (tf.data iterator `batches`) takes 3 ms per batch, 75 %"
    )
    assert input_text(row.copy().replace(3e-3, 1e-4)) == ""


def test_an_iterator_that_ends_gives_what_it_timed_or_nothing():
    assert input_pipeline.time_batches(iter(range(3))) is None  # 2 timed calls: too few
    assert input_pipeline.time_batches(iter(range(10))) is not None


# -- item 6: emulated precision -----------------------------------------------------------


def test_emulated_precision_is_read_from_the_cpus_flags():
    assert cpu_flags.emulated("bf16", frozenset({"avx2", "fma"})) is True
    assert cpu_flags.emulated("bf16", frozenset({"avx2", "avx512_bf16"})) is False
    assert cpu_flags.emulated("fp16", frozenset({"amx_fp16"})) is False
    assert cpu_flags.emulated("fp32", frozenset({"avx2"})) is None


def test_an_autocast_step_counts_its_products_in_bf16_and_the_card_prices_them_there(tmp_path):
    model = torch.nn.Linear(64, 64)
    x = torch.randn(32, 64)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()

    assert count_torch_step(step).flops_precision == "bf16"
    assert count_torch_step(lambda: model(x).sum().backward()).flops_precision == "fp32"
    card = _card(tmp_path)  # fp32 10 TFLOP/s, no bf16 peak: priced at fp32's
    big = dict(kernels=1.0, products=((1e10, 1.0),), elementwise=(), flops=1e10, mem_bytes=0.0)
    assert price(_work(**big, precision="bf16"), card).compute_s == pytest.approx(1e-3)
    card.raw["datasheet"]["bf16_flop_per_s"]["value"] = 1e14
    assert price(_work(**big, precision="bf16"), card).compute_s == pytest.approx(1e-4)
    row = pd.Series({"step_flops_emulated": True, "step_flops_precision": "bf16"})
    assert precision_text(row).startswith("the products run in bf16, which this CPU emulates")
    assert "AVX512-BF16, AMX-BF16" in precision_text(row)
    assert precision_text(pd.Series({"step_flops_emulated": False})) == ""


# -- item 8: a failed variant's message ---------------------------------------------------


def test_a_failed_variants_message_is_one_line_with_its_type():
    long = "Attempted to call function marked as skipped\n  Explanation: " + "x" * 3000
    try:
        raise torch._dynamo.exc.Unsupported(long)  # noqa: SLF001 - the error users meet
    except Exception as exc:  # noqa: BLE001
        line = error_line(exc)
    assert line == "torch._dynamo.exc.Unsupported: Attempted to call function marked as skipped"
    assert error_line(RuntimeError("\n\n  first words\nmore")) == "RuntimeError: first words"
    old = {
        "variant": "compile",
        "status": "error",
        "message": "nsor call Explanation:\n" + "y\n" * 25,
    }
    text = _remedy_text(old)
    assert "\n" not in text and len(text) < 330


def test_host_calls_restore_the_previous_profile_function():
    seen = []
    previous = lambda frame, event, arg: seen.append(event)  # noqa: E731
    sys.setprofile(previous)
    try:
        with host_calls.HostCalls():
            pass
        assert sys.getprofile() is previous
    finally:
        sys.setprofile(None)


def test_tensorflow_reads_are_counted_with_their_lines():
    tf = frameworks.import_framework("tensorflow", "cpu", 1)  # the threads others expect
    v = tf.Variable(1.0)
    watch = host_calls.HostCalls()
    with watch:
        loss = v * 2.0
        loss.numpy(), float(loss)
    assert {what for what, _ in watch.reads} == {".numpy()", "float(t)"}


# -- the plug-ins written for issue 62, measured --------------------------------------


def _tf_plugin(tmp_path, plugin: str) -> PointSpec:
    sizes = {"batch": 16, "units": 8}
    source = (PLUGINS / plugin).read_text()
    validate_config(
        _plugin_config(tmp_path, source, framework="tensorflow", seed=sizes, axes={"batch": [16]})
    )
    frameworks.import_framework("tensorflow", "cpu", 1)
    return PointSpec("mine", "tensorflow", "cpu", "eager", sizes)


def test_a_step_that_retraces_every_call_is_predicted_as_slow_as_its_tracing(tmp_path):
    point = _tf_plugin(tmp_path, "tf_retrace_each_call.py")
    row = measure_point(point, FAST, 0.0, 0.0, 1)
    assert row["status"] == "ok", row["message"]
    assert row["attr_dominant"] == "trace"
    cpu = {**row, "case": "mine", "framework": "tensorflow", "device": "cpu",
           "variant": "eager", "timing": "synced", "replicas": 1, **point.sizes}  # fmt: skip
    predicted = predict_cards(pd.DataFrame([cpu]), load_cards(["t4"]))
    eager = predicted[predicted["variant"] == "eager"].iloc[0]
    # Tracing runs on the host: the T4's step keeps it (before: 163× faster, VALIDATION).
    assert eager["regime"] == "host-bound"
    assert eager["predicted_low_s"] > 0.5 * row["step_time_s"]


def test_a_tf_data_pipeline_the_step_reads_is_timed_alone(tmp_path):
    point = _tf_plugin(tmp_path, "tf_data_numpy_map.py")
    workload = frameworks.make_workload(point, 1)
    workload.setup()
    workload.run(2)
    columns = input_pipeline.pipeline_columns(workload)
    assert columns["input_pipeline"] == "tf.data iterator `batches`"
    assert columns["input_batch_s"] > 0
    workload.run(2)  # the step goes on reading from where the probe left the iterator


def test_the_replay_plugins_counts_leave_no_cuda_graph(tmp_path):
    workload = _built(tmp_path, "torch_replay_reads.py", batch=8, hidden=16)
    counts = count_point(workload, "torch", "cpu")
    work = work_of_row({**counts, "framework": "torch", "variant": "eager", "step_time_s": 1e-3})
    assert work.syncs >= 2  # the user's two reads, besides the library's loss read
    assert capture_obstacle(work).startswith(
        "not possible for this step, because it reads values back to the host (.item() at"
    )


def test_the_cpus_fp32_remedy_is_measured_paired_with_the_step_as_written(tmp_path):
    workload = _built(tmp_path, "torch_autocast_mlp.py", batch=16, hidden=64)
    counts = count_point(workload, "torch", "cpu")
    assert counts["step_flops_precision"] == "bf16"
    with precision_probe.autocast_off():
        assert count_point(workload, "torch", "cpu")["step_flops_precision"] == "fp32"
    columns = precision_probe.fp32_columns(workload, 4)
    assert columns["fp32_step_s"] > 0
    assert columns["fp32_speedup_low"] <= columns["fp32_speedup"] <= columns["fp32_speedup_high"]
    row = pd.Series({**columns, "step_flops_emulated": True, "step_flops_precision": "bf16"})
    assert "measured: without autocast the same step takes" in precision_text(row)
    assert "paired with the step as written" in precision_text(row)
