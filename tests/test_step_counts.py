"""Counting a training step (step_counts) and the job's rates (step_rates): the counts
match closed forms, counting happens after the timed blocks, and a program the counters
cannot follow loses its counts, never its row."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from crossover_study.measure import harness
from crossover_study.stepmodel import counts as step_counts
from crossover_study.stepmodel import counts_tf as step_counts_tf
from crossover_study.stepmodel import counts_torch as step_counts_torch
from crossover_study.stepmodel import faults as step_faults
from crossover_study.stepmodel import fit_rates as step_fit_rates
from crossover_study.stepmodel import rates as step_rates
from crossover_study.stepmodel import record as step_record
from crossover_study.stepmodel import replay as step_replay
from crossover_study.stepmodel import timing as step_timing
from crossover_study.study.spec import PointSpec


@pytest.fixture(autouse=True)
def fresh_replays(monkeypatch):
    """Each test starts with no replay kept (step_rates keeps them for the process)."""
    monkeypatch.setattr(step_replay, "_REPLAYED", {})


def _built(framework: str, case: str, sizes: dict, variant: str = "eager"):
    from crossover_study.measure import frameworks

    frameworks.import_framework(framework, "cpu", 1)
    workload = frameworks.make_workload(PointSpec(case, framework, "cpu", variant, sizes), 1)
    workload.setup()
    workload.run(workload.steps_per_call)
    workload.sync()
    return workload


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_s001_counts_match_the_closed_form(framework):
    sizes = {"batch": 64, "d_in": 256, "hidden": 128}
    columns = step_counts.count_point(_built(framework, "s001-mlp", sizes), framework, "cpu")
    columns.update(step_replay.replay_columns(columns, framework, "cpu"))
    assert columns["step_flops"] == step_record.mlp_matmul_flops(64, 256, 128)
    assert columns["step_ops"] >= 20  # a few dozen small operations per step
    assert columns["step_ops_kind"] == ("aten_ops" if framework == "torch" else "tf_ops")
    assert columns["step_copy_bytes"] == 0  # nothing crosses to a device on the CPU
    assert columns["step_mem_bytes"] > 0
    # The products by shape make the same FLOPs; the first layer's x (64 × 256) · w1
    # (256 × 128) is one of them; all of them were replayed.
    products = json.loads(columns["step_products"])
    assert step_record.product_flops(products) == columns["step_flops"]
    assert any(p[:4] == [1, 64, 256, 128] for p in products)
    assert columns["step_products_flops"] == columns["step_flops"]
    assert columns["step_products_s"] > 0
    # Counting leaves nothing behind that could change the points timed after it.
    if framework == "torch":
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        assert _get_current_dispatch_mode() is None
    else:
        import tensorflow as tf
        from tensorflow.python.framework import op_callbacks

        assert not op_callbacks.should_invoke_op_callbacks()
        assert not tf.config.functions_run_eagerly()


def test_torch_lstm_gates_are_counted():
    """oneDNN's LSTM layer ops are outside torch's FLOP counter: counted from their
    gate matrices, 2 T B 4H (I + H) per layer forward, twice that backward, and listed
    as layers (which the replay times whole), not as products."""
    sizes = {"batch": 4, "units": 6, "seq_len": 5}
    import torch

    workload = _built("torch", "s004-lstm", sizes)
    columns = step_counts.count_point(workload, "torch", "cpu")
    modules = [m for m in vars(workload).values() if isinstance(m, torch.nn.Module)]
    lstms = [m for root in modules for m in root.modules() if isinstance(m, torch.nn.LSTM)]
    assert lstms
    matrices = [p for lstm in lstms for p in lstm.parameters() if p.dim() == 2]
    forward = 2 * 5 * 4 * sum(p.numel() for p in matrices)  # 2 T B (4H (I + H)) per layer
    dense = 2 * 4 * 6 * 1 * 3  # the output Dense layer (6 units -> 1), forward + backward
    assert 3 * forward <= columns["step_flops"] <= 3 * forward + 10 * dense
    # Three layers of 6 units over T = 5 steps of B = 4 sequences (whichever way the
    # batch-first input reaches the op), each once forward and once backward a step.
    layers = json.loads(columns["step_rnn_layers"])
    assert {(steps, batch, hidden) for steps, batch, _, hidden, _, _ in layers} == {(5, 4, 6)}
    passes = {backward: 0.0 for backward in (False, True)}
    for *_, backward, per_step in layers:
        passes[backward] += per_step
    assert passes == {False: 3.0, True: 3.0}
    layer_flops = sum(step_record.lstm_layer_flops(*row[:5]) * row[5] for row in layers)
    assert layer_flops == pytest.approx(3 * forward)
    # The products are the Dense layer's alone; with the layers they make the FLOPs.
    products = json.loads(columns["step_products"])
    assert not any(24 in p[1:4] for p in products)  # no gate (4H = 24) product
    assert step_record.product_flops(products) + layer_flops == pytest.approx(columns["step_flops"])
    # flop_ops: the gate products as oneDNN runs them (per layer forward 1 + T, backward
    # 3 + T) besides the Dense's.
    gates = 3 * ((1 + 5) + (3 + 5))
    assert columns["step_flop_ops"] == gates + sum(p[-1] for p in products)


def test_a_gru_is_noted_with_the_ops_and_kernels_it_accounts_for_and_priced_as_cudnn_runs_it():
    """The GRU plug-in (issue 62 item 7): on the CPU each GRU layer runs as ATen ops per
    time step, which the T4's card priced as that many launches; its module call is noted
    (step_rnn_modules) with the ops and kernels it made, and the card prices it as cuDNN
    runs it, a few host ops and 4T + 4 kernels per layer, so the step is no longer ops per
    time step on the host."""
    import importlib.util
    from pathlib import Path

    import torch

    from crossover_study.stepmodel.card_model import price, work_of_row
    from crossover_study.study.device_cards import load_cards

    path = Path(__file__).parent / "plugins" / "torch_gru.py"
    spec = importlib.util.spec_from_file_location("torch_gru_plugin", path)
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    batch, hidden, steps = 4, 8, 12
    built = plugin.build(torch.device("cpu"), batch, hidden, steps)
    counts = step_counts_torch.count_torch_step(lambda: built.step(*built.data), 1)
    columns = counts.columns()
    rows = json.loads(columns["step_rnn_modules"])
    assert len(rows) == 1
    gru = dict(zip(step_record.RNN_MODULE_KEYS, rows[0], strict=True))
    assert (gru["kind"], gru["steps"], gru["batch"]) == ("GRU", steps, batch)
    assert (gru["inputs"], gru["hidden"], gru["layers"]) == (plugin.FEATURES, hidden, 2)
    assert gru["backward"] and gru["per_step"] == 1.0
    # The GRU is most of the step's ops and kernels, and grows with its time steps.
    assert steps * 2 * 2 < gru["ops"] < columns["step_ops"]
    assert gru["kernels"] <= columns["step_flop_ops"] + columns["step_mem_ops"]
    assert 0 < gru["flops"] <= columns["step_flops"]
    row = {
        **columns, "framework": "torch", "variant": "eager", "program": "torch_step",
        "loss_read_every": 1,
    }  # fmt: skip
    t4 = load_cards(["t4"])[0]
    after = price(work_of_row(row, 0.0), t4)
    before = price(work_of_row({**row, "step_rnn_modules": None}, 0.0), t4)
    other_ops = columns["step_ops"] - gru["ops"]
    # The host: the step's other ops and one op forward and one backward for the GRU.
    assert after.host_s + after.host_launch_s < before.host_s + before.host_launch_s
    assert (after.host_s + after.host_launch_s) / (before.host_s + before.host_launch_s) == (
        pytest.approx((other_ops + 2) / columns["step_ops"], rel=0.05)
    )
    # The device: 2 layers × (4T + 4) cuDNN kernels in place of the GRU's counted ones.
    kernels = columns["step_flop_ops"] + columns["step_mem_ops"] - gru["kernels"]
    assert after.kernels == pytest.approx(kernels + 2 * (4 * steps + 4))
    assert after.step_s < before.step_s / 5


def test_every_torch_recurrent_module_is_noted_with_its_shape():
    """nn.RNN (bidirectional, relu), nn.LSTM and nn.GRU calls in one step are each noted
    once with their kind, shape and directions; an LSTM layer is one oneDNN op each way
    on the CPU (its ops do not grow with the time steps), an RNN's ops do."""
    import torch
    from torch import nn

    def noted(steps: int) -> dict:
        torch.manual_seed(0)
        rnn = nn.RNN(3, 4, nonlinearity="relu", bidirectional=True)
        lstm = nn.LSTM(8, 5, num_layers=2, batch_first=True)
        x = torch.randn(steps, 2, 3)

        def step():
            out, _ = rnn(x)
            out, _ = lstm(out.transpose(0, 1))
            out.sum().backward()

        rows = step_counts_torch.count_torch_step(step).rnn_modules
        return {r[0]: dict(zip(step_record.RNN_MODULE_KEYS, r, strict=True)) for r in rows}

    short, long = noted(4), noted(12)
    assert set(long) == {"RNN_RELU", "LSTM"}
    rnn, lstm = long["RNN_RELU"], long["LSTM"]
    assert (rnn["steps"], rnn["batch"], rnn["inputs"], rnn["hidden"]) == (12, 2, 3, 4)
    assert (rnn["directions"], lstm["directions"], lstm["layers"]) == (2, 1, 2)
    assert (lstm["steps"], lstm["batch"], lstm["inputs"]) == (12, 2, 8)
    assert lstm["ops"] == short["LSTM"]["ops"] < 40
    assert rnn["ops"] > 2 * short["RNN_RELU"]["ops"] - 40


