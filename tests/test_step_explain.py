"""The step-time model on timings rows: its form, regimes, empty inputs, the crossover
it predicts and the prediction for a machine of a reference run (synthetic tables)."""

import math

import numpy as np
import pandas as pd
import pytest

from crossover_study.analysis.prediction import COUNT_COLUMNS
from crossover_study.stepmodel import columns as step_columns
from crossover_study.stepmodel import model as step_model
from crossover_study.stepmodel.model import Rates

#: Rates of a synthetic CPU and a synthetic GPU (seconds per op, FLOP/s, bytes/s).
CPU_RATES = {
    "rate_eager_op_s": 10e-6,
    "rate_graph_op_s": np.nan,
    "rate_flop_per_s": 1e11,
    "rate_mem_bytes_per_s": 1e10,
    "rate_copy_bytes_per_s": np.nan,
}
GPU_RATES = {
    "rate_eager_op_s": 5e-6,
    "rate_graph_op_s": np.nan,
    "rate_flop_per_s": 1e13,
    "rate_mem_bytes_per_s": 1e12,
    "rate_copy_bytes_per_s": 1e10,
}


def _row(device, step_time_s, ops=100, flops=1e6, mem=1e5, copy=0.0, graph=0.0, **kw):
    rates = CPU_RATES if device == "cpu" else GPU_RATES
    return {
        "case": "s001-mlp",
        "framework": "torch",
        "variant": "eager",
        "device": device,
        "status": "ok",
        "timing": "synced",
        "batch": 64,
        "d_in": 1024,
        "hidden": 128,
        "step_time_s": step_time_s,
        "step_ops": ops,
        "step_ops_kind": "aten_ops" if device == "cpu" else "cuda_kernels",
        "step_graph_ops": graph,
        "step_function_calls": 0.0,  # what the counter writes for torch
        "step_flops": flops,
        "step_mem_bytes": mem,
        "step_copy_bytes": copy,
        **rates,
        **kw,
    }


def test_cpu_terms_add_and_accelerator_terms_overlap():
    # CPU: 100 ops x 10 us = 1 ms, 1e9 FLOP / 1e11 = 10 ms, 1e8 B / 1e10 = 10 ms
    # GPU: 100 x 5 us = 0.5 ms, 1e9 / 1e13 = 0.1 ms, 1e8 / 1e12 = 0.1 ms, 1e6 B copy / 1e10
    # = 0.1 ms: max(0.5, 0.2) + 0.1 = 0.6 ms
    df = pd.DataFrame(
        [_row("cpu", 25e-3, flops=1e9, mem=1e8), _row("cuda", 1.2e-3, flops=1e9, mem=1e8, copy=1e6)]
    )
    out = step_columns.model_columns(df)
    cpu, gpu = out.iloc[0], out.iloc[1]
    assert cpu["model_ops_s"] == pytest.approx(1e-3)
    assert cpu["model_compute_s"] == pytest.approx(10e-3)
    assert cpu["model_memory_s"] == pytest.approx(10e-3)
    assert cpu["model_copy_s"] == 0.0
    assert cpu["model_step_s"] == pytest.approx(21e-3)  # the sum
    assert cpu["model_share"] == pytest.approx(21 / 25)
    assert cpu["model_regime"] == "compute-bound"  # 10 ms compute wins the tie by order
    assert gpu["model_step_s"] == pytest.approx(0.6e-3)  # max, then the copy
    assert gpu["model_regime"] == "launch-bound"
    assert gpu["model_share"] == pytest.approx(0.5)
    assert "model_step_s" not in df  # the input is not changed


def test_graph_ops_are_priced_at_the_graph_rate_else_the_eager_rate():
    kw = {"ops": 300, "graph": 200, "flops": 0.0, "mem": 0.0}
    row = _row("cpu", 1e-3, framework="tensorflow", step_ops_kind="tf_ops", **kw)
    out = step_columns.model_columns(pd.DataFrame([row, {**row, "rate_graph_op_s": 1e-6}]))
    # 100 eager x 10 us + 200 graph x 10 us (no graph rate) = 3 ms; with 1 us: 1.2 ms
    assert list(out["model_ops_s"]) == pytest.approx([3e-3, 1.2e-3])
    assert list(out["model_regime"]) == ["launch-bound", "launch-bound"]


@pytest.mark.parametrize(
    ("device", "counts", "regime"),
    [
        ("cuda", {"ops": 10, "flops": 1e3, "mem": 1e10}, "memory-bound"),
        ("cuda", {"ops": 10, "flops": 1e3, "mem": 0.0, "copy": 1e9}, "transfer-bound"),
        ("cuda", {"ops": 10, "flops": 1e12, "mem": 0.0}, "compute-bound"),
        ("cpu", {"ops": 1000, "flops": 1e3, "mem": 0.0}, "launch-bound"),
    ],
)
def test_the_regime_is_the_largest_term(device, counts, regime):
    out = step_columns.model_columns(pd.DataFrame([_row(device, 1.0, **counts)]))
    assert out["model_regime"].iloc[0] == regime


