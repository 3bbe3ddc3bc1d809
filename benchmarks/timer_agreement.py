"""Our harness against the field's reference timers, on the same training step.

    .venv/bin/python benchmarks/timer_agreement.py [--threads 2] [--runs 3] \
        [--frameworks torch tensorflow]

For s001-mlp at three sizes and s000-hjb at its seed size, on the CPU (and CUDA when a
device is visible), prints one line per point with ours / reference and its 95 %
bootstrap interval in brackets (``crossover_study.measure.agreement.ratio_interval``). With
``--runs N`` the whole set of points is measured N times in a row in this process, each
run closed by ``run i/N: min=<r> max=<r>``; the last line is
``timer agreement: min=<r> max=<r>`` over the ratios of all runs. The reference is
``torch.utils.benchmark.Timer.blocked_autorange`` for PyTorch (same thread count; its
own default is one thread) and a plain loop synchronised by reading the result back for
TensorFlow. The target is every ratio within [0.95, 1.05] in three consecutive runs.

``--against-itself`` adds the null comparison after each point: the same rounds with the
reference on both sides (an A/A test, ``agreement(..., against_itself=True)``), printed
as a line of its own, and before the last line ``reference against itself: min=<r>
max=<r>`` over all runs: the spread that the machine's noise alone gives a comparison of
this length, against which the timer agreement's spread is read.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from crossover_study.measure.agreement import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
