"""Our harness against the field's reference timers, on the same training step.

    .venv/bin/python benchmarks/timer_agreement.py [--threads 2] [--runs 3] \
        [--frameworks torch tensorflow]

For s001-mlp at three sizes and s000-hjb at its seed size, on the CPU (and CUDA when a
device is visible), prints one line per point with ours / reference and its 95 %
bootstrap interval in brackets (``crossover_study.agreement.ratio_interval``). With
``--runs N`` the whole set of points is measured N times in a row in this process, each
run closed by ``run i/N: min=<r> max=<r>``; the last line is
``timer agreement: min=<r> max=<r>`` over the ratios of all runs. The reference is
``torch.utils.benchmark.Timer.blocked_autorange`` for PyTorch (same thread count; its
own default is one thread) and a plain loop synchronised by reading the result back for
TensorFlow. The target is every ratio within [0.95, 1.05] in three consecutive runs.
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
        "--rounds", type=_positive_int, default=20, help="alternating rounds per point"
    )
    parser.add_argument(
        "--min-run-time",
        type=_positive_float,
        default=1.0,
        help="seconds of the PyTorch reference's own blocks, timed once per point",
    )
    parser.add_argument(
        "--runs", type=_positive_int, default=1, help="times the whole set of points is measured"
    )
    args = parser.parse_args(argv)

    frameworks.pin_thread_env(args.threads)
    devices: dict[str, list[str]] = {}
    ratios = []
    for run in range(1, args.runs + 1):
        run_ratios = []
        for framework, device in _targets(args.frameworks, args.threads, devices):
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
                run_ratios.append(result.ratio)
        print(f"run {run}/{args.runs}: {_span(run_ratios)}", flush=True)
        ratios += run_ratios
    print(f"timer agreement: {_span(ratios)}")
    return 0


def _targets(names: list[str], threads: int, devices: dict[str, list[str]]):
    """(framework, device) pairs in order; a framework is imported (and its devices
    probed) when first reached, so its first run's points come before the next import,
    as in a single run."""
    for framework in names:
        if framework not in devices:
            frameworks.import_framework(framework, "cpu", threads)
            cuda = frameworks.probe(framework, "cuda").available
            devices[framework] = ["cpu"] + (["cuda"] if cuda else [])
        for device in devices[framework]:
            yield framework, device


def _span(ratios: list[float]) -> str:
    return f"min={min(ratios):.3f} max={max(ratios):.3f}"


if __name__ == "__main__":
    sys.exit(main())
