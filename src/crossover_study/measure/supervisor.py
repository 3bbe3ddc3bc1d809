"""One measuring job as a supervisor and the process that measures: the job ends when its
points are done, whatever the program measured left running or did to its process.

The program a job measures may be a user's (a plug-in): it may leave a thread or a child
process running after its points are done (a non-daemon thread keeps a Python process
from exiting, a child holds the pipes of whoever reads the job's output), end its process
inside a step (``os._exit(0)``, a C library's ``exit``), or take longer than any job
should. So the job's own process (the measure rule's script, ``crossover-study
measure-job``) is a supervisor that measures nothing itself: it holds the job's journal
(:func:`journal.hold`: a second live run of the job is refused) and starts the *worker*,
``crossover-study measure-job --worker`` (:func:`crossover_study.measure.job.measure_job`
in a process of its own), in a session of its own, handing it the journal's lock and
reading its log lines over a pipe:

- When its table and probe record are written, the worker leaves at once with
  ``os._exit`` (no thread the program left running can hold it), and the supervisor
  ends the worker's process group: whatever the program started ends with the job.
- A worker that ends inside a point has that point finished in the journal and a fresh
  worker measures the job's other points (those done are kept): ended with a status of
  its own (``os._exit(0)``), the point gets an ``error`` row naming it here; crashed on
  a fatal signal, the journal holds the crash (:meth:`journal.Journal.recording_crashes`),
  and the point is tried again at most :data:`journal.MAX_ATTEMPTS` times; ended at the
  point deadline by the watchdog's helper (:mod:`crossover_study.measure.watchdog`), that
  helper journals its row. A worker ended from outside (SIGKILL or SIGTERM not its own:
  the OOM killer, a preempted node) leaves its point to a rerun and fails the job, as a
  job's single process did.
- The whole job has a deadline (``timing.job_deadline_s``; left out, the device class's
  runtime's 90 %: :func:`crossover_study.study.job_limits.job_deadline_s`). Past it, or on
  SIGINT (Ctrl-C), SIGTERM or SIGHUP, the worker's group is ended, one last worker that
  measures nothing writes the job's table and probe record from the journal (the points
  not measured are ``unavailable`` rows saying why, which a rerun measures), and the
  job fails with one line (:class:`JobEnded`).

Standard library and the study's floors only: the supervisor never imports a framework.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from crossover_study.core.origin import placement
from crossover_study.measure.journal import (
    CRASH_PREFIX,
    FINAL,
    MAX_ATTEMPTS,
    Journal,
    JournalBusy,
    hold,
)
from crossover_study.study import cases, job_limits
from crossover_study.study import config as study_config
from crossover_study.study import points as study_points
from crossover_study.study.programs import program_or_none

#: Seconds the last worker, which measures nothing, may take to write the table and probe
#: record from the journal (it imports the framework: TensorFlow's import took 10 s on a
#: loaded 2-core machine).
SALVAGE_S = 120.0
#: Seconds to wait, after a worker was killed inside a point, for the watchdog's helper
#: to journal the point's row (it waits up to ``watchdog.GONE_WAIT_S`` for the process
#: to be gone first).
HELPER_WAIT_S = 15.0
#: Signals that end the job early (the worker's group first), and the exit status each
#: gives the job's command (128 + the signal's number, as a shell reports it).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: The source folder of this package, first on the worker's PYTHONPATH (the measure rule
#: runs in a conda env that may not have the package installed).
SRC = Path(__file__).resolve().parents[2]


class JobEnded(RuntimeError):
    """The job ended before its points were all measured (the message: its one line,
    which was also logged): at its deadline, interrupted, or its measuring process failed
    or was ended from outside. ``status``: the exit status of the job's command (1, or
    128 + the signal's number after a signal)."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