def test_keras_lstm_and_gru_are_noted_where_keras_would_run_cudnn():
    """s004-lstm's Keras LSTM layers (TensorFlow, Keras fit): each call is noted with the
    ops it accounts for, all inside the step's graph, and on the T4 they become two
    CudnnRNNV3 ops a layer and 4T + 4 kernels; a GRU with Keras's defaults is noted, a
    SimpleRNN (no cuDNN path in Keras) and an LSTM with recurrent dropout are not."""
    import keras
    import tensorflow as tf

    from crossover_study.stepmodel.card_model import price, work_of_row
    from crossover_study.study.device_cards import load_cards

    sizes = {"batch": 4, "units": 6, "seq_len": 5}
    workload = _built("tensorflow", "s004-lstm", sizes)
    columns = step_counts.count_point(workload, "tensorflow", "cpu")
    rows = json.loads(columns["step_rnn_modules"])
    layers = [dict(zip(step_record.RNN_MODULE_KEYS, r, strict=True)) for r in rows]
    assert [(r["kind"], r["steps"], r["batch"], r["hidden"]) for r in layers] == [
        ("LSTM", 5, 4, 6)
    ] * 3
    assert sum(r["per_step"] for r in layers) == pytest.approx(3.0)
    removed = sum(r["ops"] * r["per_step"] for r in layers)
    assert 3 * 5 < removed < columns["step_graph_ops"] <= columns["step_ops"]
    row = {**columns, "framework": "tensorflow", "variant": "eager", "program": "keras_fit"}
    work = work_of_row(row, 0.0)
    t4 = load_cards(["t4"])[0]
    after, before = price(work, t4), price(work_of_row({**row, "step_rnn_modules": None}, 0.0), t4)
    assert after.host_launch_s < before.host_launch_s
    assert after.kernels < before.kernels

    calls, state = Counter(), step_counts_tf._new_state()
    undo = step_counts_tf._note_keras_rnn(state, calls)
    x = tf.random.normal((2, 4, 3))
    try:
        for layer in (
            keras.layers.GRU(5),
            keras.layers.SimpleRNN(5),
            keras.layers.LSTM(5, recurrent_dropout=0.5),
        ):
            layer(x)
    finally:
        undo()
    assert [spec[0] for spec in calls] == ["GRU"]
    gru = step_counts_tf.count_keras_rnn_call(next(iter(calls)))
    assert (gru["steps"], gru["batch"], gru["inputs"], gru["hidden"]) == (4, 2, 3, 5)
    assert gru["ops"] > 4 and gru["flops"] > 0