def test_missing_inputs_give_empty_model_columns_never_invented_ones():
    rows = [
        _row("cpu", 1e-3, ops=np.nan),  # not counted
        _row("cuda", 1e-3, copy=1e6, rate_copy_bytes_per_s=np.nan),  # copy with no rate
        _row("cpu", 1e-3, status="error"),  # not ok
        _row("tpu_v9", 1e-3),  # device class the model does not know
        _row("cuda", 1e-3, copy=np.nan),  # copy bytes not counted on an accelerator
        _row("cpu", 1e-3, copy=np.nan),  # on the CPU nothing is copied: modelled
    ]
    out = step_columns.model_columns(pd.DataFrame(rows))
    for column in step_model.MODEL_COLUMNS:
        assert out[column].iloc[:5].isna().all(), column
    assert out["model_step_s"].iloc[5] == pytest.approx(100 * 10e-6 + 1e-5 + 1e-5)
    # no measured time (a prediction): the model, but no share of a measurement
    unmeasured = step_columns.model_columns(pd.DataFrame([_row("cuda", np.nan)])).iloc[0]
    assert unmeasured["model_step_s"] == pytest.approx(100 * 5e-6)
    assert unmeasured["model_regime"] == "launch-bound" and pd.isna(unmeasured["model_share"])
    # a table written before the counts existed: every model column empty
    old = pd.DataFrame([{"case": "s001-mlp", "device": "cpu", "status": "ok", "step_time_s": 1.0}])
    out = step_columns.model_columns(old)
    assert list(out.columns[-len(step_model.MODEL_COLUMNS) :]) == list(step_model.MODEL_COLUMNS)
    assert out[list(step_model.MODEL_COLUMNS)].isna().all().all()
    empty = step_columns.model_columns(pd.DataFrame(columns=["device", "status", "step_time_s"]))
    assert empty.empty and set(step_model.MODEL_COLUMNS) <= set(empty.columns)


def test_rates_and_terms_refuse_what_they_cannot_price():
    rates = Rates(launch_s=5e-6, flop_per_s=1e12)
    with pytest.raises(ValueError, match="mem_bytes"):
        step_model.terms(1, 1, rates, mem_bytes=10)
    with pytest.raises(ValueError, match="graph_ops"):
        step_model.terms(1, 1, rates, graph_ops=2)
    with pytest.raises(ValueError, match="graph_op_s"):
        Rates(launch_s=1e-6, flop_per_s=1e9, graph_op_s=0.0)
    full = Rates(5e-6, 1e12, bytes_per_s=1e10, graph_op_s=1e-6, mem_bytes_per_s=1e11)
    t = step_model.terms(100, 1e9, full, 1e6, graph_ops=50, mem_bytes=1e8)
    assert t == pytest.approx(
        {"launch": 50 * 5e-6 + 50 * 1e-6, "compute": 1e-3, "memory": 1e-3, "transfer": 1e-4}
    )
    assert step_model.combine(t, synchronous=True) == pytest.approx(sum(t.values()))
    assert step_model.combine(t) == pytest.approx(2e-3 + 1e-4)
    assert step_model.regime(100, 1e9, full, 1e6, graph_ops=50, mem_bytes=1e9) == "memory-bound"
    assert math.isclose(
        step_model.predict_step_s(
            100, 1e9, full, 1e6, graph_ops=50, mem_bytes=1e8, synchronous=True
        ),
        sum(t.values()),
    )


def test_collect_writes_the_model_columns_and_is_deterministic(tmp_path):
    from crossover_study.analysis.tables import collect_timings, read_timings
    from crossover_study.core.origin import table_columns

    documented = list(table_columns("timings"))
    assert set(step_model.MODEL_COLUMNS) <= set(documented)
    inputs = [*COUNT_COLUMNS, *CPU_RATES]
    assert set(inputs) <= set(documented)  # the contract's columns, in the schema
    row = _row("cpu", 2e-3, ops=100, flops=1e8, mem=1e6)
    row = {k: v for k, v in row.items() if k in documented}  # the schema's columns only
    part = tmp_path / "job.csv"
    pd.DataFrame([row], columns=documented).to_csv(part, index=False)
    first = collect_timings([part], tmp_path / "a.csv")
    again = collect_timings([part], tmp_path / "b.csv")
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    back = read_timings(tmp_path / "a.csv")
    # 100 x 10 us + 1e8 / 1e11 + 1e6 / 1e10 = 1 ms + 1 ms + 0.1 ms
    assert first["model_step_s"].iloc[0] == pytest.approx(2.1e-3)
    assert back["model_regime"].iloc[0] == "launch-bound"
    assert back["model_share"].iloc[0] == pytest.approx(2.1 / 2)
    assert again["model_step_s"].iloc[0] == first["model_step_s"].iloc[0]


def test_collect_under_an_older_header_adds_no_model_columns(tmp_path):
    from crossover_study.analysis.tables import collect_timings
    from crossover_study.core.origin import table_columns

    old = [c for c in table_columns("timings") if not c.startswith("model_")]
    part = tmp_path / "job.csv"
    row = {k: v for k, v in _row("cpu", 2e-3).items() if k in old}
    pd.DataFrame([row], columns=old).to_csv(part, index=False)
    df = collect_timings([part], tmp_path / "t.csv", columns=old)
    assert list(df.columns) == old
    assert list(pd.read_csv(tmp_path / "t.csv").columns) == old


