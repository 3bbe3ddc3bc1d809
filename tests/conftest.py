"""Shared fixtures: the smoke study, run once per test session through Snakemake; a hard
time limit on every test; a synthetic GPU reference run for the cross-machine tests."""

import faulthandler
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from crossover_study.core.paths import REPO_ROOT
from crossover_study.study import cases

# The tests assert what a machine without a usable GPU records (cuda rows unavailable,
# empty GPU lists in the probes). On a machine with a GPU, the GPU is hidden from the
# tests and every process they start, before any framework initialises CUDA, so those
# assertions hold there too; the GPU itself is measured by `make reference-gpu`.
# (NVML ignores this variable; the tests of gpu_state fake NVML and nvidia-smi.)
os.environ["CUDA_VISIBLE_DEVICES"] = ""

SNAKEMAKE = Path(sys.executable).with_name("snakemake")
#: The study of the two worked examples of cases of your own (examples/).
OWN_MODELS = REPO_ROOT / "config" / "studies" / "own-models.yaml"


@pytest.fixture(autouse=True)
def _seeds_only_registry():
    """Every test starts and ends with the seeds as the case registry: a test that loads
    a study with cases of its own (validate_config registers them) leaves no trace."""
    cases.use({})
    yield
    cases.use({})


@pytest.fixture
def own_models():
    """The validated config of config/studies/own-models.yaml, its two plug-in cases
    (examples/digits_cnn.py, examples/digits_keras_fit.py) in the registry."""
    from crossover_study.study.config import load_config

    return load_config(OWN_MODELS)


#: The committed CPU-only reference run (the synthetic GPU run below is built from it).
COMMITTED_CPU_RUN = REPO_ROOT / "results" / "reference" / "cpu-2core-2026-11-30"
SYNTHETIC_CPU_NAME = "Synthetic EPYC (test fixture)"
SYNTHETIC_GPU_NAME = "Synthetic GPU (test fixture)"
SYNTHETIC_GPU_STEP = 2.0e-4  # seconds per step of every synthetic cuda row
#: roc-validator's own environment (make crate-validator; make test builds it).
CRATE_PYTHON = REPO_ROOT / ".venv-crate" / "bin" / "python"


def run_crate_validator(*crates: Path) -> subprocess.CompletedProcess:
    """``crossover_study.provenance.crate_validation`` (roc-validator, offline) on ``crates`` in
    .venv-crate; fails the test when that environment is missing."""
    import importlib.resources

    if not CRATE_PYTHON.exists():
        pytest.fail(f"{CRATE_PYTHON} is missing: run `make crate-validator` (make test does)")
    context = importlib.resources.files("rocrate") / "data" / "ro-crate.jsonld"
    command = [str(CRATE_PYTHON), "-m", "crossover_study", "validate-crate"]
    return subprocess.run(
        [*command, "--context", str(context), *map(str, crates)],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=900,
    )


def s001_rows(device, sizes, times, status="ok", message=None) -> list[dict]:
    """Synthetic timings rows of s001-mlp (torch, eager) along ``hidden``: one per size,
    with ``times`` seconds per step and blocks 1% either side of it (``status`` other
    than ok: no times)."""
    import json

    ok = status == "ok"
    return [
        {
            "case": "s001-mlp",
            "framework": "torch",
            "device": device,
            "variant": "eager",
            "batch": 64,
            "d_in": 1024,
            "hidden": size,
            "status": status,
            "message": message,
            "step_time_s": t if ok else None,
            "block_step_times_s": json.dumps([t * 0.99, t, t * 1.01]) if ok else None,
            "cold_start_s": 0.1 if device == "cpu" else 1.0,
            "first_step_s": 0.01,
        }
        for size, t in zip(sizes, times, strict=True)
    ]


def iris_row(framework, variant, step_time_s, **columns) -> dict:
    """A synthetic ok timings row of s002-iris at its seed size on the CPU (synced),
    ``step_time_s`` seconds per step, with ``columns`` added or replaced."""
    return {
        "case": "s002-iris",
        "framework": framework,
        "device": "cpu",
        "variant": variant,
        "timing": "synced",
        "batch": 20,
        "hidden": 32,
        "status": "ok",
        "step_time_s": step_time_s,
        **columns,
    }