def test_lstm_products_as_onednn_runs_them():
    """Per layer one hidden-state product (B × H)·(H × 4H) per time step forward and
    one (B × 4H)·(4H × H) backward, the input's over all steps at once."""
    forward = step_record.lstm_products(5, 4, [(3, 6)], backward=False)
    backward = step_record.lstm_products(5, 4, [(3, 6)], backward=True)
    assert forward == {(1, 20, 3, 24, False, True): 1, (1, 4, 6, 24, False, True): 5}
    assert backward[(1, 4, 24, 6, False, False)] == 5
    assert step_record.product_flops(forward) == 2 * 5 * 4 * 24 * (3 + 6)
    assert step_record.lstm_layer_flops(5, 4, 3, 6, True) == 2 * step_record.product_flops(forward)


def test_tf_products_say_whether_they_ran_inside_a_graph():
    """A tf.function step's products ran inside its graph, an eager step's one by one:
    the replay runs each the way it ran."""
    sizes = {"batch": 8, "d_in": 16, "hidden": 8}
    flags = {}
    for variant in ("eager", "function"):
        workload = _built("tensorflow", "s001-mlp", sizes, variant)
        columns = step_counts.count_point(workload, "tensorflow", "cpu")
        flags[variant] = {p[6] for p in json.loads(columns["step_products"])}
    assert flags == {"eager": {False}, "function": {True}}


