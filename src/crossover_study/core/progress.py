"""The progress lines a person watches while a study measures: one when a measuring job
starts, one per point as it finishes.

The runner writes them to the job's log (:func:`crossover_study.measure.runner.run_group`); the
measure rule's script also prints them on Snakemake's terminal (a Slurm job's own log),
and ``crossover-study check`` and the GPU reference run pass them on from the jobs they
start (:class:`crossover_study.measure.launch.Progress`). One formatter, so the lines
read the same everywhere::

    [s001-mlp torch cpu] 37 points, 2 threads
    [s001-mlp torch cpu · 3/37] eager synced batch=64 d_in=1024 hidden=128: ok 1.21 ms/step (IQR 2%)
    [s001-mlp torch cpu · 4/37] compile synced batch=64 d_in=1024 hidden=128: error RuntimeError: …

The one format of durations (:func:`format_seconds`) is here too, below every layer
that prints one. Only the standard library is imported (the reference run imports it
before its bundle is installed).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

#: Characters of a not-ok point's message in its progress line (the whole message is
#: in the row and, for an error, the traceback in the job's log).
MESSAGE_CHARS = 120

#: A point's progress line (:func:`point_line`): ``job`` the case, framework and device,
#: ``done``/``total`` points of the job, ``point`` variant, timing and sizes, ``what``
#: the status (``kept`` for a point the job's journal already held).
POINT_LINE = re.compile(
    r"^\[(?P<job>[^\]·]+) · (?P<done>\d+)/(?P<total>\d+)\] (?P<point>[^:]+): (?P<what>\w+)\b"
)
#: A job's first progress line (:func:`job_line`).
JOB_LINE = re.compile(r"^\[(?P<job>[^\]·]+)\] (?:batch \d+ of \d+: )?\d+ points?, \d+ threads?$")
#: Beginnings of the other lines a person running the study must see at once.
ALERTS = ("job failed", "job refused", "rates job failed", "warning")


def format_seconds(seconds: float) -> str:
    """A duration in readable units, 3 significant digits: ``522 µs``, ``1.84 ms``,
    ``3.2 s``, ``1,250 s`` (the one format of durations: the answers' sentences,
    :mod:`crossover_study.answers.phrasebook`, quote it too). Raises TypeError or ValueError
    for what is not a number."""
    s = float(f"{float(seconds):.3g}")  # first: 0.9997 ms is 1 ms, not "1e+03 µs"
    if abs(s) < 1e-3:
        return f"{s * 1e6:.3g} µs"
    if abs(s) < 1:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s" if abs(s) < 1000 else f"{s:,.0f} s"


def one_line(text: object, limit: int = MESSAGE_CHARS) -> str:
    """``text`` on one line (runs of white space become one space), at most ``limit``
    characters (cut with ``…``)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def job_label(case: str, framework: str, device: str) -> str:
    """The job's part of its lines: ``s001-mlp torch cpu``."""
    return f"{case} {framework} {device}"


def job_line(
    case: str,
    framework: str,
    device: str,
    points: int,
    threads: int,
    batch: int = 0,
    batches: int = 1,
) -> str:
    """The line a measuring job says when it starts:
    ``[s001-mlp torch cpu] 37 points, 2 threads`` (``batch 2 of 3:`` before the count
    when the group is split into batches; ``batch`` is 0-based)."""
    part = f"batch {batch + 1} of {batches}: " if batches > 1 else ""
    return (
        f"[{job_label(case, framework, device)}] {part}{points} point{'s' * (points != 1)}, "
        f"{threads} thread{'s' * (threads != 1)}"
    )


def point_text(point) -> str:
    """What was measured, without the job's part: variant, timing, sizes in the
    point's own order, and replicas, TPU cores or the run of a repeated point where
    they apply (``point`` a :class:`crossover_study.study.spec.PointSpec`)."""
    parts = [point.variant, point.timing, *(f"{k}={v}" for k, v in point.sizes.items())]
    if point.replicas > 1:
        parts.append(f"replicas={point.replicas} {point.scaling}")
    if point.tpu_cores is not None:
        parts.append(f"tpu_cores={point.tpu_cores}")
    if point.repeat:
        parts.append(f"run {point.repeat + 1}")
    return " ".join(parts)


def outcome(row: Mapping) -> str:
    """A row's outcome: ``ok 1.21 ms/step (IQR 2%)`` (with its message, shortened, when
    an ok row has one: a flag), else the status and its message on one line."""
    status = row.get("status") or "?"
    message = row.get("message")
    if isinstance(message, float) and math.isnan(message):  # an empty cell read back
        message = None
    if status != "ok":
        return f"{status} {one_line(message)}" if message else str(status)
    step, iqr = row.get("step_time_s"), row.get("step_time_iqr_s")
    if not isinstance(step, int | float) or not math.isfinite(step):
        return "ok (no step time)"
    text = f"ok {format_seconds(step)}/step"
    if step > 0 and isinstance(iqr, int | float) and math.isfinite(iqr):
        share = 100 * iqr / step
        text += f" (IQR {share:.0f}%)" if share >= 1 else f" (IQR {share:.1f}%)"
    return f"{text}; {one_line(message)}" if message else text


def point_line(point, row: Mapping, done: int, total: int, kept_from: str | None = None) -> str:
    """One point's progress line: ``[case framework device · done/total] point: outcome``
    (:func:`point_text`, :func:`outcome`); ``kept_from`` the run id of a row the job's
    journal already held (``kept from run <id>: ok …``). Matches :data:`POINT_LINE`."""
    head = f"[{job_label(point.case, point.framework, point.device)} · {done}/{total}]"
    what = outcome(row)
    if kept_from is not None:
        what = f"kept from run {kept_from}: {what}"
    return f"{head} {point_text(point)}: {what}"


def for_terminal(text: str) -> bool:
    """Whether a line of a job's log is one a person watching the study sees: a job's
    first line, a point's line, a failed or refused job, a warning."""
    return bool(POINT_LINE.match(text) or JOB_LINE.match(text)) or text.startswith(ALERTS)
