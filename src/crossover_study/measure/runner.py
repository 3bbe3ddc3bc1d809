"""Measure a group of points (one case × framework × device) in one process.

Framework import and process start are paid once per group, not once per point. Each
finished point is appended to a journal (JSON lines, flushed and fsynced:
:mod:`crossover_study.measure.journal`), so a crash or ``kill -9`` loses at most the point in
flight, and a rerun measures only what is missing. One point is timed by
:func:`crossover_study.measure.point.measure_point`. The group's CSV is written atomically (temporary file + rename)
at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil

from crossover_study.core import errors
from crossover_study.core import origin as provenance
from crossover_study.core.files import write_csv_atomic
from crossover_study.core.origin import git_state, placement
from crossover_study.core.progress import point_line
from crossover_study.measure import device_probe, frameworks, gpu_state
from crossover_study.measure.fresh_point import in_users_state
from crossover_study.measure.journal import MAX_ATTEMPTS, Journal, hold, json_default
from crossover_study.measure.partners import KeptPartner, paired_order, partners_wanted
from crossover_study.measure.point import Pairing, deadline_row, measure_point
from crossover_study.measure.probe import check_cpus_given
from crossover_study.measure.watchdog import (
    PointDeadlineExceeded,
    PointWatchdog,
    ended_at_deadline,
    grace_s,
    hard_message,
)
from crossover_study.stepmodel import rates as step_rates
from crossover_study.study import cases
from crossover_study.study.job_limits import ContentionPolicy
from crossover_study.study.points import TimingPolicy, logical_cpus
from crossover_study.study.programs import program_or_none
from crossover_study.study.spec import PointSpec, timings_columns
from crossover_study.workloads import framework_mismatch, precision

#: The public names.
__all__ = [
    "GroupSpec",
    "run_group",
]


@dataclass(frozen=True)
class GroupSpec:
    """One measuring job: the points of one case × framework × device."""

    case: str
    framework: str
    device: str
    points: tuple[PointSpec, ...]
    threads: int
    policy: TimingPolicy
    missing_device: str  # "skip" or "fail"
    config_hash: str
    #: ``timing.point_deadline_s``: seconds a point may run (None: no deadline).
    point_deadline_s: float | None = None
    #: ``timing.contention_share`` and ``contention_wait_s`` (None: contention not
    #: checked); not part of :meth:`settings`: they change no measurement of a quiet point.
    contention: ContentionPolicy | None = None

    def settings(self) -> str:
        """Fingerprint (12 hex digits) of what a measurement depends on besides the
        point itself: the job's threads, the timing policy, the pinned float
        precision (:data:`precision.PINNED`; rows journaled before precision was pinned
        and recorded do not count) and, for a case of the user's own, the sha256 of its
        plug-in file (an edited plug-in is measured again; the seeds' fingerprint is
        the one it was before plug-ins existed). A journaled row measured under other settings is
        measured again, never reused. The point deadline is not part of it: it changes
        no measurement (a point ended at a shorter deadline is measured again, see
        :func:`run_group`)."""
        fingerprint = {
            "threads": self.threads,
            "policy": dataclasses.asdict(self.policy),
            "precision": precision.PINNED,
        }
        if not cases.get(self.case).builtin:
            fingerprint["workload_sha256"] = cases.workload_provenance(self.case, self.framework)[
                "workload_sha256"
            ]
        text = json.dumps(fingerprint, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def run_group(
    group: GroupSpec,
    journal_path: Path,
    out_csv: Path,
    log: Callable[[str], None] = print,
    job: dict | None = None,
    deadline: float | None = None,
    stacks=None,
) -> list[dict]:
    """Measure every point of ``group`` not yet in the journal; write ``out_csv``.

    Returns the rows written (one per point, in ``group.points`` order). ``job``, when
    given, is filled with what the job's probe record needs: ``gpu_start``, the GPU
    state (:func:`gpu_state.snapshot`) taken after the framework import, before the
    device is touched. Its ``known_missing``, when set, is the rates job's probe record
    that found this device missing on this machine
    (:func:`crossover_study.measure.probe.reused_missing`): the framework is then not
    imported, and every point is ``unavailable`` with that probe's reason. Its ``rates`` (:func:`step_rates.measure_rates`' form, as the
    rates job measured them: :func:`crossover_study.measure.rates_job.read_rates`) go into every
    row's ``rate_*`` columns (:func:`step_rates.row_columns`; empty without them): the
    job measures no rates itself. ``deadline`` (seconds since the epoch, as
    ``time.time()``): a point not yet started when it has passed is not measured; its
    row is ``unavailable`` and says so (not final: a rerun measures it), with
    ``job["deadline_why"]`` as the reason when given (a job ended early by its
    supervisor, :mod:`crossover_study.measure.supervisor`).

    ``group.point_deadline_s`` (:mod:`crossover_study.measure.watchdog`): a point still running
    that many seconds after it started is ended, every thread's stack written to
    ``stacks`` (an open file, default ``sys.stderr``; the job log), and recorded as
    ``error`` naming the deadline; the job goes on with the next point. A point that
    cannot be interrupted (a wait in C/C++) has its process ended a grace period later,
    its error row journaled by the watchdog's helper process: the rerun measures only
    the missing points. A point ended at a deadline is measured again by a job whose
    deadline is longer (or off).

    Order of the job's one-time work: threads pinned, torch.compile's on-disk caches
    pointed at a fresh folder (:func:`frameworks.fresh_compile_cache`, removed at the
    end), the framework imported (``import_s``: from the process's creation), then the
    device probed and initialised on one clock (``device_init_s``: a CUDA probe already
    initialises CUDA, so it is part of the device's cold start). A framework that
    cannot be imported gives ``unavailable`` rows naming the import error.

    Raises :class:`probe.CpusNotGivenError` before anything else when the process may
    run on fewer CPUs than ``group.threads`` (:func:`probe.check_cpus_given`; the
    journal is left as it was). Raises :class:`frameworks.DeviceMissingError` before
    measuring anything when the
    device (or the framework) is missing and ``missing_device`` is ``fail``, and
    :class:`frameworks.DeviceLostError` when a point leaves the device unable to run
    work (a sticky CUDA error): that point is not journaled as done, so a rerun in a
    fresh process measures it again (the process dies at most ``MAX_ATTEMPTS`` times
    on it before it becomes an ``error``).

    A point whose process ended while measuring it is measured again; its own faults
    (a crash inside the step, a device left unusable) count towards ``MAX_ATTEMPTS``,
    ends from outside (SIGKILL, SIGTERM) do not (:mod:`crossover_study.measure.journal`).
    Every row says in ``attempts`` how often its point was started. The journal is
    held for the job's lifetime (:func:`journal.hold`): raises
    :class:`journal.JournalBusy` before anything else when another live process
    measures the same job.
    """
    with hold(journal_path):
        return _held_group(group, journal_path, out_csv, log, job, deadline, stacks)


def _held_group(group, journal_path, out_csv, log, job, deadline, stacks) -> list[dict]:
    """:func:`run_group` once its journal is held."""
    job = {} if job is None else job
    created = psutil.Process().create_time()
    # Before anything is pinned, imported or measured: fewer CPUs than threads fails the
    # job on the node that measures (the machine that planned the workflow is not it).
    cpus = check_cpus_given(group.threads, group.device)
    log(f"{cpus} CPU(s) in this process's affinity for {group.threads} thread(s)")
    frameworks.pin_thread_env(group.threads)
    saved_env = {name: os.environ.get(name) for name in frameworks.COMPILE_CACHE_ENV}
    cache_dir = frameworks.fresh_compile_cache() if group.framework == "torch" else None
    try:
        return _run_group(
            group, journal_path, out_csv, log, job, created, deadline, stacks or sys.stderr
        )
    finally:
        if cache_dir is not None:
            shutil.rmtree(cache_dir, ignore_errors=True)
            for name, value in saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def _import_framework(group: GroupSpec) -> str | None:
    """Import the group's framework (thread pinning, logical CPUs); the reason it cannot
    be imported, or None."""
    try:
        # Logical CPU devices for mirrored replicas must exist before TensorFlow starts.
        frameworks.import_framework(
            group.framework, group.device, group.threads, logical_cpus(group.points, group.device)
        )
    except ImportError as exc:
        return frameworks.not_importable(group.framework, exc)
    return None


def _known_missing(record: dict) -> device_probe.DeviceProbe:
    """The device probe of a job whose device the rates job's probe ``record`` found
    missing on this machine (:func:`crossover_study.measure.probe.reused_missing`): its
    reason, versions and device list; the framework is not imported."""
    seen = ", ".join(record.get("gpus") or record.get("tpus") or []) or "no device"
    return device_probe.DeviceProbe(
        False,
        None,
        record["device_reason"],
        record.get("framework_version"),
        record.get("cuda_build"),
        f"{seen} (the rates job's probe on this machine; not imported again)",
    )


def _run_group(group, journal_path, out_csv, log, job, created, deadline, stacks):
    known = job.get("known_missing")
    not_importable = None if known else _import_framework(group)
    import_s = time.time() - created
    job["gpu_start"] = gpu_start = gpu_state.snapshot()

    init_start = time.perf_counter()
    if known:
        probe = _known_missing(known)
        intra = interop = None
    elif not_importable is None:
        probe = device_probe.probe(group.framework, group.device)
        intra, interop = frameworks.thread_settings(group.framework)
    else:
        probe = device_probe.DeviceProbe(False, None, not_importable, None, None, "not importable")
        intra = interop = None
    device_init_s = None
    if probe.available and (deadline is None or time.time() <= deadline):
        frameworks.initialise_device(group.framework, group.device, lstm=cases.get(group.case).lstm)
        device_init_s = time.perf_counter() - init_start
    # Everything the framework's import and the device's start created lives as long as
    # the process: frozen, a point's gc.collect (frameworks.release_memory) no longer
    # walks it (0.15-0.2 s a point with TensorFlow or PyTorch loaded on the 2-core VM,
    # 2026-12-05; a few µs frozen). The timed blocks run with the collector off anyway.
    gc.freeze()
    journal = Journal(journal_path, group.settings())
    commit, dirty = git_state()
    common = {
        "threads": intra,
        "interop_threads": interop,
        "framework_version": probe.framework_version,
        "cuda_version": probe.cuda_version,
        "python_version": sys.version.split()[0],
        "cpu_model": provenance.cpu_model(),
        "git_commit": commit,
        "git_dirty": dirty,
        "config_hash": group.config_hash,
        "run_id": uuid.uuid4().hex[:12],
        **placement(),
        **cases.workload_provenance(group.case, group.framework),
        **step_rates.row_columns(job.get("rates")),
    }
    log(f"{group.case}/{group.framework}/{group.device}: {probe.visible}; import {import_s:.2f} s")

    if not probe.available and group.missing_device == "fail":
        raise errors.DeviceMissingError(
            f"device {group.device!r} was asked for ({group.case}, {group.framework}) "
            f"but is not visible: {probe.reason}. Set missing_device: skip to record "
            "it as unavailable instead."
        )

    watchdog = (
        PointWatchdog(group.point_deadline_s, stacks, log)
        if group.point_deadline_s is not None
        else None
    )
    job_state = _Job(
        group, journal, common, probe, log, watchdog, gpu_start, deadline, import_s, device_init_s
    )
    job_state.deadline_why = job.get("deadline_why")
    # Points whose process ended in them before go last: one that ends every process
    # from outside (a point the OOM killer takes each time, which is tried again each
    # run) costs no other point its measurement.
    again = [
        journal.attempts(p.key()) > 0 and journal.final_row(p.key()) is None for p in group.points
    ]
    rows: list = [None] * len(group.points)
    partners = KeptPartner(journal, group.threads, partners_wanted(group.points, journal))
    job_state.partners = partners
    try:
        with watchdog or contextlib.nullcontext():
            for i in paired_order(group.points, again):
                rows[i] = _run_point(job_state, group.points[i])
    finally:
        partners.release()
    write_csv_atomic(rows, timings_columns(rows), out_csv)
    return rows


def _measure_again_after_deadline(journal: Journal, key: str, now: float | None) -> float | None:
    """The deadline a kept row of ``key`` was ended at, when the job's deadline
    (``now``; None: none) is longer, so that the point is measured again; else None."""
    ended = journal.ended_at.get(key)
    if ended is None or journal.final_row(key) is None:
        return None
    return ended if now is None or now > ended else None


@dataclass
class _Job:
    """What :func:`_run_group` set up once and every point of the job uses."""

    group: GroupSpec
    journal: Journal
    common: dict
    probe: device_probe.DeviceProbe
    log: Callable[[str], None]
    watchdog: PointWatchdog | None
    gpu_start: dict | None
    deadline: float | None
    import_s: float
    device_init_s: float | None
    #: Points of the job done so far (kept or measured), for the progress lines.
    done: int = 0
    #: Why a point not started by ``deadline`` is not measured (None: the run's deadline).
    deadline_why: str | None = None
    #: The eager workload kept for the variants of its size (set by :func:`_run_group`).
    partners: KeptPartner | None = None

    def progress(self, point: PointSpec, row: dict, kept_from: str | None = None) -> None:
        """Log ``point``'s progress line (:func:`progress.point_line`), counting it
        done."""
        self.done += 1
        self.log(point_line(point, row, self.done, len(self.group.points), kept_from))


def _run_point(job: _Job, point: PointSpec) -> dict:
    """One point of :func:`_run_group`: kept from the journal, or measured and
    journaled; returns its row."""
    group, journal, probe, log = job.group, job.journal, job.probe, job.log
    key = point.key()
    row = journal.final_row(key)
    ended = _measure_again_after_deadline(journal, key, group.point_deadline_s)
    if ended is not None:
        now = group.point_deadline_s
        log(
            f"  {key}: measured again (run {row.get('run_id')} ended it at a point deadline "
            f"of {ended:g} s; the deadline is now {'off' if now is None else f'{now:g} s'})"
        )
        row = None
    if row is not None:
        job.progress(point, row, kept_from=row.get("run_id"))
        return row
    if key in journal.stale and key not in journal.done:
        log(
            f"  {key}: measured again (run {journal.stale[key].get('run_id')} measured it "
            "with other threads, timing or precision settings)"
        )
    base = {
        **point.as_row(),
        **job.common,
        "device_name": probe.device_name,
        "program": program_or_none(point.case, point.framework, point.device, point.variant),
    }
    mismatch = framework_mismatch(point)
    gpu_end = None
    if mismatch is not None:  # decided before the device: never "unavailable"
        row = {**base, "status": "not_applicable", "message": mismatch}
    elif not probe.available:
        row = {**base, "status": "unavailable", "message": probe.reason}
    elif len(journal.faults.get(key, ())) >= MAX_ATTEMPTS:
        faults = journal.faults[key]
        row = {
            **base,
            "status": "error",
            "message": f"the point ended its measuring process {len(faults)} times "
            f"({faults[-1]}); not measured again",
        }
    elif job.deadline is not None and time.time() > job.deadline:
        when = datetime.fromtimestamp(job.deadline, UTC).isoformat(timespec="seconds")
        why = job.deadline_why or f"the run's deadline ({when}) passed before this point"
        row = {**base, "status": "unavailable", "message": f"not measured: {why}"}
    else:
        _say_tried_before(journal, key, log)
        journal.start(key)
        pairing = job.partners.pairing_for(point)
        with journal.recording_crashes():  # a crash in the step: the point's own fault
            row = _measure_with_deadline(job, point, base, pairing)
        job.partners.after_point(point, pairing)
        # Tensors of this point (workloads hold their own bound methods: cycles) are
        # freed before the next point sets up.
        frameworks.release_memory(group.framework, group.device)
        if row["status"] in ("error", "oom"):
            fault = frameworks.device_fault(group.framework, group.device)
            if fault is not None:
                log(f"  {key}: {row['status']} {row.get('message')}")
                if ended_at_deadline(row):  # final: measuring it again would hang again
                    _finish(journal, key, row, job.gpu_start, None, group.point_deadline_s)
                else:  # the point's own fault: counts towards MAX_ATTEMPTS
                    journal.fault(key, f"left {group.device} unable to run work: {fault}")
                raise frameworks.DeviceLostError(
                    f"{key} failed ({row.get('message')}) and left {group.device} unable "
                    f"to run work ({fault}); ending the job so that a fresh process "
                    "measures this point and the rest (the journal keeps the points "
                    "already measured)"
                )
        gpu_end = gpu_state.snapshot()
    _finish(journal, key, row, job.gpu_start, gpu_end, group.point_deadline_s)
    job.progress(point, row)
    return row


def _say_tried_before(journal: Journal, key: str, log) -> None:
    """Log why a point started before without a row is measured again: it ended its
    process itself (counted) or was ended from outside (not counted)."""
    tried, own = journal.attempts(key), journal.faults.get(key, [])
    if tried and key not in journal.done:
        log(
            f"  {key}: measured again (started {tried} time(s) before; "
            + (
                f"its own faults: {len(own)} of {MAX_ATTEMPTS}, last {own[-1]})"
                if own
                else "its process was ended from outside, which does not count)"
            )
        )


def _finish(journal, key, row, gpu_start, gpu_end, point_deadline_s) -> None:
    """Complete ``row`` (GPU state, host load, time) and journal it."""
    row.update(gpu_state.row_columns(gpu_start, gpu_end))
    row["host_load_1m"] = os.getloadavg()[0]  # documented in the schema since a54f30e
    row["utc_time"] = datetime.now(UTC).isoformat(timespec="seconds")
    row.setdefault("attempts", journal.attempts(key))
    journal.finish(key, row, point_deadline_s if ended_at_deadline(row) else None)


def _measure_with_deadline(
    job: _Job, point: PointSpec, base: dict, pairing: Pairing | None = None
) -> dict:
    """``base`` and :func:`measure_point` of ``point`` (already started in the
    journal), under the job's point deadline if it has one. The watchdog's helper gets
    the row it journals should the process have to be ended (stage 2 of
    :mod:`crossover_study.measure.watchdog`); a deadline reached after the point returned keeps
    the measured row."""
    group = job.group

    def here() -> dict:
        return measure_point(
            point,
            group.policy,
            job.import_s,
            job.device_init_s,
            group.threads,
            group.contention,
            pairing,
        )

    def measured() -> dict:  # issue 51: timed again in a fresh process where the heap matters
        return {**base, **in_users_state(point, group, here, base.get("rate_page_fault_s"))}

    if job.watchdog is None:
        return measured()
    hard = {
        **base,
        "status": "error",
        "message": hard_message(group.point_deadline_s),
        "import_s": job.import_s,
        "device_init_s": job.device_init_s,
        "measured_s": group.point_deadline_s + grace_s(group.point_deadline_s),
        **gpu_state.row_columns(job.gpu_start, None),
        "host_load_1m": os.getloadavg()[0],
        "attempts": job.journal.attempts(point.key()),
    }
    key = point.key()
    entry = json.dumps(
        job.journal.done_entry(key, hard, group.point_deadline_s), default=json_default
    )
    row = None
    started = time.perf_counter()
    try:
        with job.watchdog.point(key, job.journal.path, entry):
            row = measured()
    except PointDeadlineExceeded as exc:
        if row is None:  # raised outside measure_point's own handling
            row = {**base, **deadline_row(exc, job.import_s, job.device_init_s, started)}
    return row