HIDDEN = (32, 128, 512, 2048)


def _sweep(cpu_extra=1.05, gpu_extra=1.0):
    """s001-mlp along hidden, both devices with counts and rates: the CPU pays 40 ops x
    10 us + 262144 H FLOPs at 1e11 FLOP/s; CUDA 200 kernels x 5 us = 1 ms (its 1e13
    FLOP/s keeps compute below the launches): the model's curves cross where
    0.4 ms + 262144 H / 1e11 = 1 ms, H = 228.9 (interpolated between 128 and 512)."""
    from conftest import s001_rows

    rows = []
    for device, ops, extra in (("cpu", 40, cpu_extra), ("cuda", 200, gpu_extra)):
        rates = CPU_RATES if device == "cpu" else GPU_RATES
        for h, row in zip(HIDDEN, s001_rows(device, HIDDEN, [1.0] * 4), strict=True):
            flops = 262144.0 * h
            model = ops * 10e-6 + flops / 1e11 if device == "cpu" else max(ops * 5e-6, flops / 1e13)
            row.update(
                timing="synced",
                step_time_s=model * extra,
                step_ops=ops,
                step_ops_kind="aten_ops" if device == "cpu" else "cuda_kernels",
                step_graph_ops=0.0,
                step_flops=flops,
                step_mem_bytes=0.0,
                step_copy_bytes=0.0,
                **rates,
            )
            rows.append(row)
    return step_columns.model_columns(pd.DataFrame(rows))


def test_model_crossover_lies_where_the_modelled_curves_cross():
    from crossover_study.answers.regime import model_crossover, model_crossover_text

    df = _sweep()
    outcome, size = model_crossover(df, "s001-mlp", "torch", "eager", "cuda", "hidden")
    assert outcome == "crossover"
    assert 128 < size < 512
    assert size == pytest.approx(228.9, rel=0.25)  # log-log interpolation of a line
    # batch and d_in were not swept: no model crossover there
    assert model_crossover(df, "s001-mlp", "torch", "eager", "cuda", "batch") is None
    text = model_crossover_text(df, "s001-mlp", "torch", "eager", "cuda", ("batch", "hidden"))
    assert text.startswith("the model predicts the crossover at hidden ≈ 2")
    # without the model's columns: nothing
    plain = df.drop(columns=list(step_model.MODEL_COLUMNS))
    assert model_crossover(plain, "s001-mlp", "torch", "eager", "cuda", "hidden") is None
    faster = df.assign(step_ops=np.where(df["device"] == "cuda", 1, df["step_ops"]))
    outcome, _ = model_crossover(
        step_columns.model_columns(faster), "s001-mlp", "torch", "eager", "cuda", "hidden"
    )
    assert outcome == "accelerator_faster_throughout"


def test_the_answer_names_each_devices_regime_and_the_models_crossover():
    from crossover_study.answers.sentences import answer_sentence

    df = _sweep()
    text = answer_sentence(df, None, "s001-mlp")
    # at H = 128: CPU 400 us launches + 335.5 us compute, measured 5 % more
    assert (
        "why (step-time model): with torch, on the CPU the step is launch-bound: "
        "40 ops \u00d7 10 µs ≈ 400 µs; the model's whole step 736 µs of 772 µs measured "
        "(the model explains 95 %)" in text
    )
    assert (
        "on CUDA it is launch-bound: 200 kernels \u00d7 5 µs ≈ 1 ms; the model's whole step" in text
    )
    assert "(the model explains 100 %)" in text
    assert "the model predicts the crossover at hidden ≈ " in text
    assert text.endswith(".")
    # the same table without the model's columns: the sentence without the additions
    plain = answer_sentence(df.drop(columns=list(step_model.MODEL_COLUMNS)), None, "s001-mlp")
    assert "model" not in plain and "why" not in plain
    import re

    stripped = re.sub(r"; the model predicts [^;]*", "", text.split("; why")[0])
    assert stripped == plain[:-1]


def test_regime_wording_for_compute_memory_and_graph_ops():
    from crossover_study.answers.phrasebook import fmt_si
    from crossover_study.answers.regime import device_regime_text

    assert fmt_si(33972224, "FLOP") == "34 MFLOP"
    assert fmt_si(1.2e12, "FLOP/s") == "1.2 TFLOP/s"
    assert fmt_si(512, "B") == "512 B"
    out = step_columns.model_columns(
        pd.DataFrame(
            [
                _row("cuda", 2e-3, ops=10, flops=1e10, mem=0.0),
                _row("cuda", 2e-3, ops=10, flops=1e3, mem=1e9),
                _row(
                    "cpu",
                    1e-3,
                    ops=300,
                    graph=200,
                    flops=0,
                    mem=0,
                    step_ops_kind="tf_ops",
                    rate_graph_op_s=1e-6,
                ),
            ]
        )
    )
    compute = device_regime_text(out.iloc[0])
    assert compute.startswith("on CUDA the step is compute-bound: 10 GFLOP at 10 TFLOP/s ≈ 1 ms")
    assert "(the model explains 50 %)" in compute
    memory = device_regime_text(out.iloc[1], first=False)
    assert memory.startswith("on CUDA it is memory-bound: 1 GB moved at 1 TB/s ≈ 1 ms")
    graph = device_regime_text(out.iloc[2])
    assert (
        "100 eager TensorFlow ops \u00d7 10 µs + 200 TensorFlow ops in a compiled graph \u00d7 1 µs"
        in graph
    )


