"""Measured attribution of a step (issue 38, items 1, 2 and 6).

The tree arithmetic is checked on hand-built event trees; the categories on the
plug-ins of tests/plugins/, each written in a pattern the seeds do not have and with a
cost a profile must find (Keras fit called per batch, a tf.function retraced for a
Python learning rate, a DataLoader, a per-sample NumPy loop), measured for real; the
answer's "why" on rows whose numbers are given."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

from crossover_study.answers.regime import device_regime_text, regime_clause
from crossover_study.answers.summary import measured_shares
from crossover_study.measure import frameworks
from crossover_study.measure.attribution import attribution_columns, block_steps
from crossover_study.measure.device_trace import BLOCK_NAME
from crossover_study.measure.event_tree import UNREADABLE, attribute_tree, flat_block, nested
from crossover_study.measure.point import measure_point
from crossover_study.measure.tracer_cost import CATEGORIES, corrected
from crossover_study.study import cases
from crossover_study.study.config import load_config, validate_config
from crossover_study.study.points import TimingPolicy
from crossover_study.study.programs import KERAS_FIT_PROGRAMS
from crossover_study.study.spec import PointSpec

UNSEEN = Path(__file__).resolve().parents[1] / "config" / "studies" / "unseen.yaml"
#: Short but not tiny: the profiled block's steps follow from the point's time.
POLICY = TimingPolicy(min_block_s=0.02, n_blocks=5, max_warmup_s=0.3, max_point_s=2, sync_check_s=0)


@dataclass
class Fake:
    """An event as torch.profiler's tree gives it (tag, name, times in ns, children)."""

    tag: str
    name: str
    start_time_ns: int
    duration_time_ns: int
    children: list = field(default_factory=list)


def _block(*children, start=0, duration=1000) -> Fake:
    return Fake(
        "_EventType.PyCall",
        "measure/attribution.py(1): _profiled_block",
        start,
        duration,
        list(children),
    )


def _adam_step() -> Fake:
    """Adam's step as the profiler's tree gives it: Optimizer.step's range is the child
    of the C call that entered it but outlives it; the profiler parents the op to the
    range, beside the Python frame that called it."""
    op = Fake("_EventType.TorchOp", "aten::add_", 300, 100)
    rng = Fake("_EventType.TorchOp", "Optimizer.step#Adam.step", 110, 800, [op])
    enter = Fake(
        "_EventType.PyCCall", "<built-in method _record_function_enter_new>", 100, 20, [rng]
    )
    binding = Fake("_EventType.PyCCall", "<built-in method _foreach_add_>", 290, 120)
    return Fake("_EventType.PyCall", "torch/optim/adam.py(1): step", 50, 900, [enter, binding])


def test_a_range_is_left_out_and_its_ops_nest_under_the_call_that_made_them():
    frame = _adam_step()
    block = nested(_block(frame))
    seconds, events = attribute_tree(block, "cpu")
    # 1000 ns in all, nothing counted twice: the op under its binding (ops), the frame's
    # own time and the enter call's Python, the block's own 100 ns unattributed.
    assert sum(seconds.values()) == pytest.approx(1000e-9)
    assert seconds["ops"] == pytest.approx(120e-9)  # the binding that called the op
    assert seconds["python"] == pytest.approx(780e-9)
    assert seconds["unattributed"] == pytest.approx(100e-9)
    assert sum(events["ops"].values()) == 2 and "Optimizer" not in str(events)


def test_fit_claims_its_subtree_but_its_train_steps_are_ops():
    graph = Fake(
        "_EventType.PyCCall", "<built-in method TFE_Py_Execute of PyCapsule object>", 300, 200
    )
    step = Fake(
        "_EventType.PyCall",
        "keras/src/backend/tensorflow/trainer.py(237): function",
        280,
        250,
        [graph],
    )
    adapter = Fake(
        "_EventType.PyCCall",
        "<built-in method TFE_Py_FastPathExecute of PyCapsule object>",
        50,
        200,
    )
    fit = Fake(
        "_EventType.PyCall",
        "keras/src/backend/tensorflow/trainer.py(314): fit",
        10,
        900,
        [adapter, step],
    )
    seconds, _ = attribute_tree(nested(_block(fit)), "cpu")
    assert seconds["ops"] == pytest.approx(250e-9)  # the train step fit ran, wrapper included
    assert seconds["fit"] == pytest.approx(650e-9)  # fit's own Python and its data adapter's ops