def test_a_loop_call_is_spread_over_the_steps_of_its_block():
    """The loop variant runs a whole timed block of k steps in one traced call: one
    call per k steps, where a function step makes one call per step."""
    sizes = {"batch": 8, "d_in": 16, "hidden": 8}
    calls = {
        variant: step_counts.count_point(
            _built("tensorflow", "s001-mlp", sizes, variant), "tensorflow", "cpu", 8
        )["step_function_calls"]
        for variant in ("loop", "function")
    }
    assert calls == {"loop": 1 / 8, "function": 1.0}


def test_tf_keras_fit_ops_run_inside_its_graph():
    columns = step_counts.count_point(
        _built("tensorflow", "s002-iris", {"batch": 20, "hidden": 32}), "tensorflow", "cpu"
    )
    assert 0 < columns["step_graph_ops"] <= columns["step_ops"]
    assert columns["step_graph_ops"] > 0.8 * columns["step_ops"]  # Keras fit: a tf.function


def test_torch_copy_bytes_count_a_copy_across_devices():
    import torch

    host = torch.ones(10, 10)
    counts = step_counts_torch.count_torch_step(lambda: host.to("meta"))
    assert counts.copy_bytes == 400
    assert step_counts_torch.count_torch_step(lambda: host.clone()).copy_bytes == 0


def test_a_program_the_counters_cannot_follow_keeps_its_row(capsys):
    class Broken:
        steps_per_call = 1

        def run(self, n):
            raise RuntimeError("no")

        def sync(self):
            pass

    assert step_counts.count_point(Broken(), "torch", "cpu") == {}
    assert "not counted (RuntimeError: no)" in capsys.readouterr().err


