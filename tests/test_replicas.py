"""Replicated points (issue 5, item 3) and the TPU path (item 4), on this CPU-only host:
torch DDP with gloo and two processes, TensorFlow MirroredStrategy on two logical CPU
devices, the strategy step under an injected strategy, the TPU probe, the config section
and the Slurm GPU resources of cuda_multi jobs."""

from __future__ import annotations

import copy
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest

from crossover_study.core import errors
from crossover_study.core import origin as provenance
from crossover_study.core.origin import table_columns
from crossover_study.core.paths import REPO_ROOT
from crossover_study.figures import draw as figure_draw
from crossover_study.figures import scaling as figure_scaling
from crossover_study.measure import device_probe, frameworks
from crossover_study.measure import point as point_measure
from crossover_study.measure.harness import measure
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study.applicability import NotApplicable
from crossover_study.study.cases import SEEDS
from crossover_study.study.config import validate_config
from crossover_study.study.points import (
    TimingPolicy,
    batches,
    job_gpu_resources,
    logical_cpus,
    measure_jobs,
    points,
)
from crossover_study.study.spec import PointSpec, without_replicas
from crossover_study.study.study_file import ConfigError
from crossover_study.workloads import ddp_rank, framework_mismatch

SEED_SIZES = {name: dict(case.seed) for name, case in SEEDS.items()}
MLP = SEED_SIZES["s001-mlp"]
FAST = TimingPolicy(min_block_s=0.01, n_blocks=3, max_warmup_s=0.1, max_point_s=1, sync_check_s=0)

REPLICATED = {
    "study": "r",
    "sweep": {"frameworks": ["torch", "tensorflow"], "devices": ["cpu"], "variants": ["eager"]},
    "replication": {"cases": ["s001-mlp"]},
    "cases": {"s001-mlp": {"axes": {"hidden": [128, 512]}}, "s000-hjb": {}},
}


def rep(**kw):
    return PointSpec("s001-mlp", "torch", "cpu", "ddp", MLP, **kw)


# -- the point and its arithmetic ------------------------------------------------------


def test_strong_and_weak_batch_arithmetic_and_keys():
    ordinary = PointSpec("s001-mlp", "torch", "cpu", "eager", MLP)
    assert ordinary.key() == "s001-mlp|torch|cpu|eager|batch=64,d_in=1024,hidden=128"
    assert (ordinary.replicas, ordinary.scaling, ordinary.global_batch()) == (1, None, 64)
    strong, weak = rep(replicas=2, scaling="strong"), rep(replicas=4, scaling="weak")
    assert (strong.global_batch(), strong.replica_batch()) == (64, 32)
    assert (weak.global_batch(), weak.replica_batch()) == (256, 64)
    assert strong.key() == f"{ordinary.key().replace('eager', 'ddp')}|replicas=2,scaling=strong"
    assert strong.as_row()["global_batch"] == 64 and weak.as_row()["global_batch"] == 256
    assert weak.as_row()["replicas"] == 4 and weak.as_row()["scaling"] == "weak"
    with pytest.raises(ValueError, match="not divisible"):
        rep(replicas=3, scaling="strong").replica_batch()
    with pytest.raises(ValueError, match="needs scaling strong or weak"):
        rep(replicas=2)
    with pytest.raises(ValueError, match="one replica"):
        rep(scaling="weak")
    with pytest.raises(ValueError, match="positive int"):
        rep(replicas=0)


# -- config ------------------------------------------------------------------------------


def test_replication_section_defaults_points_and_jobs():
    config = validate_config(REPLICATED)
    assert config["replication"] == {
        "cases": ["s001-mlp"],
        "variants": ["ddp", "mirrored"],
        "replicas": [2],
        "scaling": ["strong", "weak"],
        "devices": ["cpu"],
    }
    pts = points(config, "s001-mlp", "torch", "cpu")
    replicated = [p for p in pts if p.replicas > 1]
    assert len(replicated) == 2 * 1 * 2  # variants x replicas x scalings
    assert all(p.sizes == MLP for p in replicated)  # the seed's size only
    # Per variant, the same program on one replica: the scaling baseline.
    baselines = [p for p in pts if p.variant in ("ddp", "mirrored") and p.replicas == 1]
    assert [(p.variant, p.scaling, p.sizes) for p in baselines] == [
        ("ddp", None, MLP),
        ("mirrored", None, MLP),
    ]
    assert len({p.key() for p in pts}) == len(pts)
    assert points(config, "s000-hjb", "torch", "cpu") == [
        PointSpec("s000-hjb", "torch", "cpu", "eager", SEED_SIZES["s000-hjb"])
    ]
    # Ordinary points keep batch 0 (their journals still match); replicas get their own job.
    parts = batches(config, "s001-mlp", "torch", "cpu")
    # hidden 128 and 512 plus the two one-replica baselines; 2 x 2 replicated
    assert [len(p) for p in parts] == [4, 4]
    assert [p.variant for p in parts[0]] == ["eager", "eager", "ddp", "mirrored"]
    assert all(p.replicas == 1 for p in parts[0]) and all(p.replicas == 2 for p in parts[1])
    assert [logical_cpus(p, "cpu") for p in parts] == [1, 2]
    assert len(measure_jobs(config)) == 2 * 2 + 2  # (2 cases x 2 fw) + replicated s001 x 2 fw
    # Absent section: no replicated points, and the validated config gains nothing.
    plain = {k: v for k, v in REPLICATED.items() if k != "replication"}
    assert "replication" not in validate_config(plain)


