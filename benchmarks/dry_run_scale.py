"""How long Snakemake takes to plan (dry run) a study of many points, against the
60 s goal for 100 000 points (issue 36).

    .venv/bin/python benchmarks/dry_run_scale.py [--points 100000] [--cores 2]
        [--timeout 900] [--one-group] [--keep]

Writes a study file to a temporary folder: the seed ``s000-hjb`` on a grid of its
``batch`` and ``width`` axes (each a run of consecutive sizes from the seed's own, so the
grid holds the seed), in both frameworks on ``cpu`` and ``cuda``: four groups of
``--points / 4`` points each, batched at the default ``max_points_per_job`` (100), as
``config/studies/scale.yaml`` is laid out (``--one-group``: every point in one group,
torch on ``cpu``, as a 300 x 300 grid of one case is). Then, in one process, the study-points
functions the rule files call per job: the first :func:`batches` of a group (computed),
a second one (what every later input function gets), and :func:`measure_jobs`; then
``snakemake -n`` of the study (in the temporary folder, so nothing of this checkout is
touched).

Prints the seconds of each, the dry run's planned jobs and its points per second, and
a last line ``dry run: <s> s for <n> points (<p> points/s), <r> x the 60 s goal`` (a
ratio at or below 1 meets the goal; 10 000 points, ``--points 10000``, is the scale
study's size). Not a test: the seconds depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from crossover_study.study import config as study_config  # noqa: E402
from crossover_study.study import points as study_points  # noqa: E402

#: The plan's goal for 100 000 points, seconds (issue 36).
GOAL_S = 60.0
#: The case and its two grid axes with the seed's sizes (spec.seed_sizes("s000-hjb")).
CASE, AXES = "s000-hjb", {"batch": 100, "width": 8}
FRAMEWORKS, DEVICES = ("torch", "tensorflow"), ("cpu", "cuda")


def grid_shape(points_per_group: int) -> tuple[int, int]:
    """The most nearly square ``(a, b)`` with ``a * b == points_per_group``."""
    a = max(d for d in range(1, math.isqrt(points_per_group) + 1) if points_per_group % d == 0)
    return a, points_per_group // a


def study(n_points: int, one_group: bool = False) -> dict:
    """A study config of ``n_points`` points: four groups (``n_points`` a multiple of
    4) or, with ``one_group``, one (torch on cpu)."""
    frameworks, devices = (FRAMEWORKS[:1], DEVICES[:1]) if one_group else (FRAMEWORKS, DEVICES)
    groups = len(frameworks) * len(devices)
    if n_points % groups:
        raise SystemExit(f"--points must be a multiple of {groups}, got {n_points}")
    shape = grid_shape(n_points // groups)
    axes = {
        a: list(range(seed, seed + n)) for (a, seed), n in zip(AXES.items(), shape, strict=True)
    }
    device = {"threads": 2, "mem_mb": 8000, "runtime": 240}
    return {
        "study": "dry-run-scale",
        "sweep": {"frameworks": list(frameworks), "devices": list(devices), "variants": ["eager"]},
        "devices": {"cpu": dict(device), "cuda": {**device, "gpu": 1}},
        "max_points_per_job": 100,
        "timing": {
            "min_block_s": 0.05,
            "blocks": 5,
            "max_warmup_s": 1.0,
            "noise_threshold": 0.1,
            "max_point_s": 6.0,
        },
        "crossover": {"bootstrap": 1000, "seed": 0},
        "cases": {CASE: {"axes": axes, "grid": list(AXES)}},
    }


def _timed(fn, *args):
    started = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - started


def time_study_points(path: Path) -> int:
    """Time the study-points calls of the rule files' input functions; return the points."""
    config = study_config.load_config(path)
    group = study_points.groups(config)[0]
    n_points = sum(len(study_points.points(config, *g)) for g in study_points.groups(config))
    first, first_s = _timed(study_points.batches, config, *group)
    again, again_s = _timed(study_points.batches, config, *group)
    assert again == first
    jobs, jobs_s = _timed(study_points.measure_jobs, config)
    print(f"points: {n_points} in {len(study_points.groups(config))} groups, {len(jobs)} jobs")
    print(f"batches() of {'/'.join(group)}: first {first_s:.3f} s, again {again_s:.5f} s")
    print(f"measure_jobs(): {jobs_s:.3f} s")
    return n_points


def time_dry_run(path: Path, workdir: Path, cores: int, timeout: float) -> tuple[float, str]:
    """Seconds of ``snakemake -n`` of the study at ``path`` and its output."""
    bindir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT / "src"),
    }
    cmd = [
        str(bindir / "snakemake"),
        "-s",
        str(ROOT / "Snakefile"),
        "-d",
        str(workdir),
        "-n",
        "--cores",
        str(cores),
        "--configfile",
        str(path),
    ]
    started = time.perf_counter()
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return math.inf, ""
    seconds = time.perf_counter() - started
    out = result.stdout + result.stderr
    if result.returncode != 0:
        raise SystemExit(f"dry run failed ({result.returncode}):\n{out[-3000:]}")
    return seconds, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after (s)")
    parser.add_argument(
        "--one-group", action="store_true", help="every point in one group (torch, cpu)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="dry-run-scale-"))
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump(study(args.points, args.one_group), sort_keys=False))
    print(f"study file: {path}")
    n_points = time_study_points(path)
    seconds, out = time_dry_run(path, tmp / "work", args.cores, args.timeout)
    if out:
        stats = dict(re.findall(r"^(\w+)\s+(\d+)$", out.split("Job stats:")[-1], re.M))
        print(
            f"planned: {stats.get('measure', '?')} measure jobs, {stats.get('total', '?')} in all"
        )
    if not args.keep:
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
    if math.isinf(seconds):
        print(
            f"dry run: > {args.timeout:.0f} s for {n_points} points (gave up), "
            f"> {args.timeout / GOAL_S:.2f} x the {GOAL_S:.0f} s goal"
        )
        return 1
    print(
        f"dry run: {seconds:.1f} s for {n_points} points ({n_points / seconds:.0f} points/s), "
        f"{seconds / GOAL_S:.2f} x the {GOAL_S:.0f} s goal"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
