"""The price of a minor page fault as a framework's ops take them
(:func:`page_fault`), and the faults one call of a replayed shape takes
(:func:`faults_per_call`).
"""

from __future__ import annotations

from collections.abc import Callable

from crossover_study.stepmodel.timing import BLOCKS, repeated, timed_blocks

#: float32 elements of each mapping of :func:`page_fault` (64 MiB, 16 384 pages): enough
#: that its mmap and munmap are a small part of a call.
FAULT_ELEMENTS = 2**24


def page_fault(fresh: Callable[[], object], reuse: Callable[[], object]) -> dict:
    """Seconds per minor page fault as the job's framework takes them: ``fresh()``
    writes :data:`FAULT_ELEMENTS` float32 into new memory (faulting in every page),
    ``reuse()`` writes as many into memory it keeps; their difference in time per fault
    that ``fresh()`` took (:data:`BLOCKS` blocks of one call each, after one untimed).
    Returns ``{"page_fault_s": {"median", "iqr", "blocks"}}``; ``{}`` where the fresh
    call faulted in fewer than half its pages or the OS counts no faults
    (:func:`mapped_pages` makes the calls).

    Why: a PyTorch step that allocates and frees tensors of a MB or more can fault in
    fresh pages at every step (glibc returns the top of its heap to the kernel), and
    the replays, whose outputs reuse the memory just freed, do not: s000-hjb at batch
    10 000, width 128 took 4 645 faults a step, s004-lstm at batch 128 40 848 (default
    study, 2026-12-04). Written by PyTorch's two threads a fault cost 1.3 to 1.4 µs on
    the 2-core VM, one thread 2.1 µs, a one-byte-a-page write from NumPy with the
    mapping's mmap and munmap 3.4 µs; priced at 3.2 µs the faulting points were
    over-predicted (s004-lstm at batch 128: 1.41). Hand-rolled: two timed writes."""
    import mmap

    faults = faults_per_call(repeated(fresh), lambda: None)
    if faults < FAULT_ELEMENTS * 4 / mmap.PAGESIZE / 2:
        return {}
    fresh_s = timed_blocks(repeated(fresh), lambda: None, faults, 1)
    reuse_s = timed_blocks(repeated(reuse), lambda: None, faults, 1)
    return {
        "page_fault_s": {
            "median": max(fresh_s["median"] - reuse_s["median"], 0.0),
            "iqr": fresh_s["iqr"] + reuse_s["iqr"],
            "blocks": BLOCKS,
        }
    }


def mapped_pages(fill: Callable[[object], None]) -> tuple[Callable[[], None], Callable[[], None]]:
    """``(fresh, reuse)`` for :func:`page_fault`: ``fill(region)`` writes every float32
    of an anonymous mapping of :data:`FAULT_ELEMENTS` float32 (an ``mmap``), fresh:
    into a new mapping, unmapped afterwards; reuse: into one mapping kept.

    Why a mapping of its own and not the framework's allocation: whether a 64 MiB
    tensor gets fresh pages depends on the process's heap. glibc serves it from a free
    block of its heap where one is large enough, and mmaps fresh pages only where none
    is: torch.ones(2**24) faulted 16 385 times a call in some processes and never in
    others, the same code run four times after the job's rates (2-core VM,
    2026-12-04)."""
    import mmap

    size = FAULT_ELEMENTS * 4
    kept = mmap.mmap(-1, size)

    def fresh() -> None:
        region = mmap.mmap(-1, size)
        fill(region)
        region.close()

    return fresh, lambda: fill(kept)


def numpy_fill(region) -> None:
    """Fill ``region`` (a buffer) with float32 ones from NumPy, one thread: the page
    writes of :func:`page_fault` for TensorFlow, whose CPU allocator keeps its large
    blocks (its 64 MiB outputs took 0.05 faults a call on the 2-core VM)."""
    import numpy as np

    np.frombuffer(region, dtype=np.float32).fill(1.0)


#: Calls of a replayed shape after its timed blocks over which
#: :func:`faults_per_call` counts its page faults.
FAULT_CALLS = 3


def faults_per_call(run: Callable[[int], None], sync: Callable[[], None]) -> float:
    """Minor page faults per call of ``run(1)`` over :data:`FAULT_CALLS` calls (0
    where the OS counts none): what a replay's calls faulted in, so that the model
    prices only the step's other faults (a product or element-wise call whose output
    is 32 MiB or more is mmapped afresh every call, in the step as in its replay)."""
    from crossover_study.core.host_load import minor_faults

    before = minor_faults()
    run(FAULT_CALLS)
    sync()
    after = minor_faults()
    return 0.0 if before is None or after is None else (after - before) / FAULT_CALLS