def test_the_keras_entry_point_that_claimed_the_time_is_kept():
    # Issue 62 item 4: a predict called per sample is predict's work, not fit's; an
    # evaluate that fit runs for validation is fit's (the outermost entry point claims).
    predict_step = Fake(
        "_EventType.PyCall",
        "keras/src/backend/tensorflow/trainer.py(237): one_step_on_data",
        120,
        100,
    )
    predict = Fake(
        "_EventType.PyCall",
        "keras/src/backend/tensorflow/trainer.py(560): predict",
        10,
        400,
        [predict_step],
    )
    evaluate = Fake("_EventType.PyCall", "keras/src/trainers/trainer.py(600): evaluate", 500, 200)
    fit = Fake(
        "_EventType.PyCall",
        "keras/src/backend/tensorflow/trainer.py(314): fit",
        450,
        500,
        [evaluate],
    )
    entries: dict[str, float] = {}
    seconds, _ = attribute_tree(nested(_block(predict, fit)), "cpu", entries)
    assert entries == pytest.approx({"predict": 300e-9, "fit": 500e-9})
    assert sum(entries.values()) == pytest.approx(seconds["fit"])
    assert seconds["ops"] == pytest.approx(100e-9)  # the predict step it ran


def test_a_tf_function_call_that_traced_is_tracing_and_one_that_did_not_is_its_graph():
    trace = Fake(
        "_EventType.PyCall",
        "polymorphic_function/tracing_compilation.py(295): _create_concrete_function",
        20,
        300,
    )
    run = Fake(
        "_EventType.PyCCall", "<built-in method TFE_Py_Execute of PyCapsule object>", 330, 100
    )
    traced = Fake(
        "_EventType.PyCall",
        "polymorphic_function/polymorphic_function.py(805): __call__",
        10,
        430,
        [trace, run],
    )
    run2 = Fake(
        "_EventType.PyCCall", "<built-in method TFE_Py_Execute of PyCapsule object>", 520, 100
    )
    cached = Fake(
        "_EventType.PyCall",
        "polymorphic_function/polymorphic_function.py(805): __call__",
        500,
        150,
        [run2],
    )
    seconds, _ = attribute_tree(nested(_block(traced, cached)), "cpu")
    assert seconds["trace"] == pytest.approx(430e-9)  # the trace and its graph's first run
    assert seconds["ops"] == pytest.approx(100e-9) and seconds["python"] == pytest.approx(50e-9)


def test_a_dataloader_claims_the_ops_of_its_collate():
    stack = Fake("_EventType.TorchOp", "aten::stack", 200, 100)
    collate = Fake("_EventType.PyCCall", "<built-in method stack>", 190, 120, [stack])
    loader = Fake(
        "_EventType.PyCall", "torch/utils/data/dataloader.py(720): __next__", 100, 300, [collate]
    )
    nxt = Fake("_EventType.PyCCall", "<built-in function next>", 90, 320, [loader])
    seconds, _ = attribute_tree(nested(_block(nxt)), "cpu")
    # the loader's frame and all under it; the builtin next's own 20 ns are Python
    assert seconds["data"] == pytest.approx(300e-9) and seconds["ops"] == 0
    assert seconds["python"] == pytest.approx(20e-9)


def test_the_tracers_cost_is_taken_out_in_proportion_to_each_kinds_weight():
    seconds = dict.fromkeys(CATEGORIES, 0.0) | {"ops": 4.0, "python": 6.0}
    events = {c: {} for c in CATEGORIES} | {"ops": {"TorchOp": 100}, "python": {"PyCall": 100}}
    # 10 s profiled over 2 steps timed at 3 s: 4 s of tracer cost, a TorchOp weighing 3
    # PyCalls: 3 s off ops, 1 s off python.
    per_step, scale = corrected(seconds, events, 2, 3.0, {"TorchOp": 3.0, "PyCall": 1.0})
    assert per_step["ops"] == pytest.approx(0.5) and per_step["python"] == pytest.approx(2.5)
    assert scale == pytest.approx(0.01)
    # a block that ran no slower than the timed ones keeps its times
    per_step, scale = corrected(seconds, events, 4, 3.0, {"TorchOp": 3.0, "PyCall": 1.0})
    assert per_step["ops"] == 1.0 and scale == 0