def test_counting_runs_after_the_timed_blocks(monkeypatch):
    """measure_point counts only once the harness has returned its measurement."""
    from crossover_study.measure import point as point_measure
    from crossover_study.study.points import TimingPolicy

    events = []
    real_measure = harness.measure

    def measure(*args, **kwargs):
        result = real_measure(*args, **kwargs)
        events.append("measured")
        return result

    def count_point(workload, framework, device, steps_per_block=None):
        events.append("counted")
        return {"step_ops": 1.0}

    monkeypatch.setattr(point_measure, "measure", measure)
    monkeypatch.setattr(point_measure.step_counts, "count_point", count_point)
    from crossover_study.measure import frameworks

    frameworks.import_framework("torch", "cpu", 1)
    point = PointSpec("s001-mlp", "torch", "cpu", "eager", {"batch": 8, "d_in": 8, "hidden": 8})
    policy = TimingPolicy(min_block_s=0.001, n_blocks=3, max_warmup_s=0.05, sync_check_s=0)
    row = point_measure.measure_point(point, policy, import_s=0.0, device_init_s=0.0)
    assert row["status"] == "ok" and row["step_ops"] == 1.0
    assert events == ["measured", "counted"]


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_rates_are_measured_with_their_spread(framework):
    from crossover_study.measure import frameworks

    frameworks.import_framework(framework, "cpu", 1)
    rates = step_rates.measure_rates(framework, "cpu")
    columns = step_rates.row_columns(rates)
    assert columns["rate_eager_op_s"] > 0 and columns["rate_flop_per_s"] > 1e8
    assert columns["rate_mem_bytes_per_s"] > 1e8
    # DRAM: operands out of cache stream slower than the curve's cache-resident sizes
    peak = max(rate for _, rate in json.loads(columns["rate_mem_curve"]))
    assert 1e8 < columns["rate_mem_dram_bytes_per_s"] < peak
    assert columns["rate_copy_bytes_per_s"] is None  # nothing to copy to on the CPU
    # a page fault (a zeroed 4 KiB page mapped in) costs a fraction of a µs to some µs
    assert 1e-8 < columns["rate_page_fault_s"] < 1e-4
    tf_only = ("rate_graph_op_s", "rate_function_call_s", "rate_fit_call_s", "rate_fit_step_s")
    tf_only += ("rate_fit_epoch_s", "rate_fit_validation_s")
    for column in tf_only:
        assert (columns[column] is None) == (framework == "torch")
    assert all(rates[name]["iqr"] >= 0 for name in ("eager_op_s", "flop_per_s"))
    assert step_rates.row_columns(None) == dict.fromkeys(
        [*step_rates.RATE_COLUMNS.values(), "rate_mem_curve", "rate_flop_curve"]
    )
    for column in ("rate_mem_curve", "rate_flop_curve"):
        curve = json.loads(columns[column])
        assert len(curve) >= 2 and all(size > 0 and rate > 0 for size, rate in curve)


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_a_counted_point_times_no_rates_and_says_what_it_paid(framework, monkeypatch):
    """A counted point's row carries no rates of its own (the rates job's are the job's
    common columns, runner): measure_point never times the op costs or Keras fit's costs
    again, and says in count_s and replay_s what its count and its replays took."""
    from crossover_study.measure import frameworks
    from crossover_study.measure import point as point_measure
    from crossover_study.study.points import TimingPolicy

    frameworks.import_framework(framework, "cpu", 1)

    def timed(*args, **kwargs):
        raise AssertionError("a point timed the machine's rates")

    monkeypatch.setattr(step_rates, "op_costs", timed)
    monkeypatch.setattr(step_rates, "keras_fit_rates", timed)  # as _tf_rates calls it
    monkeypatch.setattr(step_rates, "measure_rates", timed)
    policy = TimingPolicy(min_block_s=0.001, n_blocks=3, max_warmup_s=0.05, sync_check_s=0)
    points = [
        PointSpec("s001-mlp", framework, "cpu", "eager", {"batch": 8, "d_in": 8, "hidden": 8})
    ]
    if framework == "tensorflow":  # Iris's seed program is Keras fit
        points.append(PointSpec("s002-iris", framework, "cpu", "eager", {"batch": 8, "hidden": 4}))
    rows = [point_measure.measure_point(p, policy, import_s=0.0, device_init_s=0.0) for p in points]
    for row in rows:
        assert row["status"] == "ok", row.get("message")
        assert not any(column.startswith("rate_") for column in row)
        assert row["step_ops"] > 0 and row["step_products_s"] is not None
        assert row["count_s"] > 0 and row["replay_s"] > 0
    # Iris's fit keeps its data iterator (steps_per_epoch 2) for a pass over 105 rows
    # in batches of 8: 14 batches, 7 epochs; s001 calls no fit
    assert [row["fit_epochs_per_iterator"] for row in rows] == [None, 7][: len(rows)]


