"""On a real single-node Slurm: `snakemake --profile slurm` sends each job to its device's
partition, asks for GPUs with the plugin's own resources, and a GPU or TPU job on a node
without one ends as missing_device says (CASES.md P7, P8).

tests/slurm/start-slurm.sh starts munge, MariaDB + slurmdbd, slurmctld and slurmd on
loopback, with partitions cpu, gpu and tpu and two placeholder GPU GRES (mknod devices:
Slurm allocates them, no framework can use them). The tests skip only when Slurm is not
installed and CI is not set; under CI they fail when Slurm cannot start.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from crossover_study.analysis.tables import read_timings
from crossover_study.core.paths import REPO_ROOT
from crossover_study.measure import frameworks
from crossover_study.study.config import load_config
from crossover_study.study.points import measure_jobs

pytestmark = pytest.mark.slurm

SLURM_DIR = REPO_ROOT / "tests" / "slurm"
TOOLS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd", "sbatch", "sacct")
SEARCH_PATH = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
#: Partition each device class of the smoke study's devices table sends its jobs to.
PARTITION = {"cpu": "cpu", "cuda": "gpu", "tpu": "tpu"}
#: A healthy run takes 1-2 minutes here; past this the cluster state is reported.
SNAKEMAKE_TIMEOUT_S = 480
#: Where Slurm's commands look for a configless slurmd's config; start-slurm.sh links
#: its state folder there.
RUN_CONF = Path("/run/slurm/conf")
COMMENT = re.compile(r"rule_measure_wildcards_([^_]+)_([^_]+)_(.+)_(\d+)$")
#: The Slurm comment of a rates job: its framework and device.
RATES_COMMENT = re.compile(r"rule_rates_wildcards_([^_]+)_([^_]+)$")


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="module")
def slurm_env(tmp_path_factory):
    """Environment of a running test Slurm (SLURM_CONF set); stopped afterwards."""
    missing = [t for t in TOOLS if shutil.which(t, path=SEARCH_PATH) is None]
    if missing:
        why = f"Slurm is not installed ({', '.join(missing)} missing; .ci/run installs it)"
        if _in_ci():
            pytest.fail(f"CI is set, so the Slurm tests must run: {why}")
        pytest.skip(why)
    if os.geteuid() != 0:
        pytest.fail("the test Slurm runs its daemons as root: run the Slurm tests as root")
    state = Path(tempfile.mkdtemp(prefix="xs-", dir="/tmp"))  # munge's socket path is short
    # A clean environment: no Slurm variables of an enclosing job, no GPU mask, and no
    # thread pinning left over from tests that imported a framework in this process.
    drop = {"CUDA_VISIBLE_DEVICES", "OMP_THREAD_LIMIT", *frameworks.THREAD_ENV}
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "SBATCH_", "SRUN_")) and k not in drop
    }
    env["PATH"] = f"{Path(sys.executable).parent}:{SEARCH_PATH}"
    # A test Slurm killed before stop-slurm.sh ran leaves /run/slurm/conf linked to its
    # dead state folder (it broke a CI run on 2026-12-02): plant such a link, so that
    # every run checks that start-slurm.sh removes a stale one and says so.
    stale = None
    if not os.path.lexists(RUN_CONF):
        stale = Path(tempfile.mkdtemp(prefix="xs-dead-", dir="/tmp"))
        RUN_CONF.parent.mkdir(parents=True, exist_ok=True)
        RUN_CONF.symlink_to(stale)
    try:
        start = subprocess.run(
            [str(SLURM_DIR / "start-slurm.sh"), str(state)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        if start.returncode != 0:
            pytest.fail(f"Slurm did not start:\n{start.stdout}\n{start.stderr}")
        if stale is not None:
            assert f"removing the stale link {RUN_CONF} -> {stale}" in start.stderr
            assert RUN_CONF.readlink() == state
        env["SLURM_CONF"] = str(state / "slurm.conf")
        yield env
    finally:
        subprocess.run([str(SLURM_DIR / "stop-slurm.sh"), str(state)], timeout=120)
        # Keep the daemons' logs with pytest's temporary folders (the last runs are kept).
        if (state / "log").is_dir():
            logs = tmp_path_factory.mktemp("slurm-logs")
            shutil.copytree(state / "log", logs, dirs_exist_ok=True)
        shutil.rmtree(state, ignore_errors=True)
        if stale is not None:
            if RUN_CONF.is_symlink() and RUN_CONF.readlink() == stale:
                RUN_CONF.unlink()  # start-slurm.sh failed before removing it
            stale.rmdir()


@pytest.fixture(scope="module")
def profile_env(slurm_env, tmp_path_factory):
    """slurm_env with a temporary HOME into which `make install-profile` put the profile."""
    home = tmp_path_factory.mktemp("home")
    env = {**slurm_env, "HOME": str(home)}
    env.pop("XDG_CONFIG_HOME", None)
    subprocess.run(
        ["make", "-s", "-C", str(REPO_ROOT), "install-profile"],
        check=True,
        env=env,
        capture_output=True,
        timeout=60,
    )
    installed = home / ".config/snakemake/slurm/config.yaml"
    assert installed.read_text() == (REPO_ROOT / "profiles/slurm/config.yaml").read_text()
    return env


def study(workdir: Path, missing_device: str) -> Path:
    """The smoke study in torch only over cpu, cuda and tpu (its devices table maps them
    to the test cluster's partitions), written to workdir/study.yaml."""
    config = yaml.safe_load((REPO_ROOT / "config/studies/smoke.yaml").read_text())
    config["study"] = f"slurm-{missing_device}"
    config["sweep"]["frameworks"] = ["torch"]
    config["sweep"]["devices"] = ["cpu", "cuda", "tpu"]
    # The naive program only: partitions and GPUs are the subject here, not variants.
    config["sweep"]["variants"] = ["eager"]
    config["sweep"]["timing"] = ["synced"]
    config.pop("replication", None)  # replicas have their own tests (tests/test_replicas.py)
    config["missing_device"] = missing_device
    path = workdir / "study.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def snakemake_slurm(
    workdir: Path, env: dict, *args: str
) -> tuple[subprocess.CompletedProcess, str]:
    """The literal `snakemake --profile slurm` in workdir; returns the result and the
    run's Slurm job name (the plugin's run id)."""
    cmd = ["snakemake", "--profile", "slurm", "-s", str(REPO_ROOT / "Snakefile"), *args]
    try:
        result = subprocess.run(
            cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=SNAKEMAKE_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() + (exc.stderr or b"").decode()
        pytest.fail(
            f"snakemake --profile slurm did not finish within {SNAKEMAKE_TIMEOUT_S} s.\n"
            f"{cluster_state(env)}\n--- snakemake output ---\n{out[-4000:]}"
        )
    out = result.stdout + result.stderr
    m = re.search(r"SLURM run ID: (\S+)", out)
    assert m, f"no SLURM run ID in the output:\n{out[-5000:]}"
    return result, m.group(1)


def cluster_state(env: dict) -> str:
    """Queue, node and job states of the test cluster (for a failure message)."""
    text = []
    for cmd in (
        ["squeue", "-o", "%i %P %T %r %C %b"],
        ["sinfo", "-N", "-o", "%N %P %t %E"],
        ["sacct", "-X", "-P", "-S", "2020-01-01", "-o", "JobID,Partition,State,Reason,AllocTRES"],
        ["scontrol", "show", "job"],
    ):
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
            text.append(f"$ {' '.join(cmd)}\n{done.stdout}{done.stderr}")
        except (OSError, subprocess.SubprocessError) as exc:
            text.append(f"$ {' '.join(cmd)}: {exc}")
    return "\n".join(text)


def sacct_jobs(env: dict, run_id: str) -> pd.DataFrame:
    """The run's jobs from sacct (allocations only), one row per Slurm job."""
    fields = ["JobID", "JobName", "Partition", "State", "ExitCode", "AllocTRES", "Comment"]
    deadline = time.time() + 30
    while True:
        out = subprocess.run(
            ["sacct", "-X", "-P", "-n", "-S", "2020-01-01", "--name", run_id]
            + ["-o", ",".join(fields)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rows = [dict(zip(fields, line.split("|"), strict=True)) for line in out.splitlines()]
        df = pd.DataFrame(rows, columns=fields)
        # Accounting may lag a moment behind the last job's end.
        if not df["State"].isin(["PENDING", "RUNNING"]).any() or time.time() > deadline:
            return df
        time.sleep(1)


def rates_rows(jobs: pd.DataFrame) -> pd.DataFrame:
    """The rates jobs of ``jobs``, with their framework and device."""
    parts = jobs["Comment"].str.extract(RATES_COMMENT)
    parts.columns = ["framework", "device"]
    return pd.concat([jobs, parts], axis=1).dropna(subset=["device"])


def measure_rows(jobs: pd.DataFrame) -> pd.DataFrame:
    parts = jobs["Comment"].str.extract(COMMENT)
    parts.columns = ["case", "framework", "device", "batch"]
    return pd.concat([jobs, parts], axis=1).dropna(subset=["device"])


@pytest.fixture(scope="module")
def skip_run(profile_env, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("slurm-skip")
    config_path = study(workdir, "skip")
    started = time.perf_counter()
    result, run_id = snakemake_slurm(workdir, profile_env, "--configfile", str(config_path))
    wall = time.perf_counter() - started
    out = result.stdout + result.stderr
    assert result.returncode == 0, f"snakemake --profile slurm failed:\n{out[-6000:]}"
    print(f"snakemake --profile slurm (skip) took {wall:.0f} s")
    return workdir, load_config(config_path), sacct_jobs(profile_env, run_id)


def test_every_job_ran_in_its_device_partition(skip_run):
    _, config, jobs = skip_run
    assert set(jobs["State"]) == {"COMPLETED"}, jobs.to_string()
    measured = measure_rows(jobs)
    assert len(measured) == len(measure_jobs(config)) == 2 * 3  # two cases x three devices
    for _, job in measured.iterrows():
        assert job["Partition"] == PARTITION[job["device"]], job.to_dict()
    # one rates job per framework and device, on its device class's partition
    rates = rates_rows(jobs)
    pairs = {(framework, device) for _, framework, device, _ in measure_jobs(config)}
    assert set(zip(rates["framework"], rates["device"], strict=True)) == pairs
    assert len(rates) == len(pairs), rates.to_string()
    for _, job in rates.iterrows():
        assert job["Partition"] == PARTITION[job["device"]], job.to_dict()
    others = jobs.drop(measured.index).drop(rates.index)
    # collect, crossover, predict, report_notebook, report_html, manifest, ro_crate: the
    # cpu class's partition
    assert len(others) == 7 and set(others["Partition"]) == {"cpu"}, others.to_string()


def test_cuda_jobs_got_one_gpu_and_the_others_none(skip_run):
    _, _, jobs = skip_run
    measured, rates = measure_rows(jobs), rates_rows(jobs)
    for _, job in pd.concat([measured, rates]).iterrows():
        gpus = re.findall(r"gres/gpu=(\d+)", job["AllocTRES"])
        if job["device"] == "cuda":
            assert gpus == ["1"], job.to_dict()
        else:
            assert gpus == [], job.to_dict()
    assert "gres/gpu" not in " ".join(jobs.drop(measured.index).drop(rates.index)["AllocTRES"])


def test_cuda_and_tpu_points_are_unavailable_never_cpu_timings(skip_run):
    workdir, config, jobs = skip_run
    # The whole rows: where a row ran (partition, node) is in environment.csv beside it.
    df = read_timings(workdir / "results/slurm-skip/timings.csv")
    assert len(df) == 2 * 2 * 3  # two cases x two sizes x three devices
    cpu = df[df["device"] == "cpu"]
    assert set(cpu["status"]) == {"ok"} and (cpu["step_time_s"] > 0).all()
    for device, reason in [("cuda", "no CUDA device visible to torch"), ("tpu", "no TPU backend")]:
        rows = df[df["device"] == device]
        assert set(rows["status"]) == {"unavailable"}, rows[["status", "message"]]
        assert rows["step_time_s"].isna().all() and rows["cold_start_s"].isna().all()
        assert rows["message"].str.contains(reason).all(), rows["message"].tolist()
    # Every row says where it ran; the partition is its device's.
    assert (df["partition"] == df["device"].map(PARTITION)).all()
    assert (df["node"] == socket.gethostname().split(".")[0]).all()
    assert (workdir / "reports/slurm-skip/report.html").stat().st_size > 0


def test_probe_records_match_sacct(skip_run):
    workdir, config, jobs = skip_run
    by_id = measure_rows(jobs).set_index("JobID")
    probes = sorted((workdir / "results/slurm-skip/points").rglob("*.probe.json"))
    assert len(probes) == len(by_id)
    for path in probes:
        probe = json.loads(path.read_text())
        job = by_id.loc[probe["slurm_job_id"]]
        assert probe["device"] == job["device"] and probe["partition"] == job["Partition"]
        threads = config["devices"][probe["device"]]["threads"]
        assert probe["cpus"]["threads"] == probe["cpus"]["given"] == threads, probe["cpus"]
        assert probe["gpus"] == [] and probe["tpus"] == []  # placeholder GPUs: none usable
        if probe["device"] == "cuda":
            # Slurm gave the job one of the two GRES and said so to the job.
            assert probe["cuda_visible_devices"] in ("0", "1"), probe
        else:
            assert probe["cuda_visible_devices"] is None, probe


def test_missing_device_fail_fails_the_gpu_and_tpu_jobs_clearly(profile_env, tmp_path):
    config_path = study(tmp_path, "fail")
    config = load_config(config_path)
    case = next(iter(config["cases"]))
    targets = [f"results/slurm-fail/points/{case}/torch/{d}/batch-0.csv" for d in ("cuda", "tpu")]
    # Targets first: --configfile takes every path that follows it.
    result, run_id = snakemake_slurm(
        tmp_path, profile_env, *targets, "--configfile", str(config_path)
    )
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-3000:]
    assert "Error in rule measure" in out
    jobs = measure_rows(sacct_jobs(profile_env, run_id))
    assert set(jobs["device"]) == {"cuda", "tpu"} and set(jobs["State"]) == {"FAILED"}
    for _, job in jobs.iterrows():
        assert job["Partition"] == PARTITION[job["device"]]
        assert re.findall(r"gres/gpu=(\d+)", job["AllocTRES"]) == (
            ["1"] if job["device"] == "cuda" else []
        )
    for device, reason in [("cuda", "no CUDA device visible"), ("tpu", "no TPU backend")]:
        log = (tmp_path / f"logs/slurm-fail/measure/{case}/torch/{device}/batch-0.log").read_text()
        assert f"device '{device}' was asked for" in log and reason in log, log[-2000:]
        points = tmp_path / f"results/slurm-fail/points/{case}/torch/{device}"
        assert not list(points.glob("*.csv"))  # no table, so no CPU timing under its name
        journal = tmp_path / f"results/slurm-fail/journal/{case}/torch/{device}/batch-0.jsonl"
        assert not journal.exists() or '"ok"' not in journal.read_text()
