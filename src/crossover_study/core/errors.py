"""Errors that several layers raise or catch: a leaf of the package (it imports nothing
of it), so that a workload can raise what the measuring job catches without importing
the job's modules."""

from __future__ import annotations

import errno
import os


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
