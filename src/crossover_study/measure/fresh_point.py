"""Time a point in a fresh process: the heap state a user's own training loop has
(issue 51, items 1 and 2).

A measuring job times all points of one case x framework x device in one process (the
framework imported once: a fresh process per point would cost an import each, torch
about 1.5 s and TensorFlow about 5 s). That process's C heap is not a user's: it
freed a 32 MiB block before its first point (:func:`frameworks.settle_heap`) and
whatever its earlier points freed, so it keeps memory that a fresh process gives back
to the kernel and maps again every step (:mod:`crossover_study.measure.heap`).

Why not a fresh process for every point, or a fork-server: the first costs the study's
time budget (``make study``'s 9 minutes) an import per point for the few points whose
step allocates enough to matter; the second forks a process whose framework may have
started threads (TensorFlow's pools start at import), which neither framework
supports. So the job's process measures every point as before, screens the pages its
step touches afresh (:func:`heap.trimmed_heap_faults`, three steps after the timed
blocks, each after the heap gave its free pages back), and only where those would
cost a material share of the step (:func:`heap.needs_users_state`) times the point again here, in a fresh Python process
that imports the framework, initialises the device without settling the heap, builds
the program and measures it (:func:`measure_point`). The row's steady state then is the
fresh process's (:data:`TIMED_COLUMNS`), with ``step_state`` ``fresh_process`` and the
job process's step time and faults kept beside it (``job_step_time_s``,
``job_page_faults``); a row measured in the job's process has ``step_state``
``job_process`` and the same two columns equal to its own.

The ``malloc_env`` variant (the allocator remedy) is always measured here, in a fresh
process started with :data:`heap.REMEDY_ENV`, running the ``eager`` program: the same
program, faster only by the allocator. It is paired with the ``eager`` program in fresh
processes started without that environment (:func:`paired_in_fresh_processes`): a
fresh process of each per round, :data:`FRESH_ROUNDS` rounds, each round's order drawn
as :func:`pairing.interleave_order` draws it, and the speed-up is
:func:`pairing.paired_speedup` of the rounds' step times, with its interval. Against
the job's own eager row it would not be the allocator's gain alone: the job's process
and a fresh one differ in their heaps (issue 62: ``malloc_env`` 1.2x faster than eager
in the job's process, where eager in a fresh process took the same time).

``crossover-study fresh-point`` (``python -m crossover_study fresh-point``, :func:`main`) is
the child's side: a JSON request on stdin, the row as one JSON line on stdout (after the marker :data:`ROW_MARKER`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

from crossover_study.measure import heap

#: The variant measured in a fresh process started with :data:`heap.REMEDY_ENV`.
MALLOC_VARIANT = "malloc_env"
#: What precedes the row's JSON line on the child's stdout (a plug-in may print).
ROW_MARKER = "crossover-study-fresh-row "
#: Rounds of :func:`paired_in_fresh_processes`: the fewest :func:`pairing.paired_speedup`
#: takes. Each round starts two processes (an import each: torch about 1.5 s,
#: TensorFlow about 5 s on the 2-core VM), so a ``malloc_env`` point costs six.
FRESH_ROUNDS = 3
#: Seconds a child may take beyond the point's own deadline (import, device set-up).
CHILD_GRACE_S = 60.0
#: Seconds a child may take when the job has no point deadline.
CHILD_DEFAULT_TIMEOUT_S = 600.0
#: Columns a fresh process's measurement gives a row measured in the job's process
#: (the steady state as the user's loop runs it); the rest stays the job's: the cold
#: start and first step (the child's compile cache is the job's, warm), the profile's
#: shares and the counts and replays of the step-time model (the replays the model is
#: calibrated with run in the job's heap state: in a fresh process their own calls
#: would fault too).
TIMED_COLUMNS: tuple[str, ...] = (
    "step_time_s",
    "step_time_iqr_s",
    "noisy",
    "block_step_times_s",
    "steps_per_block",
    "n_blocks",
    "warmup_steps",
    "timer_overhead_s",
    "sync_check",
    "sync_check_long_s",
    "sync_check_steps",
    "host_load_start",
    "host_load_end",
    "host_cpus_others",
    "contended",
    "contention_wait_s",
    "remeasured",
    "threads_timed",
    "threads_changed",
    "step_page_faults",
    "measured_s",
    "final_loss",
    "nonfinite_loss",
    "samples_per_s",
)


class FreshPointError(RuntimeError):
    """The fresh process did not return a row (it crashed, timed out or printed none);
    the message says how it ended and the last lines of its error output."""


def _request(point, policy, threads, contention) -> dict:
    """The JSON request of a child measuring ``point``: the point, timing and contention
    policies, threads and, for a case of the user's own, its plug-in entry (the child
    registers it as the study's config did)."""
    from crossover_study.study import cases

    case = cases.get(point.case)
    spec = None
    if not case.builtin:
        where, entry = case.entry_point(point.framework)
        spec = {
            "workload": str(cases.resolve_stored(where)),
            "framework": point.framework,
            "seed": dict(case.seed),
            "entry": entry,
            "question": case.question,
        }
    return {
        "point": {**dataclasses.asdict(point), "sizes": dict(point.sizes)},
        "policy": dataclasses.asdict(policy),
        "threads": threads,
        "contention": None if contention is None else dataclasses.asdict(contention),
        "case_spec": spec,
    }


