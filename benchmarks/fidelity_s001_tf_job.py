"""Where in the product's job process s001-mlp's TensorFlow step is slower (issue 51,
item 3; docs/VALIDATION.md, 2026-12-05 18:04-18:45). Run in a fresh process, under
``flock /tmp/bench.lock``:

    .venv/bin/python benchmarks/fidelity_s001_tf_job.py pre

The product's one-point job (``runner.run_group``, as ``benchmarks/fidelity.py``'s
product side) of s001-mlp's eager point at the seed's size, with the hand-written loop's
step (``benchmarks/seed_loops/s001_mlp_tf.py``) and a workload of the study's own
timed in interleaved plain blocks (20 warm-up steps, 6 blocks of 45 steps each) at
four places of the same process: ``pre`` just before the point (after the job's
set-up; with the argument ``pre``), ``in_pre`` inside the point just before the
harness's ``measure`` (the point's own workload), ``in_post`` right after it, and
``post`` after ``run_group`` returned; with the process's CPU seconds per wall second
and context switches a step of each phase and of ``measure``. Diagnostic only: it
replaces ``runner._run_point`` and ``point.measure`` by wrappers. Prints one line,
``RESULT {json}``.
"""

# ruff: noqa: E402, SLF001 - a diagnostic: its path set-up and wrappers come first
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sizes = {"batch": 64, "d_in": 1024, "hidden": 128}
out = {}


def timing(tag):
    import plain_loop
    import tensorflow as tf

    from crossover_study.workloads.tf_cases import MLP

    with tf.device("/CPU:0"):
        built = plain_loop.load_plugin(str(ROOT / "benchmarks/seed_loops/s001_mlp_tf.py")).build(
            "/CPU:0", **sizes
        )
    loop_run = plain_loop.step_runner(built, lambda loss: loss.numpy())
    prod = MLP("cpu", dict(sizes), "eager")
    prod.setup()

    def prod_run(n):
        prod.run(n)
        prod.sync()

    runs = {"loop": loop_run, "product": prod_run}
    for r in runs.values():
        r(20)
    t = time.perf_counter()
    loop_run(5)
    steps = max(1, int(0.1 / ((time.perf_counter() - t) / 5)))
    times = {k: [] for k in runs}
    for k in range(6):
        for name in list(runs) if k % 2 == 0 else list(reversed(list(runs))):
            t = time.perf_counter()
            runs[name](steps)
            times[name].append((time.perf_counter() - t) / steps)
    out.update({f"{tag}_{k}_ms": round(1e3 * statistics.median(v), 4) for k, v in times.items()})
    out[f"{tag}_gc"] = __import__("gc").isenabled()


import yaml

from crossover_study.measure import runner
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study import cases
from crossover_study.study import points as study_points
from crossover_study.study.config import validate_config
from crossover_study.study.spec import PointSpec

config = validate_config(
    {
        "study": "fidelity",
        "sweep": {"frameworks": ["tensorflow"], "devices": ["cpu"], "variants": ["eager"]},
        "timing": dict(yaml.safe_load(open(ROOT / "config/config.yaml"))["timing"]),
        "cases": {"s001-mlp": {"axes": {k: [v] for k, v in sizes.items()}}},
    }
)
cases.use(config)
policy = study_points.timing_policy(config)
point = PointSpec("s001-mlp", "tensorflow", "cpu", "eager", sizes)
group = GroupSpec("s001-mlp", "tensorflow", "cpu", (point,), 2, policy, "skip", "fidelity")
orig = runner._run_point


def wrapped(job, p):
    if "pre" in sys.argv[1:]:
        timing("pre")
    return orig(job, p)


runner._run_point = wrapped
from crossover_study.measure import point as point_mod

orig_measure = point_mod.measure


def inner(tag, wl):
    import plain_loop
    import tensorflow as tf

    with tf.device("/CPU:0"):
        built = plain_loop.load_plugin(str(ROOT / "benchmarks/seed_loops/s001_mlp_tf.py")).build(
            "/CPU:0", **sizes
        )
    loop_run = plain_loop.step_runner(built, lambda loss: loss.numpy())

    def wl_run(n):
        wl.run(n)
        wl.sync()

    runs = {"loop": loop_run, "wl": wl_run}
    for r in runs.values():
        r(20)
    times = {k: [] for k in runs}
    import resource

    r0 = resource.getrusage(resource.RUSAGE_SELF)
    w0 = time.perf_counter()
    nsteps = 0
    for k in range(6):
        for name in list(runs) if k % 2 == 0 else list(reversed(list(runs))):
            t = time.perf_counter()
            runs[name](45)
            times[name].append((time.perf_counter() - t) / 45)
            nsteps += 45
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    w1 = time.perf_counter()
    out[f"{tag}_cpu_per_wall"] = round(
        (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / (w1 - w0), 3
    )
    out[f"{tag}_ivcsw_step"] = round((r1.ru_nivcsw - r0.ru_nivcsw) / nsteps, 2)
    out[f"{tag}_vcsw_step"] = round((r1.ru_nvcsw - r0.ru_nvcsw) / nsteps, 2)
    out.update({f"{tag}_{k}_ms": round(1e3 * statistics.median(v), 4) for k, v in times.items()})
    out[f"{tag}_gc"] = __import__("gc").isenabled()


def measure_wrapped(workload, *a, **k):
    workload.setup()
    workload.sync()
    inner("in_pre", workload)
    import resource

    r0 = resource.getrusage(resource.RUSAGE_SELF)
    w0 = time.perf_counter()
    m = orig_measure(workload, *a, **{**k, "built": True})
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    w1 = time.perf_counter()
    nsteps = (
        m.warmup_steps + m.steps_per_block * len(m.block_step_times_s) + (m.sync_check_steps or 0)
    )
    out["measure_cpu_per_wall"] = round(
        (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / (w1 - w0), 3
    )
    out["measure_ivcsw_step"] = round((r1.ru_nivcsw - r0.ru_nivcsw) / nsteps, 2)
    out["measure_vcsw_step"] = round((r1.ru_nvcsw - r0.ru_nvcsw) / nsteps, 2)
    import threading

    out["threads_py"] = len(threading.enumerate())
    out["threads_os"] = len(os.listdir("/proc/self/task"))
    inner("in_post", workload)
    return m


point_mod.measure = measure_wrapped
with tempfile.TemporaryDirectory() as tmp:
    row = run_group(group, Path(tmp) / "j.jsonl", Path(tmp) / "t.csv", log=lambda _: None)[0]
out["row_ms"] = round(1e3 * row["step_time_s"], 4)
out["row_sync_long_ms"] = round(1e3 * row["sync_check_long_s"], 4)
out["host_cpus_others"] = round(row["host_cpus_others"], 2)
timing("post")
print("RESULT " + json.dumps(out))
