"""Faults a first GPU run would hit, each reproduced or checked on the CPU.

A reading of the CUDA paths against torch's source (nothing here has a GPU) found
crashes and biased numbers; each test below checks one fix with the CPU-side stand-in
of its kind: a fake workload, a patched probe, an import hook, a spy on torch.
"""

import json
import os
import subprocess
import sys
import time
import weakref

import pandas as pd
import pytest
import torch
import yaml

from crossover_study.core.paths import REPO_ROOT
from crossover_study.measure import device_probe, frameworks, runner
from crossover_study.measure import point as point_measure
from crossover_study.measure.journal import Journal
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study.points import TimingPolicy
from crossover_study.study.spec import PointSpec
from crossover_study.workloads import torch_base, torch_cases

SEED = {"batch": 64, "d_in": 1024, "hidden": 128}
SMALL = {"batch": 8, "d_in": 16, "hidden": 8}
POLICY = TimingPolicy(min_block_s=0.005, n_blocks=3, max_warmup_s=0.05, max_point_s=1)


def quiet(_):
    pass


def group_of(points, device="cpu", case="s001-mlp", framework="torch"):
    return GroupSpec(case, framework, device, tuple(points), 1, POLICY, "skip", "h")


# --- crashes ------------------------------------------------------------------------


def test_mlp_compile_has_stable_gradient_buffers_before_its_first_compiled_call():
    """On CUDA (reduce-overhead), gradients first created inside torch.compile's
    CUDA-graph pool and zeroed in place are overwritten by the next replay; the weights
    must own their gradient buffers before the first compiled call, and keep them."""
    mlp = torch_cases.MLP("cpu", SMALL, "compile")
    mlp.setup()
    grads = [mlp.w1.grad, mlp.w2.grad, mlp.w3.grad]
    assert all(g is not None and not g.any() for g in grads)
    pointers = [g.data_ptr() for g in grads]
    mlp.run(3)
    mlp.sync()
    assert [w.grad.data_ptr() for w in (mlp.w1, mlp.w2, mlp.w3)] == pointers
    assert mlp.w3.grad.abs().sum() > 0  # w3's gradient accumulates, as in the seed
    # The eager program is unchanged: its gradients are created by the first backward.
    eager = torch_cases.MLP("cpu", SMALL, "eager")
    eager.setup()
    assert eager.w1.grad is None


#: TensorFlow hidden from every Python process that starts with this file's folder on
#: its PYTHONPATH (``site`` imports ``sitecustomize``): the measuring job's supervisor
#: and the worker it starts alike.
HIDE_TENSORFLOW = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ModuleNotFoundError("No module named " + repr(name), name=name)
        return None
