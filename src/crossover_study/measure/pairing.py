"""A remedy is a ratio: the step as written and a variant timed side by side.

A variant's timed blocks are interleaved with blocks of the step as written (``eager``,
built once per size and kept warm: :class:`crossover_study.measure.harness.Partner`),
one block of each per round in a randomised order, the same number of blocks each, as
Google Benchmark's ``--benchmark_enable_random_interleaving`` does to cut run-to-run
variance. A slow stretch of the machine then slows both sides of a round alike, and the
speed-up is the median of the per-round ratios with a 95 % interval (Student's t over
the rounds, :func:`paired_speedup`), not a ratio of two medians measured minutes apart.

Where interleaving cannot be done (:func:`not_interleaved_reason`) the variant is
measured alone as before, and its row says why (``interleaved`` False,
``interleaved_reason``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
import statistics
from collections.abc import Sequence

from crossover_study.study.spec import REPLICA_VARIANTS, PointSpec

#: The variant every other is paired with: the step as written.
REFERENCE_VARIANT = "eager"

#: Columns a variant's row gets (documented in ``workflow/schemas/timings.schema.yaml``).
PAIRED_COLUMNS = (
    "interleaved",
    "interleaved_reason",
    "paired_rounds",
    "paired_eager_step_s",
    "speedup",
    "speedup_low",
    "speedup_high",
)

#: Why a variant is not timed in the same process as the step as written, by variant.
#: TF32 is switched on process-wide for its point (``workloads.precision``), so the
#: eager blocks interleaved with it would run in TF32 too; ``strategy_step`` runs under
#: a ``tf.distribute`` strategy whose scope is the point's own.
PROCESS_WIDE = {
    "tf32": "TF32 is switched on for the whole process while its point runs, so eager "
    "blocks beside it would not compute fp32",
    "strategy_step": "it runs under its own tf.distribute strategy, which the eager "
    "program does not share",
    "malloc_env": "it runs in a fresh process started with the allocator's environment "
    "(measure.fresh_point), apart from the job's; it is paired there with the eager "
    "program in fresh processes (fresh_point.paired_in_fresh_processes)",
}

#: Confidence level of :func:`paired_speedup`'s interval.
CONFIDENCE = 0.95


def not_interleaved_reason(point: PointSpec) -> str | None:
    """Why ``point`` (a variant other than eager) is measured alone rather than in
    interleaved blocks with the step as written, or None when it is interleaved.

    Not interleaved: replicated points (``ddp``, ``mirrored``, ``mirrored_fit``: their
    follower processes or strategy own the job's CPUs or GPUs), ``unsynced`` timing (its
    blocks end without a sync, so a block of the other program would start while it
    still works), and the variants of :data:`PROCESS_WIDE`. The eager point itself
    returns None (it is the reference)."""
    if point.variant == REFERENCE_VARIANT:
        return None
    if point.replicas > 1 or point.variant in REPLICA_VARIANTS:
        return "a replicated point: its replicas own the job's devices"
    if point.timing != "synced":
        return (
            "unsynced timing: its blocks end without a device sync, so another program's "
            "block would overlap its queued work"
        )
    return PROCESS_WIDE.get(point.variant)


def reference_point(point: PointSpec) -> PointSpec:
    """The eager point ``point`` is paired with: the same case, framework, device,
    sizes, timing and run, variant ``eager``."""
    return dataclasses.replace(point, variant=REFERENCE_VARIANT)


def order_seed(key: str) -> int:
    """A stable seed (int below 2**32) for a point's interleaving order, from its
    :meth:`PointSpec.key`, so a rerun of the point draws the same order."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big")


def interleave_order(rounds: int, members: int, seed: int) -> list[list[int]]:
    """The order of ``members`` programs in each of ``rounds`` rounds: each round a
    random permutation of ``range(members)`` (so every program runs exactly one block a
    round: balanced), drawn from ``random.Random(seed)``. Raises ValueError for
    ``rounds`` or ``members`` under 1."""
    if rounds < 1 or members < 1:
        raise ValueError(f"rounds and members must be at least 1, got {rounds}, {members}")
    rng = random.Random(seed)
    order = []
    for _ in range(rounds):
        one = list(range(members))
        rng.shuffle(one)
        order.append(one)
    return order


def paired_speedup(
    reference_s: Sequence[float], variant_s: Sequence[float]
) -> tuple[float, float, float]:
    """``(median, low, high)`` of the per-round speed-ups ``reference_s[r] /
    variant_s[r]`` (seconds per step of the step as written and of the variant in the same
    round; > 1: the variant is faster): the median of the ratios and a 95 % interval of
    the speed-up from Student's t over the rounds' log ratios (``scipy.stats.ttest_1samp``'s
    ``confidence_interval``, taken back from logs: a ratio and its inverse get mirrored
    intervals), widened where needed to hold the median.

    Why t and not a bootstrap: with the 3 to 5 rounds a point has, a percentile bootstrap
    of the median spans little more than the second-lowest to the second-highest ratio,
    narrower than the spread between two runs of the same variant: it held 1.0 at 25 of
    32 variants that do eager's own work (``benchmarks/remedy_stability.py``, 2026-12-05,
    ``docs/VALIDATION.md``). For so few
    measurements the t distribution is the interval performance evaluation uses (Georges,
    Buytaert and Eeckhout, "Statistically rigorous Java performance evaluation", OOPSLA
    2007, section 3.2: n < 30). With every ratio equal the interval is that ratio. Raises
    ValueError when the two lists differ in length, hold fewer than 3 rounds, or hold a
    time that is not a positive finite number."""
    if len(reference_s) != len(variant_s):
        raise ValueError(f"paired blocks differ in number: {len(reference_s)} and {len(variant_s)}")
    if len(reference_s) < 3:
        raise ValueError(f"a paired speed-up needs at least 3 rounds, got {len(reference_s)}")
    for t in (*reference_s, *variant_s):
        if not (isinstance(t, int | float) and math.isfinite(t) and t > 0):
            raise ValueError(f"a paired block's seconds per step must be positive, got {t!r}")
    ratios = [a / b for a, b in zip(reference_s, variant_s, strict=True)]
    median = statistics.median(ratios)
    if max(ratios) == min(ratios):
        return median, median, median
    from scipy import stats

    logs = [math.log(r) for r in ratios]
    interval = stats.ttest_1samp(logs, 0.0).confidence_interval(CONFIDENCE)
    low, high = math.exp(interval.low), math.exp(interval.high)
    return median, min(low, median), max(high, median)


def paired_columns(reference_s: Sequence[float], variant_s: Sequence[float]) -> dict:
    """The :data:`PAIRED_COLUMNS` of an interleaved variant row: ``interleaved`` True,
    ``paired_rounds``, ``paired_eager_step_s`` (median seconds per step of the eager
    blocks of its rounds), ``speedup`` and its interval (:func:`paired_speedup`)."""
    speedup, low, high = paired_speedup(reference_s, variant_s)
    return {
        "interleaved": True,
        "interleaved_reason": None,
        "paired_rounds": len(reference_s),
        "paired_eager_step_s": statistics.median(reference_s),
        "speedup": speedup,
        "speedup_low": low,
        "speedup_high": high,
    }


def alone_columns(reason: str) -> dict:
    """The :data:`PAIRED_COLUMNS` of a variant row measured alone, saying why."""
    return {
        "interleaved": False,
        "interleaved_reason": reason,
        "paired_rounds": None,
        "paired_eager_step_s": None,
        "speedup": None,
        "speedup_low": None,
        "speedup_high": None,
    }