def _synthetic_reference():
    """A SYNTHETIC reference run's table (built here, never a result): torch on a made-up
    GPU at two rates per point (medians 5 us per kernel, 1e13 FLOP/s), its cpu rows
    and a tensorflow row without rates (no prediction from them)."""
    rows = []
    for eager_s, flop_s in ((4e-6, 0.9e13), (6e-6, 1.1e13)):
        rows.append(
            _row(
                "cuda",
                1e-3,
                device_name="Synthetic GPU X1",
                rate_eager_op_s=eager_s,
                rate_flop_per_s=flop_s,
            )
        )
    rows.append(_row("cpu", 1e-3, device_name="Synthetic CPU"))
    rows.append(_row("cuda", 1e-3, framework="tensorflow", **{c: np.nan for c in GPU_RATES}))
    return pd.DataFrame(rows)


def test_a_cpu_only_study_is_predicted_on_the_reference_accelerator():
    from crossover_study.analysis import prediction as step_reference
    from crossover_study.answers.sentences import answer_sentence

    study = _sweep()
    study = study[study["device"] == "cpu"]  # a CPU-only study with its counts
    # Its products' replay timed the CPU: never a price on the reference accelerator.
    study = study.assign(step_products_s=1.0, step_products_flops=study["step_flops"])
    predicted = step_reference.predict_on_reference(study, _synthetic_reference(), "ref-x")
    assert len(predicted) == len(HIDDEN)  # torch only: tensorflow has no rates
    assert set(predicted["device"]) == {"cuda"}
    assert set(predicted["device_name"]) == {"Synthetic GPU X1"}
    assert set(predicted["reference"]) == {"ref-x"} and set(predicted["kind"]) == {"prediction"}
    assert list(predicted["hidden"]) == list(HIDDEN)
    # 40 CPU ops x 5 us (median) = 200 us against 262144 H / 1e13 at most 54 us
    assert list(predicted["predicted_step_s"]) == pytest.approx([200e-6] * 4)
    assert set(predicted["regime"]) == {"launch-bound"}
    assert list(predicted["cpu_step_time_s"]) == list(study["step_time_s"])
    text = answer_sentence(study, None, "s001-mlp", predictions=predicted)
    assert (
        "predicted on Synthetic GPU X1 from reference ref-x (a prediction from this study's "
        "counts and the reference's measured rates, not a measurement): with torch 200 µs per "
        "step, launch-bound (the CPU measured 772 µs)" in text
    )
    assert answer_sentence(study, None, "s001-mlp", predictions=predicted.iloc[0:0]) == (
        answer_sentence(study, None, "s001-mlp")
    )


def test_no_prediction_without_rates_or_counts():
    from crossover_study.analysis import prediction as step_reference

    study = _sweep()
    cpu_only = _synthetic_reference()
    cpu_only = cpu_only[cpu_only["device"] == "cpu"]
    assert step_reference.predict_on_reference(study, cpu_only, "r").empty
    uncounted = study.assign(step_ops=np.nan)
    assert step_reference.predict_on_reference(uncounted, _synthetic_reference(), "r").empty
    old = study.drop(columns=["step_ops"])
    assert step_reference.predict_on_reference(old, _synthetic_reference(), "r").empty
    no_rates = _synthetic_reference().drop(columns=list(GPU_RATES))
    assert step_reference.reference_rates(no_rates).empty


def test_read_reference_names_the_folder(tmp_path):
    from crossover_study.analysis import prediction as step_reference
    from crossover_study.core.origin import table_columns

    documented = list(table_columns("timings"))
    folder = tmp_path / "synthetic-gpu-ref"
    folder.mkdir()
    table = _synthetic_reference()
    table[[c for c in table.columns if c in documented]].to_csv(folder / "timings.csv", index=False)
    reference, name = step_reference.read_reference(folder)
    assert name == "synthetic-gpu-ref"
    rates = step_reference.reference_rates(reference)
    assert rates.loc[0, "rate_eager_op_s"] == pytest.approx(5e-6)


def test_predict_references_skips_measured_devices_and_old_references(tmp_path):
    from crossover_study.analysis import prediction as step_reference
    from crossover_study.core.origin import table_columns

    documented = list(table_columns("timings"))
    paths = []
    for name, table in (
        ("synthetic-gpu", _synthetic_reference()),
        ("old-cpu", _synthetic_reference().drop(columns=list(GPU_RATES)).iloc[2:3]),
    ):
        (tmp_path / name).mkdir()
        paths.append(tmp_path / name / "timings.csv")
        table[[c for c in table.columns if c in documented]].to_csv(paths[-1], index=False)
    study = _sweep()
    cpu_only = study[study["device"] == "cpu"]
    predicted = step_reference.predict_references(cpu_only, paths)
    assert set(predicted["reference"]) == {"synthetic-gpu"} and len(predicted) == len(HIDDEN)
    assert step_reference.predict_references(study, paths).empty  # cuda measured here
    assert step_reference.predict_references(cpu_only, []).empty
    assert "predicted_step_s" in step_reference.predict_references(cpu_only, []).columns


