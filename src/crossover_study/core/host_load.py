"""The host's load around a measurement: load average, CPUs other work kept busy, and
the minor page faults of this process, sampled outside the timed blocks (standard
library only)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class HostSample:
    """The host's load at one moment: ``wall_s`` (perf_counter), ``load_1m`` (the
    1-minute load average, None where the OS has none), ``busy_s`` (CPU-seconds all the
    host's CPUs have been busy since boot, from /proc/stat, the hypervisor's steal time
    included; None without /proc/stat) and ``own_s`` (CPU-seconds of this process, all
    its threads); ``minor_faults``: the page faults this process has taken without a disk
    read (``getrusage``'s ``ru_minflt``, all its threads; None where the OS has no
    ``resource`` module)."""

    wall_s: float
    load_1m: float | None
    busy_s: float | None
    own_s: float
    minor_faults: int | None = None


def _busy_s(path: str = "/proc/stat") -> float | None:
    """CPU-seconds the host's CPUs have been busy since boot: user, nice, system, irq,
    softirq and steal of /proc/stat's ``cpu`` line (guest time is part of user)."""
    try:
        with open(path) as f:
            fields = f.readline().split()
        if not fields or fields[0] != "cpu":
            return None
        ticks = [int(x) for x in fields[1:9]] + [0] * (9 - len(fields))
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def host_sample() -> HostSample:
    """A :class:`HostSample` now (reads two small files; never inside a timed block)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    times = os.times()
    return HostSample(
        time.perf_counter(), load, _busy_s(), times.user + times.system, minor_faults()
    )


def minor_faults() -> int | None:
    """Minor page faults this process has taken so far, all its threads (``getrusage``'s
    ``ru_minflt``); None where the OS has no ``resource`` module (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def faults_per_step(start: HostSample, end: HostSample, steps: int) -> float | None:
    """Minor page faults per step between two samples that ``steps`` steps ran between
    (None without fault counts or steps). A step that allocates and frees tensors of
    hundreds of KB or more can fault in fresh pages every step: glibc serves large
    blocks with mmap and gives the top of its heap back to the kernel when it frees
    enough, and each fault costs a few µs (:func:`crossover_study.stepmodel.rates.
    _page_fault`)."""
    if start.minor_faults is None or end.minor_faults is None or steps < 1:
        return None
    return (end.minor_faults - start.minor_faults) / steps


#: :func:`cpus_others` needs a window at least this long (seconds): CPU time is counted
#: in clock ticks (1/100 s), too coarse for a shorter one.
MIN_OTHERS_WINDOW_S = 0.1


def cpus_others(start: HostSample, end: HostSample) -> float | None:
    """CPUs that work other than this process kept busy between two samples, on
    average: (host busy CPU-seconds - this process's CPU-seconds) / wall seconds,
    never below 0. None without /proc/stat or for a window under
    :data:`MIN_OTHERS_WINDOW_S`."""
    wall = end.wall_s - start.wall_s
    if start.busy_s is None or end.busy_s is None or wall < MIN_OTHERS_WINDOW_S:
        return None
    others = (end.busy_s - start.busy_s) - (end.own_s - start.own_s)
    return max(0.0, others / wall)