sys.meta_path.insert(0, Hide())
"""


def test_a_framework_that_cannot_be_imported_gives_unavailable_rows_and_a_probe(tmp_path):
    """TensorFlow absent (as on the GPU reference machine): the job writes its table of
    unavailable rows naming the import error, and its probe record; it does not die in
    the runner or again while writing the probe."""
    study = {
        "study": "hidden-tf",
        "sweep": {
            "frameworks": ["tensorflow"],
            "devices": ["cpu"],
            "variants": ["eager", "compile"],
            "timing": ["synced"],
        },
        "cases": {"s001-mlp": {"axes": {"hidden": [128]}}},
    }
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump(study))
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text(HIDE_TENSORFLOW)
    out = {k: tmp_path / f"job.{k}" for k in ("csv", "probe", "journal", "log")}
    args = [f"--{k}={v}" for k, v in out.items()]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden), str(REPO_ROOT / "src")])}
    proc = subprocess.run(
        [sys.executable, "-m", "crossover_study", "measure-job", f"--config={config}"]
        + ["--case=s001-mlp", "--framework=tensorflow", "--device=cpu", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = pd.read_csv(out["csv"])
    by_variant = dict(zip(rows["variant"], rows["status"], strict=True))
    assert by_variant == {"eager": "unavailable", "compile": "not_applicable"}
    eager = rows[rows["variant"] == "eager"].iloc[0]
    assert "tensorflow cannot be imported" in eager["message"]
    assert "No module named 'tensorflow'" in eager["message"]
    assert pd.isna(eager["step_time_s"]) and pd.isna(eager["framework_version"])
    probe = json.loads(out["probe"].read_text())
    assert probe["device_available"] is False
    assert "No module named 'tensorflow'" in probe["device_reason"]
    assert probe["framework_version"] is None and probe["gpus"] == []


def test_compile_without_a_compiler_is_unavailable_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(torch_base.shutil, "which", lambda name: None)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)
    assert "gcc or clang not found" in torch_base.compile_toolchain_missing("cuda")
    assert "g++ not found" in torch_base.compile_toolchain_missing("cpu")
    point = PointSpec("s001-mlp", "torch", "cpu", "compile", SMALL)
    rows = run_group(group_of([point]), tmp_path / "j", tmp_path / "o.csv", log=quiet)
    assert rows[0]["status"] == "unavailable"
    assert "needs a C++ compiler: g++ not found" in rows[0]["message"]
    # unavailable is not final: a machine with a compiler measures it on the rerun.
    assert Journal(tmp_path / "j", group_of([point]).settings()).final_row(point.key()) is None


def test_compile_without_python_headers_is_unavailable(tmp_path, monkeypatch):
    real = torch_base.sysconfig.get_paths
    monkeypatch.setattr(
        torch_base.sysconfig, "get_paths", lambda: {**real(), "include": str(tmp_path)}
    )
    assert f"{tmp_path}/Python.h is missing" in torch_base.compile_toolchain_missing("cuda")


# --- numbers that would be wrong ------------------------------------------------------


def test_device_init_clock_includes_the_probe(tmp_path, monkeypatch):
    """A CUDA probe initialises CUDA; its time belongs to the device's cold start."""
    real_probe = device_probe.probe

    def slow_probe(framework, device):
        time.sleep(0.3)
        return real_probe(framework, device)

    monkeypatch.setattr(device_probe, "probe", slow_probe)
    point = PointSpec("s001-mlp", "torch", "cpu", "eager", SMALL)
    rows = run_group(group_of([point]), tmp_path / "j", tmp_path / "o.csv", log=quiet)
    assert rows[0]["device_init_s"] >= 0.3
    assert rows[0]["cold_start_s"] >= rows[0]["device_init_s"]


def test_lstm_jobs_warm_the_lstm_path_when_they_initialise_the_device(monkeypatch):
    calls = []
    real_forward = torch.nn.LSTM.forward

    def counting(self, *args, **kwargs):
        calls.append(self.hidden_size)
        return real_forward(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.LSTM, "forward", counting)
    frameworks.initialise_device("torch", "cpu", lstm=False)
    assert calls == []
    frameworks.initialise_device("torch", "cpu", lstm=True)
    assert calls == [4]


def test_the_runner_asks_for_the_lstm_warm_up_in_lstm_jobs_only(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(
        frameworks, "initialise_device", lambda f, d, lstm=False: seen.append(lstm) or 0.0
    )
    monkeypatch.setattr(runner, "measure_point", lambda *a, **k: {"status": "error"})
    for case, sizes in (("s004-lstm", {"batch": 8, "units": 4, "seq_len": 3}), ("s001-mlp", SMALL)):
        point = PointSpec(case, "torch", "cpu", "eager", sizes)
        run_group(group_of([point], case=case), tmp_path / case, tmp_path / "o.csv", log=quiet)
    assert seen == [True, False]


def test_each_job_compiles_into_a_fresh_cache_and_rows_record_cache_hits(tmp_path, monkeypatch):
    """A compile point's first step must not depend on caches an earlier run left: each
    job gets an empty cache folder (removed afterwards) and each row its hits/misses."""
    folders = []
    real_measure = point_measure.measure_point

    def spying(*args, **kwargs):
        folders.append(frameworks.os.environ["TORCHINDUCTOR_CACHE_DIR"])
        return real_measure(*args, **kwargs)

    monkeypatch.setattr(runner, "measure_point", spying)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "users-cache"))
    point = PointSpec("s001-mlp", "torch", "cpu", "compile", SMALL)
    first = run_group(group_of([point]), tmp_path / "j1", tmp_path / "o.csv", log=quiet)
    second = run_group(group_of([point]), tmp_path / "j2", tmp_path / "o.csv", log=quiet)
    assert len(set(folders)) == 2 and str(tmp_path) not in folders[0]
    assert not any(frameworks.os.path.exists(f) for f in folders)  # removed after the job
    assert frameworks.os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "users-cache")
    for rows in (first, second):
        assert rows[0]["status"] == "ok", rows[0]["message"]
        counts = json.loads(rows[0]["compile_cache"])
        # The second job compiled again: nothing came from the first job's cache.
        assert counts["fxgraph_cache_hit"] == 0 and counts["fxgraph_cache_miss"] >= 1
    eager = PointSpec("s001-mlp", "torch", "cpu", "eager", SMALL)
    rows = run_group(group_of([eager]), tmp_path / "j3", tmp_path / "o.csv", log=quiet)
    assert rows[0]["compile_cache"] is None


