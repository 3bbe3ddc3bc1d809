"""Each seed case in each framework: faithful to its seed and trainable on the CPU."""

import math

import numpy as np
import pytest

from crossover_study import frameworks
from crossover_study.harness import TimingPolicy, measure
from crossover_study.spec import CASES, SEED_SIZES
from crossover_study.workloads import data

SMALL = {
    "s000-hjb": {"batch": 16, "width": 8},
    "s001-mlp": {"batch": 8, "d_in": 32, "hidden": 16},
    "s002-iris": {"batch": 20, "hidden": 8},
    "s004-lstm": {"batch": 4, "units": 8, "seq_len": 5},
}


@pytest.fixture(scope="module", params=["torch", "tensorflow"])
def framework(request):
    frameworks.pin_thread_env(1)
    frameworks.import_framework(request.param, "cpu", 1)
    return request.param


@pytest.mark.parametrize("case", CASES)
def test_every_case_trains_and_is_timed(framework, case):
    cls = frameworks.workload_class(framework, case)
    w = cls("cpu", SMALL[case])
    m = measure(w, TimingPolicy(min_block_s=0.005, n_blocks=3, max_warmup_s=0.05, max_point_s=2))
    assert m.step_time_s > 0 and len(m.block_step_times_s) == 3
    assert m.steps_per_block % cls.steps_per_call == 0
    assert math.isfinite(m.final_loss)


def test_seed_axes_match_the_seeds():
    assert SEED_SIZES["s001-mlp"] == {"batch": 64, "d_in": 1024, "hidden": 128}
    assert SEED_SIZES["s000-hjb"] == {"batch": 100, "width": 8}
    assert SEED_SIZES["s002-iris"] == {"batch": 20, "hidden": 32}
    assert SEED_SIZES["s004-lstm"]["units"] == 180 and SEED_SIZES["s004-lstm"]["batch"] == 32


def test_iris_split_is_the_seeds():
    xt, yt, xv, yv = data.iris(20)
    assert xt.shape == (105, 4) and yv.shape == (45, 1) and xv.shape == (45, 4)
    assert xt.dtype == np.float32 and set(np.unique(yt)) <= {0.0, 1.0, 2.0}
    # shuffle=False: the last 45 rows of Iris (all of class 2) are the validation set.
    assert set(np.unique(yv)) == {2.0}
    big, _, _, _ = data.iris(1000)
    assert big.shape == (2000, 4)  # rows repeated to fill two batches per epoch


def test_sequences_are_seeded_and_shaped():
    x, y = data.sequences(6, 12, seed=3)
    x2, _ = data.sequences(6, 12, seed=3)
    assert x.shape == (6, 12, 3) and y.shape == (6, 4)
    assert np.array_equal(x, x2)
    with pytest.raises(ValueError, match="positive"):
        data.sequences(0, 12)


def test_torch_hjb_output_bias_and_mlp_updates_follow_the_seeds():
    frameworks.import_framework("torch", "cpu", 1)
    from crossover_study.workloads.torch_cases import HJB, MLP

    hjb = HJB("cpu", SEED_SIZES["s000-hjb"])
    hjb.setup()
    assert hjb.model[-1].bias.item() == -60.0  # initGuess = -60
    assert len([m for m in hjb.model if hasattr(m, "weight")]) == 4  # 3 hidden + output
    mlp = MLP("cpu", {"batch": 8, "d_in": 32, "hidden": 16})
    mlp.setup()
    w1, w3 = mlp.w1.detach().clone(), mlp.w3.detach().clone()
    mlp.run(3)
    assert not np.array_equal(w1.numpy(), mlp.w1.detach().numpy())  # w1 is updated
    assert np.array_equal(w3.numpy(), mlp.w3.detach().numpy())  # w3 never is (as in the seed)


def test_keras_compile_pins_xla_off_and_one_step_per_execution():
    frameworks.import_framework("tensorflow", "cpu", 1)
    from crossover_study.workloads.tf_cases import Iris

    w = Iris("cpu", {"batch": 20, "hidden": 32})
    w.setup()
    assert w.model.jit_compile is False
    assert w.model.steps_per_execution == 1
    assert w.model.layers[0].units == 32 and w.model.layers[-1].units == 3
