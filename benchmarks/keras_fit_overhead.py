"""How much of s004's Keras step time is ``fit``'s own work, with epochs as long as the
seed's data set made them and with the 4-step epochs the study used before.

    .venv/bin/python benchmarks/keras_fit_overhead.py [--threads 2] [--batch 32 --units 180 --seq-len 60]

Times three programs of the same model (the s004 LSTM regressor, TensorFlow/Keras, on
the CPU) with this study's harness, one after the other in one process:

- ``fit, seed epochs``: the ``eager`` point as the study measures it now: ``fit`` with
  ``data.lstm_steps_per_epoch(batch)`` steps per epoch (38 at batch 32), the seed's
  progress bar and a ``ModelCheckpoint`` after every epoch; a timed block is one ``fit``
  call of whole epochs;
- ``custom step``: the ``custom_step`` point, a compiled ``tf.function`` step on data
  placed once, with the same per-epoch checkpoint;
- ``fit, 4-step epochs``: the program the study timed before (4 batches per epoch,
  2 epochs per ``fit`` call, ``verbose=0``, no checkpoint).

Prints each median step time with its interquartile range, then the ratio of each
``fit`` program to the custom step measured in this run, and a last line
``keras fit overhead: seed-epochs/custom=<r> 4-step/custom=<r>``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from crossover_study.measure import frameworks  # noqa: E402
from crossover_study.measure.harness import measure  # noqa: E402
from crossover_study.study.points import TimingPolicy

#: The study's default timing policy (config/config.yaml, section timing), with room
#: for five blocks of a 3-second epoch.
POLICY = TimingPolicy(min_block_s=0.05, n_blocks=5, max_warmup_s=1.0, max_point_s=60.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (default 2)")
    parser.add_argument("--batch", type=int, default=32, help="batch (seed: 32)")
    parser.add_argument("--units", type=int, default=180, help="LSTM units (seed: 180)")
    parser.add_argument("--seq-len", type=int, default=60, help="time steps (assumed: 60)")
    args = parser.parse_args(argv)
    for name in ("threads", "batch", "units", "seq_len"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer")
    frameworks.pin_thread_env(args.threads)
    frameworks.import_framework("tensorflow", "cpu", args.threads)
    from crossover_study.workloads.tf_cases import LSTM

    class FourStepEpochs(LSTM):
        """The program timed before 2026-12: 4 batches per epoch, 2 epochs per fit
        call, no progress bar, no checkpoint."""

        checkpoint_each_epoch = False
        verbose = 0

        def __init__(self, device, sizes, variant="eager", seed=1234):
            super().__init__(device, sizes, variant, seed)
            self.steps_per_call, self.min_steps_per_block = 4, 8

    sizes = {"batch": args.batch, "units": args.units, "seq_len": args.seq_len}
    programs = {
        "fit, seed epochs": LSTM("cpu", sizes),
        "custom step": LSTM("cpu", sizes, "custom_step"),
        "fit, 4-step epochs": FourStepEpochs("cpu", sizes),
    }
    times = {}
    for name, workload in programs.items():
        try:
            m = measure(workload, POLICY)
        finally:
            workload.close()
        times[name] = m.step_time_s
        print(
            f"{name:20s} {m.step_time_s * 1e3:8.2f} ms/step  IQR {m.step_time_iqr_s * 1e3:6.2f} ms"
            f"  ({workload.steps_per_call} steps per epoch, {m.steps_per_block} per block,"
            f" {len(m.block_step_times_s)} blocks)"
        )
    custom = times["custom step"]
    seed_ratio, old_ratio = times["fit, seed epochs"] / custom, times["fit, 4-step epochs"] / custom
    print(f"keras fit overhead: seed-epochs/custom={seed_ratio:.3f} 4-step/custom={old_ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
