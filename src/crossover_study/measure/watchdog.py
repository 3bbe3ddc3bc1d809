"""The per-point deadline (``timing.point_deadline_s``): a point still running past it
is ended, every thread's stack in the job log, and recorded as ``status=error``.

A point can be stuck where Python cannot reach it, so there are two stages:

1. **At the deadline**, a timer thread of the measuring process sends
   :data:`SOFT_SIGNAL` to the main thread; its handler writes every thread's stack to
   the job log (``faulthandler.dump_traceback``) and raises
   :class:`PointDeadlineExceeded` inside the point. The runner records the point as an
   error naming the deadline, the workload's ``close`` runs, and the job goes on with
   the next point. A signal also ends a Python-level wait (``time.sleep``, a lock, a
   queue) early. A TensorFlow point's blocks run in a step thread
   (:mod:`crossover_study.core.step_thread`): there the exception is raised in the
   step's thread too, which ends a step stuck in Python at once; a step of that thread
   waiting in a sleep or in C is ended by stage 2.
2. **A grace period later** (:func:`grace_s`), if the point has still not returned, it
   waits in C/C++: one that holds the GIL keeps the timer thread and every Python
   handler from running, one that releases it is not ended by a signal. A helper
   process, started once per job and sharing no GIL with it (this file run as a
   script: the standard library only), then sends :data:`DUMP_SIGNAL`, on which
   faulthandler's C-level handler writes every thread's stack to the job log without
   taking the GIL; ends the measuring process (and its child processes, e.g. DDP
   followers) with SIGKILL; and, once it is gone, appends the point's ``error`` row to
   the journal. The job fails; its rerun keeps that row (an error is final) and
   measures only the points still missing.

The helper learns of each point over a pipe (one JSON line to arm, one to disarm) and
exits when the pipe closes or the measuring process is gone. Should it fail to write the
row, the journal's ``start`` without a ``done`` still makes the rerun try the point
again. A point that crashes its process itself (a fatal signal inside the step) is
recorded by faulthandler in the journal instead (:meth:`journal.Journal.recording_crashes`)
and becomes an ``error`` after ``MAX_ATTEMPTS`` such crashes; a process ended from
outside (SIGKILL, SIGTERM) is not counted against the point.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

#: Sent by the timer thread to the main thread at the deadline (a Python handler).
SOFT_SIGNAL = signal.SIGUSR2
#: Sent by the helper process after the grace period: faulthandler's C-level handler
#: writes every thread's stack (no GIL needed).
DUMP_SIGNAL = signal.SIGUSR1
#: Seconds the helper leaves faulthandler to write the stacks before SIGKILL.
DUMP_WAIT_S = 1.0
#: Seconds the helper waits for the ended process to be gone before it journals.
GONE_WAIT_S = 10.0
#: Every deadline row's ``message`` starts so (:func:`ended_at_deadline`).
MESSAGE_START = "point exceeded timing.point_deadline_s="


class PointDeadlineExceeded(BaseException):
    """Raised inside a point that ran past ``timing.point_deadline_s``. A BaseException,
    as KeyboardInterrupt is, so that a workload's ``except Exception`` cannot swallow it
    (``finally`` blocks still run)."""

    def __init__(self, deadline_s: float, elapsed_s: float):
        super().__init__(f"{MESSAGE_START}{deadline_s:g} s (ended after {elapsed_s:.1f} s)")
        self.deadline_s = deadline_s
        self.elapsed_s = elapsed_s


def ended_at_deadline(row) -> bool:
    """Whether ``row`` (a timings row) is a point ended at its deadline."""
    return row.get("status") == "error" and str(row.get("message") or "").startswith(MESSAGE_START)


def stopped_where(exc: BaseException) -> str:
    """Where the point was when :class:`PointDeadlineExceeded` was raised in the main
    thread: ``function (file.py:line)`` of the innermost frame outside this module; of
    the step's own thread when the point ran its block there (``exc.step_stack``, set
    by :func:`crossover_study.core.step_thread.on_fresh_stack`)."""
    import traceback

    here = os.path.abspath(__file__)
    stack = getattr(exc, "step_stack", None) or traceback.extract_tb(exc.__traceback__)
    frames = [f for f in stack if f.filename != here]
    if not frames:
        return "an unknown place"
    last = frames[-1]
    return f"{last.name} ({os.path.basename(last.filename)}:{last.lineno})"


def grace_s(deadline_s: float) -> float:
    """Seconds between the deadline (stage 1) and ending the process (stage 2): 10% of
    the deadline, at least 2 and at most 60."""
    return min(60.0, max(2.0, 0.1 * deadline_s))


def hard_message(deadline_s: float) -> str:
    """The ``message`` of a point whose process was ended (stage 2)."""
    return (
        f"{MESSAGE_START}{deadline_s:g} s and did not stop: it "
        "waited in C/C++ where Python cannot interrupt it (perhaps holding the GIL); the "
        f"measuring process was ended {deadline_s + grace_s(deadline_s):g} s after the "
        "point started; every thread's stack is in the job log"
    )


class PointWatchdog:
    """The deadline of every point of one measuring job (a context manager: installs
    the signal handlers on entry, restores them and stops the helper on exit).

    ``deadline_s``: seconds a point may run. ``stacks``: the open file every thread's
    stack is written to (the job log; it must stay open while the watchdog is
    entered). ``log``: the job's line logger. Stage 1 needs the main thread (where
    Python runs signal handlers); a watchdog entered in another thread has stage 2
    only.
    """

    def __init__(self, deadline_s: float, stacks, log=print):
        if not deadline_s > 0:
            raise ValueError(f"timing.point_deadline_s must be positive, got {deadline_s}")
        self.deadline_s = float(deadline_s)
        try:
            stacks.fileno()
        except (AttributeError, OSError, ValueError):  # no file descriptor (a StringIO)
            stacks = sys.__stderr__
        self.stacks = stacks
        self.log = log
        self._lock = threading.Lock()
        self._armed: object | None = None  # the point in flight (a token), or None
        self._started = 0.0
        self._key = ""
        self._helper: subprocess.Popen | None = None
        self._soft = threading.current_thread() is threading.main_thread()
        self._old_handler = None

    def __enter__(self) -> PointWatchdog:
        if self._soft:
            self._old_handler = signal.signal(SOFT_SIGNAL, self._on_soft_signal)
        faulthandler.register(DUMP_SIGNAL, file=self.stacks, all_threads=True, chain=False)
        return self

    def __exit__(self, *exc) -> None:
        faulthandler.unregister(DUMP_SIGNAL)
        if self._helper is not None:
            with contextlib.suppress(OSError):
                self._helper.stdin.close()
            try:
                self._helper.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._helper.kill()
                self._helper.wait()
            self._helper = None
        if self._soft:
            signal.signal(SOFT_SIGNAL, self._old_handler)

    # ------------------------------------------------------------------ the helper
    def _send(self, message: dict) -> None:
        """One line to the helper (started on first use; started again if it died)."""
        line = (json.dumps(message) + "\n").encode()
        for _ in range(2):
            if self._helper is None or self._helper.poll() is not None:
                fd = self.stacks.fileno()
                # In a session of its own: a measuring job's supervisor ends the process
                # group of the measuring process once that process is gone (what a
                # program left running), and the helper may still have a row to journal.
                self._helper = subprocess.Popen(
                    [sys.executable, "-I", "-c", _HELPER_MAIN, os.path.abspath(__file__)]
                    + [str(os.getpid()), str(fd)],
                    stdin=subprocess.PIPE,
                    pass_fds=(fd,),
                    start_new_session=True,
                )
            try:
                self._helper.stdin.write(line)
                self._helper.stdin.flush()
                return
            except OSError:
                self._helper = None
        raise RuntimeError("the point deadline's helper process cannot be started")

    # ------------------------------------------------------------------ one point
    @contextlib.contextmanager
    def point(self, key: str, journal: str | os.PathLike, entry_json: str):
        """Arm the deadline for the point ``key`` while the block runs.

        ``journal`` and ``entry_json`` (the journal line the helper appends, a ``done``
        entry whose row is the error; the helper sets ``row.utc_time``) are for stage 2.
        Stage 1 raises :class:`PointDeadlineExceeded` inside the block."""
        token = object()
        self.stacks.flush()
        self._send(
            {
                "op": "arm",
                "at": time.monotonic() + self.deadline_s + grace_s(self.deadline_s),
                "key": key,
                "deadline_s": self.deadline_s,
                "journal": os.fspath(journal),
                "entry": entry_json,
            }
        )
        timer = None
        self._key, self._started = key, time.monotonic()
        with self._lock:
            self._armed = token
        try:
            if self._soft:
                timer = threading.Timer(self.deadline_s, self._fire, args=(token,))
                timer.daemon = True
                timer.start()
            yield
        finally:
            # Nested: the deadline's exception may arrive in here, and the helper must
            # be disarmed whatever happens.
            try:
                with self._lock:  # from here on no signal is sent for this point
                    self._armed = None
            finally:
                try:
                    if timer is not None:
                        timer.cancel()
                        timer.join()
                finally:
                    self._send({"op": "disarm"})

    def _fire(self, token: object) -> None:
        with self._lock:
            if self._armed is token:
                signal.pthread_kill(threading.main_thread().ident, SOFT_SIGNAL)

    def _on_soft_signal(self, signum, frame) -> None:
        # No lock here: the main thread may hold it (the point's own finally).
        if self._armed is None:
            return  # the point returned meanwhile
        self._armed = None  # raised once per point
        elapsed = time.monotonic() - self._started
        self.log(
            f"  {self._key}: still running at timing.point_deadline_s={self.deadline_s:g} s; "
            "every thread's stack:"
        )
        self.stacks.flush()
        faulthandler.dump_traceback(file=self.stacks, all_threads=True)
        self.stacks.flush()
        raise PointDeadlineExceeded(self.deadline_s, elapsed)


# ---------------------------------------------------------------------- the helper
def _say(fd: int, text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, (text + "\n").encode())


def _finished_after_start(journal: str, key: str, settings) -> bool:
    """Whether the journal's last ``start`` of ``key`` is followed by a ``done``."""
    finished = False
    try:
        with open(journal) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return False
    for line in lines:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry.get("key") != key or entry.get("settings") != settings:
            continue
        finished = entry.get("event") == "done"
    return finished


