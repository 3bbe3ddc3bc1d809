"""How far each seed program's own cost of its operations is from the step-time model's
ops term, which prices them at the minimal training step's op costs.

    .venv/bin/python benchmarks/op_cost_spread.py [--framework torch] [--threads 2] [--rounds 2]
        [--sync-check-s 0]

The model (crossover_study.stepmodel.model) prices a step's eagerly dispatched operations at
``rate_eager_op_s``, the per-op cost of a minimal training step (step_rates.DEPTH tanh
layers of width 1, SGD) timed right after the point (TensorFlow: graph ops, function
calls and Keras fit's own cost likewise, from minimal programs). Where a program's
operations cost more than the minimal step's (more Python around them, an optimizer's
per-parameter loop, a second backward pass), an operation-bound step is predicted short
by that ratio, whatever its counts. This measures the ratio: each point is measured as
a job measures it (crossover_study.measure.point.measure_point: timed blocks, counts,
products replayed, op costs timed after the point), at sizes small enough that the
step is mostly operations; what the measured step leaves after the model's compute,
memory and copy terms is what its operations cost, set against the ops term
(``model_ops_s``). ``--rounds`` measures every point that many times, alternating, so
that a drifting machine falls on all points alike, and the rounds' spread shows how much
of a miss is the machine's noise rather than the model (the same point measured twice a
minute apart). ``--sync-check-s 1.0`` runs the block-length check as the default study
does.

Prints per point and round: measured step, the model's prediction and share, its ops
term, what the step leaves for its operations and their ratio; then per point the
median ratio, and a last line ``op cost ratio: min=<r> max=<r>`` over the points (1:
the minimal programs price the program's operations exactly; the model's share of an
operation-bound point is about 1 / ratio).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from crossover_study.stepmodel import columns as step_columns

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

#: Points mostly made of operations (tiny arithmetic), per case: (case, sizes).
POINTS = (
    ("s000-hjb", {"batch": 10, "width": 8}),
    ("s001-mlp", {"batch": 64, "d_in": 256, "hidden": 32}),
    ("s002-iris", {"batch": 20, "hidden": 32}),
    ("s004-lstm", {"batch": 8, "units": 8, "seq_len": 60}),
)


def _row(
    framework: str, case: str, sizes: dict, threads: int, job_rates: dict, sync_check_s: float
) -> dict:
    """One point measured as a job measures it, with the job's rate columns, priced by
    the model: a dict of the timings table's columns."""
    import pandas as pd

    from crossover_study.measure.point import measure_point
    from crossover_study.stepmodel import rates as step_rates
    from crossover_study.study.points import TimingPolicy
    from crossover_study.study.programs import program_of
    from crossover_study.study.spec import PointSpec

    point = PointSpec(case, framework, "cpu", "eager", sizes)
    policy = TimingPolicy(min_block_s=0.05, n_blocks=5, max_warmup_s=1.0, sync_check_s=sync_check_s)
    row = {
        "case": case,
        "framework": framework,
        "device": "cpu",
        "variant": "eager",
        "program": program_of(case, framework, "cpu", "eager"),
        **step_rates.row_columns(job_rates),
        **measure_point(point, policy, 0.0, 0.0, threads),
    }
    if row["status"] != "ok":
        raise RuntimeError(f"{case} {framework}: {row['status']}: {row.get('message')}")
    return step_columns.model_columns(pd.DataFrame([row])).iloc[0].to_dict()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("torch", "tensorflow"), default="torch")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (default 2)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per point (default 2)")
    parser.add_argument(
        "--sync-check-s",
        type=float,
        default=0.0,
        help="budget of the block-length check's long blocks, as timing.sync_check_s"
        " (default 0: off; the default study's is 1.0)",
    )
    args = parser.parse_args(argv)
    for name in ("threads", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.sync_check_s < 0:
        parser.error(f"--sync-check-s must not be negative, got {args.sync_check_s}")

    from crossover_study.measure import frameworks
    from crossover_study.stepmodel import rates as step_rates
    from crossover_study.stepmodel.model import TERM_COLUMNS

    # The model's terms other than its ops term: on the CPU the terms add, so what the
    # measured step leaves after them is what its operations cost.
    others = [column for term, column in TERM_COLUMNS.items() if term != "launch"]
    frameworks.import_framework(args.framework, "cpu", args.threads)
    job_rates = step_rates.measure_rates(args.framework, "cpu")
    ratios: dict[str, list[float]] = {case: [] for case, _ in POINTS}
    for round_ in range(args.rounds):
        for case, sizes in POINTS:
            row = _row(args.framework, case, sizes, args.threads, job_rates, args.sync_check_s)
            rest = row["step_time_s"] - sum(row[column] for column in others)
            ratio = rest / row["model_ops_s"]
            ratios[case].append(ratio)
            print(
                f"round {round_} {case} {args.framework}: step {row['step_time_s'] * 1e6:.0f} µs,"
                f" model {row['model_step_s'] * 1e6:.0f} µs (share {row['model_share']:.2f});"
                f" ops term {row['model_ops_s'] * 1e6:.0f} µs ({row['step_ops']:.1f} ops,"
                f" eager op {row['rate_eager_op_s'] * 1e6:.2f} µs), the step less its other"
                f" terms {rest * 1e6:.0f} µs: ratio {ratio:.2f}",
                flush=True,
            )
    medians = {case: statistics.median(r) for case, r in ratios.items()}
    for case, median in medians.items():
        print(f"{case} {args.framework}: median op cost ratio {median:.2f}")
    print(f"op cost ratio: min={min(medians.values()):.2f} max={max(medians.values()):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
