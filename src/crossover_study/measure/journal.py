"""The journal of a measuring job: one JSON line per point started or done, so that a
crash or ``kill -9`` loses at most the point in flight and a rerun measures only what is
missing (:func:`crossover_study.measure.runner.run_group` writes and reads it).

A point whose process ended while measuring it (a ``start`` without a ``done``) is
measured again by the next run. Its tries count towards :data:`MAX_ATTEMPTS` only when
the point itself ended them: a crash inside the step (a fatal signal such as SIGSEGV,
which faulthandler writes into the journal after the point's ``start``:
:meth:`Journal.recording_crashes`) or a device the point left unable to run work (a
``fault`` line); a point past its deadline gets a final ``error`` row at once
(:mod:`crossover_study.measure.watchdog`). A process ended from outside (the OOM killer, a
preempted Slurm job, ``kill -9``: SIGKILL or SIGTERM, which leave only the ``start``)
is not the point's fault, and the point is measured again however often that happened.

While a job measures, its process holds an exclusive ``flock`` on the journal
(:func:`hold`), so a second run of the same job (another Snakemake in the same working
directory, started after ``--unlock`` while the first still ran) refuses to measure it.
The operating system releases the lock when the process dies, so a run killed with
``kill -9`` never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import faulthandler
import fcntl
import json
import math
import os
import sys
from pathlib import Path

#: A point that ended its measuring process by its own fault (a crash inside the step,
#: a device left unable to run work) this many times is recorded as an error instead
#: of being tried again forever. Ends from outside do not count.
MAX_ATTEMPTS = 2
#: The first line faulthandler writes on a fatal signal (SIGSEGV, SIGFPE, SIGABRT,
#: SIGBUS, SIGILL): in the journal, the crash of the point started just before it.
CRASH_PREFIX = "Fatal Python error: "
#: Statuses that are final: a rerun does not measure these points again. ``unavailable``
#: is not final (the device may be there next time).
FINAL = ("ok", "oom", "error", "not_applicable")


class Journal:
    """Append-only JSON-lines record of a group's points; survives ``kill -9``.

    Each line is ``{"event": "start"|"done"|"fault", "key": ..., "settings": ...,
    "row": {...}}`` (a ``done`` of a point ended at its deadline also has
    ``"point_deadline_s"``, kept in ``ended_at``; a ``fault`` has ``"cause"``); a torn
    last line (the process died while writing it) is ignored, and so is every other
    line that is not JSON, except a faulthandler report (:data:`CRASH_PREFIX`) right
    after a point's ``start``, which counts as that point's own fault. ``starts``:
    the tries of each point; ``faults``: the causes of the tries the point itself
    ended (a list per key).
    Only entries written under ``settings`` (:meth:`crossover_study.measure.runner.GroupSpec.settings`) count: a row
    measured with other threads or another timing policy (or by a version that did not
    record its settings) is listed in ``stale`` and measured again.
    """

    def __init__(self, path: Path, settings: str | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.settings = settings
        self.done: dict[str, dict] = {}
        self.starts: dict[str, int] = {}
        self.stale: dict[str, dict] = {}
        self.ended_at: dict[str, float] = {}
        self.faults: dict[str, list[str]] = {}
        if self.path.exists():
            self._read(self.path.read_text(errors="replace").splitlines())

    def _read(self, lines: list[str]) -> None:
        open_key = None  # the point started by the last line, if nothing followed it
        for line in lines:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                if open_key is not None and line.startswith(CRASH_PREFIX):
                    self.faults.setdefault(open_key, []).append(line.strip())
                    open_key = None
                continue
            if not isinstance(entry, dict):
                continue
            open_key = None
            key = entry.get("key")
            if entry.get("settings") != self.settings:
                if entry.get("event") == "done":
                    self.stale[key] = entry["row"]
                continue
            if entry.get("event") == "done":
                self.done[key] = entry["row"]
                self.ended_at.pop(key, None)
                if entry.get("point_deadline_s") is not None:
                    self.ended_at[key] = entry["point_deadline_s"]
            elif entry.get("event") == "start":
                self.starts[key] = self.starts.get(key, 0) + 1
                open_key = key
            elif entry.get("event") == "fault":
                self.faults.setdefault(key, []).append(str(entry.get("cause")))

    def _append(self, entry: dict) -> None:
        with self.path.open("a+b") as fh:
            # A line torn by a process that died writing it, or a faulthandler report
            # cut short, must not swallow this one: start it on a line of its own.
            if fh.seek(0, os.SEEK_END) > 0:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    fh.write(b"\n")
            fh.write((json.dumps(entry, default=json_default) + "\n").encode())
            fh.flush()
            os.fsync(fh.fileno())

    def attempts(self, key: str) -> int:
        """How often the point ``key`` was started under these settings, over every run
        (its row's ``attempts``; 0: never started)."""
        return self.starts.get(key, 0)

    def start(self, key: str) -> None:
        """Journal that the point ``key`` is starting (counted in ``starts``; a point
        that ended :data:`MAX_ATTEMPTS` processes by its own fault, ``faults``, is not
        started again)."""
        self.starts[key] = self.starts.get(key, 0) + 1
        self._append({"event": "start", "key": key, "settings": self.settings})

    def fault(self, key: str, cause: str) -> None:
        """Journal that the point ``key`` ended its try by its own fault (``cause``, one
        line: e.g. the device it left unable to run work) without a row; it counts
        towards :data:`MAX_ATTEMPTS`."""
        self.faults.setdefault(key, []).append(cause)
        self._append({"event": "fault", "key": key, "settings": self.settings, "cause": cause})

    @contextlib.contextmanager
    def recording_crashes(self):
        """While the block runs (one point), a fatal signal in this process (SIGSEGV,
        SIGFPE, SIGABRT, SIGBUS, SIGILL: a crash inside the step) has faulthandler write
        its report (:data:`CRASH_PREFIX` and every thread's stack) into the journal,
        after the point's ``start``: the next run counts it as the point's own fault.
        Uses the file :func:`hold` keeps open when the journal is held by this process.
        faulthandler's earlier state is put back afterwards (enabled again on
        ``sys.__stderr__`` if it was enabled; its earlier file cannot be read back)."""
        held = _HELD.get(_held_key(self.path))
        fh = held if held is not None else self.path.open("a")
        was_enabled = faulthandler.is_enabled()
        faulthandler.enable(file=fh, all_threads=True)
        try:
            yield
        finally:
            faulthandler.disable()
            if was_enabled and sys.__stderr__ is not None:
                with contextlib.suppress(ValueError, OSError, AttributeError):
                    faulthandler.enable(file=sys.__stderr__, all_threads=True)
            if held is None:
                fh.close()

    def done_entry(self, key: str, row: dict, point_deadline_s: float | None = None) -> dict:
        """The ``done`` line of ``row`` (with the deadline it was ended at, if any)."""
        entry = {"event": "done", "key": key, "settings": self.settings, "row": row}
        if point_deadline_s is not None:
            entry["point_deadline_s"] = point_deadline_s
        return entry

    def finish(self, key: str, row: dict, point_deadline_s: float | None = None) -> None:
        """Journal ``row`` as the point's result; ``point_deadline_s``: the deadline it
        was ended at (a rerun under a longer or no deadline measures it again)."""
        self.done[key] = row
        self.ended_at.pop(key, None)
        if point_deadline_s is not None:
            self.ended_at[key] = point_deadline_s
        self._append(self.done_entry(key, row, point_deadline_s))

    def final_row(self, key: str) -> dict | None:
        """The journaled row of ``key`` when its status is :data:`FINAL`, else None."""
        row = self.done.get(key)
        return row if row is not None and row.get("status") in FINAL else None


class JournalBusy(RuntimeError):
    """The journal is held by another live process (:func:`hold`)."""


#: Journals this process holds (:func:`hold`): their absolute path -> the open file
#: that carries the lock.
_HELD: dict[str, object] = {}


def _held_key(path: str | os.PathLike) -> str:
    return os.path.abspath(path)


def _holder_pid(path: Path) -> int | None:
    """The process holding a ``flock`` on ``path`` as Linux's ``/proc/locks`` lists it
    (by device and inode), or None (another OS, a network file system, gone)."""
    try:
        st = path.stat()
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF" (a blocked waiter has "->")
        if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK":
            continue
        if fields[5].lower() == inode and fields[4].isdigit():
            return int(fields[4])
    return None


@contextlib.contextmanager
def hold(path: str | os.PathLike):
    """Hold the journal ``path`` (created if missing) for the block: an exclusive,
    non-blocking ``fcntl.flock`` on it, which the operating system releases when the
    process ends, however it ends (no stale lock after ``kill -9``). Re-entrant within
    a process. Yields the open file carrying the lock.

    Raises :class:`JournalBusy` at once, naming the journal and the holding process
    where Linux tells it, when another live process holds it: a second run of the same
    measuring job, which must not measure its points twice at the same time. On a file
    system without flock (ENOSYS, ENOLCK) the block runs unlocked, with a warning on
    ``sys.stderr`` (the job log). (Hand-rolled on the standard library's flock: the
    lock lives exactly as long as the process, which lock-file packages built on files
    that outlive it do not promise.)"""
    key = _held_key(path)
    if key in _HELD:
        yield _HELD[key]
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = path.open("a")
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        pid = _holder_pid(path)
        raise JournalBusy(
            f"{path} is held by another live measuring process"
            f"{f' (pid {pid})' if pid else ''}: this job is being measured by another "
            "run right now (a second Snakemake in the same working directory, started "
            "after `snakemake --unlock` while the first still ran?). Not measured twice at "
            "once: let that run finish, or end it, then run again. `--unlock` is only for "
            "a run that is no longer alive."
        ) from None
    except OSError as exc:  # a file system without flock (Lustre mounted without it)
        print(f"warning: {path} cannot be locked ({exc}); measuring unlocked", file=sys.stderr)
    _HELD[key] = fh
    try:
        yield fh
    finally:
        del _HELD[key]
        fh.close()  # releases the lock


def adopt(path: str | os.PathLike, fd: int) -> None:
    """Count the journal ``path`` as held by this process for the rest of its life:
    ``fd`` is a descriptor of it that carries the ``flock`` of another process, inherited
    from it (the supervisor's, :mod:`crossover_study.measure.supervisor`, which holds the
    journal for the whole job and hands it to each process it starts). The lock is one
    per open file, so this process shares it, and :func:`hold` of ``path`` here is then
    re-entrant instead of refused."""
    _HELD[_held_key(path)] = os.fdopen(fd, "a")


def json_default(value):
    """``json.dumps``'s ``default`` for a journal line: a float NaN is written as
    ``null``, anything else JSON cannot hold (a path, a numpy scalar) as its ``str``."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return str(value)
