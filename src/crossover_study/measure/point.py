"""Time one point of a measuring job: its row's columns, or the failure it became.

:func:`measure_point` runs a point's program under the timing harness inside the
point's float precision; any exception it raises (out of memory, a plug-in that does
not build, the job's point deadline) becomes an ``oom`` or ``error`` row instead of
ending the job (:func:`crossover_study.measure.runner.run_group` calls it once per point).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import sys
import sysconfig
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from crossover_study.core import errors, paths, step_thread
from crossover_study.core.host_load import contention_share, wait_until_quiet
from crossover_study.core.paths import portable_path
from crossover_study.core.progress import one_line
from crossover_study.core.step_thread import StepThread
from crossover_study.measure import frameworks, input_pipeline, precision_probe
from crossover_study.measure import pairing as pairs
from crossover_study.measure.attribution import attribution_columns
from crossover_study.measure.harness import Partner, measure
from crossover_study.measure.heap import heap_columns
from crossover_study.measure.same_program import same_program_columns
from crossover_study.measure.watchdog import PointDeadlineExceeded, stopped_where
from crossover_study.stepmodel import counts as step_counts
from crossover_study.stepmodel import replay as step_replay
from crossover_study.stepmodel.timing import rates_stack
from crossover_study.study import cases
from crossover_study.study.applicability import NotApplicable
from crossover_study.study.job_limits import ContentionPolicy
from crossover_study.study.points import TimingPolicy
from crossover_study.study.spec import PointSpec
from crossover_study.workloads import Unavailable, precision


@dataclass
class Pairing:
    """How one point is paired with the step as written (:mod:`crossover_study.measure.pairing`).

    ``partner``: the eager workload a variant's timed blocks are interleaved with;
    ``alone``: why a variant is measured alone instead (its row's ``interleaved`` False
    and ``interleaved_reason``); ``keep``: an eager point whose variants follow at its
    size, whose built workload :func:`measure_point` then leaves open in ``kept`` (the
    caller closes it) instead of closing it."""

    partner: Partner | None = None
    alone: str | None = None
    keep: bool = False
    kept: Partner | None = None


def deadline_row(exc: PointDeadlineExceeded, import_s, device_init_s, started) -> dict:
    """The columns of a point ended at its deadline (stage 1 of
    :mod:`crossover_study.measure.watchdog`): ``status`` ``error``, a ``message`` naming the
    deadline and where the point stopped, ``import_s`` and ``device_init_s`` as given
    (seconds) and ``measured_s``: seconds since ``started`` (a ``time.perf_counter()``
    reading)."""
    return {
        "status": "error",
        "message": f"{exc}, in {stopped_where(exc)}; every thread's stack is in the job log",
        "import_s": import_s,
        "device_init_s": device_init_s,
        "measured_s": time.perf_counter() - started,
    }


def _compile_cache_text(workload) -> str | None:
    """The workload's torch.compile cache hits and misses as JSON (None: not compiled)."""
    counts = workload.compile_cache() if hasattr(workload, "compile_cache") else None
    return None if counts is None else json.dumps(counts, sort_keys=True)


