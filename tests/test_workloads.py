"""Each seed case in each framework: faithful to its seed and trainable on the CPU."""

import math
import re

import numpy as np
import pytest

from crossover_study.measure import frameworks
from crossover_study.measure.harness import measure
from crossover_study.study import seed_data as data
from crossover_study.study.cases import SEEDS
from crossover_study.study.points import TimingPolicy

CASES = tuple(SEEDS)  # the seed cases, from the registry
SEED_SIZES = {name: dict(case.seed) for name, case in SEEDS.items()}

SMALL = {
    "s000-hjb": {"batch": 16, "width": 8},
    "s001-mlp": {"batch": 8, "d_in": 32, "hidden": 16},
    "s002-iris": {"batch": 20, "hidden": 8},
    "s004-lstm": {"batch": 150, "units": 8, "seq_len": 5},  # 8 steps per epoch
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


def applicable(framework: str, case: str, device: str = "cpu") -> dict[str, str | None]:
    """Every variant of ``case`` in ``framework`` on ``device`` -> None where it applies,
    else the reason, as the applicability table gives them for the workload's own
    program (its traits, ``program_traits.KINDS``, read from an eager instance)."""
    from crossover_study.study.applicability import applicability
    from crossover_study.study.spec import VARIANTS

    kind = frameworks.workload_class(framework, case)(device, SMALL[case]).kind()
    return {v: applicability(v, framework, device, kind, case=case)[1] for v in VARIANTS}


#: Variants too slow to run in unit tests on 2 cores (compilation takes seconds); their
#: rows are produced by the studies.
SLOW_TO_BUILD = {"compile"}


@pytest.mark.parametrize("case", CASES)
def test_variant_applicability_and_reasons(framework, case):
    from crossover_study.study.applicability import NotApplicable
    from crossover_study.study.spec import VARIANTS

    cls = frameworks.workload_class(framework, case)
    reasons = applicable(framework, case)
    assert set(reasons) == set(VARIANTS)
    for variant, why in reasons.items():
        if why is None:
            w = cls("cpu", SMALL[case], variant)
            assert w.variant == variant
        else:
            assert re.search(r"\w+ \w+", why), variant
            with pytest.raises(NotApplicable, match=re.escape(why)):
                cls("cpu", SMALL[case], variant)


@pytest.mark.parametrize("case", CASES)
def test_every_applicable_variant_trains(framework, case):
    cls = frameworks.workload_class(framework, case)
    policy = TimingPolicy(min_block_s=0.002, n_blocks=3, max_warmup_s=0.02, sync_check_s=0.05)
    runs = {v for v, why in applicable(framework, case).items() if why is None}
    for variant in sorted(runs - {"eager"} - SLOW_TO_BUILD):
        w = cls("cpu", SMALL[case], variant)
        m = measure(w, policy)
        assert m.step_time_s > 0 and math.isfinite(m.final_loss), variant
        if variant == "read_loss_every_step":
            assert w.loss_read_every == 1
        if variant == "read_loss_every_1000":
            assert w.loss_read_every == 1000


def test_tf_function_traces_are_counted_and_stay_constant_in_the_steady_state():
    frameworks.import_framework("tensorflow", "cpu", 1)
    from crossover_study.workloads.tf_cases import HJB, MLP, Iris

    policy = TimingPolicy(min_block_s=0.005, n_blocks=3, max_warmup_s=0.05)
    m = measure(HJB("cpu", SMALL["s000-hjb"]), policy)
    assert m.traces_first_step >= 1 and m.traces_timed == 0
    fit = measure(Iris("cpu", SMALL["s002-iris"], "custom_step"), policy)
    assert fit.traces_first_step >= 1 and fit.traces_timed == 0
    eager = measure(MLP("cpu", SMALL["s001-mlp"]), policy)
    assert eager.traces_first_step is None  # eager TensorFlow compiles nothing


def test_gpu_only_variants_say_why_on_the_cpu():
    from crossover_study.study.applicability import NotApplicable

    frameworks.import_framework("torch", "cpu", 1)
    from crossover_study.workloads.torch_cases import LSTM, MLP

    with pytest.raises(NotApplicable, match="CUDA graph captures CUDA kernels"):
        MLP("cpu", SMALL["s001-mlp"], "cuda_graph")
    with pytest.raises(NotApplicable, match="cuDNN kernels run on CUDA devices only"):
        LSTM("cpu", SMALL["s004-lstm"], "cudnn")
    with pytest.raises(NotApplicable, match="TF32 is a tensor-core format of NVIDIA GPUs"):
        MLP("cpu", SMALL["s001-mlp"], "tf32")
    assert MLP("cuda", SMALL["s001-mlp"], "tf32").variant == "tf32"  # built, not set up
    assert LSTM("cpu", SMALL["s004-lstm"]).kernel() == "cpu"


@pytest.mark.slow
def test_torch_compile_variant_trains_and_counts_its_graphs():
    frameworks.import_framework("torch", "cpu", 1)
    from crossover_study.workloads.torch_cases import MLP

    w = MLP("cpu", SMALL["s001-mlp"], "compile")
    m = measure(w, TimingPolicy(min_block_s=0.005, n_blocks=3, max_warmup_s=0.05))
    assert m.traces_first_step >= 1 and m.traces_timed == 0
    assert math.isfinite(m.final_loss)


def test_loss_read_cadence_of_the_compiled_and_keras_paths_is_recorded():
    frameworks.import_framework("tensorflow", "cpu", 1)
    from crossover_study.workloads.tf_cases import MLP, Iris

    assert MLP("cpu", SMALL["s001-mlp"], "loop").loss_read_every == 1000  # before setup
    loop = MLP("cpu", SMALL["s001-mlp"], "loop")
    loop.setup()
    assert loop.loss_read_every == 0  # one read per compiled loop, i.e. per block
    assert Iris("cpu", SMALL["s002-iris"], "train_on_batch").loss_read_every == 1
    # fit reads its logs every step, also from a dataset (counted below)
    assert Iris("cpu", SMALL["s002-iris"], "tf_data_repeat").loss_read_every == 1
    assert Iris("cpu", SMALL["s002-iris"]).loss_read_every == 1
    assert Iris("cpu", SMALL["s002-iris"], "custom_step").loss_read_every == 2  # per epoch


@pytest.mark.parametrize("variant", ["eager", "tf_data_repeat", "steps_per_execution"])
def test_keras_fit_host_reads_are_counted_and_match_the_rows(monkeypatch, variant):
    """Count the log values Keras 3 converts to Python floats after training batches
    (each a device-to-host read that waits for the step) while fit runs, and check that
    the row's ``loss_read_every`` says the same: every step for fit (also on a dataset),
    once per execution for steps_per_execution."""
    frameworks.import_framework("tensorflow", "cpu", 1)
    from keras.src import backend
    from keras.src.callbacks.callback_list import CallbackList

    from crossover_study.workloads.tf_cases import LSTM

    w = LSTM("cpu", SMALL["s004-lstm"], variant)
    w.setup()
    w.run(w.steps_per_call)  # traced and built: later calls only train
    reads = {"batch_end": 0, "all": 0}
    inside = []
    convert, batch_end = backend.convert_to_numpy, CallbackList.on_train_batch_end

    def counting_convert(x):
        reads["all"] += 1
        reads["batch_end"] += bool(inside)
        return convert(x)

    def counting_batch_end(self, batch, logs=None):
        inside.append(batch)
        try:
            return batch_end(self, batch, logs)
        finally:
            inside.pop()

    monkeypatch.setattr(backend, "convert_to_numpy", counting_convert)
    monkeypatch.setattr(CallbackList, "on_train_batch_end", counting_batch_end)
    steps = 2 * w.steps_per_call
    w.run(steps)
    w.close()
    assert reads["batch_end"] > 0, "no log value was read back after a training batch"
    assert steps / reads["batch_end"] == w.loss_read_every
    assert reads["all"] >= reads["batch_end"]


def test_torch_lstm_starts_as_keras_and_its_extra_bias_is_counted():
    frameworks.import_framework("torch", "cpu", 1)
    import torch

    from crossover_study.workloads.torch_cases import LSTMRegressor

    torch.manual_seed(0)
    net = LSTMRegressor(3, 180, 4)
    # Keras: 4 x (u x (inputs + u) + u) per LSTM layer plus the Dense head: 653 044;
    # torch's second bias vector adds 3 layers x 4 gates x 180.
    assert sum(p.numel() for p in net.parameters()) == 653_044 + 3 * 4 * 180
    bias = net.lstm1.bias_ih_l0
    assert torch.equal(bias[180:360], torch.ones(180))  # forget gate
    assert not bias[:180].any() and not bias[360:].any() and not net.lstm1.bias_hh_l0.any()
    w = net.lstm2.weight_hh_l0  # (4 x 180, 180): orthonormal columns
    assert torch.allclose(w.T @ w, torch.eye(180), atol=1e-4)
