"""Whether counting a step (step_counts.count_point, with its products' replay) changes
the step times measured after it in the same process.

    .venv/bin/python benchmarks/counting_effect.py [--threads 2] [--rounds 4]

A measuring job counts each point right after timing it, so counting can never change
that point's timed blocks (tests/test_step_counts.py checks the order). What it could
change is what comes after it in the same process: a hook left behind (a
``TorchDispatchMode``, a TensorFlow op callback, ``run_functions_eagerly``), caches the
counted call or the replay filled, the model update of the counted steps. This times
the same built workload with this study's harness in rounds, each round two
measurements, one right after a count and one right after an uncounted call of the same
program (the order alternating between rounds, so drift falls on both alike), for a
PyTorch and a TensorFlow point of s001-mlp and s000-hjb at their seed sizes.

Prints each point's median step time after counting and after not counting, their
ratio measured in this run, and a last line ``counting effect: min=<r> max=<r>`` over
the points' ratios (1 means no effect; the VM's own run-to-run spread between
measurements a second apart is the scale to read it against).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from crossover_study.measure import frameworks
from crossover_study.measure.harness import measure  # noqa: E402
from crossover_study.stepmodel import counts as step_counts  # noqa: E402
from crossover_study.study.points import TimingPolicy
from crossover_study.study.spec import PointSpec  # noqa: E402

#: The points: (case, sizes) at the seeds' sizes, each in both frameworks.
POINTS = (
    ("s001-mlp", {"batch": 64, "d_in": 1024, "hidden": 128}),
    ("s000-hjb", {"batch": 100, "width": 8}),
)

#: Short blocks: each measurement takes about a second.
POLICY = TimingPolicy(min_block_s=0.05, n_blocks=7, max_warmup_s=0.5, sync_check_s=0)


def _effect(framework: str, case: str, sizes: dict, threads: int, rounds: int) -> float:
    workload = frameworks.make_workload(PointSpec(case, framework, "cpu", "eager", sizes), threads)
    workload.setup()
    measure(workload, POLICY, built=True)  # warm the program before either arm

    def uncounted() -> None:
        workload.run(workload.steps_per_call)
        workload.sync()

    after = {"counted": [], "uncounted": []}
    for round_ in range(rounds):
        order = ("counted", "uncounted") if round_ % 2 == 0 else ("uncounted", "counted")
        for arm in order:
            if arm == "counted":
                step_counts.count_point(workload, framework, "cpu")
            else:
                uncounted()
            after[arm].append(measure(workload, POLICY, built=True).step_time_s)
    counted, plain = (statistics.median(after[a]) for a in ("counted", "uncounted"))
    ratio = counted / plain
    print(
        f"{case} {framework}: after counting {counted * 1e6:.1f} µs, "
        f"after an uncounted call {plain * 1e6:.1f} µs, ratio {ratio:.3f} "
        f"({rounds} rounds)",
        flush=True,
    )
    return ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (default 2)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per point (default 4)")
    args = parser.parse_args(argv)
    for name in ("threads", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be a positive integer")
    frameworks.pin_thread_env(args.threads)
    ratios = []
    for framework in ("torch", "tensorflow"):
        frameworks.import_framework(framework, "cpu", args.threads)
        for case, sizes in POINTS:
            ratios.append(_effect(framework, case, sizes, args.threads, args.rounds))
    print(f"counting effect: min={min(ratios):.3f} max={max(ratios):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
