"""Two runs of one study on one machine: do they agree within their own noise?

    .venv/bin/python benchmarks/repeat_study.py results/<run-a> results/<run-b>

Each folder holds a run's ``timings.csv`` and ``crossover.csv`` (e.g. ``results/smoke``
copied aside, then the smoke study run again from scratch). Prints, per point measured
ok in both runs, the two median step times, their ratio b/a and whether the two
interquartile ranges overlap; per crossover estimated in both runs, whether the two
bootstrap 95% intervals overlap; then one summary line starting ``repeat:``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from crossover_study.analysis.compare_runs import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