def test_the_kept_block_is_as_long_as_its_cost_fits_and_whole_calls():
    class Fit:
        steps_per_call = 32
        min_steps_per_block = 32

    # a first step cost 1 ms to profile: 8 % of a 10 s point fits 799 more, 2 % of it
    # at 1 ms per step is 200 steps
    assert block_steps(0.001, 10.0, object(), 1, 0.001) == 200
    # a first call that already cost most of the budget: keep it
    assert block_steps(0.001, 1.0, object(), 1, 0.07) == 0
    # whole fit epochs
    assert block_steps(0.001, 10.0, Fit(), 32, 0.01) == 192


@dataclass
class Flat:
    """An event of the profile's flat list as ``_KinetoEvent`` gives it (accessors)."""

    kind: str
    label: str
    start: int
    duration: int
    thread: int = 1

    def activity_type(self):
        return self.kind

    def name(self):
        return self.label

    def start_ns(self):
        return self.start

    def duration_ns(self):
        return self.duration

    def start_thread_id(self):
        return self.thread


def _shape(event) -> tuple:
    tag = str(event.tag).rsplit(".", 1)[-1]
    return (tag, event.name, event.start_time_ns, event.duration_time_ns,
            [_shape(c) for c in event.children])  # fmt: skip


def test_the_flat_list_gives_the_block_the_tree_gives():
    # The same events as the range test's tree, as the flat list holds them, plus what
    # the block must not take: another thread's call inside its time, a call after it,
    # a CUDA runtime call, and the range itself (a user annotation).
    block_name = "measure/attribution.py(1): _profiled_block"
    events = [
        Flat("python_function", "torch/profiler/profiler.py(1): __enter__", -20, 10),
        Flat("python_function", block_name, 0, 1000),
        Flat("python_function", "torch/optim/adam.py(1): step", 50, 900),
        Flat("python_function", "<built-in method _record_function_enter_new>", 100, 20),
        Flat("user_annotation", "Optimizer.step#Adam.step", 110, 800),
        Flat("python_function", "<built-in method _foreach_add_>", 290, 120),
        Flat("cpu_op", "aten::add_", 300, 100),
        Flat("cuda_runtime", "cudaLaunchKernel", 320, 10),
        Flat("python_function", "threading.py(1): run", 400, 50, thread=2),
        Flat("python_function", "torch/profiler/profiler.py(1): __exit__", 1005, 10),
    ]
    frame = _adam_step()
    from_flat, from_tree = flat_block(events, BLOCK_NAME), nested(_block(frame))
    assert _shape(from_flat) == _shape(from_tree)
    assert attribute_tree(from_flat, "cpu") == attribute_tree(from_tree, "cpu")
    assert flat_block(events[2:], BLOCK_NAME) is None  # no block: None, not a guess


class _Freed:
    """A name the profiler can no longer read: torch raises UnicodeDecodeError for an
    import's module body run inside the profile (its code object freed since)."""

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        raise UnicodeDecodeError("utf-8", b"\x8f", 0, 1, "invalid start byte")


class FreedTree(Fake):
    name = _Freed()


class FreedFlat(Flat):
    def name(self):
        raise UnicodeDecodeError("utf-8", b"\x8f", 0, 1, "invalid start byte")


def test_an_event_whose_name_cannot_be_read_is_kept_under_a_placeholder():
    block_name = "measure/attribution.py(1): _profiled_block"
    module_body = FreedTree.__new__(FreedTree)
    module_body.tag, module_body.start_time_ns, module_body.duration_time_ns = (
        "_EventType.PyCall", 100, 300,
    )  # fmt: skip
    module_body.children = [Fake("_EventType.TorchOp", "aten::add_", 150, 100)]
    from_tree = nested(_block(module_body))
    events = [
        FreedFlat("python_function", "?", -50, 10),  # before the block: skipped, no error
        Flat("python_function", block_name, 0, 1000),
        FreedFlat("python_function", "?", 100, 300),
        Flat("cpu_op", "aten::add_", 150, 100),
    ]
    from_flat = flat_block(events, BLOCK_NAME)
    assert _shape(from_flat) == _shape(from_tree)
    assert from_flat.children[0].name == UNREADABLE and from_flat.children[0].tag == "PyCall"
    assert attribute_tree(from_flat, "cpu") == attribute_tree(from_tree, "cpu")


