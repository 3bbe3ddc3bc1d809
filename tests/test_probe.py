"""Probe records and the collect step's check: no accelerator row without the accelerator;
device classes that cannot be measured yet never get a CPU timing under their names."""

import importlib.metadata
import json
import re
import sys
from pathlib import Path
from unittest.mock import ANY

import pandas as pd
import pytest

from crossover_study.core import errors
from crossover_study.core.paths import REPO_ROOT, pins
from crossover_study.measure import device_probe, frameworks
from crossover_study.measure.probe import (
    ENV_DISTRIBUTIONS,
    CpusNotGivenError,
    ProbeError,
    check_cpus_given,
    check_table,
    check_tables,
    installed_packages,
    load_probe,
    probe_record,
    shows_device,
    write_probe,
)
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study.points import TimingPolicy
from crossover_study.study.spec import PointSpec

SEED = {"batch": 64, "d_in": 1024, "hidden": 128}


def rows(device, statuses):
    return pd.DataFrame({"device": [device] * len(statuses), "status": statuses})


def record(device, gpus=(), tpus=()):
    return {"device": device, "gpus": list(gpus), "tpus": list(tpus), "hostname": "n1"}


def test_probe_record_of_this_process_says_what_the_job_got(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_PARTITION", "gpu")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    frameworks.import_framework("torch", "cuda", 1)
    rec = probe_record("torch", "cuda", threads=1)
    assert rec["slurm_job_id"] == "4242" and rec["partition"] == "gpu"
    assert rec["cpus"]["given"] == rec["cpus"]["threads"] == 1
    assert rec["threads_equal_cpus_given"] is True
    assert rec["cuda_visible_devices"] == "1" and rec["hostname"]
    assert rec["gpus"] == [] and rec["tpus"] == []  # no GPU on the test machine
    assert rec["framework_devices"][0] == "cpu" and rec["framework_version"]
    assert rec["device_available"] is False and "no CUDA device" in rec["device_reason"]
    json.dumps(rec)  # JSON-ready


def test_probe_records_the_environment_the_job_ran_in(tmp_path):
    rec = probe_record("torch", "cpu", threads=1)
    packages = rec["packages"]
    assert packages["python"] == sys.version.split()[0]
    assert packages["torch"] == importlib.metadata.version("torch")  # 2.13.0+cpu here
    assert packages["pandas"] == "3.1.1" and packages["PyYAML"] == "6.0.4"
    locked = pins(REPO_ROOT / "requirements.lock")
    assert set(packages) - {"python"} <= set(locked) | set(ENV_DISTRIBUTIONS)
    assert Path(sys.executable).absolute().as_posix().endswith(rec["python_executable"])
    assert not rec["python_executable"].startswith("/")
    assert rec["packages_outside_prefix"] == []  # the venv has them all
    json.dumps(rec)
    # Only what is installed: a lock naming a package this Python lacks leaves it out.
    lock = tmp_path / "requirements.lock"
    lock.write_text("# comment\nnumpy==2.4.6\nno-such-package==1.0\n")
    assert installed_packages(lock)["packages"] == {
        "python": sys.version.split()[0],
        "numpy": importlib.metadata.version("numpy"),
    }
    assert installed_packages(tmp_path / "missing.lock")["packages"] == {"python": ANY}


def test_a_package_from_outside_the_jobs_prefix_is_named(monkeypatch, tmp_path):
    """Snakemake's script preamble appends the host's sys.path to a conda job's: a
    package the env lacks comes from outside the env's prefix and is listed."""
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    lock = tmp_path / "requirements.lock"
    lock.write_text("numpy==2.4.6\n")
    assert installed_packages(lock)["packages_outside_prefix"] == ["numpy"]


def test_threads_are_checked_against_slurm_cpus_only_under_slurm(monkeypatch):
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert probe_record("torch", "cpu", threads=1)["threads_equal_cpus_given"] is None
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "4")
    assert probe_record("torch", "cpu", threads=2)["threads_equal_cpus_given"] is False