@pytest.mark.parametrize(
    "section, expected",
    [
        ({"cases": ["s002-iris"]}, r"replication.cases\[0\]: case 's002-iris' is not under cases"),
        ({"cases": ["s003-cnn"]}, r"replication.cases\[0\]: case 's003-cnn' is not under cases"),
        ({"replicas": [2, 1]}, r"replication.replicas\[1\]: 1 is less than the minimum of 2"),
        ({"replicas": [2, 2]}, r"replication.replicas: duplicate value\(s\) 2"),
        ({"replicas": [2.5]}, r"replication.replicas\[0\]: 2.5 is not of type 'integer'"),
        ({"scaling": ["diagonal"]}, r"replication.scaling\[0\]: 'diagonal' is not one of"),
        ({"variants": ["horovod"]}, r"replication.variants\[0\]: 'horovod' is not one of"),
        ({"devices": ["cuda"]}, r"replication.devices\[0\]: 'cuda' is not one of"),
        (
            {"devices": ["cuda_multi"]},
            r"replication.devices\[0\]: device 'cuda_multi' is not in sweep",
        ),
        ({"replica": [2]}, r"at replication: unknown key\(s\) 'replica'"),
        ({"replicas": [3]}, r"replication.replicas\[0\]: 3 replicas on cpu exceed devices.cpu"),
        ({"cases": None}, r"replication.cases defaults to \[s004-lstm, s001-mlp\]"),
    ],
)
def test_bad_replication_section_names_the_key(section, expected):
    config = copy.deepcopy(REPLICATED)
    config["replication"].update(section)
    config["replication"] = {k: v for k, v in config["replication"].items() if v is not None}
    with pytest.raises(ConfigError, match=expected):
        validate_config(config)


def test_replication_cross_checks_name_the_key():
    config = copy.deepcopy(REPLICATED)
    config["sweep"]["frameworks"] = ["torch"]
    config["replication"]["variants"] = ["ddp", "mirrored"]
    validate_config(config)  # ddp runs; mirrored gives not_applicable rows
    config["replication"]["variants"] = ["mirrored"]
    with pytest.raises(ConfigError, match=r"variants: \[mirrored\] belong to tensorflow"):
        validate_config(config)
    # 3 replicas fit 4 cores, but strong scaling cannot split the seed's batch of 64.
    config = copy.deepcopy(REPLICATED)
    config["devices"] = {"cpu": {"threads": 4}, "cuda": {}}
    config["replication"].update(replicas=[2, 3], scaling=["strong"])
    with pytest.raises(ConfigError, match=r"replicas\[1\]: strong scaling splits s001-mlp's"):
        validate_config(config)
    config["replication"]["scaling"] = ["weak"]  # weak scaling has nothing to split
    assert validate_config(config)["replication"]["replicas"] == [2, 3]
    # cuda_multi runs replicated points only.
    config = copy.deepcopy(REPLICATED)
    config["sweep"]["devices"] = ["cpu", "cuda_multi"]
    config["devices"] = {"cpu": {}, "cuda_multi": {"gpu": 2}}
    with pytest.raises(ConfigError, match=r"sweep.devices: cuda_multi runs only replicated"):
        validate_config(config)


def test_cuda_multi_jobs_ask_for_as_many_gpus_as_replicas():
    config = copy.deepcopy(REPLICATED)
    config["sweep"]["devices"] = ["cpu", "cuda_multi"]
    config["replication"].update(replicas=[2, 4], devices=["cuda_multi"])
    config["devices"] = {"cpu": {}, "cuda_multi": {"gpu": 8, "gpu_model": "h200"}}
    config = validate_config(config)
    parts = batches(config, "s001-mlp", "torch", "cuda_multi")
    assert [{p.replicas for p in part} for part in parts] == [{1}, {2}, {4}]
    gpus = [job_gpu_resources(config, "s001-mlp", "torch", "cuda_multi", i) for i in range(3)]
    # Batch 0: ordinary points (not_applicable on cuda_multi) and the one-replica
    # baselines, so one GPU; then one GPU per replica.
    assert [g["gpu"] for g in gpus] == [1, 2, 4] and {g["gpu_model"] for g in gpus} == {"h200"}
    assert job_gpu_resources(config, "s001-mlp", "torch", "cpu", 0)["gpu"] is None
    config["devices"]["cuda_multi"] = {
        "gres": "gpu:h200:8",
        "threads": 2,
        "mem_mb": 1,
        "runtime": 1,
    }
    assert job_gpu_resources(config, "s001-mlp", "tensorflow", "cuda_multi", 2) == {
        "gpu": None,
        "gpu_model": None,
        "gres": "gpu:h200:4",
    }


