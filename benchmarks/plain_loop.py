"""An independent plain training loop of a plug-in's step, as a user would write it, in
a fresh process: the reference the study's eager point is checked against
(``benchmarks/fidelity.py``, issue 51).

    .venv/bin/python benchmarks/plain_loop.py PLUGIN.py --size batch=64 --size hidden=2048 \
        [--threads 2] [--warmup 20] [--blocks 5] [--block-s 0.2]

It imports nothing of the study but the plug-in's return types
(``crossover_study.plugin``, which imports no framework): the plug-in's ``build`` on
the CPU, the data placed once, 20 warm-up steps, then five timed blocks of the same
number of steps (enough for about ``--block-s`` seconds each, from the warm-up's
speed), the loss read back (``.item()`` / ``.numpy()``) at the plug-in's
``loss_read_every`` cadence. ``TorchStep`` and ``TFStep`` plug-ins; a ``KerasFit`` one
is timed as ``fit`` over whole epochs (``jit_compile=False``, ``steps_per_execution=1``)
divided by its steps. ``fit`` arguments that ``KerasFit`` leaves to the library but a
seed's call sets go in the plug-in module's ``FIT_CALL`` dict (``benchmarks/seed_loops/``):
``steps_per_epoch`` (an epoch is that many steps, not ``ceil(samples / batch)``),
``epochs`` (every ``fit`` call runs exactly that many epochs, the seed's one call, and a
block is whole such calls: s002-iris's 20 epochs of 2 steps) and ``verbose`` (the
progress bar's text goes to an in-memory sink, as the study's job sends it). Threads:
``--threads`` intra-op (and 1 inter-op), set through the environment before the
framework is imported, as the study's job does.

Prints one JSON line: ``step_s`` (median seconds a step over the blocks), ``blocks_s``
(each block's seconds a step), ``steps_per_block``, ``faults_per_step`` (minor page
faults of this process a step over the timed blocks, ``getrusage``), and ``env``: the
``MALLOC_*`` variables this process was started with. Hand-rolled on purpose: it must
not share the harness it checks.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import os
import resource
import statistics
import sys
import time


def _faults() -> int:
    """Minor page faults of this process so far (all threads)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def load_plugin(path: str):
    """The plug-in module at ``path``."""
    spec = importlib.util.spec_from_file_location("plain_loop_plugin", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def step_runner(built, read):
    """``run(n)`` for a TorchStep or a TFStep on the CPU: ``run(n)`` runs n steps as
    returned (plain or a tf.function), reading the loss back with ``read`` (PyTorch's
    ``item``, TensorFlow's ``numpy``) every ``loss_read_every`` steps (its global step
    count kept)."""
    every = built.loss_read_every
    count = [0]

    def run(n: int) -> None:
        for _ in range(n):
            loss = built.step(*built.data)
            count[0] += 1
            if every and count[0] % every == 0:
                read(loss)

    return run


def keras_runner(built, call: dict | None = None):
    """``(run(n), steps a call)`` for a KerasFit: ``run(n)`` is ``fit`` over
    ``ceil(n / steps per epoch)`` epochs (so n rounds up to whole epochs: blocks are
    whole epochs), ``jit_compile=False`` and ``steps_per_execution=1`` as the study's
    eager point pins them. ``call``: the plug-in's ``FIT_CALL`` (module docstring);
    with ``epochs`` in it, ``run(n)`` is ``ceil(n / steps a call)`` calls of that many
    epochs each."""
    call = dict(call or {})
    unknown = sorted(set(call) - {"steps_per_epoch", "epochs", "verbose"})
    if unknown:
        raise SystemExit(f"FIT_CALL: unknown keys {unknown}")
    model = built.model
    model.compile(**{**built.compile, "jit_compile": False, "steps_per_execution": 1})
    samples = built.sample_count() if hasattr(built, "sample_count") else len(built.y)
    per_epoch = call.get("steps_per_epoch") or max(1, math.ceil(samples / built.batch_size))
    fit = dict(built.fit)
    fit["verbose"] = call.get("verbose", 0)
    if "steps_per_epoch" in call:
        fit["steps_per_epoch"] = call["steps_per_epoch"]

    def fit_epochs(epochs: int) -> None:
        sink = contextlib.redirect_stdout(io.StringIO()) if fit["verbose"] else None
        with sink or contextlib.nullcontext():
            model.fit(built.x, built.y, batch_size=built.batch_size, epochs=epochs, **fit)

    if "epochs" not in call:
        return lambda n: fit_epochs(max(1, math.ceil(n / per_epoch))), per_epoch
    per_call = per_epoch * call["epochs"]

    def run(n: int) -> None:
        for _ in range(max(1, math.ceil(n / per_call))):
            fit_epochs(call["epochs"])

    return run, per_call


def parse_sizes(items: list[str]) -> dict[str, int]:
    """``{axis: value}`` from ``--size axis=value`` arguments."""
    sizes = {}
    for item in items:
        name, _, value = item.partition("=")
        sizes[name] = int(value)
    return sizes


def pin_thread_env(threads: int) -> None:
    """OpenMP, MKL and OpenBLAS threads to ``threads`` (before a framework is imported),
    TensorFlow's C++ log quiet."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(threads)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plugin")
    parser.add_argument("--size", action="append", default=[], help="axis=value")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--block-s", type=float, default=0.2)
    parser.add_argument(
        "--no-gc",
        action="store_true",
        help="switch Python's garbage collector off for the warm-up and timed blocks (as "
        "the study's harness does, timeit-like; a user's loop runs with it on)",
    )
    args = parser.parse_args(argv)
    sizes = parse_sizes(args.size)
    pin_thread_env(args.threads)
    module = load_plugin(args.plugin)
    source = open(args.plugin).read()
    per_call = 1
    if "import torch" in source:
        import torch

        torch.set_num_threads(args.threads)
        torch.set_num_interop_threads(1)
        built = module.build(torch.device("cpu"), **sizes)
        run = step_runner(built, lambda loss: loss.item())
    else:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        with tf.device("/CPU:0"):
            built = module.build("/CPU:0", **sizes)
            if type(built).__name__ == "KerasFit":
                run, per_call = keras_runner(built, getattr(module, "FIT_CALL", None))
            else:
                run = step_runner(built, lambda loss: loss.numpy())
    if args.no_gc:
        import gc

        gc.disable()
    run(args.warmup)
    started = time.perf_counter()
    run(per_call)
    one = max(time.perf_counter() - started, 1e-6) / per_call
    steps = max(per_call, per_call * math.ceil(args.block_s / one / per_call))
    blocks = []
    before = _faults()
    for _ in range(args.blocks):
        started = time.perf_counter()
        run(steps)
        blocks.append((time.perf_counter() - started) / steps)
    faults = (_faults() - before) / (steps * args.blocks)
    env = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}
    print(
        json.dumps(
            {
                "step_s": statistics.median(blocks),
                "blocks_s": blocks,
                "steps_per_block": steps,
                "faults_per_step": faults,
                "env": env,
                "gc": not args.no_gc,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
