"""How often a paired speed-up's 95 % interval holds the true ratio, by method (issue 50).

Simulates rounds of a variant whose true speed-up over eager is 1.0: each round's log
ratio drawn independently (Student's t with 4 degrees of freedom, scale 0.02: heavier
tails than a normal, as block timings have), 3 and 5 rounds as a point has. For each
draw, three intervals: the percentile bootstrap of the median (the product's interval
before 2026-12-05), the lowest to the highest ratio, and Student's t over the log
ratios (``crossover_study.measure.pairing.paired_speedup``). Prints the share of draws
whose interval holds 1.0. What it cannot show: a ratio that differs between processes
(``benchmarks/remedy_stability.py`` measures that). Run:

    .venv/bin/python benchmarks/paired_interval_coverage.py [--draws 2000]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from scipy import stats

from crossover_study.measure.pairing import paired_speedup


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=2000)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    for rounds in (3, 5):
        held = {"percentile bootstrap of the median": 0, "lowest to highest": 0, "t (product)": 0}
        for k in range(args.draws):
            ratios = np.exp(rng.standard_t(4, size=rounds) * 0.02)
            boot = stats.bootstrap(
                (ratios,), statistics.median, n_resamples=500, method="percentile", random_state=k
            ).confidence_interval
            held["percentile bootstrap of the median"] += boot.low <= 1.0 <= boot.high
            held["lowest to highest"] += ratios.min() <= 1.0 <= ratios.max()
            _, low, high = paired_speedup(list(ratios), [1.0] * rounds)
            held["t (product)"] += low <= 1.0 <= high
        for method, n in held.items():
            print(f"{rounds} rounds: {method:36} holds 1.0 in {n / args.draws:.1%} of {args.draws}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
