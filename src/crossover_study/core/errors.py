"""Errors that several layers raise or catch: a leaf of the package (it imports nothing
of it), so that a workload can raise what the measuring job catches without importing
the job's modules."""

from __future__ import annotations


class DeviceMissingError(RuntimeError):
    """A device was asked for, is not visible, and the config says ``missing_device: fail``
    (or a replicated point needs more devices than are visible). The message names the
    device class and what was visible."""