class _Signals:
    """While the block runs, :data:`STOP_SIGNALS` are caught instead of ending this
    process (main thread only: elsewhere nothing is installed); ``caught`` names the
    first one caught (None: none)."""

    def __init__(self):
        self.caught: signal.Signals | None = None
        self._old: dict = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._old[sig] = signal.signal(sig, self._catch)
        return self

    def _catch(self, signum, frame) -> None:
        self.caught = self.caught or signal.Signals(signum)

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def _end_group(pgid: int) -> None:
    """SIGKILL to the process group ``pgid`` (a worker's: it leads its own session), if
    any of it is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _exit_text(returncode: int) -> str:
    """How a process ended, from its ``returncode``: ``status 3`` or ``signal SIGKILL``."""
    if returncode >= 0:
        return f"status {returncode}"
    try:
        return f"signal {signal.Signals(-returncode).name}"
    except ValueError:
        return f"signal {-returncode}"


def open_point(journal: Path, offset: int) -> tuple[str | None, str | None, bool]:
    """The point a worker was measuring when it ended, from the journal's lines past byte
    ``offset`` (those it wrote): ``(key, settings, crashed)`` of the last point started
    and not finished there (None, None, False when every one it started was finished),
    ``crashed`` when faulthandler's report of a fatal signal follows its start."""
    key = settings = None
    crashed = False
    try:
        with open(journal, "rb") as fh:
            fh.seek(offset)
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return None, None, False
    for line in lines:
        if key is not None and line.startswith(CRASH_PREFIX):
            crashed = True
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(entry, dict):
            continue
        if entry.get("event") == "start":
            key, settings, crashed = entry.get("key"), entry.get("settings"), False
        elif entry.get("event") in ("done", "fault") and entry.get("key") == key:
            key = settings = None
            crashed = False
    return key, settings, crashed


class _Job:
    """One supervised job: its command line parts, files and points."""

    def __init__(self, config, case, framework, device, batch, threads, files, echo):
        self.config, self.case, self.framework, self.device = config, case, framework, device
        self.batch, self.threads, self.files, self.echo = batch, threads, files, echo
        self.points = study_points.batches(config, case, framework, device)[batch]
        self.journal = Path(files["journal"])
        self.log = None  # the open log, while the job runs

    def say(self, text: str) -> None:
        """One line to the job's log and, when given, to ``echo``."""
        with contextlib.suppress(OSError):  # a full disk: the line is still echoed
            print(text, file=self.log, flush=True)
        if self.echo is not None:
            self.echo(text)

    def command(self, lock_fd: int, control_fd: int, extra: list[str]) -> list[str]:
        """The worker's command line (its config comes on stdin)."""
        files = [f"--{name}={path}" for name, path in self.files.items() if path is not None]
        return [
            sys.executable,
            "-m",
            "crossover_study",
            "measure-job",
            "--worker",
            "--config=-",
            f"--case={self.case}",
            f"--framework={self.framework}",
            f"--device={self.device}",
            f"--batch={self.batch}",
            f"--threads={self.threads}",
            f"--lock-fd={lock_fd}",
            f"--control-fd={control_fd}",
            *files,
            *extra,
        ]

    def run_worker(self, lock_fd: int, extra: list[str], stop) -> tuple[int, dict | None, str]:
        """Start a worker and pass its lines to :meth:`say`'s ``echo`` until it ends or
        ``stop()`` says why it must (then its group is ended at once). Returns its
        return code, its last control message (``{"end": "done"|"failed", ...}``; None
        when it ended without one) and why it was stopped (None: it was not). Its process
        group is ended in every case, so that nothing it started outlives it."""
        read_end, write_end = os.pipe()
        env = {**os.environ}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
        try:
            proc = subprocess.Popen(
                self.command(lock_fd, write_end, extra),
                stdin=subprocess.PIPE,
                stdout=self.log,
                stderr=self.log,
                pass_fds=(lock_fd, write_end),
                start_new_session=True,
                env=env,
            )
        finally:
            os.close(write_end)
        ended, stopped, pending = None, None, b""
        try:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(json.dumps(self.config, default=str).encode())
                proc.stdin.close()
            os.set_blocking(read_end, False)
            with selectors.DefaultSelector() as selector:
                selector.register(read_end, selectors.EVENT_READ)
                while True:
                    if proc.poll() is not None:
                        break
                    stopped = stop()
                    if stopped is not None:
                        break
                    if selector.select(timeout=0.25):
                        pending, ended = self._read(read_end, pending, ended)
        finally:
            _end_group(proc.pid)
            proc.wait()
            pending, ended = self._read(read_end, pending, ended)
            os.close(read_end)
        return proc.returncode, ended, stopped

    def _read(self, fd: int, pending: bytes, ended):
        """Read what the worker sent (JSON lines: ``{"line": ...}`` for ``echo``,
        ``{"end": ...}`` as it leaves); returns the unfinished bytes and its end."""
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if not isinstance(message, dict):
                continue
            if "line" in message and self.echo is not None:
                self.echo(message["line"])
            if "end" in message:
                ended = message
        return pending, ended

    def journal_exit(self, key: str, settings: str | None, returncode: int) -> None:
        """Journal the ``error`` row of the point ``key``, inside which the worker ended
        with status ``returncode`` (the program's own ``os._exit``)."""
        point = next(p for p in self.points if p.key() == key)
        journal = Journal(self.journal, settings)
        row = {
            **point.as_row(),
            **placement(),
            **cases.workload_provenance(self.case, self.framework),
            "python_version": sys.version.split()[0],
            "config_hash": study_points.measurement_hash(self.config, self.case),
            "program": program_or_none(point.case, point.framework, point.device, point.variant),
            "status": "error",
            "message": f"the measuring process ended with {_exit_text(returncode)} inside this "
            "point (os._exit or exit in the program?), before the point returned; the job's "
            "other points were measured in a fresh process",
            "utc_time": datetime.now(UTC).isoformat(timespec="seconds"),
            "attempts": journal.attempts(key),
        }
        journal.finish(key, row)

    def measured(self) -> int:
        """Points of the job's table with a final row (:data:`journal.FINAL`)."""
        try:
            with open(self.files["csv"], newline="") as fh:
                return sum(row.get("status") in FINAL for row in csv.DictReader(fh))
        except OSError:
            return 0