def synthetic_reference_gpu(dest: Path, name: str = "reference-gpu") -> Path:
    """A SYNTHETIC reference run for tests only, never committed: the committed CPU
    run's ``timings.csv`` with host, device names and step times edited, as a GPU
    host's run would look. Its cpu rows are the committed ones on a made-up host at half
    the step time; its cuda rows are copies of them with ``device=cuda``, a made-up
    ``device_name`` and a flat ``SYNTHETIC_GPU_STEP``. Nothing in it was measured.
    Writes and returns ``dest/<name>/timings.csv``."""
    rows = pd.read_csv(COMMITTED_CPU_RUN / "timings.csv")
    cpu = rows.assign(
        host="synthetic-gpu-host",
        cpu_model=SYNTHETIC_CPU_NAME,
        device_name=SYNTHETIC_CPU_NAME,
        step_time_s=rows["step_time_s"] / 2,
        step_time_iqr_s=rows["step_time_iqr_s"] / 2,
        run_id=rows["run_id"] + "-synthetic",
    )
    cuda = cpu.assign(
        device="cuda",
        device_name=SYNTHETIC_GPU_NAME,
        step_time_s=SYNTHETIC_GPU_STEP,
        step_time_iqr_s=SYNTHETIC_GPU_STEP * 0.02,
        noisy=False,
        cuda_version="13.0",
        run_id=cpu["run_id"] + "-cuda",
    )
    path = dest / name / "timings.csv"
    path.parent.mkdir(parents=True)
    pd.concat([cpu, cuda], ignore_index=True).to_csv(path, index=False)
    return path


def seal_reference(folder: Path) -> Path:
    """Make a synthetic reference run's ``folder`` (``timings.csv`` as it now is, from
    :func:`synthetic_reference_gpu`) pass its audit, as the report and the paper draw
    only audited runs: its ``crossover.csv`` computed with the committed run's
    settings, the committed run's manifest with these tables' hashes and no per-job
    tables, and its RO-Crate. Returns ``folder``."""
    import json

    from crossover_study.analysis.crossover import write_crossover
    from crossover_study.provenance.crate import CRATE_NAME, write_crate
    from crossover_study.provenance.inputs import file_record

    manifest = json.loads((COMMITTED_CPU_RUN / "manifest.json").read_text())
    settings = manifest["config"]["resolved"]["crossover"]
    write_crossover(
        folder / "timings.csv",
        folder / "crossover.csv",
        n_boot=settings["bootstrap"],
        seed=settings["seed"],
    )
    shutil.copy2(COMMITTED_CPU_RUN / "wall.json", folder / "wall.json")
    for key, record in manifest["tables"].items():
        name = Path(record["path"]).name
        manifest["tables"][key] = {
            **file_record(folder / name, folder),
            "path": f"{manifest['results_dir']}/{name}",
            "root": "workdir",
        }
    manifest["points"], manifest["probes"] = [], []
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    write_crate(manifest, folder, folder / CRATE_NAME, manifest_path=folder / "manifest.json")
    return folder


def pytest_addoption(parser):
    parser.addini(
        "hard_timeout",
        "seconds after which a test that has not finished ends the whole run (faulthandler)",
        default="1200",
    )


def pytest_configure(config):
    # faulthandler writes to a file descriptor; a copy of the terminal's stderr taken
    # now is still the terminal while pytest captures fd 2 during the tests.
    config.hard_timeout_fd = os.dup(sys.stderr.fileno())


@pytest.fixture(autouse=True)
def hard_timeout(request):
    """Backstop for hangs pytest-timeout cannot end: a wait inside C++ that holds the GIL
    (a gloo process group destroyed under a DDP Reducer did, see torch_ddp's
    ``release_program``) starves pytest-timeout's Python timer, and its signal handler
    never runs. faulthandler's watchdog is a C thread: after ``hard_timeout`` seconds
    (ini option) it prints every thread's Python stack and exits the process, so CI
    fails with the stacks instead of waiting out its own limit."""
    faulthandler.dump_traceback_later(
        float(request.config.getini("hard_timeout")),
        exit=True,
        file=request.config.hard_timeout_fd,
    )
    yield
    faulthandler.cancel_dump_traceback_later()