def test_model_agreement_counts_the_cpu_points_within_30_percent():
    from crossover_study.answers.regime import model_agreement, model_agreement_sentence

    df = _sweep(cpu_extra=1.05)
    # one CPU point measured 2x slower than modelled: share 0.5, outside 30 %
    far = (df["device"] == "cpu") & (df["hidden"] == 512)
    df.loc[far, "step_time_s"] = df.loc[far, "step_time_s"] * 2 / 1.05
    df = step_columns.model_columns(df)
    rows = model_agreement(df)
    assert len(rows) == 4 and rows["within"].sum() == 3
    assert rows.iloc[0]["hidden"] == 512  # worst first
    text = model_agreement_sentence(df, worst=1)
    assert text == (
        "The step-time model's step on the CPU is within 30 % of the measured one at 3 of 4 "
        "points (75 %); the farthest: s001-mlp torch/eager at batch=64, d_in=1024, hidden=512 "
        "(model 0.50\u00d7 measured)."
    )
    assert model_agreement_sentence(df.drop(columns=list(step_model.MODEL_COLUMNS))) == ""


def test_the_prediction_is_drawn_dashed_and_labelled_as_a_prediction():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from crossover_study.analysis import prediction as step_reference
    from crossover_study.figures import report as figures

    study = _sweep()
    cpu_only = study[study["device"] == "cpu"]
    predicted = step_reference.predict_on_reference(cpu_only, _synthetic_reference(), "ref-x")
    curves = step_reference.prediction_curves(predicted)
    assert [label for label, _ in curves] == ["predicted (reference: ref-x, Synthetic GPU X1)"]
    assert step_reference.prediction_curves(predicted.iloc[0:0]) == []
    fig, ax = plt.subplots()
    try:
        figures.cross_machine_step_time(
            [("this study", cpu_only), *curves], "s001-mlp", "hidden", ax
        )
        lines = {line.get_label(): line for line in ax.get_lines()}
        label = "predicted (reference: ref-x, Synthetic GPU X1): cuda (Synthetic GPU X1)"
        assert label in lines, sorted(lines)
        assert lines[label].get_linestyle() != "-"  # dashed: never drawn as the study's own
        assert list(lines[label].get_ydata()) == pytest.approx([200e-6] * 4)
    finally:
        plt.close(fig)


def test_the_report_predicts_the_reference_accelerator_for_a_cpu_only_study(tmp_path, monkeypatch):
    """The report notebook on a CPU-only study with counts and a SYNTHETIC reference run
    whose GPU rows carry rates: the answer quotes the prediction, labelled as one, the
    model's agreement is stated, and the cross-machine figure is drawn."""
    papermill = pytest.importorskip("papermill")
    from conftest import seal_reference, synthetic_reference_gpu
    from test_figures import REPO, make_crossover, make_timings, run_report_notebook

    results = tmp_path / "results" / "fixture"
    results.mkdir(parents=True)
    study = make_timings("unavailable")
    ok_cpu = (study["device"] == "cpu") & (study["status"] == "ok")
    counts = {"step_ops": 40, "step_ops_kind": "aten_ops", "step_graph_ops": 0.0}
    counts |= {"step_flops": 1e6, "step_mem_bytes": 0.0, "step_copy_bytes": 0.0}
    for column, value in {**counts, **CPU_RATES}.items():
        study[column] = np.nan if column != "step_ops_kind" else None
        study.loc[ok_cpu, column] = value
    step_columns.model_columns(study).to_csv(results / "timings.csv", index=False)
    make_crossover("unavailable").to_csv(results / "crossover.csv", index=False)
    reference_csv = synthetic_reference_gpu(tmp_path / "elsewhere")
    reference = pd.read_csv(reference_csv)
    ok_gpu = (reference["device"] == "cuda") & (reference["status"] == "ok")
    for column, value in GPU_RATES.items():
        reference[column] = np.nan
        reference.loc[ok_gpu, column] = value
    reference.to_csv(reference_csv, index=False)
    seal_reference(reference_csv.parent)  # the report draws only runs that pass their audit
    gpu_name = reference.loc[ok_gpu, "device_name"].mode().iloc[0]
    monkeypatch.setenv("CROSSOVER_STUDY_SRC", str(REPO / "src"))
    out = run_report_notebook(
        papermill,
        tmp_path,
        results,
        tmp_path / "figures",
        reference_dir=str(tmp_path / "elsewhere"),
    )
    import nbformat

    nb = nbformat.read(out, as_version=4)
    text = "\n".join(
        o.get("data", {}).get("text/markdown", "") + o.get("text", "")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
    )
    # 40 ops x 5 us = 200 us on the reference's GPU (1 MFLOP at 1e13 FLOP/s: 0.1 us)
    assert f"predicted on {gpu_name} from reference reference-gpu (a prediction" in text
    assert "with torch 200 µs per step, launch-bound" in text
    assert "**The step-time model.** The step-time model's step on the CPU is within" in text
    assert (tmp_path / "figures" / "s001-mlp-cross-machine-hidden.png").exists()


