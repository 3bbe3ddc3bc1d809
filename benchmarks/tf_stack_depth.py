"""What the Python stack above a TensorFlow eager step costs (issue 51: s001-mlp's
TensorFlow fidelity miss; docs/STUDY.md, "The step's stack").

    .venv/bin/python benchmarks/tf_stack_depth.py [--rounds 5] [--steps 200]

TensorFlow records the caller's Python stack with every eager op it executes:
``TFE_Py_FastPathExecute`` and ``TFE_Py_ExecuteCancelable`` call
``StackTrace::Capture(kStackTraceInitialSize = 30)`` (``tensorflow/python/util/
stack_trace.{h,cc}``), which on Python 3.11 and later asks every one of the innermost
30 frames for its line number (``PyFrame_GetLineNumber``). CPython finds a frame's line
by walking its code object's location table from the start to the frame's current
instruction (``_PyCode_CheckLineNumber``), so each op costs more the more frames sit
above the step and the further into their functions those frames are.

In one process, the hand-written s001-mlp step (``benchmarks/seed_loops/s001_mlp_tf.py``,
the seed's size unless ``--size``) is timed in interleaved blocks (20 warm-up steps, then
``--steps`` steps a block, one block of each placement a round, ``--rounds`` rounds)
called from:

- ``thread``: a new thread (the shallowest stack Python has: the thread's bootstrap
  frames only);
- ``top``: this script's own short loop (a user's script);
- ``short-N``: N more frames of a two-line function;
- ``long-N``: N more frames of a function whose call to the step sits about 120 lines
  (360 bytecodes) into it, as the measuring job's own frames do.

Prints one line per placement: median ms a step, and its ratio to ``thread``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
LOOP = ROOT / "benchmarks" / "seed_loops" / "s001_mlp_tf.py"


def short(depth: int, fn):
    """``fn()`` under ``depth`` more frames of a two-line function."""
    if depth == 0:
        return fn()
    return short(depth - 1, fn)


# A function whose recursive call sits far into its body: the same bytecode as a long
# function of the measuring job's (assignments that never run), then the call.
_LONG_BODY = "\n".join(f"    v{i} = depth + {i} if depth < 0 else None" for i in range(120))
_LONG_SOURCE = (
    "def long(depth, fn):\n"
    f"{_LONG_BODY}\n"
    "    if depth == 0:\n"
    "        return fn()\n"
    "    return long(depth - 1, fn)\n"
)
_namespace: dict = {}
exec(compile(_LONG_SOURCE, "<long>", "exec"), _namespace)  # noqa: S102 - fixed text above
long = _namespace["long"]


def in_thread(fn):
    """``fn()`` in a new thread; its result."""
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join()
    return out[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--size", action="append", default=[], help="axis=value")
    args = parser.parse_args(argv)
    import plain_loop

    sizes = {"batch": 64, "d_in": 1024, "hidden": 128, **plain_loop.parse_sizes(args.size)}
    plain_loop.pin_thread_env(args.threads)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    with tf.device("/CPU:0"):
        built = plain_loop.load_plugin(str(LOOP)).build("/CPU:0", **sizes)
    run = plain_loop.step_runner(built, lambda loss: loss.numpy())

    def block() -> float:
        run(20)
        started = time.perf_counter()
        run(args.steps)
        return (time.perf_counter() - started) / args.steps

    placements = {
        "thread": lambda: in_thread(block),
        "top": block,
        **{f"short-{n}": (lambda n=n: short(n, block)) for n in (10, 20)},
        **{f"long-{n}": (lambda n=n: long(n, block)) for n in (5, 10, 20)},
    }
    times = {name: [] for name in placements}
    names = list(placements)
    for k in range(args.rounds):
        for name in names if k % 2 == 0 else reversed(names):
            times[name].append(placements[name]())
    base = statistics.median(times["thread"])
    for name, values in times.items():
        median = statistics.median(values)
        print(
            json.dumps(
                {
                    "placement": name,
                    "ms_per_step": round(1e3 * median, 4),
                    "ratio_to_thread": round(median / base, 3),
                    "blocks_ms": [round(1e3 * v, 3) for v in values],
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
