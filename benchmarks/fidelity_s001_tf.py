"""Why s001-mlp's TensorFlow eager point came out 14 % slower than its plain loop
(docs/VALIDATION.md, the fidelity row of 2026-12-05 15:05-15:11; issue 51, item 3).

    .venv/bin/python benchmarks/fidelity_s001_tf.py [--rounds 3] [--size d_in=1024 ...]

Each measurement is a fresh process that sets the process up one way and then times,
in interleaved blocks (ABAB..., 20 warm-up steps each, ``--blocks`` blocks of
``--block-s`` seconds), both step functions of the same program: ``loop`` (the
hand-written ``benchmarks/seed_loops/s001_mlp_tf.py`` step as ``plain_loop.py`` runs
it) and ``product`` (the study's ``workloads.tf_cases.MLP`` eager workload's ``run``).
The process set-ups (``--setups``), each a set of the product's steps added to the
plain loop's:

- ``plain``: as ``plain_loop.py`` (OMP/MKL/OPENBLAS threads, intra-op ``threads``,
  inter-op 1, the collector on);
- ``env``: plus the job's thread variables (``frameworks.pin_thread_env``:
  ``TF_NUM_INTRAOP_THREADS`` too);
- ``fp32``: plus ``precision.pin_fp32`` (TensorFlow's TF32 off);
- ``init``: plus ``frameworks.initialise_device`` (a Keras ``fit`` of one step, then
  ``settle_heap``);
- ``nogc``: plus ``gc.freeze()`` and the collector off for the timed blocks;
- ``job``: all of the above, in the job's order.

Prints one JSON line per process and, at the end, per set-up the median over rounds of
each step's median ms a step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOOP = ROOT / "benchmarks" / "seed_loops" / "s001_mlp_tf.py"
SETUPS = {
    "plain": (),
    "env": ("env",),
    "fp32": ("fp32",),
    "init": ("init",),
    "nogc": ("nogc",),
    "job": ("env", "fp32", "init", "nogc"),
}


def child(setup: tuple[str, ...], sizes: dict, threads: int, blocks: int, block_s: float) -> dict:
    """Set the process up, build both steps, time them in interleaved blocks."""
    import gc

    names = ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"]
    if "env" in setup:
        names.append("TF_NUM_INTRAOP_THREADS")
    for name in names:
        os.environ[name] = str(threads)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import plain_loop
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    if "fp32" in setup:
        from crossover_study.workloads.precision import pin_fp32

        pin_fp32("tensorflow")
    if "init" in setup:
        from crossover_study.measure.frameworks import initialise_device

        initialise_device("tensorflow", "cpu")
    if "nogc" in setup:
        gc.freeze()

    with tf.device("/CPU:0"):
        built = plain_loop.load_plugin(str(LOOP)).build("/CPU:0", **sizes)
    loop_run = plain_loop.step_runner(built, lambda loss: loss.numpy())

    from crossover_study.workloads.tf_cases import MLP

    product = MLP("cpu", dict(sizes), "eager")
    product.setup()

    def product_run(n: int) -> None:
        product.run(n)
        product.sync()

    def loop_block(n: int) -> None:
        loop_run(n)

    runs = {"loop": loop_block, "product": product_run}
    if "nogc" in setup:
        gc.disable()
    for run in runs.values():
        run(20)
    started = time.perf_counter()
    loop_block(5)
    steps = max(1, int(block_s / ((time.perf_counter() - started) / 5)))
    times: dict[str, list[float]] = {name: [] for name in runs}
    for k in range(blocks):
        order = list(runs) if k % 2 == 0 else list(reversed(runs))
        for name in order:
            started = time.perf_counter()
            runs[name](steps)
            times[name].append((time.perf_counter() - started) / steps)
    return {
        "setup": "+".join(setup) or "plain",
        "steps_per_block": steps,
        **{f"{name}_ms": 1e3 * statistics.median(t) for name, t in times.items()},
        **{f"{name}_blocks_ms": [round(1e3 * s, 4) for s in t] for name, t in times.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--setups", default="plain,env,fp32,init,nogc,job")
    parser.add_argument("--size", action="append", default=[], help="axis=value")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--block-s", type=float, default=0.2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = {"batch": 64, "d_in": 1024, "hidden": 128}
    for item in args.size:
        name, _, value = item.partition("=")
        sizes[name] = int(value)
    if args.child is not None:
        setup = tuple(filter(None, args.child.split("+")))
        print(json.dumps(child(setup, sizes, args.threads, args.blocks, args.block_s)))
        return 0
    setups = args.setups.split(",")
    records = []
    for k in range(args.rounds):
        for name in setups if k % 2 == 0 else reversed(setups):
            cmd = [sys.executable, __file__, "--child", "+".join(SETUPS[name]) or "plain"]
            cmd += [f"--size={a}={v}" for a, v in sizes.items()]
            cmd += ["--threads", str(args.threads), "--blocks", str(args.blocks)]
            cmd += ["--block-s", str(args.block_s)]
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode or not lines:
                print(done.stderr[-2000:], file=sys.stderr)
                continue
            record = {"round": k, "name": name, **json.loads(lines[-1])}
            records.append(record)
            print(json.dumps(record), flush=True)
    print("\n| set-up | rounds | loop ms | product ms | product / loop (median of rounds) |")
    print("|---|---|---|---|---|")
    for name in setups:
        mine = [r for r in records if r["name"] == name]
        if not mine:
            continue
        loop = statistics.median(r["loop_ms"] for r in mine)
        prod = statistics.median(r["product_ms"] for r in mine)
        ratio = statistics.median(r["product_ms"] / r["loop_ms"] for r in mine)
        print(f"| {name} | {len(mine)} | {loop:.3f} | {prod:.3f} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