def test_write_and_load(tmp_path):
    path = tmp_path / "a" / "batch-0.probe.json"
    write_probe(record("cuda", gpus=["H200"]), path)
    assert load_probe(path)["gpus"] == ["H200"]
    with pytest.raises(ProbeError, match="cannot read probe record .*missing.json"):
        load_probe(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ProbeError, match="bad.json is not a probe record"):
        load_probe(tmp_path / "bad.json")


@pytest.mark.parametrize(
    "device, rec, shown",
    [
        ("cpu", record("cpu"), True),
        ("cuda", record("cuda"), False),
        ("cuda", record("cuda", gpus=["H200"]), True),
        ("cuda_multi", record("cuda_multi", gpus=["H200"]), False),
        ("cuda_multi", record("cuda_multi", gpus=["H200", "H200"]), True),
        ("tpu", record("tpu"), False),
        ("tpu", record("tpu", tpus=["/device:TPU:0"]), True),
    ],
)
def test_shows_device(device, rec, shown):
    assert shows_device(rec, device) is shown


def test_ok_accelerator_rows_without_the_device_are_refused_naming_the_files():
    with pytest.raises(ProbeError, match=r"t.csv: row 1 has status ok for device 'cuda'.*p.json"):
        check_table(rows("cuda", ["unavailable", "ok"]), record("cuda"), "t.csv", "p.json")
    with pytest.raises(ProbeError, match=r"device 'tpu'.* shows 0 tpus"):
        check_table(rows("tpu", ["ok"]), record("tpu"), "t.csv", "p.json")
    with pytest.raises(ProbeError, match=r"'cuda_multi'.* shows 1 gpus \(at least 2 needed"):
        check_table(rows("cuda_multi", ["ok"]), record("cuda_multi", gpus=["A"]), "t", "p")


def test_backed_or_unmeasured_rows_pass():
    check_table(rows("cuda", ["ok", "oom"]), record("cuda", gpus=["H200"]), "t", "p")
    check_table(rows("cuda", ["unavailable"] * 2), record("cuda"), "t", "p")
    check_table(rows("cpu", ["ok", "error"]), record("cpu"), "t", "p")


def test_a_probe_of_another_device_class_is_refused():
    with pytest.raises(ProbeError, match=r"row 0 is for device 'cuda' but its probe p"):
        check_table(rows("cuda", ["ok"]), record("cpu", gpus=["H200"]), "t", "p")


def test_check_tables_reads_the_files(tmp_path):
    table, probe = tmp_path / "batch-0.csv", tmp_path / "batch-0.probe.json"
    rows("cuda", ["ok"]).to_csv(table, index=False)
    write_probe(record("cuda"), probe)
    with pytest.raises(ProbeError, match=str(table)):
        check_tables([table], [probe])
    write_probe(record("cuda", gpus=["H200"]), probe)
    check_tables([table], [probe])
    with pytest.raises(ProbeError, match="1 timings tables but 0 probe records"):
        check_tables([table], [])


@pytest.mark.parametrize(
    "framework, device, reason",
    [
        ("torch", "tpu", "torch has no TPU backend here"),
        ("torch", "cuda_multi", "cuda_multi needs at least 2 GPUs; 0 visible to torch"),
        ("tensorflow", "tpu", "no TPU usable by TensorFlow"),
        ("tensorflow", "cuda_multi", "cuda_multi needs at least 2 GPUs; 0 visible to tensorflow"),
    ],
)
def test_unmeasurable_classes_probe_unavailable_with_the_reason(framework, device, reason):
    frameworks.import_framework(framework, device, 1)
    seen = device_probe.probe(framework, device)
    assert seen.available is False and reason in seen.reason
    assert seen.framework_version


def _group(device, missing):
    pts = tuple(
        PointSpec("s001-mlp", "torch", device, "eager", {**SEED, "hidden": h}) for h in (128, 256)
    )
    policy = TimingPolicy(min_block_s=0.01, n_blocks=3, max_warmup_s=0.1, max_point_s=1)
    return GroupSpec("s001-mlp", "torch", device, pts, 1, policy, missing, "h")


