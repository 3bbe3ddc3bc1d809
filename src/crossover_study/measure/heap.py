"""The C heap's state as part of the program (issue 51): whether a step would fault in
fresh pages in a user's own fresh process, though the measuring job's process does not.

glibc's malloc adjusts two thresholds as a process frees memory (mallopt(3), "dynamic
mmap threshold"): freeing a block it had served with mmap (at most 32 MiB) raises
``M_MMAP_THRESHOLD`` to the block's size and ``M_TRIM_THRESHOLD`` to twice that. The
measuring job's process has freed a 32 MiB block before its first point
(:func:`crossover_study.measure.frameworks.settle_heap`) and whatever its earlier points
and rates freed, so it keeps up to 64 MiB of freed memory in its heap. A user's fresh
process has raised them only as far as its own frees did: a step that frees 8 MiB
temporaries each step (autocast's bfloat16 copies of a 2048 x 2048 weight) then gives
the top of its heap back to the kernel at the end of each step and faults it in again
at the next (about 13 000 minor page faults a step, 27 ms against 14 ms in a process
that keeps the memory: tests/plugins/torch_autocast_mlp.py at batch 64, hidden 2048, 2
threads, this 2-core VM, 2026-12-05).

:func:`trimmed_heap_faults` is the screen: the step's page faults when, before each
step, the heap has given every free page back to the kernel (``malloc_trim(0)``): the
most a fresh process can map afresh a step, whatever the job's heap holds. Pinning the
thresholds at glibc's defaults is not enough: in the job's process the step's blocks
are served from free memory in the middle of its heap, which is never trimmed (the
autocast MLP took 0 faults a step so in the job's process, 2026-12-05). Where the screened
faults would cost a material share of the step (:func:`needs_users_state`), the point
is timed again in a fresh process (:mod:`crossover_study.measure.fresh_point`): a
step that could fault but does not in a fresh process is then timed twice, never
mistimed. :data:`REMEDY_ENV` is the remedy
the ``malloc_env`` variant measures. Standard library only (``ctypes``); on a C library
without ``malloc_trim`` (macOS, musl) nothing is screened.
"""

from __future__ import annotations

import ctypes
import ctypes.util

from crossover_study.core.host_load import minor_faults

#: The ``malloc_env`` variant's environment: glibc's trim threshold at 512 MiB and its
#: mmap threshold at 256 MiB, read by malloc at the process's start (mallopt(3),
#: ENVIRONMENT: ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``), so that a step's
#: freed temporaries stay in the heap for the next step. The values of issue 51, which
#: took the autocast MLP above from 27 ms and about 13 000 faults a step to 14 ms and 0.
#: A user sets them in the shell that starts training; nothing in the program changes.
REMEDY_ENV: dict[str, str] = {
    "MALLOC_TRIM_THRESHOLD_": str(512 * 2**20),
    "MALLOC_MMAP_THRESHOLD_": str(256 * 2**20),
}

#: A step whose screened faults would cost at least this share of its measured time
#: is timed again in a fresh process (:func:`needs_users_state`): the share at which
#: the answer names page faults (answers.page_faults.FAULT_SHARE).
MATERIAL_SHARE = 0.10
#: ... and that many faults a step at least (4 MiB of 4 KiB pages): the screen is an
#: upper bound (after a trim even a step's small blocks fault once). In the PyTorch
#: fidelity run of 2026-12-05 (docs/VALIDATION.md) every point screened under 1 024
#: (224 to 449) took at most 1 fault a step in a fresh process, while points screened
#: at 1 039 to 3 492 took 0 to 2 097 there (digits-cnn at batch 512: 5.6 to 7.1 ms
#: against 4.6 to 5.2 ms in the job's process).
MIN_FAULTS = 1024
#: Seconds per minor page fault when the job has no measured price
#: (``rate_page_fault_s``): the lowest measured on the 2-core VM (1.3 µs, two threads;
#: :func:`crossover_study.stepmodel.faults.page_fault`), so the screen errs towards
#: timing again.
FALLBACK_FAULT_S = 1.0e-6
#: Calls of the workload's ``run`` the screen counts over, each after a trim.
SCREEN_CALLS = 3