def measure_fresh(
    point,
    policy,
    threads: int,
    contention=None,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> dict:
    """The row of :func:`crossover_study.measure.point.measure_point` for ``point``
    measured in a fresh Python process (this interpreter, ``-m``
    crossover_study.measure.fresh_point), started with this process's environment plus
    ``env``; its ``variant`` ``malloc_env`` runs the ``eager`` program. The child pins
    ``threads``, imports the framework and initialises the device without
    :func:`frameworks.settle_heap`. ``timeout_s``: seconds before the child is killed
    (default :data:`CHILD_DEFAULT_TIMEOUT_S`). Adds ``fresh_process_s`` (the child's
    wall seconds, import included). Raises :class:`FreshPointError` when the child
    returns no row."""
    request = json.dumps(_request(point, policy, threads, contention))
    child_env = {**os.environ, **(env or {})}
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "crossover_study", "fresh-point"],
            input=request,
            capture_output=True,
            text=True,
            env=child_env,
            timeout=timeout_s or CHILD_DEFAULT_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise FreshPointError(f"the fresh process ran past {exc.timeout:g} s") from None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(ROW_MARKER):
            row = json.loads(line[len(ROW_MARKER) :])
            row["fresh_process_s"] = time.perf_counter() - started
            return row
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])
    raise FreshPointError(f"the fresh process ended with code {done.returncode} and no row: {tail}")


def _timeout(group) -> float:
    """Seconds a child measuring one of ``group``'s points may run."""
    deadline = getattr(group, "point_deadline_s", None)
    return CHILD_DEFAULT_TIMEOUT_S if deadline is None else deadline + CHILD_GRACE_S


def _ms(seconds) -> str:
    """Seconds as milliseconds for a message."""
    return f"{seconds * 1e3:.3g} ms"