#: A TensorFlow CPU row with the rates a Keras fit program is priced by.
TF_FIT_ROW = {
    "status": "ok",
    "device": "cpu",
    "framework": "tensorflow",
    "step_time_s": 0.01,
    "step_ops": 110.0,
    "step_graph_ops": 100.0,
    "step_function_calls": 2.0,
    "step_flops": 0.0,
    "step_mem_bytes": 0.0,
    "step_copy_bytes": 0.0,
    "rate_eager_op_s": 1e-4,
    "rate_graph_op_s": 1e-6,
    "rate_function_call_s": 2e-4,
    "rate_fit_call_s": 0.05,
    "rate_fit_step_s": 0.003,
    "rate_flop_per_s": 1e10,
    "rate_mem_bytes_per_s": 1e10,
    "steps_per_call": 10,
}


def test_function_calls_and_keras_fit_overheads_are_priced():
    """TensorFlow's traced-function calls cost rate_function_call_s each; a Keras fit
    program pays fit's own cost per call (over steps_per_call) and per step instead of
    its eager ops and calls."""
    import pandas as pd

    from crossover_study.stepmodel.columns import model_columns

    base = TF_FIT_ROW
    rows = pd.DataFrame(
        [
            {**base, "program": "tf_step"},
            {**base, "program": "keras_fit"},
            # a repeating tf.data pipeline: one fit call per timed block of 40 steps
            {**base, "program": "keras_fit_repeat", "steps_per_block": 40},
        ]
    )
    out = model_columns(rows)
    own = 10 * 1e-4 + 2 * 2e-4 + 100 * 1e-6
    fit = 0.05 / 10 + 0.003 + 100 * 1e-6
    repeat = 0.05 / 40 + 0.003 + 100 * 1e-6
    assert out["model_ops_s"].tolist() == pytest.approx([own, fit, repeat])


def test_keras_fit_pays_its_call_once_per_block_and_its_epochs_each_epoch():
    """With fit's cost per epoch measured, a fit program pays the call once per timed
    block (one fit call per block), the epoch (and its validation, where the program
    validates each epoch) once per steps_per_call steps, and every step its own."""
    base = {
        **TF_FIT_ROW,
        "program": "keras_fit",
        "rate_fit_epoch_s": 0.02,
        "rate_fit_validation_s": 0.03,
        "steps_per_call": 2,
        "steps_per_block": 40,
    }
    from crossover_study.stepmodel.columns import model_columns

    rows = pd.DataFrame(
        [
            {**base, "validates_each_epoch": False},
            {**base, "validates_each_epoch": True},
            {**base, "program": "keras_fit_repeat", "validates_each_epoch": False},
        ]
    )
    out = model_columns(rows)
    graph = 100 * 1e-6
    plain = 0.05 / 40 + 0.02 / 2 + 0.003 + graph
    validated = 0.05 / 40 + (0.02 + 0.03) / 2 + 0.003 + graph
    repeat = 0.05 / 40 + 0.02 / 40 + 0.003 + graph  # one long epoch per block
    assert out["model_ops_s"].tolist() == pytest.approx([plain, validated, repeat])
    from crossover_study.answers.regime import _term_detail

    text = _term_detail(rows.iloc[1], "launch")
    assert text.startswith("Keras fit's own 50 ms per call / 40 steps + 50 ms per epoch / 2")

    # A new data iterator (24 ms) each epoch, or every 3rd epoch where fit keeps one
    # (steps_per_epoch over 6 batches, as s002-iris's seed at batch 20)
    rows = rows.assign(rate_fit_iterator_s=0.024, fit_epochs_per_iterator=[1, 3, None])
    out = model_columns(rows)
    assert out["model_ops_s"].tolist() == pytest.approx(
        [plain + 0.024 / 2, validated + 0.008 / 2, repeat + 0.024 / 40]
    )
    text = _term_detail(rows.iloc[1], "launch")
    assert text.startswith("Keras fit's own 50 ms per call / 40 steps + 58 ms per epoch / 2")


def test_a_tensorflow_row_without_its_call_count_gets_no_model():
    from crossover_study.stepmodel.columns import model_columns

    row = _row("cpu", 1e-3)
    row.update(framework="tensorflow", step_function_calls=np.nan)
    assert np.isnan(model_columns(pd.DataFrame([row]))["model_step_s"].iloc[0])
    row.update(step_function_calls=1.0, rate_function_call_s=1e-4)
    assert model_columns(pd.DataFrame([row]))["model_step_s"].iloc[0] > 0