def _malloc_trim():
    """glibc's ``malloc_trim`` as a ctypes function, or None (another C library)."""
    import platform

    try:
        if platform.libc_ver()[0] != "glibc":
            return None
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        func = libc.malloc_trim
    except (OSError, AttributeError, ValueError):
        return None
    func.argtypes = [ctypes.c_size_t]
    func.restype = ctypes.c_int
    return func


def trimmed_heap_faults(workload, calls: int = SCREEN_CALLS) -> float | None:
    """Minor page faults per step of ``workload`` (built and warm: after its timed
    blocks) when the C heap has given its free pages back to the kernel before each
    call (glibc's ``malloc_trim(0)``, which also releases free pages inside the heap,
    every arena): the pages a step's allocations touch afresh, the most a fresh process
    can fault in a step. ``calls`` calls of ``run(steps_per_call)``, each after a trim,
    counted (``sync`` included). None where glibc's ``malloc_trim`` or the fault count
    is missing. Never inside a timed block."""
    trim = _malloc_trim()
    if trim is None or minor_faults() is None:
        return None
    per_call = max(1, int(getattr(workload, "steps_per_call", 1) or 1))
    faults = 0
    for _ in range(calls):
        trim(0)
        before = minor_faults()
        workload.run(per_call)
        workload.sync()
        faults += minor_faults() - before
    return faults / (per_call * calls)


#: Seconds the screen may take at most (its calls, each one of the workload's ``run``
#: calls: a Keras fit program's is a whole epoch); at least one call is counted.
SCREEN_BUDGET_S = 0.5
#: A point whose one call takes longer than this many seconds is not screened (a Keras
#: fit epoch of several seconds: TensorFlow's CPU allocator keeps its large blocks, its
#: steps took no faults in the job's or a fresh process, stepmodel/faults.py).
SCREEN_MAX_CALL_S = 1.0


def heap_columns(point, workload, m=None) -> dict:
    """The row's ``trimmed_page_faults`` (:func:`trimmed_heap_faults`) for a point on
    the CPU, over as many calls as fit :data:`SCREEN_BUDGET_S` at the measured step
    time (``m``, the harness's :class:`Measurement`; 1 to :data:`SCREEN_CALLS`); None
    elsewhere (a device's step keeps its tensors in the device's own allocator), for a
    replicated point (its replicas are other processes) and where one call takes more
    than :data:`SCREEN_MAX_CALL_S`."""
    if point.device != "cpu" or point.replicas != 1:
        return {"trimmed_page_faults": None}
    calls = SCREEN_CALLS
    step_s = getattr(m, "step_time_s", None)
    if step_s:
        call_s = step_s * max(1, int(getattr(workload, "steps_per_call", 1) or 1))
        if call_s > SCREEN_MAX_CALL_S:
            return {"trimmed_page_faults": None}
        calls = max(1, min(SCREEN_CALLS, int(SCREEN_BUDGET_S / call_s)))
    return {"trimmed_page_faults": trimmed_heap_faults(workload, calls)}


def needs_users_state(row: dict, fault_s: float | None) -> bool:
    """Whether an ``ok`` row measured in the job's process must be timed again in a
    fresh process: its step's faults after a trim of the heap (``trimmed_page_faults``)
    number :data:`MIN_FAULTS` or more and, priced at ``fault_s`` seconds each (the job's
    measured ``rate_page_fault_s``; :data:`FALLBACK_FAULT_S` without one), cost at least
    :data:`MATERIAL_SHARE` of its step time.

    Also where the job's process faulted as much itself: how many faults a step takes
    depends on the process's whole allocation history, not only on the step. The same
    plain loop of tests/plugins/torch_heap_churn.py (batch 64, 32 MB) took 16 352 faults
    a step in one fresh process and 8 570 in the next, and a one-point measuring job
    16 353 (2-core VM, 2026-12-05): a step that can fault materially is timed in the
    state its user's process has, a fresh one, never in the job's."""
    if row.get("status") != "ok":
        return False
    screened = row.get("trimmed_page_faults")
    step = row.get("step_time_s")
    if screened is None or not step:
        return False
    price = fault_s if fault_s and fault_s > 0 else FALLBACK_FAULT_S
    return screened >= MIN_FAULTS and screened * price >= MATERIAL_SHARE * step