def test_keras_fit_costs_are_measured():
    """Keras fit's own costs (the rates job's): call, epoch, validated epoch and step,
    each a positive or zero number of seconds, the call and the step above zero (a fit
    does cost something)."""
    from crossover_study.measure import frameworks

    tf = frameworks.import_framework("tensorflow", "cpu", 1)
    with tf.device("/CPU:0"):
        fit = step_fit_rates.keras_fit_rates(0.4)
    assert set(fit) == {
        "fit_call_s",
        "fit_epoch_s",
        "fit_iterator_s",
        "fit_validation_s",
        "fit_step_s",
    }
    assert fit["fit_call_s"]["median"] > 0 and fit["fit_step_s"]["median"] > 0
    assert all(rate["median"] >= 0 for rate in fit.values())


def test_a_shape_replayed_before_in_the_job_is_not_replayed_again(monkeypatch):
    """The replays keep each shape's (and call's) timing for the process: a second
    point with the same products, LSTM layers and element-wise calls times nothing,
    and its columns are the first point's; a new shape is timed (itself only)."""
    timed = []

    def blocks(run, sync, units, n):
        timed.append(n)
        return {"median": 1e-3 * len(timed), "iqr": 0.0, "blocks": []}

    monkeypatch.setattr(step_replay, "timed_blocks", blocks)
    monkeypatch.setattr(step_replay, "faults_per_call", lambda run, sync: 2.0)
    products = [[1, 8, 8, 8, False, False, False, 3.0], [2, 4, 4, 4, True, False, False, 1.0]]
    layers = [[5, 2, 3, 4, False, 1.0], [5, 2, 3, 4, True, 1.0]]
    tanh = json.dumps([[{"t": [4, 4], "dtype": "float32"}], {}])
    columns = {
        "step_products": json.dumps(products),
        "step_rnn_layers": json.dumps(layers),
        "step_elementwise": json.dumps([["aten.tanh.default", tanh, 128.0, 2.0]]),
    }
    first = step_replay.replay_columns(columns, "torch", "cpu")
    # products: the floor and two shapes; LSTM: the floor's and one shape's forward and
    # forward-and-backward; the tanh call at full size and at its floor
    assert len(timed) == 3 + 4 + 2
    assert first["step_products_s"] is not None and first["step_elementwise_s"] is not None
    again = step_replay.replay_columns(columns, "torch", "cpu")
    assert len(timed) == 9 and again == first
    products.append([1, 16, 16, 16, False, False, False, 1.0])
    step_replay.replay_columns({"step_products": json.dumps(products)}, "torch", "cpu")
    assert len(timed) == 10  # the new shape only


def test_rate_blocks_drop_each_result_at_once():
    """A rate's calls free their outputs as a step's temporaries are freed: kept to
    the block's end, every output was fresh memory and the bandwidth curve timed page
    faults (step_timing.repeated)."""
    import weakref

    class Output:
        pass

    alive, made = weakref.WeakSet(), []

    def call():
        out = Output()
        alive.add(out)
        made.append(len(alive))
        return out

    step_timing.repeated(call)(5)
    assert made == [1, 1, 1, 1, 1] and len(alive) == 0


def test_tf_step_that_only_runs_traced_is_counted_from_a_fresh_trace():
    """s000-hjb's step calls tf.gradients, which cannot run eagerly: its ops and FLOPs
    come from its tf.function traced afresh, so they scale with the batch."""
    counted = [
        step_counts.count_point(
            _built("tensorflow", "s000-hjb", {"batch": batch, "width": 8}), "tensorflow", "cpu"
        )
        for batch in (10, 20)
    ]
    assert all("traced afresh" in c["step_flops_source"] for c in counted)
    assert counted[1]["step_flops"] == 2 * counted[0]["step_flops"] > 0
    for c in counted:  # the traced products, with their static shapes
        assert step_record.product_flops(json.loads(c["step_products"])) == c["step_flops"]
    assert counted[0]["step_ops"] == counted[1]["step_ops"] > 200  # a few hundred ops