def _children(pid: int) -> list[int]:
    """Child processes of ``pid`` (Linux ``/proc``; empty elsewhere), this one excluded:
    a point's own processes (the DDP followers) go with it."""
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                found += [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            continue
    return [c for c in found if c != os.getpid()]


def _end_point(parent: int, fd: int, armed: dict) -> None:
    """Stage 2: the stacks, SIGKILL, then the error row (unless the point finished)."""
    key, deadline = armed["key"], armed["deadline_s"]
    _say(
        fd,
        f"watchdog: {key} still running {deadline + grace_s(deadline):g} s after it started "
        f"(timing.point_deadline_s={deadline:g} s): it waits where Python cannot interrupt "
        "it (in C/C++, perhaps holding the GIL). Every thread's stack (faulthandler) "
        f"follows, then the measuring process (pid {parent}) and its own processes are "
        "ended.",
    )
    try:
        os.kill(parent, DUMP_SIGNAL)
        time.sleep(DUMP_WAIT_S)
        children = _children(parent)
        os.kill(parent, signal.SIGKILL)
    except ProcessLookupError:
        children = []
    for child in children:
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)
    gone = time.monotonic() + GONE_WAIT_S
    while os.getppid() == parent and time.monotonic() < gone:
        time.sleep(0.02)
    entry = json.loads(armed["entry"])
    if _finished_after_start(armed["journal"], key, entry.get("settings")):
        _say(fd, f"watchdog: {key} finished as it was ended; its journaled row is kept")
        return
    entry["row"]["utc_time"] = datetime.now(UTC).isoformat(timespec="seconds")
    with open(armed["journal"], "a") as fh:
        fh.write(json.dumps(entry) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    _say(
        fd,
        f"watchdog: {key} journaled as status=error ({entry['row']['message']}); the "
        "job's rerun keeps it and measures only the points still missing",
    )


#: The helper process's program: this file loaded by its path in an isolated Python (``-I``:
#: no site, no PYTHONPATH; the file imports the standard library only), Ctrl-C left to
#: the measuring process, then :func:`_helper` (``sys.argv``: file, parent pid, fd).
_HELPER_MAIN = (
    "import importlib.util, signal, sys; "
    "spec = importlib.util.spec_from_file_location('point_watchdog', sys.argv[1]); "
    "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
    "signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "module._helper(int(sys.argv[2]), int(sys.argv[3]))"
)


def _helper(parent: int, fd: int) -> None:
    """The helper process: follow the arm/disarm lines on stdin; end a point whose
    time (deadline + grace) is up. Exits when stdin closes or ``parent`` is gone."""
    armed: dict | None = None
    pending = b""
    while os.getppid() == parent:
        wait = 1.0 if armed is None else min(1.0, max(0.0, armed["at"] - time.monotonic()))
        ready, _, _ = select.select([sys.stdin.fileno()], [], [], wait)
        if ready:
            chunk = os.read(sys.stdin.fileno(), 1 << 16)
            if not chunk:
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                message = json.loads(line)
                armed = message if message["op"] == "arm" else None
            continue
        if armed is not None and time.monotonic() >= armed["at"]:
            _end_point(parent, fd, armed)
            return
