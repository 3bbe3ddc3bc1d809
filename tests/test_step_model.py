"""Counts of one training step and the step-time model built on them."""

import math

import numpy as np
import pytest

from crossover_study.stepmodel import counts_torch as step_counts_torch
from crossover_study.stepmodel import model as step_model
from crossover_study.stepmodel import record as step_record
from crossover_study.stepmodel.model import Rates


@pytest.mark.parametrize("sizes", [(64, 1024, 128), (64, 256, 32), (7, 33, 5)])
def test_mlp_flops_of_the_torch_step_match_the_closed_form(sizes):
    from crossover_study.measure import frameworks

    batch, d_in, hidden = sizes
    frameworks.import_framework("torch", "cpu", 1)
    workload = frameworks.workload_class("torch", "s001-mlp")(
        "cpu", {"batch": batch, "d_in": d_in, "hidden": hidden}
    )
    workload.setup()
    counts = step_counts_torch.count_torch_step(lambda: workload.run(1))  # one step
    assert counts.flops == step_record.mlp_matmul_flops(batch, d_in, hidden)
    # three products forward, five backward, clamps, loss and update: dozens, not one
    assert 20 <= counts.ops <= 200
    assert counts.ops_kind == "aten_ops" and counts.graph_ops == 0


def test_mlp_flops_closed_form_by_hand_and_bad_sizes():
    # N=1, D=1, H=1, O=1: forward 3 products of 1 MAC, backward 5: 8 MACs = 16 FLOPs
    assert step_record.mlp_matmul_flops(1, 1, 1, d_out=1) == 16
    # the seed's size: 2·64·(2·1024·128 + 3·128·8 + 3·64)
    assert step_record.mlp_matmul_flops(64, 1024, 128) == 2 * 64 * (262144 + 3072 + 192)
    with pytest.raises(ValueError, match="hidden"):
        step_record.mlp_matmul_flops(64, 1024, 0)


def test_the_model_takes_the_larger_floor_and_names_it():
    rates = Rates(launch_s=5e-6, flop_per_s=1e12, bytes_per_s=1e10)
    # 183 kernels x 5 us = 0.915 ms against 1 MFLOP at 1 TFLOP/s = 1 us: launch-bound
    assert step_model.predict_step_s(183, 1e6, rates) == pytest.approx(915e-6)
    assert step_model.regime(183, 1e6, rates) == "launch-bound"
    assert step_model.regime(183, 1e10, rates) == "compute-bound"  # 10 ms of arithmetic
    assert step_model.regime(10, 1e3, rates, bytes_=1e9) == "transfer-bound"  # 0.1 s copy
    assert step_model.predict_step_s(10, 1e3, rates, bytes_=1e9) == pytest.approx(0.1 + 5e-5)
    assert step_model.explained_share(0.9e-3, 1e-3) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="launch_s"):
        Rates(launch_s=0.0, flop_per_s=1e9)
    with pytest.raises(ValueError, match="flops"):
        step_model.terms(1, -1, rates)


def test_fit_recovers_known_rates_from_synthetic_steps():
    """Steps generated from known rates with 3 % noise, on both sides of the bend (an
    eager MLP-like sweep: fixed ops, FLOPs growing with the width)."""
    launch, rate = 8e-6, 5e10
    rng = np.random.default_rng(0)
    ops = np.full(12, 60.0)
    flops = np.geomspace(1e5, 1e9, 12)
    true = np.maximum(ops * launch, flops / rate)
    measured = true * rng.lognormal(0.0, 0.03, size=true.shape)
    fitted = step_model.fit_rates(ops, flops, measured)
    assert fitted.launch_s == pytest.approx(launch, rel=0.05)
    assert fitted.flop_per_s == pytest.approx(rate, rel=0.05)
    predicted = [step_model.predict_step_s(o, f, fitted) for o, f in zip(ops, flops, strict=True)]
    shares = [step_model.explained_share(p, m) for p, m in zip(predicted, measured, strict=True)]
    assert all(abs(math.log(s)) < 0.15 for s in shares)


def test_fit_refuses_what_it_cannot_fit():
    with pytest.raises(ValueError, match="at least 2"):
        step_model.fit_rates([1], [1], [1])
    with pytest.raises(ValueError, match="unequal"):
        step_model.fit_rates([1, 2], [1], [1, 2])
    with pytest.raises(ValueError, match="step_s"):
        step_model.fit_rates([1, 2], [1, 2], [0.0, 1.0])