@pytest.mark.parametrize("device", ["tpu", "cuda_multi"])
def test_tpu_and_multi_gpu_jobs_follow_missing_device(tmp_path, device):
    out = run_group(_group(device, "skip"), tmp_path / "j.jsonl", tmp_path / "o.csv", log=print)
    assert [r["status"] for r in out] == ["unavailable", "unavailable"]
    assert all(r.get("step_time_s") is None and r["message"] for r in out)
    with pytest.raises(errors.DeviceMissingError, match=f"'{device}' was asked for"):
        run_group(_group(device, "fail"), tmp_path / "j2.jsonl", tmp_path / "o2.csv")
    assert not (tmp_path / "o2.csv").exists()


def test_the_interpreter_is_named_without_the_machines_folders(tmp_path, monkeypatch):
    from crossover_study.core.paths import portable_path

    monkeypatch.chdir(tmp_path)
    conda = tmp_path / ".snakemake" / "conda" / "abc123" / "bin" / "python"
    assert portable_path(conda) == ".snakemake/conda/abc123/bin/python"
    assert portable_path(REPO_ROOT / ".venv" / "bin" / "python") == ".venv/bin/python"
    assert portable_path("/somewhere/else/python3.11") == "python3.11"


SLURM_VARS = ("SLURM_JOB_ID", "SLURM_CPUS_PER_TASK", "SRUN_CPUS_PER_TASK")