def measure_point(
    point: PointSpec,
    policy: TimingPolicy,
    import_s: float,
    device_init_s: float,
    threads: int = 1,
    contention: ContentionPolicy | None = None,
    pairing: Pairing | None = None,
) -> dict:
    """Time one point; exceptions become ``status=oom`` or ``status=error`` rows.

    Pairing (``pairing``; None: a point timed alone, no paired columns): a variant with
    a ``partner`` is timed in rounds interleaved with the step as written and its row
    gets :func:`pairing.paired_columns` (``speedup`` = eager / variant per round, median
    and 95 % interval); one with ``alone`` gets ``interleaved`` False and the reason; an
    eager point with ``keep`` leaves its built workload in ``pairing.kept`` when ok.

    ``cold_start_s`` = ``device_init_s`` (once per process, see
    :func:`frameworks.initialise_device`) + this point's model and data placement (for
    ``ddp`` also starting the follower processes and the process group). ``threads``
    are the job's CPU threads (replicas on the CPU share them).

    Replica columns: ``samples_per_s`` = ``global_batch / step_time_s`` for every ok
    row; for a workload with replicas (``replica_info``), ``allreduce_s`` (one
    all-reduce of the step's gradients measured alone after the timed blocks) and
    ``allreduce_share`` = ``allreduce_s / step_time_s``. The workload's ``close`` (the
    ddp followers) runs whatever happens.

    Precision: the point runs inside :func:`precision.point_precision` (TF32 allowed
    for the ``tf32`` variant only, the process's pinned fp32 restored afterwards, also
    when it fails); a point whose workload was built (``ok``, ``oom``, ``error``) gets
    ``precision`` and ``precision_settings`` read back from the framework inside that
    context, after the measurement (:func:`precision.row_columns`). A point that never
    ran (``not_applicable``, ``unavailable``) leaves them empty.

    Contention (``contention``; None: not checked, the three columns empty): after the
    timed blocks, when other work took more than ``contention.share`` of the job's
    ``threads`` CPUs (:func:`host_load.contention_share` of ``host_cpus_others``), the
    point waits for a quiet machine (at most ``contention.wait_s``, and what is left of
    the job's ``contention.job_wait_s``) and, once quiet, is measured once more (the
    whole harness, on the built workload; the second measurement replaces the first,
    cold start and first step kept from the first). Columns ``contended`` (still
    contended: flagged, with a ``message`` clause), ``contention_wait_s`` (seconds
    waited) and ``remeasured``; :func:`_unless_contended`.

    A point ended at the job's point deadline (:class:`watchdog.PointDeadlineExceeded`,
    raised inside it) is an ``error`` row naming the deadline and where it stopped; a
    program that calls ``sys.exit`` gives an ``error`` row naming the call
    (:func:`_exit_row`), and the job goes on.

    Threads: ``threads_timed`` are the intra-op threads in effect right after the timed
    blocks (:func:`frameworks.threads_in_effect`); a program that set its own
    (``torch.set_num_threads(16)`` in a plug-in's ``build``) was timed with those, and
    its row says so (``threads_changed``, a ``message`` clause); the job's threads are
    pinned again after the point (:func:`frameworks.restore_threads`).

    ``point_wall_s``: wall seconds of this call, everything the point cost the job
    (set-up, warm-up, timed blocks, checks, counts, replays, attribution, waits).
    """
    with precision.point_precision(point.framework, point.variant):
        started = time.perf_counter()
        try:
            row = _measure_point(
                point, policy, import_s, device_init_s, threads, contention, pairing
            )
        except PointDeadlineExceeded as exc:  # the job's point deadline (watchdog)
            row = deadline_row(exc, import_s, device_init_s, started)
        finally:
            frameworks.restore_threads(point.framework, threads)
        row["point_wall_s"] = time.perf_counter() - started
        if row["status"] in ("ok", "oom", "error"):
            row.update(precision.row_columns(point.framework, point.device))
    return row


#: Folders an installed package's path runs through; a frame there is named from the
#: package on (``keras/src/trainers/trainer.py``), never by the machine's folders.
PACKAGE_FOLDERS = ("site-packages", "dist-packages")