@pytest.mark.slow
def test_snakemake_dry_run_gives_cuda_multi_jobs_their_replicas_as_gpus(tmp_path):
    study = copy.deepcopy(REPLICATED)
    study["sweep"]["devices"] = ["cpu", "cuda_multi"]
    study["replication"].update(replicas=[2, 4], devices=["cuda_multi"], scaling=["weak"])
    study["devices"] = {
        "cpu": {"slurm_partition": "cpu"},
        "cuda_multi": {"threads": 4, "slurm_partition": "gpu", "gpu": 2, "gpu_model": "h200"},
    }
    path = tmp_path / "study.yaml"
    path.write_text(json.dumps(study))
    snakemake = Path(sys.executable).with_name("snakemake")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    out = subprocess.run(
        [str(snakemake), "-s", str(REPO_ROOT / "Snakefile"), "-d", str(tmp_path), "-n"]
        + ["--configfile", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    jobs = re.findall(
        r"wildcards: case=(\S+), framework=(\S+), device=(\S+), batch=(\d+)\n\s+resources: ([^\n]*)",
        text,
    )
    got = {}
    for case, framework, device, batch, resources in jobs:
        res = dict(kv.split("=", 1) for kv in resources.split(", "))
        got[(case, framework, device, int(batch))] = (res.get("slurm_partition"), res.get("gpu"))
    for framework in ("torch", "tensorflow"):
        assert got[("s001-mlp", framework, "cuda_multi", 1)] == ("gpu", "2")
        assert got[("s001-mlp", framework, "cuda_multi", 2)] == ("gpu", "4")
        assert got[("s001-mlp", framework, "cuda_multi", 0)] == ("gpu", "1")  # the baselines
        assert got[("s001-mlp", framework, "cpu", 0)] == ("cpu", None)  # never a GPU
    assert ("s000-hjb", "torch", "cuda_multi", 1) not in got  # s000 is not replicated


# -- which program a point gets ------------------------------------------------------------


@pytest.mark.parametrize(
    "point, reason",
    [
        (
            PointSpec("s001-mlp", "torch", "cpu", "mirrored", MLP, replicas=2, scaling="weak"),
            "is a TensorFlow/Keras program variant",
        ),
        (
            PointSpec("s001-mlp", "tensorflow", "cpu", "ddp", MLP, replicas=2, scaling="weak"),
            "ddp is a PyTorch program variant",
        ),
        (
            PointSpec(
                "s000-hjb",
                "torch",
                "cpu",
                "ddp",
                SEED_SIZES["s000-hjb"],
                replicas=2,
                scaling="weak",
            ),
            "replicas are measured for s001-mlp, s004-lstm",
        ),
        (
            PointSpec("s001-mlp", "torch", "cpu", "ddp", MLP, replicas=3, scaling="strong"),
            "not divisible",
        ),
        (PointSpec("s001-mlp", "torch", "cuda_multi", "eager", MLP), "replicated points"),
        (
            PointSpec("s002-iris", "tensorflow", "tpu", "xla", SEED_SIZES["s002-iris"]),
            "on tpu only strategy_step runs",
        ),
        (
            PointSpec(
                "s001-mlp", "tensorflow", "cpu", "mirrored_fit", MLP, replicas=2, scaling="weak"
            ),
            "s001-mlp's seed is not a Keras fit program",
        ),
        (
            PointSpec("s001-mlp", "tensorflow", "cpu", "mirrored_fit", MLP, replicas=1),
            "s001-mlp's seed is not a Keras fit program",
        ),
        (
            PointSpec(
                "s004-lstm",
                "torch",
                "cpu",
                "mirrored_fit",
                SEED_SIZES["s004-lstm"],
                replicas=2,
                scaling="strong",
            ),
            "is a TensorFlow/Keras program variant",
        ),
    ],
)
def test_points_that_do_not_apply_say_why(point, reason):
    frameworks.import_framework(point.framework, "cpu", 1)
    with pytest.raises(NotApplicable, match=reason):
        frameworks.make_workload(point, 2)


def test_cuda_multi_replicas_without_gpus_are_unavailable():
    frameworks.import_framework("torch", "cpu", 1)
    point = PointSpec("s001-mlp", "torch", "cuda_multi", "ddp", MLP, replicas=2, scaling="strong")
    row = point_measure.measure_point(point, FAST, 0.1, 0.1, 2)
    assert row["status"] == "unavailable" and "2 replicas need 2 GPUs; 0 visible" in row["message"]
    probe = device_probe.probe("torch", "cuda_multi")
    assert not probe.available and "cuda_multi needs at least 2 GPUs; 0 visible" in probe.reason


# -- torch DDP with gloo, two processes ----------------------------------------------------


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.slow
@pytest.mark.timeout(300)  # two processes on gloo (a wait in C++: conftest hard_timeout)
def test_ddp_gloo_two_processes_measures_real_rows(tmp_path):
    before = _children()
    pts = (
        PointSpec("s001-mlp", "torch", "cpu", "eager", MLP),
        PointSpec("s001-mlp", "torch", "cpu", "ddp", MLP, replicas=2, scaling="strong"),
        PointSpec("s001-mlp", "torch", "cpu", "ddp", MLP, replicas=2, scaling="weak"),
        PointSpec("s001-mlp", "torch", "cpu", "mirrored", MLP, replicas=2, scaling="weak"),
        PointSpec("s001-mlp", "torch", "cpu", "ddp", MLP, replicas=1),
    )
    policy = TimingPolicy(min_block_s=0.02, n_blocks=3, max_warmup_s=0.2, max_point_s=2)
    group = GroupSpec("s001-mlp", "torch", "cpu", pts, 2, policy, "skip", "h")
    rows = run_group(group, tmp_path / "j.jsonl", tmp_path / "o.csv", log=lambda _: None)
    df = pd.read_csv(tmp_path / "o.csv")
    assert list(df.columns) == list(table_columns("timings"))
    eager, strong, weak, mirrored, baseline = rows
    # The scaling baseline: the same DDP program on one rank (no follower process).
    assert baseline["status"] == "ok", baseline.get("message")
    assert baseline["replicas"] == 1 and baseline["global_batch"] == 64
    assert baseline["threads_per_replica"] == 2
    assert eager["status"] == "ok" and eager["replicas"] == 1 and eager["scaling"] is None
    assert eager["global_batch"] == 64 and eager["allreduce_share"] is None
    for row, global_batch in ((strong, 64), (weak, 128)):
        assert row["status"] == "ok", row.get("message")
        assert row["replicas"] == 2 and row["global_batch"] == global_batch
        assert row["samples_per_s"] == pytest.approx(global_batch / row["step_time_s"])
        # The all-reduce is timed alone, after the step's blocks; on a busy 2-core machine
        # it can come out a little above the step that contains it (seen: 1.04), but
        # never several steps long.
        assert 0 < row["allreduce_share"] < 2 and row["allreduce_s"] > 0
        assert row["threads_per_replica"] == 1  # the job's 2 threads shared by 2 ranks
        assert row["device"] == "cpu" and row["device_name"] == provenance.cpu_model()
        assert "gloo on lo" in row["replica_devices"] and "cuda" not in row["replica_devices"]
        assert math.isfinite(row["final_loss"]) and row["n_blocks"] >= 3
    assert mirrored["status"] == "not_applicable" and "TensorFlow" in mirrored["message"]
    assert _children() == before  # every follower process was reaped
    assert df["scaling"].tolist()[1:3] == ["strong", "weak"]
    assert pd.isna(df["scaling"].tolist()[4])


def test_gloo_binds_the_loopback_unless_the_user_chose(monkeypatch):
    from crossover_study.workloads import torch_ddp

    assert ddp_rank.loopback_interface() == "lo"  # Linux
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    ddp_rank._gloo_on_loopback()
    assert os.environ["GLOO_SOCKET_IFNAME"] == "lo"
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    ddp_rank._gloo_on_loopback()
    assert os.environ["GLOO_SOCKET_IFNAME"] == "eth7"
    monkeypatch.setattr(torch_ddp.socket, "if_nameindex", lambda: [(1, "eth0")])
    assert ddp_rank.loopback_interface() is None


class _Boom(RuntimeError):
    pass


def _record_live_ddp_at_destroy(monkeypatch) -> list[int]:
    """Wrap ``dist.destroy_process_group`` as torch_ddp calls it: each call appends how
    many DistributedDataParallel models are still alive at that moment."""
    import gc

    from torch.nn.parallel import DistributedDataParallel

    from crossover_study.workloads import torch_ddp

    live, real = [], torch_ddp.dist.destroy_process_group

    def destroy(*args, **kwargs):
        live.append(sum(type(o) is DistributedDataParallel for o in gc.get_objects()))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch_ddp.dist, "destroy_process_group", destroy)
    return live


def test_ddp_model_is_freed_before_its_process_group_is_destroyed(monkeypatch):
    # A Reducer that outlives its gloo group destroys the group itself, with the GIL
    # held, and can deadlock with gloo's worker thread (ddp_rank.release_program).
    from crossover_study.workloads.torch_ddp import DDPWorkload

    frameworks.import_framework("torch", "cpu", 1)
    live = _record_live_ddp_at_destroy(monkeypatch)
    w = DDPWorkload("s001-mlp", "cpu", MLP, 1, "strong", 1)
    w.setup()
    w.run(3)
    w.sync()
    assert w.replica_info()["allreduce_s"] > 0
    w.close()
    assert live == [0] and w.prog is None
    w.close()  # twice is safe: nothing left to destroy
    assert live == [0]


@pytest.mark.timeout(300)  # two processes on gloo (a wait in C++: conftest hard_timeout)
def test_ddp_followers_are_killed_and_reaped_when_a_point_fails(monkeypatch):
    from crossover_study.workloads.ddp_rank import RankProgram
    from crossover_study.workloads.torch_ddp import DDPWorkload

    frameworks.import_framework("torch", "cpu", 1)
    before, seen = _children(), []
    real_run = RankProgram.run

    def failing_run(self, n):  # rank 0 only: followers are other processes
        real_run(self, n)
        if self.step_index > 3:
            raise _Boom("rank 0 fails mid-block")

    class Recording(DDPWorkload):
        def setup(self):
            super().setup()
            seen.extend(self.follower_pids())

    monkeypatch.setattr(RankProgram, "run", failing_run)
    live = _record_live_ddp_at_destroy(monkeypatch)
    monkeypatch.setattr(
        frameworks,
        "make_workload",
        lambda p, t: Recording(p.case, p.device, dict(p.sizes), p.replicas, p.scaling, t),
    )
    point = PointSpec("s001-mlp", "torch", "cpu", "ddp", MLP, replicas=2, scaling="strong")
    row = point_measure.measure_point(point, FAST, 0.1, 0.1, 2)
    assert row["status"] == "error" and "rank 0 fails mid-block" in row["message"]
    assert len(seen) == 1
    assert not psutil.pid_exists(seen[0]) or psutil.Process(seen[0]).status() == "zombie"
    assert _children() == before
    assert live == [0]  # the failed point's model went before its process group
    import torch.distributed as dist

    assert not dist.is_initialized()  # the next point can start a process group


# -- TensorFlow MirroredStrategy on two logical CPU devices ----------------------------------

MIRRORED_SCRIPT = """
import json, sys
sys.path.insert(0, {src!r})
from crossover_study.measure.harness import TimingPolicy
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study.spec import PointSpec
from crossover_study.measure import frameworks
seed = {{"batch": 32, "units": 8, "seq_len": 5}}
mlp = {{"batch": 64, "d_in": 1024, "hidden": 128}}
pts = tuple(
    PointSpec(case, "tensorflow", "cpu", v, s, replicas=2, scaling=sc)
    for case, s in (("s001-mlp", mlp), ("s004-lstm", seed))
    for v in ("mirrored", "ddp")
    for sc in ("strong", "weak")
) + (PointSpec("s001-mlp", "tensorflow", "cpu", "mirrored", mlp, replicas=1),)
policy = TimingPolicy(min_block_s=0.02, n_blocks=3, max_warmup_s=0.2, max_point_s=2)
run_group(GroupSpec("s001-mlp", "tensorflow", "cpu", pts, 2, policy, "skip", "h"), sys.argv[1], sys.argv[2], log=lambda _: None)
print(json.dumps(frameworks.logical_devices("tensorflow")))
"""


@pytest.mark.slow
def test_mirrored_on_two_logical_cpu_devices(tmp_path):
    # A fresh process: the logical devices must exist before TensorFlow initialises.
    script = tmp_path / "run.py"
    script.write_text(MIRRORED_SCRIPT.format(src=str(REPO_ROOT / "src")))
    out = tmp_path / "o.csv"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "j.jsonl"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [
        "/device:CPU:0",
        "/device:CPU:1",
    ]
    df = pd.read_csv(out)
    mirrored = df[df["variant"] == "mirrored"]
    assert set(mirrored["status"]) == {"ok"}, mirrored["message"].tolist()
    baseline = mirrored[mirrored["replicas"] == 1]  # the same program on one replica
    assert baseline["global_batch"].tolist() == [64] and baseline["scaling"].isna().all()
    assert baseline["replica_devices"].str.count("CPU:").tolist() == [1]
    mirrored = mirrored[mirrored["replicas"] == 2]
    assert mirrored["global_batch"].tolist() == [64, 128, 32, 64]
    assert np.allclose(
        mirrored["samples_per_s"], mirrored["global_batch"] / mirrored["step_time_s"]
    )
    # Timed alone (see the ddp test): above zero, never several steps long.
    assert ((mirrored["allreduce_share"] > 0) & (mirrored["allreduce_share"] < 2)).all()
    assert (mirrored["replica_devices"].str.count("CPU:") == 2).all()
    assert mirrored["replica_devices"].str.contains("MirroredStrategy").all()
    assert (mirrored["traces_timed"] == 0).all()  # one trace, before the timed blocks
    assert (mirrored["device"] == "cpu").all() and np.isfinite(mirrored["final_loss"]).all()
    assert set(df.loc[df["variant"] == "ddp", "status"]) == {"not_applicable"}


# -- mirrored_fit: MirroredStrategy + Keras fit, as s004's user ran it ----------------------


def test_mirrored_fit_points_jobs_and_reasons():
    config = copy.deepcopy(REPLICATED)
    config["cases"]["s004-lstm"] = {}
    config["replication"].update(cases=["s004-lstm", "s001-mlp"], variants=["mirrored_fit"])
    config = validate_config(config)
    lstm = SEED_SIZES["s004-lstm"]
    pts = [p for p in points(config, "s004-lstm", "tensorflow", "cpu") if p.variant != "eager"]
    assert [(p.variant, p.replicas, p.scaling, p.sizes) for p in pts] == [
        ("mirrored_fit", 1, None, lstm),  # its own scaling baseline
        ("mirrored_fit", 2, "strong", lstm),
        ("mirrored_fit", 2, "weak", lstm),
    ]
    # The two-replica job of TensorFlow needs two logical CPU devices, like mirrored's.
    parts = batches(config, "s004-lstm", "tensorflow", "cpu")
    assert [logical_cpus(p, "cpu") for p in parts] == [1, 2]
    # torch's rows of the variant say it belongs to TensorFlow, decided before any device.
    torch_point = PointSpec("s004-lstm", "torch", "cpu", "mirrored_fit", lstm, replicas=1)
    assert "TensorFlow/Keras program variant" in framework_mismatch(torch_point)
    # The one-device Keras program refuses it: replicas come from the replication section.
    from crossover_study.workloads.tf_cases import LSTM

    with pytest.raises(NotApplicable, match="replication section"):
        LSTM("cpu", lstm, "mirrored_fit")
    # A torch-only study cannot run it.
    config["sweep"]["frameworks"] = ["torch"]
    with pytest.raises(ConfigError, match=r"variants: \[mirrored_fit\] belong to tensorflow"):
        validate_config(config)


def test_the_full_study_measures_mirrored_fit_for_s004_only():
    from crossover_study.study.config import load_config

    def fit_points(config):
        return {
            case: [
                (p.replicas, p.scaling)
                for p in points(config, case, "tensorflow", "cpu")
                if p.variant == "mirrored_fit"
            ]
            for case in ("s004-lstm", "s001-mlp")
        }

    full = load_config(REPO_ROOT / "config" / "studies" / "full.yaml")
    assert "mirrored_fit" in full["replication"]["variants"]
    fit = fit_points(full)
    # s001-mlp's points exist and give not_applicable rows with the reason (above).
    assert fit["s004-lstm"] == fit["s001-mlp"] == [(1, None), (2, "strong"), (2, "weak")]
    # The default study skips it for s004 (three points of about a minute each on 2
    # cores); its custom step under the same strategy (mirrored) stays.
    default = load_config(REPO_ROOT / "config" / "config.yaml")
    assert fit_points(default)["s004-lstm"] == []
    assert any(p.variant == "mirrored" for p in points(default, "s004-lstm", "tensorflow", "cpu"))


MIRRORED_FIT_SCRIPT = """
import json, sys
sys.path.insert(0, {src!r})
from crossover_study.measure.harness import TimingPolicy
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study.spec import PointSpec
# Tiny LSTM; batch 400 makes s004's data set (1 198 windows) 3 global batches per epoch
# (2 at weak scaling's global batch of 800).
lstm = {{"batch": 400, "units": 8, "seq_len": 5}}
mlp = {{"batch": 64, "d_in": 1024, "hidden": 128}}
pts = tuple(
    PointSpec("s004-lstm", "tensorflow", "cpu", v, lstm, replicas=r, scaling=sc)
    for v in ("mirrored_fit", "mirrored")
    for r, sc in ((1, None), (2, "strong"), (2, "weak"))
) + (
    PointSpec("s001-mlp", "tensorflow", "cpu", "mirrored_fit", mlp, replicas=2, scaling="weak"),
    PointSpec("s004-lstm", "torch", "cpu", "mirrored_fit", lstm, replicas=2, scaling="weak"),
)
policy = TimingPolicy(min_block_s=0.02, n_blocks=3, max_warmup_s=0.2, max_point_s=2)
run_group(GroupSpec("s004-lstm", "tensorflow", "cpu", pts, 2, policy, "skip", "h"), sys.argv[1], sys.argv[2], log=lambda _: None)
"""


@pytest.mark.slow
def test_mirrored_fit_on_two_logical_cpu_devices(tmp_path):
    from crossover_study.answers.replicas import replica_program_sentence

    script = tmp_path / "run.py"
    script.write_text(MIRRORED_FIT_SCRIPT.format(src=str(REPO_ROOT / "src")))
    out = tmp_path / "o.csv"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "j.jsonl"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    df = pd.read_csv(out)
    fit = df[(df["variant"] == "mirrored_fit") & (df["framework"] == "tensorflow")]
    fit = fit[fit["case"] == "s004-lstm"]
    assert set(fit["status"]) == {"ok"}, fit["message"].tolist()
    assert fit["replicas"].tolist() == [1, 2, 2]
    assert fit["global_batch"].tolist() == [400, 400, 800]
    # One fit call of whole epochs of s004's data set per block: ceil(1198 / global batch).
    assert fit["steps_per_call"].tolist() == [3, 3, 2]
    assert (fit["steps_per_block"] % fit["steps_per_call"] == 0).all()
    assert (fit["loss_read_every"] == 1).all()  # Keras 3 fit reads its logs every step
    assert fit["replica_devices"].str.contains("MirroredStrategy").all()
    assert fit["replica_devices"].str.count("CPU:").tolist() == [1, 2, 2]
    assert fit["threads_per_replica"].tolist() == [2, 1, 1]
    # The gradients' all-reduce through the same strategy, timed alone.
    assert ((fit["allreduce_share"] > 0) & (fit["allreduce_share"] < 2)).all()
    assert (fit["traces_timed"] == 0).all() and np.isfinite(fit["final_loss"]).all()
    # Counted per step over a window of whole steps (3 steps per call: windowed): the
    # same FLOPs on 1 replica and on 2 at strong scaling, twice them at weak scaling,
    # each replica's ops on top of the first's (a window placed by one fetch per step
    # held set-up only at 2 replicas: no FLOPs).
    flops, ops = fit["step_flops"].tolist(), fit["step_ops"].tolist()
    assert flops[0] > 0 and flops[1] == pytest.approx(flops[0], rel=0.02)
    assert flops[2] == pytest.approx(2 * flops[0], rel=0.02)
    assert ops[1] == pytest.approx(2 * ops[0], rel=0.1)
    others = df[(df["variant"] == "mirrored_fit") & (df["status"] != "ok")]
    reasons = dict(zip(others["framework"] + "/" + others["case"], others["message"], strict=True))
    assert set(others["status"]) == {"not_applicable"}
    assert "not a Keras fit program" in reasons["tensorflow/s001-mlp"]
    assert "TensorFlow/Keras program variant" in reasons["torch/s004-lstm"]
    assert set(df.loc[df["variant"] == "mirrored", "status"]) == {"ok"}
    # Each program's one replica is its own baseline; the sentence compares them. (The
    # report reads the seed's size; these rows were measured small, so they are labelled
    # with the seed's sizes for the table only.)
    table = figure_scaling.scaling_table(df.assign(**SEED_SIZES["s004-lstm"]), "s004-lstm")
    base = table[table["scaling"] == "baseline"].set_index("replica_variant")
    assert base.loc["mirrored_fit", "variant"] == "mirrored_fit"
    assert base.loc["mirrored", "variant"] == "mirrored"
    one = fit[fit["replicas"] == 1].iloc[0]
    assert base.loc["mirrored_fit", "samples_per_s"] == pytest.approx(one["samples_per_s"])
    text = replica_program_sentence(table, "s004-lstm")
    assert "on one replica Keras fit takes" in text
    assert "at 2 replicas, strong scaling, fit takes" in text
    assert "at 2 replicas, weak scaling, fit takes" in text


def _program_rows():
    """Synthetic scaling rows of s004 for both TensorFlow replica programs (made-up
    numbers: fit 10 ms per step on one replica, the custom step 4 ms)."""
    base = {
        "case": "s004-lstm",
        "framework": "tensorflow",
        "device": "cpu",
        "status": "ok",
        "timing": "synced",
        **SEED_SIZES["s004-lstm"],
    }
    rows = []
    for variant, t1, t_strong, t_weak in (
        ("mirrored_fit", 0.010, 0.016, 0.020),
        ("mirrored", 0.004, 0.005, 0.006),
    ):
        for replicas, scaling, t, gb in (
            (1, None, t1, 32),
            (2, "strong", t_strong, 32),
            (2, "weak", t_weak, 64),
        ):
            rows.append(
                {
                    **base,
                    "variant": variant,
                    "replicas": replicas,
                    "scaling": scaling,
                    "global_batch": gb,
                    "step_time_s": t,
                    "samples_per_s": gb / t,
                    "allreduce_share": None if replicas == 1 else 0.001 / t,
                }
            )
    return pd.DataFrame(rows)


def test_replica_program_sentence_sets_fit_beside_the_custom_step():
    from crossover_study.answers.replicas import replica_program_sentence

    table = figure_scaling.scaling_table(_program_rows(), "s004-lstm")
    assert sorted(set(table["replica_variant"])) == ["mirrored", "mirrored_fit"]
    text = replica_program_sentence(table, "s004-lstm")
    assert "on one replica Keras fit takes 10 ms per step and the custom step 4 ms" in text
    assert "fit adds 6 ms per step (60% of its step)" in text
    # strong: 16 ms vs 5 ms; the all-reduce alone 1 ms; speed-ups 10/16 and 4/5.
    assert (
        "at 2 replicas, strong scaling, fit takes 16 ms per step and the custom step 5 ms: "
        "fit adds 11 ms per step (69% of its step), while one all-reduce of the gradients "
        "alone takes 1 ms; speed-up over each program's own one replica: fit 0.6\u00d7, "
        "custom step 0.8\u00d7"
    ) in text
    assert "at 2 replicas, weak scaling, fit takes 20 ms" in text
    assert "flagged" not in text
    # A noisy timing is never quoted without its flag.
    noisy = _program_rows().assign(noisy=False)
    noisy.loc[(noisy["variant"] == "mirrored") & (noisy["scaling"] == "weak"), "noisy"] = True
    text = replica_program_sentence(figure_scaling.scaling_table(noisy, "s004-lstm"), "s004-lstm")
    assert "the custom step 6 ms (flagged noisy: custom step): fit adds" in text
    assert text.count("flagged") == 1
    # Only the custom step measured, or neither program of fit: nothing or a reason.
    lean = figure_scaling.scaling_table(_program_rows().query("variant == 'mirrored'"), "s004-lstm")
    assert replica_program_sentence(lean, "s004-lstm") is None
    alone = figure_scaling.scaling_table(
        _program_rows().query("variant == 'mirrored_fit'"), "s004-lstm"
    )
    assert "not mirrored (the custom step)" in replica_program_sentence(alone, "s004-lstm")


def test_replica_scaling_figure_tells_the_two_tensorflow_programs_apart():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    figure_draw.replica_scaling(_program_rows(), "s004-lstm", ax=ax)
    lines = {line.get_label(): line for line in ax.get_lines() if line.get_gid() == "scaling-line"}
    assert sorted(lines) == [
        "cpu tensorflow mirrored strong",
        "cpu tensorflow mirrored weak",
        "cpu tensorflow mirrored_fit strong",
        "cpu tensorflow mirrored_fit weak",
    ]
    # Each line starts at its own program's one replica: 32 / 10 ms and 32 / 4 ms.
    assert lines["cpu tensorflow mirrored_fit strong"].get_ydata()[0] == pytest.approx(3200)
    assert lines["cpu tensorflow mirrored strong"].get_ydata()[0] == pytest.approx(8000)
    hollow = {k for k, v in lines.items() if v.get_markerfacecolor() == "white"}
    assert hollow == {"cpu tensorflow mirrored_fit strong", "cpu tensorflow mirrored_fit weak"}
    assert [line.get_gid() for line in ax.get_lines()].count("ideal-scaling") == 2
    plt.close(fig)


def test_replica_scaling_figure_draws_the_cards_prediction_beside_the_cpu():
    """Issue 61: a card's data-parallel prediction (one GPU, then two) in global samples
    per second, dashed over its band, labelled as predicted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seed = SEED_SIZES["s004-lstm"]
    base = {"card": "t4", "device_name": "NVIDIA T4", "case": "s004-lstm",
            "framework": "tensorflow", "variant": "mirrored", **seed}  # fmt: skip
    predicted = pd.DataFrame(
        [
            {**base, "replicas": 1, "scaling": None, "predicted_step_s": 0.02,
             "predicted_low_s": 0.01, "predicted_high_s": 0.04},
            {**base, "replicas": 2, "scaling": "strong", "predicted_step_s": 0.016,
             "predicted_low_s": 0.008, "predicted_high_s": 0.04},
            {**base, "replicas": 2, "scaling": "weak", "predicted_step_s": 0.025,
             "predicted_low_s": 0.012, "predicted_high_s": 0.05},
        ]
    )  # fmt: skip
    table = figure_scaling.predicted_scaling(predicted, "s004-lstm")
    strong = table[table["scaling"] == "strong"]
    assert list(strong["samples_per_s"]) == pytest.approx([32 / 0.02, 32 / 0.016])
    weak = table[table["scaling"] == "weak"]
    assert list(weak["samples_per_s"]) == pytest.approx([32 / 0.02, 64 / 0.025])
    assert weak["low"].iloc[1] == pytest.approx(64 / 0.05)
    fig, ax = plt.subplots()
    figure_draw.replica_scaling(_program_rows(), "s004-lstm", ax=ax, predicted=predicted)
    guessed = [line.get_label() for line in ax.get_lines() if line.get_gid() == "predicted"]
    assert guessed == [
        "NVIDIA T4 (predicted) · tensorflow mirrored, strong",
        "NVIDIA T4 (predicted) · tensorflow mirrored, weak",
    ]
    assert any(c.get_gid() == "predicted-band" for c in ax.collections)
    plt.close(fig)


# -- TPU ---------------------------------------------------------------------------------------


def test_tpu_probe_on_this_host_is_unavailable_with_the_reason():
    frameworks.import_framework("tensorflow", "cpu", 1)
    probe = device_probe.probe("tensorflow", "tpu")
    assert not probe.available and probe.device_name is None
    assert re.search(
        r"(TPUClusterResolver|initialize_tpu_system|TPUStrategy).* failed", probe.reason
    )
    assert device_probe.probe("tensorflow", "tpu").reason == probe.reason  # tried once
    torch_probe = device_probe.probe("torch", "tpu")
    assert not torch_probe.available and "no TPU backend" in torch_probe.reason


def test_tpu_group_gives_unavailable_rows_or_fails(tmp_path):
    seed = SEED_SIZES["s002-iris"]
    pts = (
        PointSpec("s002-iris", "tensorflow", "tpu", "strategy_step", seed, tpu_cores=8),
        PointSpec("s002-iris", "tensorflow", "tpu", "eager", seed),
    )
    group = GroupSpec("s002-iris", "tensorflow", "tpu", pts, 1, FAST, "skip", "h")
    rows = run_group(group, tmp_path / "j.jsonl", tmp_path / "o.csv", log=lambda _: None)
    assert rows[0]["status"] == "unavailable" and "failed" in rows[0]["message"]
    assert rows[0].get("step_time_s") is None
    assert rows[0]["program"] == "strategy_step" and rows[0]["global_batch"] == 24
    assert rows[0]["note"] == "seed batch 20 → 24 to divide over 8 TPU cores"
    # The seed's own program (Keras fit) does not run under TPUStrategy: decided before
    # the device, so the row is not_applicable (not unavailable) and names strategy_step.
    assert rows[1]["status"] == "not_applicable" and rows[1]["program"] is None
    assert "only strategy_step runs" in rows[1]["message"] and "keras_fit" in rows[1]["message"]
    fail = GroupSpec("s002-iris", "tensorflow", "tpu", pts, 1, FAST, "fail", "h")
    with pytest.raises(errors.DeviceMissingError, match="'tpu' was asked for"):
        run_group(fail, tmp_path / "j2.jsonl", tmp_path / "o2.csv", log=lambda _: None)


@pytest.mark.parametrize(
    "case, sizes",
    [("s000-hjb", {"batch": 16, "width": 8}), ("s002-iris", {"batch": 20, "hidden": 8})],
)
def test_tpu_strategy_step_runs_under_an_injected_strategy(monkeypatch, case, sizes):
    tf = frameworks.import_framework("tensorflow", "cpu", 1)
    from crossover_study.workloads.tf_strategy_step import StrategyWorkload

    # The tpu routing of make_workload, with a CPU strategy standing in for TPUStrategy.
    monkeypatch.setattr(
        frameworks, "tpu_strategy", lambda: tf.distribute.OneDeviceStrategy("/cpu:0")
    )
    point = PointSpec(case, "tensorflow", "tpu", "strategy_step", sizes, tpu_cores=8)
    workload = frameworks.make_workload(point, 1)
    assert isinstance(workload, StrategyWorkload)
    m = measure(workload, FAST)
    assert m.step_time_s > 0 and math.isfinite(m.final_loss)
    assert m.traces_first_step == 1 and m.traces_timed == 0
    info = workload.replica_info()
    # The batch rounded to divide over 8 TPU cores: 16 stays, 20 -> 24.
    assert info["replicas"] == 1 and info["global_batch"] == point.global_batch()
    assert info["global_batch"] == {16: 16, 20: 24}[sizes["batch"]]
    assert "OneDeviceStrategy" in info["replica_devices"] and info["allreduce_s"] > 0


# -- figures and tables ---------------------------------------------------------------------


def _scaling_rows():
    base = {"case": "s001-mlp", "framework": "torch", "device": "cpu", "status": "ok", **MLP}
    return pd.DataFrame(
        [
            {**base, "variant": "eager", "timing": "synced", "step_time_s": 0.001},
            {**base, "variant": "eager", "timing": "unsynced", "step_time_s": 0.0001},
            {
                **base,
                "variant": "ddp",
                "timing": "synced",
                "replicas": 2,
                "scaling": "strong",
                "global_batch": 64,
                "samples_per_s": 32000.0,
                "step_time_s": 0.002,
                "allreduce_share": 0.25,
            },
            {
                **base,
                "variant": "ddp",
                "timing": "synced",
                "replicas": 2,
                "scaling": "weak",
                "global_batch": 128,
                "samples_per_s": 96000.0,
                "step_time_s": 128 / 96000,
                "allreduce_share": 0.5,
            },
        ]
    )


def test_scaling_table_baseline_and_efficiency():

    table = figure_scaling.scaling_table(_scaling_rows())
    assert table["scaling"].tolist() == ["baseline", "strong", "weak"]
    # Baseline: the synced eager row, 64 samples / 1 ms (the unsynced row is ignored).
    assert table["baseline_samples_per_s"].tolist() == pytest.approx([64000.0] * 3)
    assert table["efficiency"].tolist() == pytest.approx([1.0, 0.25, 0.75])
    assert table["allreduce_share"].tolist()[1:] == [0.25, 0.5]
    assert len(without_replicas(_scaling_rows())) == 2
    old = _scaling_rows().iloc[:2]  # a table from before replicas: nothing to scale
    assert figure_scaling.scaling_table(old).empty
    # With the same program on one replica measured, that is the baseline (not eager).
    one = {**_scaling_rows().iloc[0].to_dict(), "variant": "ddp", "replicas": 1}
    one.update(global_batch=64, samples_per_s=48000.0, step_time_s=64 / 48000)
    table = figure_scaling.scaling_table(pd.concat([_scaling_rows(), pd.DataFrame([one])]))
    assert table.loc[0, "variant"] == "ddp" and table.loc[0, "scaling"] == "baseline"
    assert table["efficiency"].tolist() == pytest.approx([1.0, 1 / 3, 1.0])


def test_replica_scaling_figure_draws_strong_weak_and_ideal():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    figure_draw.replica_scaling(_scaling_rows(), "s001-mlp", ax=ax)
    lines = [line for line in ax.get_lines() if line.get_gid() == "scaling-line"]
    assert sorted(line.get_label() for line in lines) == ["cpu torch strong", "cpu torch weak"]
    for line in lines:
        assert list(line.get_xdata()) == [1, 2]
    notes = [t.get_text() for t in ax.texts if t.get_gid() == "scaling-annotation"]
    assert sorted(notes) == ["eff 25%, all-reduce 25%", "eff 75%, all-reduce 50%"]
    assert [line.get_gid() for line in ax.get_lines()].count("ideal-scaling") == 1
    plt.close(fig)
    fig, ax = plt.subplots()
    figure_draw.replica_scaling(_scaling_rows(), "s000-hjb", ax=ax)
    assert "no ok replicated rows" in ax.texts[0].get_text()
    plt.close(fig)


def test_grad_bytes_counts_tensorflow_and_keras_variables():
    """A replicated row's gradient bytes (what a prediction on several GPUs all-reduces):
    tf.Variable and Keras 3 variables alike (a Keras variable's shape is a tuple and its
    dtype a string)."""
    import keras
    import tensorflow as tf

    from crossover_study.workloads.tf_strategy_step import grad_bytes

    dense = keras.layers.Dense(3)
    dense.build((None, 4))  # a 4 x 3 kernel and a bias of 3, float32
    assert grad_bytes([tf.Variable(tf.zeros((5, 2)))]) == 40.0
    assert grad_bytes(dense.trainable_variables) == (12 + 3) * 4.0