def supervise(
    config: Mapping,
    case: str,
    framework: str,
    device: str,
    batch: int,
    threads: int,
    out_csv: str | Path,
    out_probe: str | Path,
    journal: str | Path,
    log_path: str | Path,
    echo: Callable[[str], None] | None = None,
    deadline: float | None = None,
    rates: str | Path | None = None,
) -> None:
    """Measure batch ``batch`` of ``(case, framework, device)`` of ``config`` as
    :func:`crossover_study.measure.job.measure_job` does (same arguments and files), in
    worker processes under this supervisor (see the module docstring).

    Returns once the job's table ``out_csv`` and probe record ``out_probe`` are written
    with every point measured (or kept from the journal). Raises
    :class:`study_config.ConfigError` for a bad config, IndexError for a batch the group
    does not have, :class:`journal.JournalBusy` when another live process holds the
    journal (nothing measured or written but a line of ``log_path``), and
    :class:`JobEnded` (its one line logged and echoed first) when the job ended early:
    its worker failed (its own ``job failed`` line says why), was ended from outside, or
    the job passed ``timing.job_deadline_s`` seconds or caught SIGINT, SIGTERM or SIGHUP
    (then the table and probe record are written from the journal first)."""
    config = study_config.validate_config(config)
    batches = study_points.batches(config, case, framework, device)
    if not 0 <= batch < len(batches):
        raise IndexError(f"{case}/{framework}/{device} has {len(batches)} batch(es), not {batch}")
    files = {
        "csv": out_csv,
        "probe": out_probe,
        "journal": journal,
        "log": log_path,
        "rates": rates,
    }
    job = _Job(config, case, framework, device, batch, threads, files, echo)
    job_s = job_limits.job_deadline_s(config, device)
    started = time.time()
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log, contextlib.ExitStack() as held:
        job.log = log
        try:
            lock = held.enter_context(hold(journal))
        except JournalBusy as exc:  # a second live run of the job
            job.say(f"job refused: {exc}")
            if echo is None:  # on the console too (Snakemake's), not only in the log
                print(f"job refused: {exc}", file=sys.__stderr__, flush=True)
            raise
        signals = held.enter_context(_Signals())

        def stop() -> str | None:
            if signals.caught is not None:
                return f"was interrupted ({signals.caught.name})"
            if job_s is not None and time.time() - started > job_s:
                return f"ended at its deadline (timing.job_deadline_s={job_s:g} s)"
            return None

        extra = [] if deadline is None else [f"--deadline={deadline}"]
        for _ in range(len(job.points) * (MAX_ATTEMPTS + 1) + 1):
            offset = job.journal.stat().st_size if job.journal.exists() else 0
            code, ended, stopped = job.run_worker(lock.fileno(), extra, stop)
            if stopped is not None:
                _salvage(job, lock.fileno(), stopped, started, signals)
            if ended is not None and ended.get("end") == "done" and code == 0:
                return
            if ended is not None:  # the worker's own failure: it logged its line
                raise JobEnded(f"job failed: {ended.get('why')}")
            key, settings, crashed = open_point(job.journal, offset)
            how = _exit_text(code)
            if key is None:
                _fail(job, f"the measuring process ended with {how} outside any point")
            if code >= 0:
                job.journal_exit(key, settings, code)
                job.say(
                    f"warning: {key}: the measuring process ended with {how} inside this "
                    "point; its error row is journaled and a fresh process measures the "
                    "job's other points"
                )
            elif crashed or _journaled_by_helper(job.journal, offset, key):
                job.say(
                    f"warning: {key}: the measuring process ended with {how} inside this "
                    "point (journaled); a fresh process measures the job's other points"
                )
            else:
                _fail(
                    job,
                    f"the measuring process was ended from outside ({how}) inside {key}; "
                    "a rerun measures that point and the job's other missing points",
                )
        _fail(job, "its measuring processes ended too often; see the log")


