"""Profiles: profiles/slurm sends jobs to Slurm with resources from the study config,
profiles/default holds only what must hold on every machine."""

import re

import pytest
import yaml
from conftest import slurm_dry_run

from crossover_study.core.paths import REPO_ROOT


def test_slurm_profile_sets_the_executor_but_no_partition_or_gpu():
    profile = yaml.safe_load((REPO_ROOT / "profiles/slurm/config.yaml").read_text())
    assert profile["executor"] == "slurm"
    assert profile["jobs"] >= 1 and profile["latency-wait"] >= 1 and profile["retries"] >= 0
    assert (
        profile["default-resources"]["mem_mb"] > 0 and profile["default-resources"]["runtime"] > 0
    )
    # Where jobs run comes per device class from the config (CASES.md P7, P8).
    text = yaml.safe_dump(profile)
    assert "slurm_partition" not in text and "gpu" not in text and "slurm_extra" not in text


def test_workflow_profile_holds_no_machine_specific_setting():
    profile = yaml.safe_load((REPO_ROOT / "profiles/default/config.yaml").read_text())
    assert profile == {"rerun-incomplete": True, "keep-going": True}


@pytest.mark.slow
def test_dry_run_through_the_slurm_profile_plans_each_device_class_resources(tmp_path):
    """Without a cluster: the profile parses and each job gets its class's resources."""
    config = yaml.safe_load((REPO_ROOT / "config/studies/smoke.yaml").read_text())
    config["sweep"] = {"frameworks": ["torch"], "devices": ["cpu", "cuda", "tpu"]}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(config))
    out = slurm_dry_run(tmp_path, path)
    assert "workflow specific profile" in out
    jobs = re.findall(
        r"wildcards: case=\S+, framework=torch, device=(\w+), batch=0\n\s+"
        r"resources: ([^\n]+)",
        out,
    )
    assert len(jobs) == 2 * 3, out[-3000:]
    for device, resources in jobs:
        res = dict(kv.split("=", 1) for kv in resources.split(", "))
        assert res["slurm_partition"] == {"cpu": "cpu", "cuda": "gpu", "tpu": "tpu"}[device]
        # A dry run caps threads at its one core; on Slurm cpus_per_task is the class's
        # threads (tests/test_slurm.py checks it against what the jobs were given).
        assert int(res["cpus_per_task"]) >= 1
        assert res.get("gpu") == ("1" if device == "cuda" else None)
        assert "slurm_extra" not in res
