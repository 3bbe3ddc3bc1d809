"""Errors that several layers raise or catch: a leaf of the package (it imports nothing
of it), so that a workload can raise what the measuring job catches without importing
the job's modules; and a disk that takes no more writes (full, read-only) said in one
line (:func:`describe_os_error`, :func:`disk_errors_in_one_line`)."""

from __future__ import annotations

import contextlib
import errno
import os
import sys


class DeviceMissingError(RuntimeError):
    """A device was asked for, is not visible, and the config says ``missing_device: fail``
    (or a replicated point needs more devices than are visible). The message names the
    device class and what was visible."""


#: errno values of a disk that takes no more writes, as a one-line message says them
#: (lower case, as in "no space left on device"): :func:`disk_error`.
DISK_FULL_OR_READ_ONLY = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EFBIG: "file too large",
}


def describe_os_error(exc: OSError) -> str:
    """``exc`` in words for a one-line message: its cause in lower case (``no space left
    on device``, ``read-only file system``, ...) then ``: PATH`` when the error names a
    file (its ``filename``, and ``filename2`` of a rename). Never raises."""
    cause = DISK_FULL_OR_READ_ONLY.get(exc.errno)
    if cause is None:
        text = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
        cause = text[:1].lower() + text[1:]
    paths = [os.fsdecode(p) for p in (exc.filename, exc.filename2) if p is not None]
    return f"{cause}: {' -> '.join(paths)}" if paths else cause


def disk_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an OSError of a disk that takes no more writes
    (:data:`DISK_FULL_OR_READ_ONLY`: full, over quota, read-only, not writable)."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_OR_READ_ONLY


@contextlib.contextmanager
def disk_errors_in_one_line(what: str, log: str | os.PathLike | None = None, kept: str = ""):
    """Inside the block, an OSError of a disk that takes no more writes
    (:func:`disk_error`: full, over quota, read-only) ends the process with one line
    instead of a traceback: ``{what}: cannot write: {cause}: {path}; {kept}`` (``kept``:
    what is not lost, e.g. the journals), on the process's original standard output
    (a workflow job's: Snakemake's terminal, where its log is not) and appended to
    ``log`` when given (if the disk lets it); exits with status 1 (:class:`SystemExit`).
    Other errors pass unchanged."""
    try:
        yield
    except OSError as exc:
        if not disk_error(exc):
            raise
        line = f"{what}: cannot write: {describe_os_error(exc)}" + (f"; {kept}" if kept else "")
        with contextlib.suppress(OSError, ValueError, AttributeError):
            print(line, file=sys.__stdout__, flush=True)
        if log is not None:
            with contextlib.suppress(OSError), open(log, "a") as fh:
                print(line, file=fh)
        raise SystemExit(1) from None


#: What a workflow job that hit a full or read-only disk says is kept
#: (:func:`disk_errors_in_one_line`): the measured points are in the per-job tables and
#: journals, which Snakemake leaves in place.
STUDY_KEPT = (
    "nothing measured is lost (the per-job tables and journals under results/<study>/ stay); "
    "free space or make the folder writable, then run the study again"
)
