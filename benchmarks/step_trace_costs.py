"""The whole-step costs the device cards take from published training traces
(``crossover_study.stepmodel.step_trace``), printed for any Kineto trace:

    .venv/bin/python benchmarks/step_trace_costs.py TRACE.json.gz [...]

Per trace: its device, the steps read, dispatched ops and kernel launches per step; per
CPU thread with enough ops, the host time per dispatched op (op start to next op start,
less blocked runtime calls, intervals under 1 ms); all threads together; a short
kernel's time in a queue (duration + gap) and alone (duration). The cards'
``torch_step_op_s``, ``kernel_floor_s`` and ``cuda_graph_kernel_s`` name the traces
they were read from (config/devices/families/cuda.yaml) and quote these lines; rerun it
on a new trace to add a source. ``--sensitivity`` repeats the host time per op with the
wait and blocked-call thresholds halved and doubled.

The cards' three traces are test data of Holistic Trace Analysis, at the commit the
cards' sources name:

    git clone https://github.com/facebookresearch/HolisticTraceAnalysis hta
    git -C hta checkout f4d0062c382f42bd8a74838bcdad1916c7d5d2da
    .venv/bin/python benchmarks/step_trace_costs.py --sensitivity \
        hta/tests/data/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz \
        hta/tests/data/trace_diff/control/control.json.gz \
        hta/tests/data/negative_queue_length_values_check/rank0.json.gz

Its other traces were read and left out: a sampled trace (``timeline_analysis``: events
dropped, so op-to-op intervals span missing ops), a three-step ROCm toy whose steps hold
fewer ops than a thread's mean needs (``amd_trace``), traces without a training step
(``critical_path``: a forward pass; ``trace_compare``: a stub), and two larger than the
stored snapshot keeps (``h100``, ``vision_transformer``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from crossover_study.stepmodel import step_trace  # noqa: E402


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.2f} µs"


def report(path: str) -> None:
    """Print one trace's costs (module docstring)."""
    costs = step_trace.trace_costs(path)
    devices = ", ".join(dict.fromkeys(costs.devices)) or "device not named"
    print(f"{Path(path).name}: {devices}; {costs.steps} steps")
    print(
        f"  dispatched ops per step {costs.ops_per_step:.0f}, launches per step "
        f"{costs.launches_per_step:.0f}"
    )
    for t in costs.threads:
        print(
            f"  thread {t.tid}: {t.ops} ops, host per op {_us(t.host_per_op_s)} "
            f"(blocked calls {t.blocked_s * 1e3:.1f} ms, {t.kept:.1%} of intervals kept)"
        )
    print(f"  all threads: host per op {_us(costs.host_per_op_s)}")
    print(
        f"  short kernel in a queue (duration + gap) {_us(costs.queued_kernel_s)}; "
        f"its duration alone {_us(costs.short_kernel_s)}"
    )


def sensitivity(path: str) -> None:
    """The host time per op per thread with the two thresholds halved and doubled."""
    wait, blocked = step_trace.WAIT_US, step_trace.BLOCKED_CALL_US
    try:
        for w, b in ((wait, blocked), (wait / 2, blocked), (wait * 2, blocked),
                     (wait, blocked / 2), (wait, blocked * 2)):  # fmt: skip
            step_trace.WAIT_US, step_trace.BLOCKED_CALL_US = w, b
            costs = step_trace.trace_costs(path)
            per = ", ".join(_us(t.host_per_op_s) for t in costs.threads)
            print(f"  wait < {w:.0f} µs, blocked > {b:.0f} µs: {per}")
    finally:
        step_trace.WAIT_US, step_trace.BLOCKED_CALL_US = wait, blocked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", help="Kineto Chrome traces (.json or .json.gz)")
    parser.add_argument("--sensitivity", action="store_true")
    args = parser.parse_args(argv)
    for path in args.traces:
        report(path)
        if args.sensitivity:
            sensitivity(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
