"""The 10 000-point scale study plans quickly, in batched jobs (at most one job per 50
points), and its batches are stable so that an interrupted batch resumes from its journal."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crossover_study.config import batches, groups, load_config, measure_jobs, points
from crossover_study.provenance import REPO_ROOT

SCALE = REPO_ROOT / "config" / "studies" / "scale.yaml"


def test_scale_study_has_10000_points_in_batches_of_at_most_max_points():
    config = load_config(SCALE)
    n_points = sum(len(points(config, *g)) for g in groups(config))
    assert n_points == 10_000
    jobs = measure_jobs(config)
    assert len(jobs) <= n_points / 50
    for c, f, d in groups(config):
        every = [p.key() for p in points(config, c, f, d)]
        parts = batches(config, c, f, d)
        assert all(len(p) <= config["max_points_per_job"] for p in parts)
        assert sorted(p.key() for part in parts for p in part) == sorted(every)
        # Every batch spans the sizes (round-robin), so batches take similar times.
        for part in parts:
            where = [every.index(p.key()) for p in part]
            assert max(where) - min(where) >= len(every) - 2 * len(parts)
        assert batches(config, c, f, d) == parts  # stable: a rerun finds its journal


@pytest.mark.slow
def test_scale_dry_run_is_fast_and_plans_one_job_per_50_points_at_most(tmp_path):
    snakemake = Path(sys.executable).with_name("snakemake")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    cmd = [str(snakemake), "-s", str(REPO_ROOT / "Snakefile"), "-d", str(tmp_path)]
    started = time.perf_counter()
    result = subprocess.run(
        [*cmd, "-n", "--configfile", str(SCALE)], capture_output=True, text=True, env=env
    )
    seconds = time.perf_counter() - started
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert seconds < 30, f"dry run took {seconds:.1f} s"
    stats = dict(re.findall(r"^(\w+)\s+(\d+)$", out.split("Job stats:")[1], re.M))
    cluster_jobs = int(stats["total"]) - int(stats.get("all", 0))  # `all` runs no code
    assert int(stats["measure"]) == len(measure_jobs(load_config(SCALE)))
    assert cluster_jobs <= 10_000 / 50, stats
    # The workflow profile (profiles/default) is picked up without asking.
    assert "workflow specific profile" in out
    print(f"dry run: {seconds:.1f} s, {cluster_jobs} cluster jobs ({stats['measure']} measure)")