def fake_affinity(monkeypatch, cpus, **env):
    """This process may run on ``cpus`` (a faked ``os.sched_getaffinity``); ``env`` sets
    Slurm's variables (the others are removed)."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(cpus))
    for name in SLURM_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_enough_cpus_for_the_threads_pass(monkeypatch):
    fake_affinity(monkeypatch, {0, 1, 2, 3})
    assert check_cpus_given(4) == 4
    assert check_cpus_given(2) == 4  # more CPUs than threads: wasteful, not wrong


@pytest.mark.parametrize(
    "env, cpu_count, cause",
    [
        # srun inside an sbatch that got 4 CPUs, without --cpus-per-task (Slurm >= 22.05)
        (
            {"SLURM_JOB_ID": "7", "SLURM_CPUS_PER_TASK": "4"},
            64,
            r"Slurm gave the job 4 CPUs per task.*srun without --cpus-per-task.*"
            r"SRUN_CPUS_PER_TASK=\$SLURM_CPUS_PER_TASK.*--cpu-bind",
        ),
        # a job submitted without --cpus-per-task
        (
            {"SLURM_JOB_ID": "7"},
            64,
            r"submitted with no --cpus-per-task \(1 CPU per task\) for 4 threads.*"
            r"--cpus-per-task=4",
        ),
        ({"SLURM_JOB_ID": "7", "SLURM_CPUS_PER_TASK": "2"}, 64, r"with --cpus-per-task=2 for 4"),
        # no Slurm: more threads than the node has cores
        ({}, 2, r"more threads than this node has cores \(2\): lower devices.cuda.threads"),
        # no Slurm, enough cores: the affinity was restricted
        ({}, 64, r"affinity was restricted to 2 of the node's 64 CPUs \(taskset"),
    ],
)
def test_fewer_cpus_than_threads_fail_naming_both_numbers_and_the_cause(
    monkeypatch, env, cpu_count, cause
):
    fake_affinity(monkeypatch, {0, 1}, **env)
    monkeypatch.setattr("os.cpu_count", lambda: cpu_count)
    with pytest.raises(CpusNotGivenError) as failed:
        check_cpus_given(4, "cuda")
    message = str(failed.value)
    assert message.startswith("4 threads pinned but this process may run on only 2 CPU(s)")
    assert "CPUs 0-1" in message
    assert re.search(cause, message), message


def test_a_job_with_fewer_cpus_than_threads_measures_nothing_and_keeps_its_journal(
    tmp_path, monkeypatch
):
    """Checked in the job before anything is pinned or measured: the journal's points
    stay, no table is written, no point is started."""
    pts = tuple(
        PointSpec("s001-mlp", "torch", "cpu", "eager", {**SEED, "hidden": h}) for h in (128, 256)
    )
    policy = TimingPolicy(min_block_s=0.01, n_blocks=3, max_warmup_s=0.1, max_point_s=1)
    group = GroupSpec("s001-mlp", "torch", "cpu", pts, 4, policy, "skip", "h")
    journal = tmp_path / "j.jsonl"
    done = {"event": "done", "key": pts[0].key(), "settings": group.settings()}
    journal.write_text(json.dumps({**done, "row": {"status": "ok", "run_id": "r0"}}) + "\n")
    before = journal.read_text()
    fake_affinity(monkeypatch, {3}, SLURM_JOB_ID="9", SLURM_CPUS_PER_TASK="4")
    monkeypatch.setattr(
        "crossover_study.measure.frameworks.pin_thread_env",
        lambda threads: pytest.fail("threads pinned before the CPU check"),
    )
    with pytest.raises(CpusNotGivenError, match=r"4 threads pinned .* only 1 CPU\(s\)"):
        run_group(group, journal, tmp_path / "o.csv", log=lambda _: None)
    assert journal.read_text() == before
    assert not (tmp_path / "o.csv").exists()


def test_the_job_log_names_the_cpu_shortfall_and_the_probe_is_written(tmp_path, monkeypatch):
    from crossover_study.measure.job import measure_job

    study = {
        "study": "few-cpus",
        "sweep": {"frameworks": ["torch"], "devices": ["cpu"], "variants": ["eager"]},
        "cases": {"s001-mlp": {"axes": {"hidden": [128]}}},
    }
    fake_affinity(monkeypatch, {0})
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    out = {k: tmp_path / f"job.{k}" for k in ("csv", "probe", "journal", "log")}
    with pytest.raises(CpusNotGivenError):
        measure_job(study, "s001-mlp", "torch", "cpu", 0, 2, *out.values())
    log = out["log"].read_text()
    assert "job failed: CpusNotGivenError: 2 threads pinned but this process may run on " in log
    assert "more threads than this node has cores (1)" in log
    record = json.loads(out["probe"].read_text())
    assert record["cpus"]["affinity"] == 1 and record["cpus"]["threads"] == 2
    assert not out["csv"].exists()


# -- a missing device is probed once per study: the rates job's verdict reused ------------


def _rates_probe(framework="torch", device="cuda"):
    """A probe record of this process that found ``device`` missing, as the rates job
    writes it (built here without a GPU: skipped on a machine that has one)."""
    frameworks.import_framework(framework, device, 1)
    rec = probe_record(framework, device, 1)
    if rec["device_available"]:
        pytest.skip(f"{device} is there on this machine")
    return rec


def test_the_device_environment_digest_counts_each_distribution_once(monkeypatch):
    """A Snakemake script (the rates job) has site-packages on sys.path more than once:
    its preamble appends Snakemake's own sys.path. A measuring job started as a plain
    process has it once; both digests must agree, or no missing device is reused."""
    from crossover_study.measure.probe import _device_env_digest

    once = _device_env_digest()
    site = [p for p in sys.path if p.endswith("site-packages")]
    assert site
    monkeypatch.setattr(sys, "path", [*sys.path, *site, *site])
    assert _device_env_digest() == once


def test_the_rates_jobs_missing_device_is_reused_only_where_nothing_differs(monkeypatch):
    from crossover_study.measure.probe import reused_missing

    rec = _rates_probe()
    assert reused_missing(rec, "torch", "cuda") is rec
    assert reused_missing(None, "torch", "cuda") is None
    assert reused_missing(rec, "tensorflow", "cuda") is None  # another framework's
    assert reused_missing(rec, "torch", "cuda_multi") is None  # another device class's
    assert reused_missing({**rec, "device": "cpu"}, "torch", "cpu") is None  # never the CPU
    assert reused_missing({**rec, "device_available": True}, "torch", "cuda") is None
    assert reused_missing({**rec, "hostname": "elsewhere"}, "torch", "cuda") is None
    assert reused_missing({**rec, "boot_id": "an-earlier-boot"}, "torch", "cuda") is None
    # a GPU driver loaded since (its device files) on this machine: probed again
    assert reused_missing({**rec, "gpu_device_files": ["/dev/nvidia0"]}, "torch", "cuda") is None
    # CUDA's libraries installed since (a distribution more): probed again
    assert reused_missing({**rec, "device_env_sha256": "0" * 64}, "torch", "cuda") is None
    assert reused_missing({**rec, "device": "tpu"}, "torch", "tpu") is None  # never a TPU
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/cuda/lib64")  # another library path
    assert reused_missing(rec, "torch", "cuda") is None
    monkeypatch.delenv("LD_LIBRARY_PATH")
    changed = {**rec["packages"], "torch": "0.0"}
    assert reused_missing({**rec, "packages": changed}, "torch", "cuda") is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # this job was given a GPU
    assert reused_missing(rec, "torch", "cuda") is None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-node-7")  # another node than the rates job's
    assert reused_missing(rec, "torch", "cuda") is None


RATES_PROBE = r"""
import json, sys
from crossover_study.measure import frameworks
from crossover_study.measure.probe import probe_record
frameworks.import_framework(sys.argv[1], "cuda", 1)
print("PROBE " + json.dumps(probe_record(sys.argv[1], "cuda", 1)))
"""

JOB_WITHOUT_IMPORT = r"""
import json, sys
from crossover_study.measure.job import measure_job
study = {"study": "reuse", "sweep": {"frameworks": [sys.argv[1]], "devices": ["cuda"],
         "variants": ["eager"]}, "cases": {"s001-mlp": {"axes": {"hidden": [128]}}}}
