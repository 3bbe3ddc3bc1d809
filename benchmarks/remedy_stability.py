"""Remedies that hold on a noisy machine: is a variant's speed-up the same twice? (issue 50)

Runs ``crossover-study check`` twice on each seed (in each framework asked for) and on
both examples, at their seed sizes, on the CPU, every variant that applies, and reads
each variant row's speed-up against eager two ways:

- paired: the row's ``speedup`` (median of per-round ratios, its blocks interleaved with
  eager's: ``crossover_study.measure.pairing``) and its 95 % interval;
- apart: eager's median step time over the variant's, the two points measured one
  after the other (how the study ranked remedies before interleaving).

Prints one line per variant and run pair, then the goals of issue 50 item 6:

- the two runs' paired speed-ups agree within 10 % at >= 90 % of the variants;
- the variants that do the eager step's own work on the CPU (PyTorch's
  ``copy_data_each_step``, whose copy of a host batch to the CPU returns the same
  tensor, and the loss-read variants: a CPU tensor's loss is read in microseconds) have
  an interval covering 1.0 at >= 90 % of them. TensorFlow's ``copy_data_each_step`` is
  not one of them: it converts the NumPy batch to a new tensor every step
  (``workloads/tf_base.py``), work the eager step does not do.

The same two numbers are printed for the apart ratios (the "before"). Run:

    .venv/bin/python benchmarks/remedy_stability.py [--frameworks torch,tensorflow] [--out DIR]

Each check's folder is kept under ``--out`` (default ``/tmp/remedy-stability``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from crossover_study.analysis.tables import read_timings

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ("s000-hjb", "s001-mlp", "s002-iris", "s004-lstm")
#: The examples, their framework and the sizes their builders take (README's examples).
EXAMPLES = (
    ("examples/digits_cnn.py", "torch", ("batch=32", "channels=16")),
    ("examples/digits_keras_fit.py", "tensorflow", ("batch=16", "units=64")),
)
#: Variants that do the eager step's own work on the CPU, by framework (the module
#: docstring says why TensorFlow's copy is not one).
SAME_WORK = {
    "torch": ("copy_data_each_step", "read_loss_every_step", "read_loss_every_1000"),
    "tensorflow": ("read_loss_every_step", "read_loss_every_1000"),
}
AGREE = 0.10  # the two runs' speed-ups agree when their ratio is within 1 +- AGREE
GOAL = 0.90


def _check(
    target: str, framework: str, out: Path, sizes: tuple = (), reuse: bool = False
) -> pd.DataFrame:
    """One check's ok CPU rows (``out`` kept; with ``reuse``, a folder holding a table
    already is read, not measured again)."""
    if reuse and (out / "timings.csv").exists():
        rows = read_timings(out / "timings.csv")  # the whole row: speedup lies in measurement.csv
        return rows[(rows["status"] == "ok") & (rows["device"] == "cpu")]
    command = [
        str(ROOT / ".venv/bin/crossover-study"),
        "check",
        target,
        "--framework",
        framework,
        "--devices",
        "cpu",
        "--predict",
        "none",
        "--out",
        str(out),
        *(f"--size={size}" for size in sizes),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"  {target} {framework}: check failed ({done.returncode}): {done.stderr[-300:]}")
        return pd.DataFrame()
    rows = read_timings(out / "timings.csv")  # the whole row: speedup lies in measurement.csv
    return rows[(rows["status"] == "ok") & (rows["device"] == "cpu")]


def _ratios(rows: pd.DataFrame) -> pd.DataFrame:
    """Per variant: paired speed-up, its interval, and the apart ratio."""
    if rows.empty:
        return pd.DataFrame()
    eager = rows.loc[rows["variant"] == "eager", "step_time_s"]
    if eager.empty:
        return pd.DataFrame()
    variants = rows[rows["variant"] != "eager"].set_index("variant")
    out = pd.DataFrame(
        {
            "paired": pd.to_numeric(variants.get("speedup"), errors="coerce"),
            "low": pd.to_numeric(variants.get("speedup_low"), errors="coerce"),
            "high": pd.to_numeric(variants.get("speedup_high"), errors="coerce"),
            "apart": float(eager.iloc[0]) / variants["step_time_s"].astype(float),
        }
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="torch,tensorflow")
    parser.add_argument("--out", type=Path, default=Path("/tmp/remedy-stability"))
    parser.add_argument(
        "--reuse", action="store_true", help="read the checks already in --out, measure the rest"
    )
    args = parser.parse_args()
    frameworks = args.frameworks.split(",")
    targets = [(s, f, ()) for s in SEEDS for f in frameworks]
    targets += [(e, f, sizes) for e, f, sizes in EXAMPLES if f in frameworks]
    started = time.time()
    lines = []
    for target, framework, sizes in targets:
        name = Path(target).stem
        runs = [
            _ratios(
                _check(target, framework, args.out / f"{name}-{framework}-{i}", sizes, args.reuse)
            )
            for i in (1, 2)
        ]
        if runs[0].empty or runs[1].empty:
            continue
        both = runs[0].add_suffix("_1").join(runs[1].add_suffix("_2"), how="inner")
        for variant, r in both.iterrows():
            lines.append(
                {
                    "program": f"{name} {framework}",
                    "variant": variant,
                    "same_work": variant in SAME_WORK[framework],
                    **r.to_dict(),
                }
            )
            print(
                f"{name:18} {framework:10} {variant:22} paired {r['paired_1']:.3f} "
                f"({r['low_1']:.2f}-{r['high_1']:.2f}) / {r['paired_2']:.3f} "
                f"({r['low_2']:.2f}-{r['high_2']:.2f})   apart {r['apart_1']:.3f} / "
                f"{r['apart_2']:.3f}",
                flush=True,
            )
    table = pd.DataFrame(lines)
    if table.empty:
        print("remedy-stability: no variant measured")
        return 1
    table.to_csv(args.out / "remedy_stability.csv", index=False)
    paired = table.dropna(subset=["paired_1", "paired_2"])
    for how, a, b in (("paired", "paired_1", "paired_2"), ("apart", "apart_1", "apart_2")):
        rows = paired if how == "paired" else table
        agree = ((rows[a] / rows[b] - 1).abs() <= AGREE).mean()
        print(
            f"{how}: the two runs agree within {AGREE:.0%} at {agree:.0%} of {len(rows)} "
            f"variants (goal {GOAL:.0%}: {'met' if agree >= GOAL else 'missed'})"
        )
    same = paired[paired["same_work"]]
    covered = pd.concat([(same[f"low_{i}"] <= 1) & (same[f"high_{i}"] >= 1) for i in (1, 2)])
    apart_same = table[table["same_work"]]
    within = pd.concat([(apart_same[f"apart_{i}"] - 1).abs() <= AGREE for i in (1, 2)])
    print(
        f"paired: intervals of the variants doing eager's own work cover 1.0 at "
        f"{covered.mean():.0%} of {len(covered)} (goal {GOAL:.0%}: "
        f"{'met' if covered.mean() >= GOAL else 'missed'}); apart: within 0.9-1.1 at "
        f"{within.mean():.0%} of {len(within)}"
    )
    print(f"remedy-stability: {len(targets)} programs twice in {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
