"""How long a measuring job's points and the whole job may run, and when a point counts
as measured under contention: the config's ``timing.point_deadline_s``,
``timing.job_deadline_s``, ``timing.contention_share`` and ``timing.contention_wait_s``.
None of them is filled in by validation (studies written without them keep their config
hash and the measure rule's params) nor part of the measurement hash: they decide when a
point or a job is given up, or measured once more, never how a point is timed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

#: ``timing.point_deadline_s`` when a config leaves it out (seconds; not filled in by
#: validation, see :func:`point_deadline_s`).
DEFAULT_POINT_DEADLINE_S = 600.0


def point_deadline_s(config: Mapping[str, Any]) -> float | None:
    """Seconds a point may run before it is ended (``timing.point_deadline_s``; None: no
    deadline). Left out of a config it is :data:`DEFAULT_POINT_DEADLINE_S`: the schema
    gives no default to fill in, so that studies written without the key keep their
    config hash and the measure rule's params (a change would rerun every measuring
    job). A point of the committed studies takes seconds (``timing.max_point_s`` is its
    budget for the timed blocks, plus warm-up, set-up and a first compile); ten minutes
    is far past that, yet well within a measuring job's Slurm ``runtime`` (60 minutes by
    default), so a stuck point ends before Slurm ends the whole job."""
    return config["timing"].get("point_deadline_s", DEFAULT_POINT_DEADLINE_S)


@dataclasses.dataclass(frozen=True)
class ContentionPolicy:
    """When a point counts as measured under contention, and how long to wait for a
    quiet machine before measuring it again (``timing.contention_share`` and
    ``timing.contention_wait_s``; :func:`crossover_study.measure.point.measure_point`).

    share: a point is contended when other work took more than this share of the job's
        CPU threads while it was timed (:func:`crossover_study.core.host_load.
        contention_share`: other work's CPUs beyond those the job does not need, over
        its threads). 0.25: a quarter of the job's CPUs, e.g. half of one core under a
        2-thread job, far above what a quiet machine's daemons take (a few %), and below
        one core of another process (0.5 under 2 threads), which in one trial made a
        DataLoader step read 64 ms against 4.3 ms quiet.
    wait_s: seconds to wait for a quiet machine before measuring a contended point
        once more (0: never wait, flag only). 20 s: a few seconds of someone's build or
        test run pass; a longer load does not, and the point is flagged.
    job_wait_s: seconds a measuring job waits in all (:data:`JOB_WAIT_POINTS` points'
        worth): on a machine busy throughout, the job stops waiting and flags, so
        contention never multiplies a study's time.

    Not part of a job's fingerprint or the measurement hash
    (:data:`crossover_study.study.points.NOT_MEASUREMENT_TIMING_KEYS`): changing them reruns no finished job.
    """

    share: float = 0.25
    wait_s: float = 20.0

    @property
    def job_wait_s(self) -> float:
        """Seconds one measuring job waits for a quiet machine in all."""
        return JOB_WAIT_POINTS * self.wait_s


#: A measuring job waits for a quiet machine for at most this many points' waits.
JOB_WAIT_POINTS = 5


def contention_policy(config: Mapping[str, Any]) -> ContentionPolicy:
    """The contention settings from ``config['timing']`` (``contention_share``,
    ``contention_wait_s``), :class:`ContentionPolicy`'s defaults for the keys left out
    (the schema fills in no default, so that studies written without them keep their
    config)."""
    t = config["timing"]
    default = ContentionPolicy()
    return ContentionPolicy(
        share=t.get("contention_share", default.share),
        wait_s=t.get("contention_wait_s", default.wait_s),
    )


#: The share of a device class's ``runtime`` a job may run when ``timing.job_deadline_s``
#: is left out: the rest (6 of 60 minutes) is for writing its table from its journal
#: before Slurm's own limit, which would end it without a line.
RUNTIME_SHARE = 0.9


def job_deadline_s(config: Mapping[str, Any], device: str) -> float | None:
    """Seconds a whole measuring job of ``device``'s class may run before it is ended
    (``timing.job_deadline_s``; None: no deadline): its points measured so far are kept
    and the rest left to a rerun (:mod:`crossover_study.measure.supervisor`). Left out
    of a config it is :data:`RUNTIME_SHARE` of the class's ``devices.<device>.runtime``
    (minutes, 60 by default: what Slurm grants the job), so that a job ends itself with
    its own line, its table written, before a scheduler would kill it without one; a
    local run has the same limit (60 minutes for a class the config does not give)."""
    t = config["timing"]
    if "job_deadline_s" in t:
        return t["job_deadline_s"]
    return RUNTIME_SHARE * 60.0 * config.get("devices", {}).get(device, {}).get("runtime", 60)
