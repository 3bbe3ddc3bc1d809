"""s001-mlp in TensorFlow at the seed's size: the product's eager point and the plain
loop (``benchmarks/fidelity.py``'s two sides) against the seed's whole program as its
user runs it (issue 51, item 3; docs/VALIDATION.md, 2026-12-05 18:04-18:45).

    .venv/bin/python benchmarks/fidelity_s001_tf_seed_run.py [--rounds 3]

Each round, each in a fresh process: the product's point (``fidelity.product``), the
plain loop (``fidelity.plain``), then the seed's run: ``benchmarks/seed_loops/s001_mlp_tf.py``'s
step 10 000 times from its build, the loss read every 1 000 steps (docs/STUDY.md, S001),
no warm-up left out, timed whole and in blocks of 250 steps. Prints one JSON line a
round (ms a step): ``product_ms``, ``plain_ms``, ``seed_run_ms`` (the whole run's mean),
``seed_run_last_half_ms`` (median of its last 20 blocks) and the ratios of the product
and the plain loop to the whole run.
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
SIZES = {"batch": 64, "d_in": 1024, "hidden": 128}
STEPS, BLOCK = 10_000, 250


def seed_run(threads: int) -> dict:
    """The seed's 10 000 steps in this process (call in a fresh one)."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(threads)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import plain_loop
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    with tf.device("/CPU:0"):
        built = plain_loop.load_plugin(str(LOOP)).build("/CPU:0", **SIZES)
    run = plain_loop.step_runner(built, lambda loss: loss.numpy())
    blocks = []
    started = time.perf_counter()
    for _ in range(STEPS // BLOCK):
        t = time.perf_counter()
        run(BLOCK)
        blocks.append((time.perf_counter() - t) / BLOCK)
    whole = (time.perf_counter() - started) / STEPS
    return {
        "seed_run_ms": 1e3 * whole,
        "seed_run_last_half_ms": 1e3 * statistics.median(blocks[len(blocks) // 2 :]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(seed_run(args.threads)))
        return 0
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fidelity

    program = {
        "name": "s001-mlp",
        "workload": "builtin",
        "loop": str(LOOP),
        "framework": "tensorflow",
        "sizes": SIZES,
    }
    for k in range(args.rounds):
        product = fidelity.product(program, args.threads)
        plain = fidelity.plain(program, args.threads)
        done = subprocess.run(
            [sys.executable, __file__, "--child", "--threads", str(args.threads)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=600,
        )
        seed = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
        p, q = 1e3 * product["step_time_s"], 1e3 * plain["step_s"]
        record = {
            "round": k,
            "product_ms": round(p, 4),
            "plain_ms": round(q, 4),
            **{key: round(value, 4) for key, value in seed.items()},
            "product_over_seed_run": round(p / seed["seed_run_ms"], 3),
            "plain_over_seed_run": round(q / seed["seed_run_ms"], 3),
        }
        print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