def in_users_state(point, group, measure_here: Callable[[], dict], fault_s=None) -> dict:
    """``point``'s row as a user's own process would time it (the runner's one call per
    point). ``measure_here()`` measures it in the job's process (the row of
    :func:`measure_point`); ``group``: the job's :class:`GroupSpec` (policy, threads,
    contention, point deadline); ``fault_s``: the job's measured seconds per minor page
    fault (``rate_page_fault_s``; None: :data:`heap.FALLBACK_FAULT_S`).

    - ``malloc_env``: ``not_applicable`` where the applicability table refuses it (off
      the CPU); else measured in fresh processes with :data:`heap.REMEDY_ENV` only,
      paired with the eager program in fresh processes without it
      (:func:`paired_in_fresh_processes`; ``malloc_env`` = the env's ``NAME=value``
      pairs); a ``malloc_env`` child that returns no row gives an ``error`` row saying
      so.
    - any other ``ok`` row that :func:`heap.needs_users_state` flags: measured again in
      a fresh process, whose :data:`TIMED_COLUMNS` replace the job's, with a
      ``message`` clause naming both step times and fault counts. A
      fresh measurement that fails or is not ``ok`` keeps the job's row, and its
      ``message`` says so.

    Every row measured gets ``step_state`` (``job_process`` or ``fresh_process``),
    ``job_step_time_s`` and ``job_page_faults`` (the job process's measurement; None
    for ``malloc_env``, never measured there)."""
    if point.variant == MALLOC_VARIANT:
        from crossover_study.study.applicability import applicability
        from crossover_study.study.program_traits import case_kind

        applies, why = applicability(
            point.variant, point.framework, point.device, case_kind(point.case, point.framework)
        )
        if not applies:
            return {"status": "not_applicable", "message": why}
        env_text = " ".join(f"{k}={v}" for k, v in heap.REMEDY_ENV.items())
        try:
            row = paired_in_fresh_processes(point, group)
        except FreshPointError as exc:
            return {
                "status": "error",
                "message": f"{MALLOC_VARIANT}: {exc}",
                "malloc_env": env_text,
            }
        return {
            **row,
            "step_state": "fresh_process",
            "job_step_time_s": None,
            "job_page_faults": None,
            "malloc_env": env_text,
        }
    row = measure_here()
    if row.get("status") != "ok":
        return row
    row = {
        **row,
        "step_state": "job_process",
        "job_step_time_s": row.get("step_time_s"),
        "job_page_faults": row.get("step_page_faults"),
    }
    if not heap.needs_users_state(row, fault_s):
        return row
    job_text = (
        f"{_ms(row['step_time_s'])} with {row.get('step_page_faults') or 0:.0f} page faults a "
        "step in the measuring job's process"
    )
    try:
        fresh = measure_fresh(
            point, group.policy, group.threads, group.contention, None, _timeout(group)
        )
    except FreshPointError as exc:
        return _with_message(row, f"not timed again in a fresh process ({exc}); {job_text}")
    if fresh.get("status") != "ok":
        return _with_message(
            row,
            f"timing it again in a fresh process gave {fresh.get('status')}: "
            f"{fresh.get('message')}; {job_text}",
        )
    merged = {
        **row,
        **{name: fresh.get(name) for name in TIMED_COLUMNS},
        "step_state": "fresh_process",
        "fresh_process_s": fresh.get("fresh_process_s"),
        # The job process's own measurement is timed work of the study too
        # (analysis.tables.wall_summary counts it): kept, not overwritten.
        "job_measured_s": row.get("measured_s"),
    }
    return _with_message(
        merged,
        f"timed in a fresh process, the heap state a user's own loop has: "
        f"{_ms(fresh['step_time_s'])} with {fresh.get('step_page_faults') or 0:.0f} page "
        f"faults a step; {job_text}, whose heap keeps the memory a fresh process gives back",
    )


