"""Two runs of one study on one machine: do they agree within their own noise?

    .venv/bin/python benchmarks/repeat_study.py results/<run-a> results/<run-b>

Each folder holds a run's ``timings.csv`` and ``crossover.csv`` (e.g. ``results/smoke``
copied aside, then the smoke study run again from scratch). Prints, per point measured
ok in both runs, the two median step times, their ratio b/a and whether the two
interquartile ranges overlap; per crossover estimated in both runs, whether the two
bootstrap 95% intervals overlap; then one summary line starting ``repeat:``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from crossover_study.repeat import compare_runs  # noqa: E402


def _read(path: Path) -> pd.DataFrame | None:
    try:
        return pd.read_csv(path)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_a", type=Path, help="folder with timings.csv (first run)")
    parser.add_argument("run_b", type=Path, help="folder with timings.csv (second run)")
    args = parser.parse_args(argv)
    tables = []
    for run in (args.run_a, args.run_b):
        if not run.is_dir():
            parser.error(f"{run}: no such folder")
        timings = _read(run / "timings.csv")
        if timings is None:
            parser.error(f"{run}: no timings.csv in this folder, or it is empty")
        tables.append(timings)
    try:
        summary = compare_runs(
            *tables, _read(args.run_a / "crossover.csv"), _read(args.run_b / "crossover.csv")
        )
    except KeyError as missing:
        parser.error(f"a table lacks the column {missing}: is it a timings.csv of this study?")
    print("\n".join(summary.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