def test_a_live_profile_reads_the_same_from_its_flat_list_and_its_tree():
    import torch
    from torch.profiler import ProfilerActivity, profile

    from crossover_study.measure import attribution

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(4, 8)

    class Workload:
        def run(self, steps):
            for _ in range(steps):
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()

        def sync(self):
            pass

    # One step first: the first step imports modules lazily, and a module body run inside
    # the profile leaves an event whose name torch can no longer read (event_tree.UNREADABLE).
    Workload().run(1)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        attribution._profiled_block(Workload(), 3)  # noqa: SLF001 - the frame flat_block finds
    results = prof.profiler.kineto_results
    from_tree = nested(attribution.find_block(results.experimental_event_tree()))
    from_flat = flat_block(results.events(), BLOCK_NAME)
    assert len(from_flat.children) > 0
    assert _shape(from_flat) == _shape(from_tree)
    seconds, events = attribute_tree(from_flat, "cpu")
    assert (seconds, events) == attribute_tree(from_tree, "cpu")
    assert sum(events["ops"].values()) > 10  # the ATen ops were read, not only Python


def test_the_processs_first_profile_is_a_warm_up_that_is_not_kept(monkeypatch):
    from crossover_study.measure import attribution

    profiled = []

    def profile(workload, steps, device, read=True, fit_entries=None):
        profiled.append((steps, read))
        if not read:  # the warm-up: profiled, never read
            return None
        # the kept ones: 1 ms a step, half ops
        seconds = dict.fromkeys(CATEGORIES, 0.0)
        seconds.update(ops=0.0005, python=0.0005)
        events = {c: {} for c in CATEGORIES}
        events["ops"], events["python"] = {"TorchOp": 10}, {"PyCall": 10}
        block = Fake("PyCall", "block", 0, int(sum(seconds.values()) * 1e9))
        return block, seconds, events, None

    monkeypatch.setattr(attribution, "_profile", profile)
    monkeypatch.setattr(attribution, "_WARM", False)
    monkeypatch.setattr(attribution, "tracer_bias", lambda: {"TorchOp": 1e-7, "PyCall": 1e-7})
    # measured_s so short that no longer block fits: one call is profiled
    first = attribution.attribute_point(object(), "cpu", 0.001, 0.001)
    assert profiled == [(1, False), (1, True)]  # the warm-up, unread, then the kept block
    assert first["attr_python_s"] == pytest.approx(0.0005)
    assert first["attr_setup_s"] >= 0.0 and first["attr_steps"] == 1
    attribution.attribute_point(object(), "cpu", 0.001, 0.001)
    assert profiled == [(1, False), (1, True), (1, True)]  # warm: one block


def test_unsynced_and_replicated_points_are_not_profiled():
    unsynced = PointSpec("s001-mlp", "torch", "cpu", "eager", {"batch": 8}, timing="unsynced")
    assert "unsynced" in attribution_columns(unsynced, None, None)["attr_source"]


# -- the plug-ins, measured ----------------------------------------------------------------


def _measure(case: str, framework: str, sizes: dict) -> dict:
    load_config(UNSEEN)  # registers the plug-in cases
    frameworks.import_framework(
        framework, "cpu", 1
    )  # as every test process does: TensorFlow sets it once
    row = measure_point(PointSpec(case, framework, "cpu", "eager", sizes), POLICY, 0.0, 0.0, 1)
    assert row["status"] == "ok", row.get("message")
    return row