def frame_path(filename: str) -> str:
    """How an error row names a source file: from the package on for an installed
    package (``keras/src/...``, after ``site-packages/``), relative to the standard
    library (``importlib/__init__.py``), to the repository root
    (``src/crossover_study/...``) or to the working directory, else its file name
    (a plug-in outside both); a name in angle brackets (``<frozen importlib._bootstrap>``)
    as it is. Never an absolute path."""
    if filename.startswith("<"):
        return filename
    parts = Path(filename).parts
    for folder in PACKAGE_FOLDERS:
        if folder in parts:
            last = len(parts) - 1 - parts[::-1].index(folder)
            return Path(*parts[last + 1 :]).as_posix()
    stdlib = [sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib")]
    return portable_path(filename, [*stdlib, paths.REPO_ROOT, Path.cwd()])


def raised_where(exc: BaseException, plugin_file: str | Path | None = None) -> str | None:
    """Where ``exc`` was raised, for its error row: ``"raised at FILE:LINE in FUNCTION"``
    (the innermost frame of its traceback) and, when the traceback passes through the
    plug-in file ``plugin_file`` elsewhere, ``"; plug-in: FILE:LINE in FUNCTION"`` (the
    innermost frame there); ``"raised in the plug-in at ..."`` when the innermost frame
    is the plug-in's. Files are named by :func:`frame_path` (no machine path). None for
    an exception without a traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return None

    def named(frame) -> str:
        return f"{frame_path(frame.filename)}:{frame.lineno} in {frame.name}"

    mine = None
    if plugin_file is not None:
        target = os.path.realpath(plugin_file)
        mine = next((f for f in reversed(frames) if os.path.realpath(f.filename) == target), None)
    if mine is frames[-1]:
        return f"raised in the plug-in at {named(mine)}"
    where = f"raised at {named(frames[-1])}"
    return where if mine is None else f"{where}; plug-in: {named(mine)}"


def _plugin_file(point: PointSpec) -> Path | None:
    """The plug-in file of ``point``'s case; None for a seed (or a case not registered)."""
    try:
        case = cases.get(point.case)
        return None if case.builtin else case.plugin_file(point.framework)
    except (KeyError, ValueError):
        return None


#: The most characters of an exception's first line a row's message keeps.
ERROR_LINE_CHARS = 240


def error_line(exc: BaseException) -> str:
    """``exc`` in one line: its type as the traceback names it and the first non-empty
    line of its text, at most :data:`ERROR_LINE_CHARS` characters, cut at the end
    (``torch._dynamo.exc.Unsupported: Attempted to call function marked as skipped``).
    The rest of a long message (PyTorch's and TensorFlow's run to dozens of lines) is
    in the job's log with the traceback."""
    kind = type(exc)
    name = kind.__qualname__
    if kind.__module__ not in ("builtins", "__main__"):  # named as a traceback names it
        name = f"{kind.__module__}.{name}"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return one_line(f"{name}: {lines[0]}" if lines else name, ERROR_LINE_CHARS)


def _error_row(exc: BaseException, point: PointSpec, import_s, device_init_s, started) -> dict:
    """The row of ``point``, whose program raised ``exc``: ``oom`` for an out-of-memory
    error (:func:`frameworks.is_oom`), else ``error``. ``message`` is the exception's own
    line (the last line of its traceback) followed by where it was raised
    (:func:`raised_where`, in parentheses), at most 2 000 characters (the exception's
    text is shortened from its start, where it was raised is kept). The whole traceback
    goes to ``sys.stderr`` (the job's log: the ``measure`` rule's script and
    :func:`crossover_study.measure.job.measure_job` point it there), under a line naming
    the point."""
    status = "oom" if frameworks.is_oom(exc) else "error"
    text = error_line(exc)
    where = raised_where(exc, _plugin_file(point))
    suffix = "" if where is None else f" ({where})"
    print(f"{point.key()}: {status}, the exception's traceback:", file=sys.stderr)
    traceback.print_exception(exc, file=sys.stderr)
    sys.stderr.flush()
    return {
        "status": status,
        "message": text + suffix[:2000],
        "import_s": import_s,
        "device_init_s": device_init_s,
        "measured_s": time.perf_counter() - started,
    }


def _exit_row(exc: SystemExit, point: PointSpec, import_s, device_init_s, started) -> dict:
    """The row of ``point``, whose program called ``sys.exit`` (``exit``, ``quit``: a
    :class:`SystemExit` raised in the point): ``error``, its ``message`` naming the call
    with its argument (at most 200 characters of it) and where it was made
    (:func:`raised_where`), e.g. ``the program called sys.exit(3) (raised in the plug-in
    at mine.py:9 in step)``; the whole traceback in the job's log (:func:`_error_row`).
    Recorded so that the job goes on with its next point instead of ending."""
    row = _error_row(exc, point, import_s, device_init_s, started)
    where = raised_where(exc, _plugin_file(point))
    row["message"] = (
        f"the program called sys.exit({repr(exc.code)[:200]}), which would have ended the "
        "measuring job; recorded as this point's error" + (f" ({where})" if where else "")
    )
    return row


class _JobWait:
    """Seconds this measuring process (one job) has waited for a quiet machine, so that
    a machine busy throughout costs at most ``ContentionPolicy.job_wait_s`` per job."""

    waited_s = 0.0


def _unless_contended(m, workload, policy, contention, threads, partner=None, thread=None) -> tuple:
    """``(measurement, columns)`` of a point timed as ``m``: when other work took more
    than ``contention.share`` of the job's CPUs, wait for a quiet machine (bounded per
    point and per job) and, once quiet, measure again (``measure(..., built=True)``;
    cold start, first step and its traces kept from ``m``, ``measured_s`` summed with
    the wait; in ``thread``, the point's step thread, where it has one). Columns
    ``contended``, ``contention_wait_s``, ``remeasured`` and
    ``contention_text`` (the message clause, None when not contended). After the timed
    blocks, never inside them."""
    if contention is None:
        return m, {"contended": None, "contention_wait_s": None, "remeasured": None}
    share = contention_share(m.host_cpus_others, threads)
    if share is None or share <= contention.share:  # None: not known (window < 0.1 s)
        known = None if share is None else False
        return m, {"contended": known, "contention_wait_s": 0.0, "remeasured": False}
    budget = max(0.0, min(contention.wait_s, contention.job_wait_s - _JobWait.waited_s))
    quiet, waited = wait_until_quiet(threads, contention.share, budget) if budget else (False, 0.0)
    _JobWait.waited_s += waited
    first_share, remeasured = share, quiet
    if quiet:
        again = measure(workload, policy, built=True, partner=partner, thread=thread)
        m = dataclasses.replace(
            again,
            cold_start_s=m.cold_start_s,
            first_step_s=m.first_step_s,
            traces_first_step=m.traces_first_step,
            measured_s=m.measured_s + waited + again.measured_s,
        )
        share = contention_share(m.host_cpus_others, threads)
    contended = share is not None and share > contention.share
    text = None
    if contended:
        how = (
            f"measured again after {waited:.0f} s of waiting for a quiet machine, "
            f"other work still took {share:.0%}"
            if remeasured
            else f"waited {waited:.0f} s for a quiet machine in vain (timing.contention_wait_s"
            f"={contention.wait_s:g}, at most {contention.job_wait_s:g} s per job)"
        )
        text = (
            f"measured under contention: other work took {first_share:.0%} of the job's "
            f"{threads} CPU thread(s) while it was timed (timing.contention_share="
            f"{contention.share:g}); {how}; flagged, kept out of the verdicts and remedy "
            "rankings"
        )
    columns = {"contended": contended, "contention_wait_s": waited, "remeasured": remeasured}
    return m, {**columns, "contention_text": text}


def point_policy(policy: TimingPolicy, point: PointSpec) -> TimingPolicy:
    """The job's ``policy`` for ``point``: ``synced`` from its timing (``synced`` or the
    anti-pattern ``unsynced``) and ``fresh_stack`` for the frameworks whose ops capture
    the caller's stack (:data:`step_thread.FRESH_STACK_FRAMEWORKS`)."""
    return dataclasses.replace(
        policy,
        synced=point.timing == "synced",
        fresh_stack=point.framework in step_thread.FRESH_STACK_FRAMEWORKS,
    )


def _measure_point(
    point, policy, import_s, device_init_s, threads, contention=None, pairing=None
) -> dict:
    """:func:`measure_point` without the precision context and columns."""
    started = time.perf_counter()
    pairing = pairing or Pairing()
    kept = False
    try:
        workload = frameworks.make_workload(point, threads)
    except NotApplicable as reason:
        return {"status": "not_applicable", "message": str(reason), "import_s": import_s}
    except (errors.DeviceMissingError, Unavailable) as reason:
        return {"status": "unavailable", "message": str(reason), "import_s": import_s}
    except SystemExit as exc:  # sys.exit() while importing or building: the point's end only
        return _exit_row(exc, point, import_s, device_init_s, started)
    except Exception as exc:  # noqa: BLE001 - a plug-in that fails to import or build
        return _error_row(exc, point, import_s, device_init_s, started)
    policy = point_policy(policy, point)
    # One step thread for everything of the point that runs steps it times or screens:
    # one shallow stack and one malloc arena (harness.measure).
    thread = StepThread() if policy.fresh_stack else None
    try:
        # A derived variant of a plug-in's step is compared with the step as written
        # (measure.same_program) outside the timed blocks: TensorFlow's before them (a
        # step that cannot be traced is not_applicable), torch.compile's after the row.
        same = same_program_columns(point, workload, "before")
        partner = pairing.partner
        m = measure(workload, policy, partner=partner, thread=thread)
        # What the timed blocks ran with: a program may set its own threads.
        threads_timed = frameworks.threads_in_effect(point.framework)
        # Contention: after the timed blocks; waits and measures once more if it must.
        m, contended = _unless_contended(m, workload, policy, contention, threads, partner, thread)
        # Where the step's time goes: one extra block, profiled after the timed ones.
        attributed = attribution_columns(point, workload, m)
        # The input pipeline alone (no step): the pace at which the host makes batches.
        attributed.update(input_pipeline.pipeline_columns(workload))
        screen = functools.partial(heap_columns, point, workload, m)  # a fresh heap's faults
        attributed.update(screen() if thread is None else thread.call(screen))
        info = workload.replica_info() if hasattr(workload, "replica_info") else {}
        # After the timed blocks and the loss read back: counting never changes them.
        # One count, then the replays of the shapes new to the job (step_replay caches
        # the others); the rates the model prices the rest at are the rates job's.
        counted = time.perf_counter()
        counts = step_counts.count_point(workload, point.framework, point.device, m.steps_per_block)
        replayed = time.perf_counter()
        with rates_stack(point.framework):  # priced from the stack the step is timed from
            counts.update(step_replay.replay_columns(counts, point.framework, point.device))
        counts["count_s"] = replayed - counted
        counts["replay_s"] = time.perf_counter() - replayed
        if counts.get("step_flops_emulated") and point.framework == "torch":
            # The CPU's remedy for a precision it emulates: the same step in fp32, paired.
            attributed.update(precision_probe.fp32_columns(workload, m.steps_per_block, thread))
    except NotApplicable as reason:  # known once a plug-in's builder said what it built
        return {"status": "not_applicable", "message": str(reason), "import_s": import_s}
    except SystemExit as exc:  # sys.exit() in the step: this point's error, not the job's end
        return _exit_row(exc, point, import_s, device_init_s, started)
    except Exception as exc:  # noqa: BLE001 - any failure of one point is recorded
        return _error_row(exc, point, import_s, device_init_s, started)
    else:
        if pairing.keep:  # the partner of this size's variants: closed by the caller
            pairing.kept = Partner(workload, m.steps_per_block, pairs.order_seed(point.key()))
            kept = True
    finally:
        if thread is not None:
            thread.close()
        close = getattr(workload, "close", None)
        if close is not None and not kept:
            close()
    retraced = None if m.traces_timed is None else m.traces_timed > 0
    nonfinite = not math.isfinite(m.final_loss) if m.final_loss is not None else None
    has_batch = "batch" in point.sizes
    global_batch = info.get("global_batch", point.global_batch() if has_batch else None)
    allreduce_s = info.get("allreduce_s")
    messages = []
    if retraced:
        messages.append(f"{m.traces_timed} trace(s) or recompilation(s) inside the timed blocks")
    contention_text = contended.pop("contention_text", None)
    if contention_text:
        messages.append(contention_text)
    threads_changed = None if threads_timed is None else threads_timed != threads
    if threads_changed:
        messages.append(
            f"timed with {threads_timed} CPU threads, not the job's {threads}: the program "
            "set its own (torch.set_num_threads?); flagged, the job's threads are set again "
            "for its next point"
        )
    if nonfinite:
        messages.append(
            f"the loss is {m.final_loss} after the timed blocks: the program diverged, so "
            "its steps computed on NaN/inf (flagged, not a speed of the working program)"
        )
    row = {
        "status": "ok",
        "message": "; ".join(messages) or None,
        "nonfinite_loss": nonfinite,
        "step_time_s": m.step_time_s,
        "step_time_iqr_s": m.step_time_iqr_s,
        "noisy": m.is_noisy(policy.noise_threshold),
        "block_step_times_s": json.dumps(m.block_step_times_s),
        "steps_per_block": m.steps_per_block,
        "n_blocks": len(m.block_step_times_s),
        "warmup_steps": m.warmup_steps,
        "steps_per_call": workload.steps_per_call,
        "loss_read_every": workload.loss_read_every,
        "validates_each_epoch": bool(getattr(workload, "validation", False)),
        "fit_epochs_per_iterator": (
            workload.fit_epochs_per_iterator()
            if hasattr(workload, "fit_epochs_per_iterator")
            else None
        ),
        "kernel": workload.kernel() if hasattr(workload, "kernel") else None,
        "compile_cache": _compile_cache_text(workload),
        "timer_overhead_s": m.timer_overhead_s,
        "sync_check": m.sync_check,
        "sync_check_long_s": m.sync_check_long_s,
        "sync_check_steps": m.sync_check_steps,
        "host_load_start": m.host_load_start,
        "host_load_end": m.host_load_end,
        "host_cpus_others": m.host_cpus_others,
        **contended,
        "threads_timed": threads_timed,
        "threads_changed": threads_changed,
        "step_page_faults": m.page_faults_per_step,
        "traces_first_step": m.traces_first_step,
        "traces_warmup": m.traces_warmup,
        "traces_timed": m.traces_timed,
        "retraced": retraced,
        "first_step_s": m.first_step_s,
        "cold_start_s": device_init_s + m.cold_start_s,
        "device_init_s": device_init_s,
        "import_s": import_s,
        "measured_s": m.measured_s,
        "final_loss": m.final_loss,
        "replicas": info.get("replicas", point.replicas),
        "scaling": info.get("scaling", point.scaling),
        "global_batch": global_batch,
        "samples_per_s": None if global_batch is None else global_batch / m.step_time_s,
        "threads_per_replica": info.get("threads_per_replica"),
        "replica_devices": info.get("replica_devices"),
        "allreduce_s": allreduce_s,
        "allreduce_share": None if allreduce_s is None else allreduce_s / m.step_time_s,
        "grad_bytes": info.get("grad_bytes"),
        **counts,
    }
    if m.partner_block_step_times_s is not None:
        row.update(pairs.paired_columns(m.partner_block_step_times_s, m.block_step_times_s))
    elif pairing.alone is not None:
        row.update(pairs.alone_columns(pairing.alone))
    # After the row's compile columns were read: the check's compilation is not the point's.
    same = same or same_program_columns(point, workload, "after")
    return {**row, **attributed, **same}
