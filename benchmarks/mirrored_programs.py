"""s004 under MirroredStrategy, the two TensorFlow replica programs side by side.

    .venv/bin/python benchmarks/mirrored_programs.py [--units 180] [--seq-len 60]
        [--batch 32] [--replicas 2] [--threads 2] [--out mirrored_programs.csv]

Measures, in one fresh process with ``--replicas`` logical CPU devices, the points of
``mirrored`` (a custom step on data placed per replica) and ``mirrored_fit`` (the
seed's Keras ``fit`` under the same strategy) on one replica and on ``--replicas``
replicas with strong and weak scaling, through the study's runner and harness (default
timing policy). Writes the rows to ``--out`` and prints one line per point: step time,
global samples per second, speed-up over the same program on one replica, one
all-reduce of the gradients timed alone; then, per replica count x scaling, fit's step
time over the custom step's; at the seed's size also the report's sentence
(``answers.replica_program_sentence``). Defaults: the seed's size.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import pandas as pd  # noqa: E402

from crossover_study.answers.replicas import replica_program_sentence  # noqa: E402
from crossover_study.core.progress import format_seconds
from crossover_study.figures import scaling as figure_scaling
from crossover_study.measure.runner import GroupSpec, run_group  # noqa: E402
from crossover_study.study.points import TimingPolicy  # noqa: E402
from crossover_study.study.spec import PointSpec, seed_sizes  # noqa: E402

PROGRAMS = ("mirrored", "mirrored_fit")


def main(argv: list[str] | None = None) -> int:
    seed = seed_sizes("s004-lstm")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=seed["units"])
    parser.add_argument("--seq-len", type=int, default=seed["seq_len"])
    parser.add_argument("--batch", type=int, default=seed["batch"])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("mirrored_programs.csv"))
    args = parser.parse_args(argv)
    sizes = {"batch": args.batch, "units": args.units, "seq_len": args.seq_len}
    points = tuple(
        PointSpec("s004-lstm", "tensorflow", "cpu", v, sizes, replicas=r, scaling=s)
        for v in PROGRAMS
        for r, s in ((1, None), (args.replicas, "strong"), (args.replicas, "weak"))
    )
    group = GroupSpec(
        "s004-lstm", "tensorflow", "cpu", points, args.threads, TimingPolicy(), "fail", "bench"
    )
    with tempfile.TemporaryDirectory() as tmp:
        run_group(group, Path(tmp) / "journal.jsonl", args.out, log=lambda _: None)
    df = pd.read_csv(args.out)
    bad = df[df["status"] != "ok"]
    for _, row in bad.iterrows():
        print(f"{row['variant']} replicas={row['replicas']}: {row['status']} {row['message']}")
    ok = df[df["status"] == "ok"].copy()
    ok["scaling"] = ok["scaling"].fillna("one replica")
    print(f"s004-lstm {sizes}, {args.threads} threads, {ok['cpu_model'].iloc[0]}")
    for variant, rows in ok.groupby("variant", sort=False):
        one = rows[rows["replicas"] == 1]["samples_per_s"]
        for _, r in rows.iterrows():
            speedup = r["samples_per_s"] / one.iloc[0] if len(one) else float("nan")
            allreduce = (
                f", all-reduce alone {format_seconds(r['allreduce_s'])}"
                if pd.notna(r["allreduce_s"])
                else ""
            )
            print(
                f"{variant:13s} replicas={r['replicas']} {r['scaling']:11s} "
                f"global batch {r['global_batch']:4.0f}: {format_seconds(r['step_time_s'])} "
                f"per step (IQR {format_seconds(r['step_time_iqr_s'])}), "
                f"{r['samples_per_s']:.0f} samples/s, speed-up {speedup:.2f}{allreduce}; "
                f"{r['steps_per_call']:.0f} steps per epoch, sync check {r['sync_check']}"
            )
    pairs = ok.pivot_table(index=["replicas", "scaling"], columns="variant", values="step_time_s")
    for (replicas, scaling), r in pairs.iterrows():
        if all(p in r and pd.notna(r[p]) for p in PROGRAMS):
            print(
                f"replicas={replicas} {scaling}: mirrored_fit / mirrored step time = "
                f"{r['mirrored_fit'] / r['mirrored']:.2f}"
            )
    if sizes == seed:
        print(replica_program_sentence(figure_scaling.scaling_table(df, "s004-lstm"), "s004-lstm"))
    return 0 if bad.empty else 1


if __name__ == "__main__":
    raise SystemExit(main())