def run_snakemake(
    workdir: Path, *args: str, check: bool = True, snakefile: Path = REPO_ROOT / "Snakefile"
) -> subprocess.CompletedProcess:
    """Run this repository's workflow (or ``snakefile``'s: a copy of the checkout) in
    ``workdir`` (2 cores); raise with the output when it fails and ``check``."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    cmd = [str(SNAKEMAKE), "-s", str(snakefile), "-d", str(workdir), "--cores", "2"]
    result = subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, timeout=900)
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def slurm_dry_run(workdir: Path, study: Path) -> str:
    """``snakemake --profile profiles/slurm -n`` of ``study`` in ``workdir`` (no cluster
    needed): its output, after asserting that it succeeded."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    result = subprocess.run(
        [str(SNAKEMAKE), "--profile", str(REPO_ROOT / "profiles/slurm")]
        + ["-s", str(REPO_ROOT / "Snakefile"), "-d", str(workdir), "-n"]
        + ["--configfile", str(study)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    return out


def copy_checkout(dest: Path) -> Path:
    """A copy of this checkout's files in ``dest`` (tracked and untracked, git's ignored
    ones left out: no .venv, no results of runs), as a clone there would hold them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = REPO_ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """The smoke study, plus cuda in the sweep (not visible here: unavailable rows), run
    as a user runs it in a clone whose folder is named ``a dir é`` (a space and a
    non-ASCII letter: every path the workflow hands a shell must be quoted, issue 47):
    this checkout's files copied there, its workflow run there, with the committed
    reference runs (``results/reference/``), which the report draws beside it.

    Returns ``(workdir, config)``: ``workdir`` is the clone. Tests must not change files
    in ``workdir``; copy it (``shutil.copytree``) to edit results.
    """
    workdir = copy_checkout(tmp_path_factory.mktemp("smoke") / "a dir é")
    config = yaml.safe_load((REPO_ROOT / "config/studies/smoke.yaml").read_text())
    config["sweep"]["devices"] = ["cpu", "cuda"]
    path = workdir / "smoke.yaml"
    path.write_text(yaml.safe_dump(config))
    run_snakemake(workdir, "--configfile", str(path), snakefile=workdir / "Snakefile")
    return workdir, config


#: Issue 47 item 1: a case's question that would run two scripts if rendered as HTML,
#: and an exception text of its plug-in that would run a third and link a fourth.
HOSTILE_QUESTION = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned2=1>"
HOSTILE_MESSAGE = "<img src=x onerror=window.__pwned3=1> [here](javascript:window.__pwned4=1)"
HOSTILE_PLUGIN = f"""
import torch

from crossover_study.plugin import TorchStep


def build(device, batch):
    if batch == 8:
        raise ValueError({HOSTILE_MESSAGE!r})
    w = torch.ones(batch, requires_grad=True, device=device)
    optimizer = torch.optim.SGD([w], lr=0.01)

    def step():
        optimizer.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        optimizer.step()
        return loss

    return TorchStep(step, optimizer=optimizer)
"""


@pytest.fixture(scope="session")
def hostile_run(tmp_path_factory):
    """A study of one case of its own whose ``question`` is :data:`HOSTILE_QUESTION` and
    whose plug-in raises :data:`HOSTILE_MESSAGE` at one of its two sizes, through the
    workflow (torch on the CPU, quick timing), then Snakemake's own report of it.
    Returns ``(workdir, config)``; the study is ``hostile``."""
    workdir = tmp_path_factory.mktemp("hostile")
    (workdir / "hostile.py").write_text(HOSTILE_PLUGIN)
    config = {
        "study": "hostile",
        "sweep": {"frameworks": ["torch"], "devices": ["cpu"], "variants": ["eager"]},
        "devices": {"cpu": {"threads": 2}},
        "timing": {"min_block_s": 0.01, "blocks": 3, "max_warmup_s": 0.1, "max_point_s": 1.0},
        "crossover": {"bootstrap": 200},
        "figure_formats": ["svg"],  # the SVGs are read back for live markup
        "cases": {
            "hostile": {
                "workload": "hostile.py",
                "framework": "torch",
                "question": HOSTILE_QUESTION,
                "seed": {"batch": 4},
                "axes": {"batch": [4, 8]},
            }
        },
    }
    path = workdir / "hostile.yaml"
    path.write_text(yaml.safe_dump(config))
    run_snakemake(workdir, "--configfile", str(path))
    report = workdir / "reports/hostile/snakemake-report.zip"
    run_snakemake(workdir, "--configfile", str(path), "--report", str(report))
    return workdir, config