def test_keras_fit_counted_over_a_window_of_steps_matches_the_whole_call(monkeypatch):
    """Counting a Keras fit call stops after WINDOW_STEPS steps (marked by its batch
    fetches): per step it gives what counting the whole call gives."""
    sizes = {"batch": 8, "units": 4, "seq_len": 3}
    workload = _built("tensorflow", "s004-lstm", sizes)
    assert workload.steps_per_call > step_counts_tf.WINDOW_STEPS
    windowed = step_counts.count_point(workload, "tensorflow", "cpu")
    monkeypatch.setattr(step_counts_tf, "WINDOW_STEPS", 10**6)
    whole = step_counts.count_point(workload, "tensorflow", "cpu")
    assert windowed["step_flops"] == pytest.approx(whole["step_flops"], rel=0.02)
    assert windowed["step_ops"] == pytest.approx(whole["step_ops"], rel=0.05)
    assert windowed["step_function_calls"] == whole["step_function_calls"] > 0
    windowed_flops = step_record.product_flops(json.loads(windowed["step_products"]))
    assert windowed_flops == pytest.approx(windowed["step_flops"])


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_products_are_replayed_one_shape_at_a_time(framework):
    """replay_products times each eager shape alone on the job's device: the FLOPs it
    covers are the shapes' FLOPs times their counts per step (a product that ran in a
    graph is left to the curve), and a product that does work takes time beyond the
    1 × 1 product's dispatch."""
    from crossover_study.measure import frameworks

    frameworks.import_framework(framework, "cpu", 1)
    products = [(1, 96, 96, 96, False, True, False, 3.0), (4, 8, 16, 8, True, False, False, 0.5)]
    products.append((1, 96, 96, 96, False, False, True, 2.0))  # ran in a graph: not replayed
    replay = step_replay.replay_products(framework, "cpu", products)
    assert replay["products_flops"] == 3 * 2 * 96**3 + 0.5 * 2 * 4 * 8 * 16 * 8
    assert replay["products_s"] > 0 and replay["seconds"] > 0


def test_lstm_layers_are_replayed_whole():
    """replay_rnn_layers times a layer's forward and its backward pass: each covers its
    gate products' FLOPs and takes time beyond the one-unit layer's; replay_columns adds
    them to the products' replay."""
    from crossover_study.measure import frameworks

    frameworks.import_framework("torch", "cpu", 1)
    layers = [(20, 16, 8, 32, False, 2.0), (20, 16, 8, 32, True, 2.0)]
    replay = step_replay.replay_rnn_layers("cpu", layers)
    flops = 2 * (step_record.lstm_layer_flops(20, 16, 8, 32, False))
    flops += 2 * step_record.lstm_layer_flops(20, 16, 8, 32, True)
    assert replay["products_flops"] == pytest.approx(flops)
    assert replay["products_s"] > 0
    products = [(1, 96, 96, 96, False, True, False, 1.0)]
    columns = {"step_products": json.dumps(products), "step_rnn_layers": json.dumps(layers)}
    both = step_replay.replay_columns(columns, "torch", "cpu")
    assert both["step_products_flops"] == pytest.approx(flops + 2 * 96**3)
    alone = step_replay.replay_columns({"step_rnn_layers": json.dumps(layers)}, "torch", "cpu")
    assert alone["step_products_flops"] == pytest.approx(flops)


