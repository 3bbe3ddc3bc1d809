"""The report's first screen (answers.summary): one row per case and framework, the
accelerator measured where it was and predicted from device cards where it was not,
each row linked to its section, every text escaped, each case's lead short."""

import json

import pandas as pd
import pytest

from crossover_study.analysis.card_prediction import predict_cards, predicted_crossovers
from crossover_study.answers.summary import (
    anchor,
    block_quartiles,
    case_lead,
    measured_shares,
    summary_html,
    summary_rows,
)
from crossover_study.study.device_cards import load_cards


def _row(device="cpu", variant="eager", step=6e-4, **columns) -> dict:
    """One ok s001-mlp row at the seed's size (torch) with counts and an attribution."""
    return {
        "case": "s001-mlp", "framework": "torch", "device": device, "variant": variant,
        "timing": "synced", "status": "ok", "batch": 64, "d_in": 1024, "hidden": 128,
        "axes": "batch,d_in,hidden", "program": "torch_step", "step_time_s": step,
        "block_step_times_s": json.dumps([step * 0.9, step, step * 1.1]),
        "step_ops": 38.0, "step_flop_ops": 8.0, "step_mem_ops": 24.0, "step_flops": 3.4e7,
        "step_mem_bytes": 5.5e6, "step_graph_ops": 0.0, "step_function_calls": 0.0,
        "loss_read_every": 1000, "attr_ops_s": 0.75 * step, "attr_python_s": 0.25 * step,
        **columns,
    }  # fmt: skip


def test_a_row_quotes_the_cpu_with_its_interval_the_prediction_and_the_remedy():
    paired = {"interleaved": True, "speedup": 2.0, "speedup_low": 1.9, "speedup_high": 2.1}
    timings = pd.DataFrame([_row(), _row(variant="compile", step=3e-4, **paired)])
    predicted = predict_cards(timings, load_cards(["t4"]))
    (row,) = summary_rows(
        timings, pd.DataFrame(), ["s001-mlp"], predicted, predicted_crossovers(predicted)
    )
    assert row["cpu"] == "600 µs (570 µs–630 µs)"
    assert row["accelerator"].endswith("on T4 (predicted)")
    assert "(predicted)" in row["verdict"]
    assert row["why"].startswith("CPU: framework ops 75%; T4: ")
    assert row["remedy"].startswith("CPU: compile 2.0× (1.90–2.10); T4: cuda_graph ≈ ")
    # measured apart, with no paired interval: not offered (issue 62)
    apart = pd.DataFrame([_row(), _row(variant="compile", step=3e-4)])
    (row,) = summary_rows(
        apart, pd.DataFrame(), ["s001-mlp"], predicted, predicted_crossovers(predicted)
    )
    assert row["remedy"].startswith("CPU: none offered (compile 2.0× unpaired)")


def test_a_measured_accelerator_takes_the_place_of_the_predictions():
    timings = pd.DataFrame([_row(), _row(device="cuda", step=2e-4, device_name="NVIDIA H200")])
    crossover = pd.DataFrame(
        [{"case": "s001-mlp", "framework": "torch", "variant": "eager", "accelerator": "cuda",
          "axis": "hidden", "outcome": "crossover", "crossover_size": 90.0, "speedup_at_seed": 3.0,
          "seed_size": 128, "size_verdicts": "32:slower 128:faster"}]
    )  # fmt: skip
    predicted = predict_cards(timings, load_cards(["t4"]))
    (row,) = summary_rows(
        timings, crossover, ["s001-mlp"], predicted, predicted_crossovers(predicted)
    )
    assert (
        row["accelerator"].startswith("NVIDIA H200: 200 µs") and "(measured)" in row["accelerator"]
    )
    assert row["verdict"] == "CUDA 3.0× faster"
    assert row["overtakes"] == "hidden ≈ 90"
    assert "predicted" not in row["accelerator"] + row["verdict"] + row["overtakes"]


def test_every_cell_is_escaped_and_each_case_links_to_its_section():
    rows = [
        {
            "case": "s001-mlp",
            "framework": "torch",
            "cpu": "1 ms",
            "accelerator": "<img src=x onerror=alert(1)>",
            "verdict": "a & b",
            "overtakes": "",
            "why": "",
            "remedy": "",
        }
    ]
    html = summary_html(rows)
    assert '<a href="#case-s001-mlp">s001-mlp</a>' in html and anchor("s001-mlp") == "case-s001-mlp"
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "a &amp; b" in html


def test_a_case_lead_is_short():
    timings = pd.DataFrame([_row(), _row(variant="compile", step=3e-4)])
    predicted = predict_cards(timings, load_cards(["t4"]))
    rows = summary_rows(
        timings, pd.DataFrame(), ["s001-mlp"], predicted, predicted_crossovers(predicted)
    )
    lead = case_lead(rows, "s001-mlp")
    assert lead.startswith("With torch: ") and len(lead.split()) <= 40


def test_shares_and_quartiles_are_read_from_the_row():
    row = pd.Series(_row())
    assert measured_shares(row, top=2) == "framework ops 75%, Python 25%"
    assert measured_shares(pd.Series({"attr_ops_s": None})) == ""
    assert block_quartiles(row) == pytest.approx((0.00057, 0.00063))
    assert block_quartiles(pd.Series({"block_step_times_s": None})) is None


def test_a_seed_asked_about_several_gpus_is_answered_on_them():
    """s004-lstm's user asked why two GPUs train a batch no faster than one: its first
    screen gives the cards' data-parallel prediction on two GPUs against one."""
    seed = {"batch": 32, "units": 180, "seq_len": 60}
    cpu = {**_row(step=0.2), "case": "s004-lstm", "framework": "tensorflow", **seed,
           "axes": "batch,units,seq_len", "d_in": None, "hidden": None}  # fmt: skip
    base = {"card": "t4", "device_name": "NVIDIA T4", "case": "s004-lstm",
            "framework": "tensorflow", "variant": "mirrored", "cpu_variant": "mirrored",
            "regime": "launch-bound", "allreduce_s": 2e-4, **seed}  # fmt: skip
    predicted = pd.DataFrame(
        [
            {**base, "device_class": "cuda", "replicas": 1, "scaling": None,
             "predicted_step_s": 0.036, "predicted_low_s": 0.02, "predicted_high_s": 0.07},
            {**base, "device_class": "cuda_multi", "replicas": 2, "scaling": "strong",
             "predicted_step_s": 0.07, "predicted_low_s": 0.02, "predicted_high_s": 0.14},
        ]
    )  # fmt: skip
    (row,) = summary_rows(pd.DataFrame([cpu]), pd.DataFrame(), ["s004-lstm"], predicted, None)
    assert row["accelerator"] == "2 × T4 (mirrored) ≈ 70 ms · 1 × T4 ≈ 36 ms (predicted)"
    assert row["verdict"] == "2 GPUs no faster than one within the bands (predicted)"
