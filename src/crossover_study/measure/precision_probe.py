"""The step in fp32, for a step whose reduced precision this CPU only emulates.

A PyTorch step that runs its products under ``torch.autocast`` in bfloat16 or float16 on
a CPU without native products for that precision (``step_flops_emulated``,
:mod:`crossover_study.core.cpu_flags`) pays for conversions and gains no arithmetic. The
remedy on the CPU is the same step without autocast. :func:`fp32_columns` measures it
after the point's timed blocks and its count (never inside them): the step as written and
the step with every ``torch.autocast`` region switched off (:func:`autocast_off`) in
alternating blocks of the point's length, one warm-up pair and then
:data:`ROUNDS` rounds, the order swapped every round, as the study pairs its variants
(:mod:`crossover_study.measure.pairing`); the speed-up and its 95 % interval are
:func:`~crossover_study.measure.pairing.paired_speedup`'s.

The fp32 step computes the same program at a higher precision: its losses differ from
the reduced-precision ones by the rounding the user chose, which is why it is a probe
here, not a variant the same-program check would refuse.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Iterator

from crossover_study.measure.harness import time_block
from crossover_study.measure.pairing import paired_speedup

#: Rounds of the paired probe (the fewest the interval needs, for a step that may take
#: seconds in emulated bf16).
ROUNDS = 3


@contextlib.contextmanager
def autocast_off() -> Iterator[None]:
    """Every ``torch.autocast`` region entered inside the block runs with autocast
    disabled (``torch.autocast``, ``torch.amp.autocast`` and ``torch.cpu.amp.autocast``
    are one class, whose ``__enter__`` reads its ``_enabled``; PyTorch 2.x's
    ``torch/amp/autocast_mode.py``): the step's code is unchanged, its products run in
    the tensors' own dtype."""
    import torch

    cls = torch.amp.autocast_mode.autocast
    original = cls.__enter__

    def enter(self):
        self._enabled = False  # noqa: SLF001 - the flag autocast's own __enter__ reads
        return original(self)

    cls.__enter__ = enter
    try:
        yield
    finally:
        cls.__enter__ = original


def fp32_columns(workload, steps_per_block: int, thread=None) -> dict:
    """``fp32_step_s`` (the step without autocast, median seconds per step),
    ``fp32_speedup`` and its 95 % interval ``fp32_speedup_low``/``_high`` (the step as
    written over the fp32 step, paired: > 1 where fp32 is faster). Empty where the probe
    failed (a line on stderr, the job's log, says why): it never fails a point."""
    k = max(1, int(steps_per_block))

    def as_written() -> float:
        return time_block(workload, k, time.perf_counter, thread=thread) / k

    def fp32() -> float:
        with autocast_off():
            return time_block(workload, k, time.perf_counter, thread=thread) / k

    try:
        as_written(), fp32()  # warm-up: the fp32 path's first blocks allocate afresh
        written, plain = [], []
        for r in range(ROUNDS):
            for member in (0, 1) if r % 2 == 0 else (1, 0):
                (plain if member else written).append(fp32() if member else as_written())
        ratio, low, high = paired_speedup(written, plain)
    except Exception as exc:  # noqa: BLE001 - a probe, never the point's measurement
        print(f"fp32 probe: not measured ({type(exc).__name__}: {exc})", file=sys.stderr)
        return {}
    return {
        "fp32_step_s": statistics.median(plain),
        "fp32_speedup": ratio,
        "fp32_speedup_low": low,
        "fp32_speedup_high": high,
    }
