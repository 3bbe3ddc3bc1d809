"""The host's load around a measurement: load average, CPUs other work kept busy, and
the minor page faults of this process, sampled outside the timed blocks; the share of a
job's CPUs that other work took (:func:`contention_share`) and the wait for a quiet
machine (:func:`wait_until_quiet`). Standard library, plus psutil (a dependency) to
count this process's live child processes as its own."""

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
    its threads, and of its child processes, live or ended: :func:`own_cpu_s`);
    ``minor_faults``: the page faults this process has taken without a disk
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
    return HostSample(time.perf_counter(), load, _busy_s(), own_cpu_s(), minor_faults())


def own_cpu_s() -> float:
    """CPU-seconds of this process (all its threads) and of its child processes: the
    ended ones waited for (``os.times``) and the live ones (psutil, recursively: a ddp
    point's follower ranks), so that a point's own helpers are never counted as other
    work. A child that ends between two readings moves from the live to the ended
    count; one that ends unwaited-for between them is lost (counted as other work)."""
    times = os.times()
    own = times.user + times.system + times.children_user + times.children_system
    try:
        import psutil

        children = psutil.Process().children(recursive=True)
    except Exception:  # noqa: BLE001 - no psutil or no /proc: this process alone
        return own
    for child in children:
        try:
            cpu = child.cpu_times()
        except Exception:  # noqa: BLE001 - ended (or unreadable) since it was listed
            continue
        own += cpu.user + cpu.system
    return own


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
    page_fault`)."""
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


def contention_share(
    others: float | None, threads: int, host_cpus: int | None = None
) -> float | None:
    """The share of a job's ``threads`` CPUs that other work took: CPUs other work kept
    busy (``others``, :func:`cpus_others`) beyond the host's CPUs the job does not need
    (``host_cpus`` - ``threads``; ``host_cpus`` defaults to ``os.cpu_count()``, the CPUs
    /proc/stat counts), divided by ``threads``, between 0 and 1. So on 2 CPUs a job of
    1 thread beside another job of 1 thread (the study's own parallel jobs) reads 0, and
    a job of 2 threads beside a process that keeps one CPU busy reads 0.5. None when
    ``others`` is None (no /proc/stat, a window too short)."""
    if others is None:
        return None
    threads = max(1, int(threads))
    cpus = host_cpus if host_cpus is not None else (os.cpu_count() or threads)
    spare = max(0, cpus - threads)
    return min(1.0, max(0.0, others - spare) / threads)


#: Seconds of one reading of :func:`wait_until_quiet` (CPU time is counted in 1/100 s
#: ticks: half a second reads other work to about 2 %).
QUIET_POLL_S = 0.5


def wait_until_quiet(
    threads: int,
    threshold: float,
    max_wait_s: float,
    *,
    poll_s: float = QUIET_POLL_S,
    sample=None,
    sleep=None,
) -> tuple[bool, float]:
    """Wait, for at most ``max_wait_s`` seconds, until other work takes no more than
    ``threshold`` of a job's ``threads`` CPUs (:func:`contention_share` over one
    ``poll_s`` window while this process sleeps). Returns ``(quiet, waited_s)``:
    whether a window read quiet, and the seconds waited (``sample``'s clock). A host
    without /proc/stat reads quiet at once (nothing to wait for). Never inside a timed
    block: it sleeps. ``sample`` and ``sleep``: :func:`host_sample` and ``time.sleep``
    unless given (read when called, so a test can replace them)."""
    sample = sample or host_sample
    sleep = sleep or time.sleep
    poll_s = max(poll_s, MIN_OTHERS_WINDOW_S)  # a shorter window reads nothing
    first = sample()
    previous = first
    while True:
        waited = previous.wall_s - first.wall_s
        if waited + poll_s > max_wait_s + 1e-9:
            return False, waited
        sleep(poll_s)
        now = sample()
        share = contention_share(cpus_others(previous, now), threads)
        if share is None and now.busy_s is None:
            return True, now.wall_s - first.wall_s
        if share is not None and share <= threshold:
            return True, now.wall_s - first.wall_s
        previous = now
