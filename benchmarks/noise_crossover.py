"""How often the crossover step reports a crossover made of noise (issue 14, item 6).

    .venv/bin/python benchmarks/noise_crossover.py [--seeds 100] [--n-boot 1000] [--src DIR]

Builds synthetic timings tables of s001-mlp along ``hidden`` (4 sizes: 32, 128, 512 and
2048; 5 timed blocks per point, each block's seconds per step multiplied by lognormal
noise of sigma 0.05, i.e. about 5 %) and runs the study's own crossover step
(:func:`crossover_study.analysis.crossover.crossover_table`, the row builder that sets
``outcome``, with the config's default bootstrap: ``--n-boot`` replicates, seed 0) on
each of ``--seeds`` noise seeds, for two experiments:

- ``same``: the CPU and the accelerator drawn from the same distribution (both
  ``1e-5 s x hidden``): any crossover it reports is made of noise;
- ``2x``: a real crossover: the accelerator 2x slower than the CPU at hidden = 32 and 2x
  faster at 2048 (time ratio 2 (hidden/32)^(-1/3), crossing at hidden = 256).

Prints, per experiment, how many seeds gave each outcome and how many gave a crossover
with a 95 % interval (``ci_low`` and ``ci_high`` set), then one line per experiment
``noise crossover: <experiment> crossover_with_ci=<n>/<seeds>``. ``--src`` imports
``crossover_study`` from another checkout's ``src`` (e.g. an older commit's worktree) to
count what that version reported on the same data.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

SIZES = (32, 128, 512, 2048)
N_BLOCKS = 5
SIGMA = 0.05


def _rows(device: str, sizes, base, rng) -> list[dict]:
    rows = []
    for size, t in zip(sizes, base, strict=True):
        blocks = t * rng.lognormal(0.0, SIGMA, size=N_BLOCKS)
        rows.append(
            {
                "case": "s001-mlp",
                "framework": "torch",
                "device": device,
                "variant": "eager",
                "batch": 64,
                "d_in": 1024,
                "hidden": size,
                "status": "ok",
                "message": None,
                "step_time_s": float(np.median(blocks)),
                "block_step_times_s": json.dumps([float(b) for b in blocks]),
                "cold_start_s": 0.1 if device == "cpu" else 1.0,
                "first_step_s": 0.01,
            }
        )
    return rows


def timings(experiment: str, seed: int) -> pd.DataFrame:
    """Synthetic timings of one noise seed (``experiment``: ``same`` or ``2x``)."""
    rng = np.random.default_rng(seed)
    cpu = [1e-5 * x for x in SIZES]
    if experiment == "same":
        acc = cpu
    else:
        acc = [t * 2.0 * (x / SIZES[0]) ** (-1 / 3) for t, x in zip(cpu, SIZES, strict=True)]
    return pd.DataFrame(_rows("cpu", SIZES, cpu, rng) + _rows("cuda", SIZES, acc, rng))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument(
        "--src",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "src",
        help="folder to import crossover_study from (default: this checkout's src)",
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.src.resolve()))
    from crossover_study.analysis.crossover import crossover_table

    for experiment in ("same", "2x"):
        outcomes: Counter[str] = Counter()
        with_ci = 0
        for seed in range(args.seeds):
            table = crossover_table(timings(experiment, seed), n_boot=args.n_boot, seed=0)
            row = table[table["axis"] == "hidden"].iloc[0]
            outcomes[row["outcome"]] += 1
            if row["outcome"] == "crossover" and pd.notna(row["ci_low"]):
                with_ci += 1
        counts = ", ".join(f"{k}={v}" for k, v in sorted(outcomes.items()))
        print(f"{experiment}: {counts}")
        print(f"noise crossover: {experiment} crossover_with_ci={with_ci}/{args.seeds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