@pytest.mark.parametrize(
    "case, framework, sizes, dominant",
    [
        # batch 2048, where the loader is most of the step: at 512 (loader about 1 ms
        # of 1.3) the tracer-cost correction, which takes too much out of the loader's
        # many small events (docs/STEP_MODEL.md, "How far each can be trusted"), lets
        # framework ops come first in some runs
        ("dataloader", "torch", {"batch": 2048, "hidden": 128}, "data"),
        ("numpy-augment", "torch", {"batch": 64, "channels": 16}, "python"),
        ("fit-per-batch", "tensorflow", {"batch": 32, "units": 64}, "fit"),
        ("decaying-lr", "tensorflow", {"batch": 32, "units": 64}, "trace"),
    ],
)
def test_the_profile_finds_the_cost_each_plugin_is_written_around(case, framework, sizes, dominant):
    # The profiled block is one call here (as at a study's point whose profile is costly),
    # so one hiccup of the machine inside it can move a category (seen once in a full
    # test run: an op event 4 ms long). The claim is the majority of three profiles.
    rows = [_measure(case, framework, sizes)]
    if rows[0]["attr_dominant"] != dominant:
        rows += [_measure(case, framework, sizes) for _ in range(2)]
    found = [r["attr_dominant"] for r in rows]
    assert found.count(dominant) * 2 > len(found), [
        {c: r[f"attr_{c}_s"] for c in CATEGORIES} for r in rows
    ]
    row = next(r for r in rows if r["attr_dominant"] == dominant)
    share = row[f"attr_{dominant}_s"] / row["step_time_s"]
    assert share > 0.3
    # The events name at least 90 % of the profiled block (issue 38's bar) ...
    assert 0.9 <= row["attr_coverage"] <= 1.0
    # ... and the shares account for the timed step: loose bounds (the profiled block is
    # a few steps and this machine may be busy), tight enough to catch time counted twice.
    assert 0.5 < row["attr_accounted"] < 1.5
    assert row["attr_cost_s"] > 0 and row["attr_steps"] >= 1


PREDICT = Path(__file__).resolve().parent / "plugins" / "tf_predict_per_sample.py"


def test_a_step_that_predicts_per_sample_is_named_predict_with_its_remedy():
    # Issue 62 item 4: a plug-in's step scores each sample with its own model.predict
    # call. The profile finds Keras's per-call work, names predict as the entry point it
    # was spent in (not fit), and the why gives predict's remedy: one call over the batch.
    config = validate_config(
        {
            "study": "predict-test",
            "sweep": {"frameworks": ["tensorflow"], "devices": ["cpu"], "variants": ["eager"]},
            "cases": {
                "predict-per-sample": {
                    "workload": str(PREDICT),
                    "framework": "tensorflow",
                    "question": "Keras predict per sample: where does the step's time go?",
                    "seed": {"batch": 4, "units": 16},
                    "axes": {"batch": [4], "units": [16]},
                }
            },
        }
    )
    frameworks.import_framework("tensorflow", "cpu", 1)
    point = PointSpec("predict-per-sample", "tensorflow", "cpu", "eager", {"batch": 4, "units": 16})
    with cases.kept():
        cases.use(config)
        row = measure_point(point, POLICY, 0.0, 0.0, 1)
    assert row["status"] == "ok", row.get("message")
    assert row["attr_dominant"] == "fit", {c: row[f"attr_{c}_s"] for c in CATEGORIES}
    assert row["attr_fit_entry"] == "predict"
    # the point's columns, which the runner adds to the measured row
    text = device_regime_text(pd.Series({**row, "device": "cpu", "framework": "tensorflow"}))
    assert "bound by Keras predict's own work (measured)" in text, text
    assert "one call over the whole batch (model(x)" in text
    assert "one fit over" not in text and "Keras fit" not in text


def test_a_seed_step_is_found_in_framework_ops():
    row = _measure("s001-mlp", "torch", {"batch": 64, "d_in": 1024, "hidden": 128})
    assert row["attr_dominant"] == "ops"
    # the device's columns (issue 53) are a CUDA point's only
    assert not [c for c in row if c.startswith(("attr_device", "attr_kernel", "attr_sync"))]


# -- the answer's why ----------------------------------------------------------------------


