"""The 10 000-point scale study plans quickly, in batched jobs (at most one job per 50
points), and its batches are stable so that an interrupted batch resumes from its journal."""

import dataclasses
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crossover_study.core.paths import REPO_ROOT
from crossover_study.study import cases as case_registry
from crossover_study.study import points as study_points
from crossover_study.study.config import load_config, validate_config
from crossover_study.study.points import batches, groups, measure_jobs, points, previous_round_jobs

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
def test_scale_dry_run_plans_one_job_per_50_points_at_most(tmp_path):
    """The 10 000-point study plans (its time is printed; the speed goal is checked by
    benchmarks/dry_run_scale.py, not by a timed test)."""
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
    stats = dict(re.findall(r"^(\w+)\s+(\d+)$", out.split("Job stats:")[1], re.M))
    cluster_jobs = int(stats["total"]) - int(stats.get("all", 0))  # `all` runs no code
    assert int(stats["measure"]) == len(measure_jobs(load_config(SCALE)))
    assert cluster_jobs <= 10_000 / 50, stats
    # The workflow profile (profiles/default) is picked up without asking.
    assert "workflow specific profile" in out
    print(f"dry run: {seconds:.1f} s, {cluster_jobs} cluster jobs ({stats['measure']} measure)")


# A small study with everything the job tables depend on: a grid, two devices, replicas,
# repeated runs, and batches of at most 3 points.
CACHED = {
    "study": "x",
    "sweep": {"devices": ["cpu", "cuda"]},
    "devices": {"cpu": {"threads": 2}, "cuda": {"threads": 1, "gpu": 1}},
    "max_points_per_job": 3,
    "timing": {"repeats": 2},
    "replication": {"cases": ["s001-mlp"], "replicas": [2], "devices": ["cpu"]},
    "cases": {
        "s001-mlp": {
            "axes": {"hidden": [16, 128, 512], "d_in": [8, 1024]},
            "grid": ["hidden", "d_in"],
        },
        "s000-hjb": {"axes": {"width": [4, 8, 16]}},
    },
}


def _uncached(config):
    """Batches per group, jobs and each job's previous round as computed without the
    cache (study_points._batches, every group's batch indices in group order, and the
    scan previous_round_jobs did)."""
    tables = {g: study_points._batches(config, *g) for g in groups(config)}
    jobs = [(*g, i) for g in groups(config) for i in range(len(tables[g]))]
    waits = {}
    for c, f, d, i in jobs:
        r = tables[(c, f, d)][i][0].repeat
        waits[(c, f, d, i)] = [
            job
            for job in jobs
            if job[:2] == (c, f) and r > 0 and tables[job[:3]][job[3]][0].repeat == r - 1
        ]
    return tables, jobs, waits


def _cached(config):
    tables = {g: batches(config, *g) for g in groups(config)}
    jobs = measure_jobs(config)
    return tables, jobs, {job: previous_round_jobs(config, *job) for job in jobs}


def test_cached_job_tables_equal_the_uncached_computation():
    config = validate_config(CACHED)
    study_points._plan.cache_clear()
    tables, jobs, waits = _uncached(config)
    assert len(jobs) > 8 and any(waits.values())  # repeats: runs wait for the one before
    assert {1, 2} == {p.replicas for t in tables.values() for b in t for p in b}
    assert _cached(config) == (tables, jobs, waits)
    assert _cached(config) == (tables, jobs, waits)  # served from the cache
    assert study_points._plan.cache_info().hits > 0
    # Each call gets a list of its own: changing one changes no later answer.
    got = batches(config, "s001-mlp", "torch", "cpu")
    got.clear()
    measure_jobs(config).clear()
    assert _cached(config) == (tables, jobs, waits)


def test_a_changed_config_is_not_served_a_stale_cache(monkeypatch):
    config = validate_config(CACHED)
    group = ("s001-mlp", "torch", "cpu")
    before = batches(config, *group)
    # Changed in place (the same object), at the top and deep inside.
    config["max_points_per_job"] = 1
    assert batches(config, *group) == study_points._batches(config, *group) != before
    config["cases"]["s001-mlp"]["axes"]["hidden"].append(2048)
    after = batches(config, *group)
    assert after == study_points._batches(config, *group)
    assert any(p.sizes["hidden"] == 2048 for b in after for p in b)
    config["timing"]["repeats"] = 3
    assert _cached(config) == _uncached(config)
    # The same cases in another order: jobs in that order.
    reordered = {**config, "cases": dict(reversed(list(config["cases"].items())))}
    assert measure_jobs(reordered) == _uncached(reordered)[1]
    assert measure_jobs(reordered) != measure_jobs(config)
    # True where 1 was (equal in Python, not the same config).
    flagged = {**config, "max_points_per_job": True}
    assert batches(flagged, *group) == study_points._batches(flagged, *group)
    # A config equal to the one first cached, after that one was changed: its plan
    # computes a group not asked for before from its own copy, not the changed config.
    fresh = validate_config(CACHED)
    assert batches(fresh, "s001-mlp", "torch", "cuda") == study_points._batches(
        fresh, "s001-mlp", "torch", "cuda"
    )
    assert batches(fresh, *group) == before
    # The case registry's seed is part of the key (a plug-in case re-registered).
    seed = case_registry.get("s000-hjb")
    monkeypatch.setitem(
        case_registry._active,
        "s000-hjb",
        dataclasses.replace(seed, seed={"batch": 100, "width": 6}),
    )
    hjb = batches(fresh, "s000-hjb", "torch", "cpu")
    assert hjb == study_points._batches(fresh, "s000-hjb", "torch", "cpu")
    assert any(p.sizes["width"] == 6 for b in hjb for p in b)


def test_a_config_that_does_not_pickle_is_planned_uncached():
    """A config that cannot be a cache key gets a plan of its own per call, with the
    same jobs and batches."""
    config = validate_config(CACHED)
    jobs = measure_jobs(config)
    config["unpicklable"] = lambda: None
    assert study_points._plan_of(config) is not study_points._plan_of(config)
    assert measure_jobs(config) == jobs == _uncached(config)[1]
    assert _cached(config) == _uncached(config)
