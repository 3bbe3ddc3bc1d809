"""One measuring job: a batch of one case x framework x device, then its probe record.

The ``measure`` rule's script (``workflow/scripts/measure.py``) calls :func:`measure_job`
with Snakemake's wildcards; ``crossover-study measure-job`` does the same from
a command line, for machines without Snakemake (the GPU reference run,
:mod:`crossover_study.reference.gpu_run`, starts one such process per job). Both run the
same code: :func:`crossover_study.measure.runner.run_group`, then
:func:`crossover_study.measure.probe.probe_record`. The job measures no rates of the
step-time model: it reads those of its framework and device from the rates job's file
(:mod:`crossover_study.measure.rates_job`), measured once per study before the measuring jobs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NoReturn

from crossover_study.core.errors import describe_os_error, disk_error
from crossover_study.core.progress import job_line
from crossover_study.measure.journal import JournalBusy, adopt, hold
from crossover_study.measure.probe import probe_record, reused_missing, write_probe
from crossover_study.measure.rates_job import rates_probe, read_rates
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study import config as study_config
from crossover_study.study import job_limits
from crossover_study.study import points as study_points

#: What a job that could not write says is kept: each point is journaled (and synced)
#: as it finishes.
KEPT = "the points measured before are kept in its journal; a rerun measures the rest"


def measure_job(
    config: Mapping,
    case: str,
    framework: str,
    device: str,
    batch: int,
    threads: int,
    out_csv: str | Path,
    out_probe: str | Path,
    journal: str | Path,
    log_path: str | Path,
    echo: Callable[[str], None] | None = None,
    deadline: float | None = None,
    rates: str | Path | None = None,
    deadline_why: str | None = None,
) -> list[dict]:
    """Measure batch ``batch`` of the group ``(case, framework, device)`` of ``config``
    (a study config; validated here) with ``threads`` CPU threads, in this process (the
    measure rule and ``crossover-study measure-job`` run it in a worker process under
    :func:`crossover_study.measure.supervisor.supervise`).

    Writes the job's table ``out_csv`` (atomically), appends every line it logs to
    ``log_path`` (and passes it to ``echo`` when given, e.g. a printer of the progress
    lines, :func:`crossover_study.core.progress.for_terminal`: the job's first line and one
    per point, :mod:`crossover_study.core.progress`), sends
    what the measurement writes to ``sys.stderr`` there too (a failed point's whole
    traceback: :func:`crossover_study.measure.point.measure_point`), and
    writes the probe record ``out_probe`` also when the job fails (copied into the log:
    a failed job's outputs are removed by Snakemake). Returns the rows. Raises what
    :func:`runner.run_group` raises (a missing device with ``missing_device: fail``, a
    device lost to a sticky error), :class:`config.ConfigError` for a bad config and
    IndexError for a batch the group does not have. ``deadline``: see
    :func:`runner.run_group` (points not started by then are not measured;
    ``deadline_why``: the reason their rows give instead of the run's deadline). A point
    past ``timing.point_deadline_s`` (:func:`config.point_deadline_s`) is ended with
    every thread's stack in ``log_path`` (:mod:`crossover_study.measure.watchdog`); one that
    cannot be interrupted ends the process (SIGKILL) after its error row is journaled.

    ``rates``: the rates job's file for this framework, device and thread count
    (:func:`rates_job.read_rates`); its rates go into every row's ``rate_*`` columns and
    the probe record's ``rates``. Without one (None, a missing file, rates not measured
    or of other threads) those stay empty and the log says why. Where its probe found
    the device missing on this machine (:func:`probe.reused_missing`), the job does not
    import the framework to find it missing again: its rows and probe record carry that
    probe's reason and view, and its log says so.

    The job's journal is held for the job's whole life (:func:`journal.hold`): when
    another live process holds it (the same job of a second run), raises
    :class:`journal.JournalBusy` before measuring or writing anything but a line of
    ``log_path`` (no table, no probe record).
    """
    config = study_config.validate_config(config)
    batches = study_points.batches(config, case, framework, device)
    if not 0 <= batch < len(batches):
        raise IndexError(f"{case}/{framework}/{device} has {len(batches)} batch(es), not {batch}")
    points = batches[batch]
    group = GroupSpec(
        case=case,
        framework=framework,
        device=device,
        points=points,
        threads=threads,
        policy=study_points.timing_policy(config),
        missing_device=config["missing_device"],
        config_hash=study_points.measurement_hash(config, case),
        point_deadline_s=job_limits.point_deadline_s(config),
        contention=job_limits.contention_policy(config),
    )
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    job: dict = {"deadline_why": deadline_why}
    with open(log_path, "a") as log, contextlib.ExitStack() as held:

        def say(text: str) -> None:
            with contextlib.suppress(OSError):  # a full disk: the line is still echoed
                print(text, file=log, flush=True)
            if echo is not None:
                echo(text)

        try:  # until the probe record is written, past the measurement
            held.enter_context(hold(journal))
        except JournalBusy as exc:
            say(f"job refused: {exc}")
            if echo is None:  # on the console too (Snakemake's), not only in the log
                print(f"job refused: {exc}", file=sys.__stderr__, flush=True)
            raise
        say(job_line(case, framework, device, len(points), threads, batch, len(batches)))
        job["rates"], said = read_rates(rates, framework, device, threads)
        say(said)
        job["known_missing"] = reused_missing(rates_probe(rates), framework, device)
        if job["known_missing"]:
            say(f"device: missing, as the rates job's probe on this machine found ({rates})")
        try:
            # Stacks of a point past timing.point_deadline_s go to the log as well, and
            # so does the job's stderr: a failed point's whole traceback (point_measure),
            # as under Snakemake, whose measure rule points sys.stderr at the log.
            with contextlib.redirect_stderr(log):
                return run_group(
                    group,
                    Path(journal),
                    Path(out_csv),
                    log=say,
                    job=job,
                    deadline=deadline,
                    stacks=log,
                )
        except Exception as exc:
            if disk_error(exc):  # a full or read-only disk: its cause and path in words
                say(f"job failed: cannot write: {describe_os_error(exc)}; {KEPT}")
            else:
                say(f"job failed: {type(exc).__name__}: {exc}")
            raise
        finally:
            # After the measurement: the probe imports the framework's device queries,
            # which must not disturb the thread pinning or the import time. Written even
            # when the job fails, and copied to the log (a failed job's outputs go).
            record = probe_record(
                framework,
                device,
                threads,
                gpu_start=job.get("gpu_start"),
                known=job.get("known_missing"),
            )
            record["rates"] = job.get("rates")  # the step-time model's, from the rates job
            write_probe(record, out_probe)
            say(f"probe: {json.dumps(record, sort_keys=True)}")
            if record["threads_equal_cpus_given"] is False:
                say(
                    f"warning: {threads} threads but {record['cpus']['given']} "
                    "CPUs given; set devices.<class>.cpus_per_task"
                )


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Command line: one measuring job from a study config file (YAML or JSON; ``-``:
    standard input), under its supervisor
    (:func:`crossover_study.measure.supervisor.supervise`). Returns 0, 1 when the job
    was refused or failed (its line on stderr unless ``--echo`` printed it), 128 + the
    signal's number when a signal ended it. ``--worker`` is the supervisor's own
    measuring process (:func:`worker`)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="study config (YAML or JSON; -: stdin)")
    for name in ("case", "framework", "device"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--batch", type=int, default=0)
    parser.add_argument("--threads", type=int, help="default: devices.<device>.threads")
    parser.add_argument("--csv", required=True, help="the job's timings table")
    parser.add_argument("--probe", required=True, help="the job's probe record")
    parser.add_argument("--journal", required=True, help="the job's journal (JSON lines)")
    parser.add_argument("--log", required=True, help="the job's log (appended)")
    parser.add_argument("--rates", help="the rates job's file (default: none; no rate columns)")
    parser.add_argument("--echo", action="store_true", help="also print each log line")
    parser.add_argument(
        "--deadline", type=float, help="seconds since the epoch; later points are not measured"
    )
    parser.add_argument("--deadline-why", help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--lock-fd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--control-fd", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    import yaml

    text = sys.stdin.read() if args.config == "-" else Path(args.config).read_text()
    raw = yaml.safe_load(text)
    threads = args.threads or study_config.validate_config(raw)["devices"][args.device]["threads"]
    files = (args.csv, args.probe, args.journal, args.log)
    if args.worker:
        worker(raw, args, threads, files)  # never returns

    def echo(text: str) -> None:
        print(text, flush=True)

    from crossover_study.measure.supervisor import JobEnded, supervise

    try:
        supervise(
            raw,
            args.case,
            args.framework,
            args.device,
            args.batch,
            threads,
            *files,
            echo=echo if args.echo else None,
            deadline=args.deadline,
            rates=args.rates,
        )
    except JournalBusy:  # supervise printed its one line
        return 1
    except JobEnded as exc:  # logged (and with --echo printed) by the supervisor
        if not args.echo:
            print(exc, file=sys.stderr, flush=True)
        return exc.status
    except Exception as exc:  # noqa: BLE001 - a bad config or batch: one line
        print(f"job failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


def _die_with(supervisor: int) -> None:
    """End this process's group (this process and whatever the measured program started)
    should ``supervisor`` (its parent) be gone: nothing may go on measuring, nor hold the
    journal, once the job's own process was killed (a scheduler's SIGKILL, a runner's
    deadline). A daemon thread looks five times a second. (The kernel's
    ``PR_SET_PDEATHSIG`` would end this process alone and leave its children running.)"""

    def orphaned() -> None:
        while os.getppid() == supervisor:
            time.sleep(0.2)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=orphaned, daemon=True, name="supervisor-watch").start()


def worker(raw: Mapping, args, threads: int, files: tuple) -> NoReturn:
    """The supervisor's measuring process: :func:`measure_job` in this process, the
    journal held through the supervisor's lock (``args.lock_fd``,
    :func:`journal.adopt`), each log line sent to the supervisor as a JSON line on
    ``args.control_fd`` (``{"line": ...}``), then ``{"end": "done"}`` or ``{"end":
    "failed", "why": ...}``. Leaves with :func:`os._exit` once its files are written
    and its output flushed (status 0, or 1 after a failure), so that no thread the
    measured program left running can keep it; its process group (what the program
    started) is the supervisor's to end. Should the supervisor be gone (SIGKILL), the
    worker ends its own process group."""
    control = os.fdopen(args.control_fd, "w", buffering=1)
    adopt(args.journal, args.lock_fd)
    supervisor = os.getppid()
    _die_with(supervisor)

    def send(message: dict) -> None:
        with contextlib.suppress(OSError, ValueError):
            control.write(json.dumps(message) + "\n")

    status = 1
    try:
        measure_job(
            raw,
            args.case,
            args.framework,
            args.device,
            args.batch,
            threads,
            *files,
            echo=lambda text: send({"line": text}),
            deadline=args.deadline,
            rates=args.rates,
            deadline_why=args.deadline_why,
        )
        send({"end": "done"})
        status = 0
    except BaseException as exc:  # noqa: BLE001 - measure_job logged its "job failed" line
        why = (
            f"cannot write: {describe_os_error(exc)}; {KEPT}"
            if disk_error(exc)
            else f"{type(exc).__name__}: {exc}"
        )
        send({"end": "failed", "why": why})
    finally:
        for stream in (sys.stdout, sys.stderr, control):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(status)