out = [f"{sys.argv[2]}/job.{k}" for k in ("csv", "probe", "journal", "log")]
rows = measure_job(study, "s001-mlp", sys.argv[1], "cuda", 0, 1, *out, rates=sys.argv[3])
print("RESULT " + json.dumps({"imported": sys.argv[1] in sys.modules,
      "rows": [(r["status"], r["message"]) for r in rows]}))
"""


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_a_job_whose_device_the_rates_job_found_missing_imports_no_framework(tmp_path, framework):
    import subprocess

    # The rates job's probe, made as the rates job makes it: in a fresh process (this test
    # process's own facts can differ from a fresh one's after the tests before it).
    made = subprocess.run(
        [sys.executable, "-c", RATES_PROBE, framework], capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    rec = json.loads(made.stdout.split("PROBE ", 1)[1])
    if rec["device_available"]:
        pytest.skip("cuda is there on this machine")
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps({"framework": framework, "device": "cuda", "probe": rec}))
    done = subprocess.run(
        [sys.executable, "-c", JOB_WITHOUT_IMPORT, framework, str(tmp_path), str(rates)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert result["imported"] is False
    assert result["rows"] and all(
        status == "unavailable" and message == rec["device_reason"]
        for status, message in result["rows"]
    )
    probe = json.loads((tmp_path / "job.probe").read_text())
    assert probe["device_reason"] == rec["device_reason"]
    assert probe["framework_version"] == rec["framework_version"]
    assert "as the rates job's probe on this machine found" in (tmp_path / "job.log").read_text()
    # A rates file from another machine is not trusted: the job probes for itself.
    rates.write_text(
        json.dumps({"framework": framework, "device": "cuda", "probe": {**rec, "hostname": "x"}})
    )
    done = subprocess.run(
        [sys.executable, "-c", JOB_WITHOUT_IMPORT, framework, str(tmp_path / "b"), str(rates)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(done.stdout.split("RESULT ", 1)[1])["imported"] is True