def paired_in_fresh_processes(point, group) -> dict:
    """The ``malloc_env`` row of ``point``: :data:`FRESH_ROUNDS` rounds, each a fresh
    process of the eager program (no environment added) and one started with
    :data:`heap.REMEDY_ENV` (:func:`measure_fresh`), in the order
    :func:`pairing.interleave_order` draws for the point's key. The row is the
    ``malloc_env`` process of the median step time (so its ``step_time_s`` is the
    median over the rounds), with :func:`pairing.paired_columns` of the rounds' step
    times (seconds per step: ``speedup`` = eager / malloc_env per round, its 95 %
    interval, ``paired_eager_step_s`` the eager processes' median); ``measured_s`` and
    ``fresh_process_s`` the sums over every process (the timed work and wall seconds
    the pairing cost); its ``message`` says how it was paired. Where an eager process
    returns no ok row, the row keeps the ``malloc_env`` processes' and gets
    :func:`pairing.alone_columns` saying so (a remedy measured apart is not offered:
    :func:`crossover_study.answers.remedies.remedy_table`). ``group``: the job's
    :class:`GroupSpec`. Raises :class:`FreshPointError` when a ``malloc_env`` process
    returns no row; returns the first ``malloc_env`` row that is not ``ok`` as it is."""
    from crossover_study.measure import pairing as pairs

    eager_point = pairs.reference_point(point)
    order = pairs.interleave_order(FRESH_ROUNDS, 2, pairs.order_seed(point.key()))
    eager_s: list[float] = []
    remedy_rows: list[dict] = []
    eager_failed = None
    spent_s = measured_s = 0.0
    for members in order:
        for member in members:
            if member == 1:
                row = measure_fresh(
                    point,
                    group.policy,
                    group.threads,
                    group.contention,
                    heap.REMEDY_ENV,
                    _timeout(group),
                )
                if row.get("status") != "ok":
                    return row
                remedy_rows.append(row)
            elif eager_failed is None:
                try:
                    row = measure_fresh(
                        eager_point,
                        group.policy,
                        group.threads,
                        group.contention,
                        None,
                        _timeout(group),
                    )
                except FreshPointError as exc:
                    eager_failed, row = str(exc), {}
                if row and row.get("status") != "ok":
                    eager_failed = f"{row.get('status')}: {row.get('message')}"
                elif row:
                    eager_s.append(float(row["step_time_s"]))
            else:
                continue
            spent_s += row.get("fresh_process_s") or 0.0
            measured_s += row.get("measured_s") or 0.0
    remedy_s = [float(r["step_time_s"]) for r in remedy_rows]
    median = sorted(remedy_rows, key=lambda r: r["step_time_s"])[len(remedy_rows) // 2]
    row = {**median, "fresh_process_s": spent_s, "measured_s": measured_s}
    if eager_failed is not None:
        reason = (
            f"the eager program in a fresh process gave no ok row to pair with ({eager_failed})"
        )
        return _with_message({**row, **pairs.alone_columns(reason)}, reason)
    row.update(pairs.paired_columns(eager_s, remedy_s))
    return _with_message(
        row,
        f"paired with the eager program in fresh processes: {FRESH_ROUNDS} rounds of a "
        f"fresh process of each, eager {', '.join(_ms(t) for t in eager_s)}, "
        f"{MALLOC_VARIANT} {', '.join(_ms(t) for t in remedy_s)}",
    )


def _with_message(row: dict, clause: str) -> dict:
    """``row`` with ``clause`` appended to its ``message`` ("; "-separated)."""
    message = row.get("message")
    return {**row, "message": clause if not message else f"{message}; {clause}"}


def _child() -> int:
    """The child's side: read the request, measure, print the row."""
    request = json.loads(sys.stdin.read())
    from crossover_study.measure import frameworks
    from crossover_study.study import cases
    from crossover_study.study.job_limits import ContentionPolicy
    from crossover_study.study.points import TimingPolicy
    from crossover_study.study.spec import PointSpec

    started = time.time()
    point = PointSpec(**request["point"])
    if point.variant == MALLOC_VARIANT:
        point = dataclasses.replace(point, variant="eager")
    policy = TimingPolicy(**request["policy"])
    contention = request["contention"] and ContentionPolicy(**request["contention"])
    threads = int(request["threads"])
    spec = request["case_spec"]
    if spec is not None:
        cases.use({"cases": {point.case: spec}})
    frameworks.pin_thread_env(threads)
    frameworks.import_framework(point.framework, point.device, threads)
    import_s = time.time() - started
    device_init_s = frameworks.initialise_device(
        point.framework, point.device, lstm=cases.get(point.case).lstm, settle=False
    )
    from crossover_study.measure.journal import json_default
    from crossover_study.measure.point import measure_point

    row = measure_point(point, policy, import_s, device_init_s, threads, contention)
    sys.stdout.flush()
    print(ROW_MARKER + json.dumps(row, default=json_default), flush=True)
    return 0


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """``crossover-study fresh-point``: :func:`_child` (no arguments: the request comes
    on stdin). Returns its exit status."""
    import argparse

    argparse.ArgumentParser(prog=prog, description=main.__doc__).parse_args(argv)
    return _child()
