"""Shared fixtures: the smoke study, run once per test session through Snakemake."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from crossover_study.provenance import REPO_ROOT

SNAKEMAKE = Path(sys.executable).with_name("snakemake")


def run_snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run this repository's workflow in ``workdir`` (2 cores); raise with the output
    when it fails and ``check``."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    cmd = [str(SNAKEMAKE), "-s", str(REPO_ROOT / "Snakefile"), "-d", str(workdir), "--cores", "2"]
    result = subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, timeout=900)
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """The smoke study, plus cuda in the sweep (not visible here: unavailable rows).

    Returns ``(workdir, config)``. Tests must not change files in ``workdir``; copy it
    (``shutil.copytree``) to edit results.
    """
    workdir = tmp_path_factory.mktemp("smoke")
    config = yaml.safe_load((REPO_ROOT / "config/studies/smoke.yaml").read_text())
    config["sweep"]["devices"] = ["cpu", "cuda"]
    path = workdir / "smoke.yaml"
    path.write_text(yaml.safe_dump(config))
    run_snakemake(workdir, "--configfile", str(path))
    return workdir, config