def test_a_cuda_graph_replay_copies_only_inputs_that_change(monkeypatch):
    copies = []
    real_copy = torch.Tensor.copy_

    def spy(self, src, *args, **kwargs):
        copies.append(src)
        return real_copy(self, src, *args, **kwargs)

    class FakeGraph:
        replays = 0

        def replay(self):
            FakeGraph.replays += 1

    fixed, changing = torch.zeros(3), torch.zeros(2)
    loss = torch.tensor(1.0)
    replay = torch_base.graph_replay(FakeGraph(), [fixed, changing], loss)
    monkeypatch.setattr(torch.Tensor, "copy_", spy)
    new_batch = torch.ones(2)
    assert replay(fixed, new_batch) is loss
    assert FakeGraph.replays == 1
    assert len(copies) == 1 and copies[0] is new_batch  # the pre-staged input is not copied
    assert changing.tolist() == [1.0, 1.0]


def test_lstm_steps_enter_no_cudnn_flags_context_except_generic(monkeypatch):
    entered = []
    real_flags = torch.backends.cudnn.flags

    def spy(*args, **kwargs):
        entered.append(kwargs)
        return real_flags(*args, **kwargs)

    monkeypatch.setattr(torch.backends.cudnn, "flags", spy)
    lstm = torch_cases.LSTM("cpu", {"batch": 4, "units": 4, "seq_len": 3}, "eager")
    lstm.setup()
    lstm.run(lstm.steps_per_call * 2)
    assert entered == []
    generic = torch_cases.LSTM("cuda", {"batch": 4, "units": 4, "seq_len": 3}, "generic")
    with generic._kernel():
        pass
    assert entered == [{"enabled": False}]


class FakeCudaWorkload:
    """A CPU stand-in for a CUDA program whose ``fail_at`` point raises a sticky CUDA
    error (every later device call would fail too). Holds a reference to itself, as the
    real workloads do through ``self.step = self.train_step``."""

    steps_per_call = min_steps_per_block = loss_read_every = 1
    alive: list = []

    def __init__(self, hidden, fail_at=None):
        self.hidden, self.fail_at = hidden, fail_at
        self.me = self  # a reference cycle: freed only by the garbage collector
        self.alive.append(weakref.ref(self))

    def setup(self):
        # The previous point's workload is gone before this one sets up.
        assert all(ref() is None for ref in self.alive[:-1]), "previous workload still alive"

    def run(self, n):
        if self.hidden == self.fail_at:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        time.sleep(1e-4 * n)

    def sync(self):
        pass

    def loss(self):
        return 0.0


def fake_cuda(monkeypatch, fail_at=None, broken=None):
    """Pretend a CUDA device is there, with FakeCudaWorkload programs on it."""
    FakeCudaWorkload.alive = []
    probe = device_probe.DeviceProbe(True, "Fake GPU", None, torch.__version__, "13.0", "cuda:0")
    monkeypatch.setattr(device_probe, "probe", lambda f, d: probe)
    monkeypatch.setattr(frameworks, "initialise_device", lambda f, d, lstm=False: 0.01)
    monkeypatch.setattr(
        frameworks,
        "make_workload",
        lambda point, threads: FakeCudaWorkload(point.sizes["hidden"], fail_at),
    )
    monkeypatch.setattr(frameworks, "device_fault", lambda f, d: broken[0] if broken else None)


def cuda_points(*hidden):
    return [PointSpec("s001-mlp", "torch", "cuda", "eager", {**SEED, "hidden": h}) for h in hidden]


def test_the_previous_points_workload_is_freed_before_the_next_sets_up(tmp_path, monkeypatch):
    fake_cuda(monkeypatch)
    group = group_of(cuda_points(8, 16, 32), device="cuda")
    rows = run_group(group, tmp_path / "j", tmp_path / "o.csv", log=quiet)
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"], [r.get("message") for r in rows]