def _row(dominant_shares: dict, model_share: float, framework="torch") -> pd.Series:
    step = 0.004
    row = {
        "device": "cpu",
        "framework": framework,
        "step_time_s": step,
        "model_share": model_share,
        "model_step_s": model_share * step,
        "model_regime": "launch-bound",
        "step_ops": 548.0,
        "step_ops_kind": "aten_ops",
        "rate_eager_op_s": 15e-6,
        "model_launch_s": model_share * step,
        # the shares given are of the profiled step; what they leave is unattributed
        "attr_unattributed_s": (1.0 - sum(dominant_shares.values())) * step,
    }
    for category in CATEGORIES[:-1]:
        row[f"attr_{category}_s"] = dominant_shares.get(category, 0.0) * step
    row["attr_dominant"] = max(dominant_shares, key=dominant_shares.get)
    return pd.Series(row)


def test_the_why_names_the_measured_cost_and_its_fix_where_the_model_is_off():
    text = device_regime_text(_row({"data": 0.69, "ops": 0.17, "python": 0.14}, 2.39))
    assert text.startswith(
        "on the CPU the step is data-loading-bound (measured): the profile puts 69 % in data loading"
    )
    assert "randperm" in text  # what removes it
    assert "explains 239 %" in text and "not the answer" in text
    assert "launch-bound:" not in text  # never the model's regime alone


def test_the_why_keeps_the_models_regime_where_it_agrees_with_a_step_in_ops():
    text = device_regime_text(_row({"ops": 0.85, "python": 0.15}, 0.95))
    assert text.startswith("on the CPU the step is launch-bound: 548 ops")
    assert text.endswith(
        "measured: the profile puts 85 % in framework ops (dispatch and arithmetic), 15 % in Python outside framework ops (your code, module calls, optimizer loops, NumPy)"
    )


def test_framework_ops_the_model_misses_keep_the_models_split_as_its_estimate():
    text = device_regime_text(_row({"ops": 0.54, "python": 0.46}, 0.59))
    assert text.startswith("on the CPU the step is bound by framework ops (measured)")
    assert "the step-time model calls it launch-bound but explains 59 %" in text
    assert "so that split is its estimate, not the answer" in text


def test_keras_fit_inside_a_step_is_named_with_its_fix():
    text = device_regime_text(_row({"fit": 0.92, "ops": 0.05}, 0.03, framework="tensorflow"))
    assert (
        "bound by Keras fit's own work (measured): the profile puts 92 % in Keras fit's own" in text
    )
    assert "one fit over many batches" in text


def test_keras_predict_inside_a_step_is_named_with_its_own_fix():
    row = _row({"fit": 0.9, "ops": 0.05}, 0.03, framework="tensorflow")
    row["attr_fit_entry"] = "predict"
    text = device_regime_text(row)
    assert "bound by Keras predict's own work (measured)" in text
    assert "the profile puts 90 % in Keras predict's own per-call work" in text
    assert "one call over the whole batch (model(x), or one predict over all the samples)" in text
    assert "fit" not in text.replace("fit_entry", "")
    assert measured_shares(row) == "Keras predict's own work 90%"


def test_a_keras_fit_programs_own_work_keeps_the_models_regime_where_it_agrees():
    # Iris's Keras fit: the model prices fit's own work per call, epoch and step
    row = _row({"fit": 0.88, "ops": 0.12}, 0.98, framework="tensorflow")
    row = pd.concat([row, pd.Series({"program": sorted(KERAS_FIT_PROGRAMS)[0]})])
    row["rate_fit_call_s"], row["rate_fit_step_s"], row["steps_per_block"] = 0.02, 3e-4, 40
    text = device_regime_text(row)
    assert text.startswith("on the CPU the step is launch-bound: Keras fit's own 20 ms per call")
    assert "measured: the profile puts 88 % in Keras fit's own" in text
    # a step of a plug-in that calls fit inside it (not a fit program): the measured leads
    plugin = device_regime_text(_row({"fit": 0.88, "ops": 0.12}, 0.98, framework="tensorflow"))
    assert "bound by Keras fit's own work (measured)" in plugin


def test_the_clause_says_it_is_measured():
    seed = cases.get("s001-mlp").seed
    row = _row({"python": 0.8, "ops": 0.2}, 0.1).to_dict()
    row.update(case="s001-mlp", variant="eager", status="ok", timing="synced", replicas=1, **seed)
    clause = regime_clause(pd.DataFrame([row]), "s001-mlp")
    assert clause.startswith(
        "why (measured, with the step-time model): with torch, on the CPU the step is Python-bound (measured)"
    )
