"""Does the first profiled call name the dominant cost? (issue 50, the attribution's cost)

For each seed and each of the unseen plug-ins at its seed size, on the CPU, one eager
point is measured twice in this process: once as the study measures it (the longer
profiled block skipped where the first call settles it:
``attribution.first_block_settles``) and once with the longer block always profiled
(``SETTLED_LEAD`` above 1). Prints, per program, both runs' dominant category, whether
the first call settled it, and the attribution's cost each way; the claim is that the
dominant category agrees wherever the first call settled it. Run:

    .venv/bin/python benchmarks/attribution_settle.py [--framework torch|tensorflow]
"""

from __future__ import annotations

import argparse
import time

from crossover_study.measure import attribution, frameworks
from crossover_study.measure.point import measure_point
from crossover_study.study.config import load_config
from crossover_study.study.points import TimingPolicy
from crossover_study.study.spec import PointSpec, seed_sizes

SEEDS = ("s000-hjb", "s001-mlp", "s002-iris", "s004-lstm")
UNSEEN = {
    "torch": (
        ("dataloader", {"batch": 512, "hidden": 128}),
        ("numpy-augment", {"batch": 64, "channels": 16}),
    ),
    "tensorflow": (
        ("fit-per-batch", {"batch": 32, "units": 64}),
        ("decaying-lr", {"batch": 32, "units": 64}),
    ),
}
POLICY = TimingPolicy(min_block_s=0.05, n_blocks=5, max_warmup_s=1.0, sync_check_s=1.0)


def _row(case: str, framework: str, sizes: dict, lead: float) -> dict:
    attribution.SETTLED_LEAD = lead
    point = PointSpec(case, framework, "cpu", "eager", sizes)
    return measure_point(point, POLICY, 0.0, 0.0, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("torch", "tensorflow"), default="torch")
    args = parser.parse_args()
    load_config("config/studies/unseen.yaml")  # registers the plug-in cases
    frameworks.import_framework(args.framework, "cpu", 2)
    default = attribution.SETTLED_LEAD
    programs = [(c, seed_sizes(c)) for c in SEEDS] + list(UNSEEN[args.framework])
    print(
        f"{'program':16} {'settled':8} {'lead':5} {'dominant (as run)':18} {'dominant (longer)':18} cost as run / longer"
    )
    agree = settled_n = 0
    started = time.time()
    for case, sizes in programs:
        _row(case, args.framework, sizes, default)  # the process's first profile: a warm-up
        fast = _row(case, args.framework, sizes, default)
        full = _row(case, args.framework, sizes, 2.0)
        if fast.get("status") != "ok" or full.get("status") != "ok":
            print(f"{case:16} not ok: {fast.get('message') or full.get('message')}")
            continue
        settled = bool(fast.get("attr_first_settled"))
        same = fast["attr_dominant"] == full["attr_dominant"]
        settled_n += settled
        agree += settled and same
        lead = fast.get("attr_first_lead")
        lead = "-" if lead is None else f"{lead:.2f}"
        print(
            f"{case:16} {settled!s:8} {lead:5} {fast['attr_dominant']:18} {full['attr_dominant']:18} "
            f"{fast['attr_cost_s']:.3f} s / {full['attr_cost_s']:.3f} s"
        )
    attribution.SETTLED_LEAD = default
    print(
        f"{args.framework}: settled by the first call at {settled_n} program(s), the same "
        f"dominant category as the longer block at {agree} of them ({time.time() - started:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