def test_element_wise_traffic_is_priced_at_the_bandwidth_of_its_size():
    """The bandwidth curve: cache-sized ops get the fast end, large ones DRAM's."""
    import json

    from crossover_study.stepmodel.columns import curve_rate, model_columns

    curve = json.dumps([[1e4, 1e11], [1e6, 1e11], [1e8, 1e10]])
    assert curve_rate(curve, 1e3) == pytest.approx(1e11)  # held at the small end
    assert curve_rate(curve, 1e7) == pytest.approx(10**10.5)  # log-log midway
    assert curve_rate(curve, 1e9) == pytest.approx(1e10)
    assert np.isnan(curve_rate(None, 1e6)) and np.isnan(curve_rate(curve, 0))
    small = _row("cpu", 1e-3, mem=1e6, step_mem_ops=100.0, rate_mem_curve=curve)
    large = _row("cpu", 1e-3, mem=1e9, step_mem_ops=10.0, rate_mem_curve=curve)
    old = _row("cpu", 1e-3, mem=1e6)  # no curve: the DRAM rate
    out = model_columns(pd.DataFrame([small, large, old]))
    assert out["model_memory_s"].tolist() == pytest.approx(
        [1e6 / 1e11, 1e9 / 1e10, 1e6 / CPU_RATES["rate_mem_bytes_per_s"]]
    )


def test_element_wise_traffic_is_never_priced_above_the_dram_rate():
    """A job that measured its DRAM rate caps the curve there: a step's tensors are
    read back with the rest of the step between, out of cache, so the curve's
    cache-resident speed does not apply; a slower curve point, a table without the
    rate and a row whose rate is empty keep the curve."""
    import json

    from crossover_study.stepmodel.columns import model_columns

    curve = json.dumps([[1e4, 1e11], [1e6, 1e11], [1e8, 1e10]])
    fast = _row("cpu", 1e-3, mem=1e6, step_mem_ops=1.0, rate_mem_curve=curve)
    fast["rate_mem_dram_bytes_per_s"] = 4e10  # the curve says 1e11 at 1e6 bytes per op
    slow = _row("cpu", 1e-3, mem=1e9, step_mem_ops=10.0, rate_mem_curve=curve)
    slow["rate_mem_dram_bytes_per_s"] = 4e10  # the curve's 1e10 is already below it
    empty = {**fast, "rate_mem_dram_bytes_per_s": np.nan}
    out = model_columns(pd.DataFrame([fast, slow, empty]))
    assert out["model_memory_s"].tolist() == pytest.approx([1e6 / 4e10, 1e9 / 1e10, 1e6 / 1e11])
    without = {k: v for k, v in fast.items() if k != "rate_mem_dram_bytes_per_s"}
    assert model_columns(pd.DataFrame([without]))["model_memory_s"].iloc[0] == pytest.approx(
        1e6 / 1e11
    )


def test_replayed_elementwise_calls_replace_their_bytes():
    """PyTorch's element-wise calls timed alone (step_elementwise_s) stand in for the
    bytes they cover; the rest of step_mem_bytes stays at the bandwidth, and a row
    without the replay prices all its bytes there."""
    from crossover_study.stepmodel.columns import model_columns

    bandwidth = CPU_RATES["rate_mem_bytes_per_s"]
    replayed = _row("cpu", 1e-2, mem=1e9, step_elementwise_s=4e-3, step_elementwise_bytes=6e8)
    whole = _row("cpu", 1e-2, mem=1e9)
    out = model_columns(pd.DataFrame([replayed, whole]))
    assert out["model_memory_s"].tolist() == pytest.approx(
        [4e-3 + 4e8 / bandwidth, 1e9 / bandwidth]
    )


def test_page_faults_the_replays_did_not_take_are_priced():
    """The step's page faults less the replays' own, at the host's rate per fault: in
    the memory term on the CPU, in the ops term on an accelerator (host time); a row
    without the count or the rate keeps its model."""
    from crossover_study.stepmodel.columns import model_columns

    faults = {
        "step_page_faults": 1500.0,
        "step_products_faults": 200.0,
        "step_elementwise_faults": 300.0,
        "rate_page_fault_s": 2e-6,
    }
    plain_cpu, plain_gpu = _row("cpu", 1e-2, mem=1e8), _row("cuda", 1e-2, mem=1e8)
    rows = [
        {**plain_cpu, **faults},
        plain_cpu,
        {**plain_gpu, **faults},
        plain_gpu,
        {**plain_cpu, **faults, "step_page_faults": 100.0},  # fewer than the replays took
        {**plain_cpu, **faults, "rate_page_fault_s": np.nan},  # rate not measured
    ]
    out = model_columns(pd.DataFrame(rows))
    extra = 1000 * 2e-6  # (1500 − 200 − 300) faults at 2 µs
    assert out["model_memory_s"][0] == pytest.approx(out["model_memory_s"][1] + extra)
    assert out["model_ops_s"][0] == pytest.approx(out["model_ops_s"][1])
    assert out["model_ops_s"][2] == pytest.approx(out["model_ops_s"][3] + extra)
    assert out["model_memory_s"][2] == pytest.approx(out["model_memory_s"][3])
    assert out["model_memory_s"][4] == pytest.approx(out["model_memory_s"][1])
    assert out["model_step_s"][5] == pytest.approx(out["model_step_s"][1])


def test_products_are_priced_at_the_flop_rate_of_their_size():
    import json

    from crossover_study.stepmodel.columns import model_columns

    curve = json.dumps([[1e4, 1e9], [1e8, 1e11]])
    small = _row("cpu", 1e-3, flops=1e6, step_flop_ops=100.0, rate_flop_curve=curve)
    large = _row("cpu", 1e-3, flops=1e9, step_flop_ops=10.0, rate_flop_curve=curve)
    out = model_columns(pd.DataFrame([small, large]))
    assert out["model_compute_s"].tolist() == pytest.approx([1e6 / 1e9, 1e9 / 1e11])