def test_replay_faults_are_counted_per_call():
    """faults_per_call counts what a call faults in: a fresh 64 MiB mapping written
    page by page faults every page, a call that allocates nothing none."""
    import mmap

    import numpy as np

    pages = 2**14

    def fresh(n):
        for _ in range(n):
            region = mmap.mmap(-1, pages * mmap.PAGESIZE)
            view = np.frombuffer(region, dtype=np.uint8)
            view[:: mmap.PAGESIZE] = 1
            del view
            region.close()

    assert step_faults.faults_per_call(fresh, lambda: None) >= pages
    assert step_faults.faults_per_call(lambda n: None, lambda: None) < 1
    # the rate: a fresh 64 MiB write costs more than the same write into kept memory
    rate = step_faults.page_fault(*step_faults.mapped_pages(step_faults.numpy_fill))
    rate = rate["page_fault_s"]
    assert 1e-8 < rate["median"] < 1e-4
    # an allocator that keeps its blocks faults nothing: no rate rather than a wrong one
    assert step_faults.page_fault(lambda: None, lambda: None) == {}


def test_a_failed_replay_keeps_the_counts(monkeypatch, capsys):
    def broken(*args):
        raise RuntimeError("no device")

    monkeypatch.setattr(step_replay, "replay_products", broken)
    columns = step_counts.count_point(
        _built("torch", "s001-mlp", {"batch": 4, "d_in": 4, "hidden": 4}), "torch", "cpu"
    )
    replayed = step_replay.replay_columns(columns, "torch", "cpu")
    assert columns["step_flops"] > 0 and columns["step_products"]
    assert replayed["step_products_s"] is None and replayed["step_products_flops"] is None
    assert "not replayed (RuntimeError: no device)" in capsys.readouterr().err
    # the element-wise calls' replay does not depend on the products'
    assert replayed["step_elementwise_bytes"] > 0
    nothing = dict.fromkeys(
        [
            "step_products_s",
            "step_products_flops",
            "step_products_faults",
            "step_elementwise_s",
            "step_elementwise_bytes",
            "step_elementwise_faults",
        ]
    )
    assert step_replay.replay_columns({"step_products": None}, "torch", "cpu") == nothing


def test_elementwise_calls_are_listed_and_replayed():
    """PyTorch's operations behind step_mem_bytes are listed by ATen overload and
    arguments (tensors by shape and dtype) with each call's bytes; a call with a
    random generator is not (its bytes stay with the bandwidth). replay_elementwise
    rebuilds a call at its shapes and with every dimension 1, and covers the bytes of
    the calls it could rebuild and run."""
    import torch

    sizes = {"batch": 20, "hidden": 8}
    columns = step_counts.count_point(_built("torch", "s002-iris", sizes), "torch", "cpu")
    calls = json.loads(columns["step_elementwise"])
    listed = sum(nbytes * per_step for _, _, nbytes, per_step in calls)
    assert 0 < listed <= columns["step_mem_bytes"] * (1 + 1e-9)
    assert not any(name.startswith("aten.randperm") for name, *_ in calls)
    softmax = next(call for call in calls if call[0] == "aten._softmax.default")
    args, _ = step_replay._torch_args(softmax[1], "cpu", floor=False)
    assert list(args[0].shape) == [20, 3] and args[1] == 1  # the batch's 3 class scores
    small, _ = step_replay._torch_args(softmax[1], "cpu", floor=True)
    assert list(small[0].shape) == [1, 1]
    tanh = step_counts_torch.encode_args((torch.empty(1000, 1000),), {})
    bogus = ["aten.no_such_op.default", tanh, 8e6, 1.0]
    replay = step_replay.replay_elementwise("cpu", [["aten.tanh.default", tanh, 8e6, 2.0], bogus])
    assert replay["elementwise_bytes"] == 16e6  # the call that cannot be rebuilt: not covered
    assert replay["elementwise_s"] > 0  # a million tanh take longer than one
    with pytest.raises(step_counts_torch._Unencodable):
        step_counts_torch.encode_args((torch.Generator(),), {})


@pytest.mark.parametrize("fetches", [(-1, 1), (0, 0)])
def test_tf_count_refuses_a_window_it_cannot_place(fetches):
    """The batch fetches that place the counting window (set-up, per step) must be a
    count of at least 0 and at least 1: anything else is refused before the step runs."""
    ran = []
    with pytest.raises(ValueError, match="fetches must be"):
        step_counts_tf.count_tf_step(lambda: ran.append(1), 3, fetches=fetches)
    assert not ran
