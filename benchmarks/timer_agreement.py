"""Our harness against the field's reference timers, on the same training step.

    .venv/bin/python benchmarks/timer_agreement.py [--threads 2] [--frameworks torch tensorflow]

For s001-mlp at three sizes and s000-hjb at its seed size, on the CPU (and CUDA when a
device is visible), prints one line per point with ours / reference, then
``timer agreement: min=<r> max=<r>``. The reference is
``torch.utils.benchmark.Timer.blocked_autorange`` for PyTorch (same thread count; its
own default is one thread) and a plain loop synchronised by reading the result back for
TensorFlow. The target is every ratio within [0.95, 1.05].
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from crossover_study import frameworks  # noqa: E402
from crossover_study.agreement import POINTS, agreement  # noqa: E402


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--threads", type=_positive_int, default=2, help="CPU threads (both timers)"
    )
    parser.add_argument(
        "--frameworks", nargs="+", default=["torch", "tensorflow"], choices=["torch", "tensorflow"]
    )
    parser.add_argument(
        "--rounds", type=_positive_int, default=5, help="alternating rounds per point"
    )
    parser.add_argument(
        "--min-run-time", type=_positive_float, default=1.0, help="reference seconds"
    )
    args = parser.parse_args(argv)

    frameworks.pin_thread_env(args.threads)
    ratios = []
    for framework in args.frameworks:
        frameworks.import_framework(framework, "cpu", args.threads)
        devices = ["cpu"] + (["cuda"] if frameworks.probe(framework, "cuda").available else [])
        for device in devices:
            for case, sizes in POINTS:
                result = agreement(
                    framework,
                    device,
                    case,
                    sizes,
                    args.threads,
                    rounds=args.rounds,
                    min_run_time=args.min_run_time,
                )
                print(result.line(), flush=True)
                ratios.append(result.ratio)
    print(f"timer agreement: min={min(ratios):.3f} max={max(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