def test_replayed_products_set_the_compute_term():
    """With its products replayed the compute term is their time plus the FLOPs they
    do not cover at the FLOP rate; without a replay all FLOPs are priced at the rate;
    the answer says the products were timed alone."""
    from crossover_study.answers.regime import _term_detail
    from crossover_study.stepmodel.columns import model_columns

    rate = CPU_RATES["rate_flop_per_s"]
    replayed = _row("cpu", 1e-2, flops=1e9, step_products_s=5e-3, step_products_flops=8e8)
    whole = _row("cpu", 1e-2, flops=1e9, step_products_s=5e-3, step_products_flops=1e9)
    not_replayed = _row("cpu", 1e-2, flops=1e9)
    out = model_columns(pd.DataFrame([replayed, whole, not_replayed]))
    assert out["model_compute_s"].tolist() == pytest.approx([5e-3 + 2e8 / rate, 5e-3, 1e9 / rate])
    assert "(its products timed alone)" in _term_detail(out.iloc[0], "compute")
    assert "timed alone" not in _term_detail(out.iloc[2], "compute")


def test_a_replicated_row_pays_its_all_reduce():
    """Replicas' all-reduce is part of the transfer term (replicated rows only); a
    replicated row that lacks it gets no model rather than a step without it."""
    from crossover_study.answers.regime import _term_detail
    from crossover_study.stepmodel.columns import model_columns

    one = _row("cpu", 1e-2, replicas=1, allreduce_s=5e-3)
    two = _row("cpu", 1e-2, replicas=2, allreduce_s=5e-3)
    unmeasured = _row("cpu", 1e-2, replicas=2, allreduce_s=np.nan)
    out = model_columns(pd.DataFrame([one, two, unmeasured]))
    assert out["model_copy_s"].iloc[0] == 0 and out["model_copy_s"].iloc[1] == 5e-3
    assert out["model_step_s"].iloc[1] == pytest.approx(out["model_step_s"].iloc[0] + 5e-3)
    assert out["model_regime"].iloc[1] == "transfer-bound"
    assert np.isnan(out["model_step_s"].iloc[2])
    text = _term_detail(out.iloc[1], "transfer")
    assert text == "one all-reduce of the gradients over 2 replicas 5 ms"


def test_keras_fit_wording_names_fit_s_own_cost():
    from crossover_study.answers.regime import _term_detail

    row = pd.Series(
        {
            "program": "keras_fit",
            "step_ops": 30.0,
            "step_graph_ops": 20.0,
            "step_function_calls": 1.0,
            "step_ops_kind": "tf_ops",
            "steps_per_call": 4,
            "rate_eager_op_s": 1e-4,
            "rate_graph_op_s": 1e-6,
            "rate_fit_call_s": 0.05,
            "rate_fit_step_s": 0.002,
        }
    )
    text = _term_detail(row, "launch")
    assert text.startswith("Keras fit's own 50 ms per call / 4 steps + 2 ms per step")
    assert "eager" not in text and "20 TensorFlow ops in a compiled graph" in text


def test_a_keras_fit_point_is_predicted_with_the_references_fit_and_curve_rates():
    """The prediction carries every count and rate the model prices: a TensorFlow Keras
    fit point needs its traced-function calls, its program and steps per call, and the
    reference's fit rates; the reference's curves price its products by size."""
    import json

    from crossover_study.analysis import prediction as step_reference

    counts = {
        "step_ops": 30.0,
        "step_graph_ops": 20.0,
        "step_function_calls": 1.0,
        "step_flops": 1e6,
        "step_flop_ops": 10.0,
        "step_mem_bytes": 0.0,
        "step_copy_bytes": 0.0,
    }
    study = pd.DataFrame(
        [
            _row(
                "cpu",
                0.02,
                framework="tensorflow",
                program="keras_fit",
                steps_per_call=4,
                **counts,
            )
        ]
    )
    curve = json.dumps([[1e3, 1e9], [1e7, 1e12]])
    gpu = _row(
        "cuda",
        1e-3,
        framework="tensorflow",
        device_name="Synthetic GPU X1",
        rate_graph_op_s=1e-6,
        rate_function_call_s=1e-4,
        rate_fit_call_s=0.04,
        rate_fit_step_s=1e-3,
        rate_flop_curve=curve,
    )
    predicted = step_reference.predict_on_reference(study, pd.DataFrame([gpu]), "ref-x")
    assert len(predicted) == 1
    # fit: 40 ms / 4 steps + 1 ms + 20 graph ops x 1 us; products of 1e5 FLOPs, halfway
    # (in logs) along the curve: 10^10.5 FLOP/s
    ops = 0.04 / 4 + 1e-3 + 20 * 1e-6
    assert predicted["model_ops_s"].iloc[0] == pytest.approx(ops)
    assert predicted["model_compute_s"].iloc[0] == pytest.approx(1e6 / 10**10.5)
    assert predicted["predicted_step_s"].iloc[0] == pytest.approx(ops)