def test_a_sticky_device_error_ends_the_job_and_a_rerun_measures_the_point(tmp_path, monkeypatch):
    broken = ["RuntimeError: CUDA error: an illegal memory access was encountered"]
    fake_cuda(monkeypatch, fail_at=16, broken=broken)
    group = group_of(cuda_points(8, 16, 32), device="cuda")
    with pytest.raises(frameworks.DeviceLostError, match="illegal memory access"):
        run_group(group, tmp_path / "j", tmp_path / "o.csv", log=quiet)
    journal = Journal(tmp_path / "j", group.settings())
    keys = [p.key() for p in group.points]
    assert journal.final_row(keys[0])["status"] == "ok"
    assert journal.final_row(keys[1]) is None and journal.starts[keys[1]] == 1
    assert keys[2] not in journal.starts
    # The point's own fault: it counts towards MAX_ATTEMPTS (a kill from outside would not).
    assert len(journal.faults[keys[1]]) == 1
    assert journal.faults[keys[1]][0].startswith("left cuda unable to run work: ")
    # The rerun, in a fresh process where the device works, measures the rest.
    fake_cuda(monkeypatch, fail_at=None, broken=None)
    rows = run_group(group, tmp_path / "j", tmp_path / "o.csv", log=quiet)
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"]
    assert [r["attempts"] for r in rows] == [1, 2, 1]


def test_an_error_that_leaves_the_device_working_is_recorded_and_the_sweep_goes_on(
    tmp_path, monkeypatch
):
    fake_cuda(monkeypatch, fail_at=16, broken=None)
    group = group_of(cuda_points(8, 16, 32), device="cuda")
    rows = run_group(group, tmp_path / "j", tmp_path / "o.csv", log=quiet)
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]


@pytest.mark.parametrize(
    "message",
    [
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "cuDNN error: CUDNN_STATUS_NOT_ENOUGH_WORKSPACE",
        "CUDA driver error: CUDA_ERROR_OUT_OF_MEMORY",
        "cudaErrorMemoryAllocation: out of memory",
    ],
)
def test_cublas_and_cudnn_allocation_failures_are_oom(message):
    assert frameworks.is_oom(RuntimeError(message))


def test_a_device_fault_check_on_the_cpu_finds_nothing():
    assert frameworks.device_fault("torch", "cpu") is None


LOCAL_GPU_STUDY = {
    "study": "gpu-jobs",
    "sweep": {"frameworks": ["torch"], "devices": ["cpu", "cuda"], "variants": ["eager"]},
    "timing": {"min_block_s": 0.005, "blocks": 3, "max_warmup_s": 0.05, "max_point_s": 0.5},
    "crossover": {"bootstrap": 100, "seed": 0},
    "cases": {"s001-mlp": {"axes": {"hidden": [128]}}, "s000-hjb": {"axes": {"batch": [100]}}},
}


def _job_spans(output: str) -> dict[str, tuple[str, str]]:
    """(start, finish) clock of each job with wildcards (measuring and rates jobs) in
    Snakemake's output, by its wildcards."""
    stamps, spans, jobs = {}, {}, {}
    stamp = None
    for line in output.splitlines():
        if line.startswith("[") and line.endswith("]"):
            stamp = time.strptime(line.strip("[]"), "%a %b %d %H:%M:%S %Y")
        elif line.strip().startswith("jobid:"):
            current = line.split(":")[1].strip()
            stamps[current] = stamp
        elif line.strip().startswith("wildcards:"):
            jobs[current] = line.split(":", 1)[1].strip()
        elif line.startswith("Finished jobid:"):
            jobid = line.split(":")[1].split("(")[0].strip()
            if jobid in jobs:
                spans[jobs[jobid]] = (stamps[jobid], stamp)
    return spans


@pytest.mark.slow
def test_a_local_run_measures_one_gpu_job_at_a_time(tmp_path):
    """With cores for all six jobs, the cuda jobs (two measuring jobs and the rates
    job) never run at once (gpu_jobs=1); the cpu jobs do run beside them."""
    from conftest import run_snakemake

    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(LOCAL_GPU_STUDY))
    result = run_snakemake(
        tmp_path, "--cores", "8", "--configfile", str(path), "--", "results/gpu-jobs/timings.csv"
    )
    out = result.stdout + result.stderr
    assert 'Provided resources: gpu_jobs=Resource("gpu_jobs", 1)' in out
    spans = _job_spans(out)
    cuda = sorted(span for job, span in spans.items() if "device=cuda" in job)
    measuring = [job for job in spans if job.startswith("case=")]
    assert len(cuda) == 3 and len(measuring) == 4 and len(spans) == 6, spans
    for (_, end), (start, _) in zip(cuda, cuda[1:], strict=False):
        assert start >= end  # each started only after the one before it finished