def _journaled_by_helper(journal: Path, offset: int, key: str) -> bool:
    """Whether the point ``key`` gets its row from the watchdog's helper, which ended
    the worker at the point deadline and journals the row once it is gone (waits up to
    :data:`HELPER_WAIT_S` for that line)."""
    waited = time.monotonic() + HELPER_WAIT_S
    while time.monotonic() < waited:
        if open_point(journal, offset)[0] != key:
            return True
        time.sleep(0.1)
    return False


def _fail(job: _Job, why: str) -> None:
    """Log and echo ``job failed: why`` and raise :class:`JobEnded` with it."""
    line = f"job failed: {why}"
    job.say(line)
    raise JobEnded(line)


def _salvage(job: _Job, lock_fd: int, why: str, started: float, signals: _Signals) -> None:
    """The job was stopped (``why``: its deadline, a signal): one last worker, whose
    deadline has passed, measures nothing and writes the table and probe record from the
    journal (points not measured: ``unavailable``, saying ``why``); then :class:`JobEnded`
    with the job's one line (status 128 + the signal's number after a signal)."""
    elapsed = time.time() - started
    reason = f"the job {why} after {elapsed:.0f} s, before this point; a rerun measures it"
    at = time.time()

    def salvage_stop() -> str | None:  # a second Ctrl-C does not stop the table's writing
        return "the table took too long" if time.time() - at > SALVAGE_S else None

    code, ended, _ = job.run_worker(
        lock_fd, ["--deadline=0", f"--deadline-why={reason}"], salvage_stop
    )
    written = code == 0 and ended is not None and ended.get("end") == "done"
    kept = (
        f"its table holds the {job.measured()} of {len(job.points)} points measured, the rest "
        "unavailable"
        if written
        else f"its table could not be written ({_exit_text(code)}; see the job's log)"
    )
    line = (
        f"job failed: {job.case}/{job.framework}/{job.device} batch {job.batch} {why} after "
        f"{elapsed:.0f} s; {kept}; its journal keeps what was measured and a rerun measures "
        "the rest"
    )
    job.say(line)
    status = 1 if signals.caught is None else 128 + int(signals.caught)
    raise JobEnded(line, status)
