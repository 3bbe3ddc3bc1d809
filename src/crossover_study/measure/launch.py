"""Measuring and rates jobs launched as their own processes, without Snakemake, by the
one-size check (:mod:`crossover_study.quickcheck.command`) and the GPU reference run
(:mod:`crossover_study.reference.gpu_run`): their files in the layout of the workflow's
rules, their command lines, the Snakemake-style benchmark file, the run's progress line
of each point, and the table of a job that was not started.

Only the standard library is imported at the top (the GPU run imports this module before
its bundle is installed); what writes a table is imported where it is used.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from crossover_study.core.progress import POINT_LINE


def job_files(results: Path, logs: Path, job: tuple[str, str, str, int]) -> dict[str, Path]:
    """The files of one measuring job ``(case, framework, device, batch)``, in the
    layout of the workflow's measure rule: ``csv``, ``probe``, ``journal``, ``log``,
    the Snakemake-style benchmark file ``bench`` and the rates file it reads, ``rates``
    (:func:`rates_files`' ``out``)."""
    case, framework, device, batch = job
    stem = f"{case}/{framework}/{device}/batch-{batch}"
    return {
        "csv": results / "points" / f"{stem}.csv",
        "probe": results / "points" / f"{stem}.probe.json",
        "journal": results / "journal" / f"{stem}.jsonl",
        "log": logs / "measure" / f"{stem}.log",
        "bench": logs / "benchmarks" / "measure" / f"{stem}.tsv",
        "rates": rates_files(results, logs, framework, device)["out"],
    }


def rates_files(results: Path, logs: Path, framework: str, device: str) -> dict[str, Path]:
    """The files of the rates job of ``framework`` on ``device``, in the layout of the
    workflow's rates rule: ``out`` (the rates file), ``log`` and ``bench``."""
    return {
        "out": results / "rates" / framework / f"{device}.json",
        "log": logs / "rates" / framework / f"{device}.log",
        "bench": logs / "benchmarks" / "rates" / framework / f"{device}.tsv",
    }


def rates_command(config_path: str | Path, framework: str, device: str, paths: dict) -> list:
    """The command of one rates job as its own process, printing its log lines:
    ``crossover-study rates`` (the rates rule's code) with the threads of
    ``device``'s class in the study config ``config_path`` and its files
    (:func:`rates_files`; ``bench`` is the caller's to write, :func:`write_benchmark`)."""
    return [
        sys.executable,
        "-m",
        "crossover_study",
        "rates",
        f"--config={config_path}",
        f"--framework={framework}",
        f"--device={device}",
        "--echo",
        f"--out={paths['out']}",
        f"--log={paths['log']}",
    ]


def job_command(config_path: str | Path, job: tuple[str, str, str, int], paths: dict) -> list:
    """The command of one measuring job as its own process, printing its log lines
    (``--echo``): ``crossover-study measure-job`` (the measure rule's code)
    with the study config ``config_path``, the job ``(case, framework, device, batch)``
    and its files (:func:`job_files`; ``bench`` is the caller's to write,
    :func:`write_benchmark`; ``rates`` is read, the rates job's, run first)."""
    case, framework, device, batch = job
    return [
        sys.executable,
        "-m",
        "crossover_study",
        "measure-job",
        f"--config={config_path}",
        f"--case={case}",
        f"--framework={framework}",
        f"--device={device}",
        f"--batch={batch}",
        "--echo",
        *(f"--{k}={v}" for k, v in paths.items() if k != "bench"),
    ]


def write_benchmark(path: Path, wall_s: float) -> None:
    """A benchmark file as Snakemake's ``benchmark`` directive writes it (columns ``s``
    and ``h:m:s``; the collect step's wall-time summary reads ``s``): ``wall_s`` seconds
    of a job run without Snakemake."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"s\th:m:s\n{wall_s:.4f}\t{time.strftime('%H:%M:%S', time.gmtime(wall_s))}\n")


class Progress:
    """Prints the jobs' lines of a whole run, a point's progress line
    (:data:`progress.POINT_LINE`, the runner's) under the run's counter and clock:
    ``[i/n elapsed] [case framework device · j/m] point: outcome``."""

    def __init__(self, total: int, started: float, out=None):
        self.total, self.started, self.out = total, started, out
        self.seen: set[str] = set()

    def line(self, text: str) -> None:
        """Pass one log line of a job through; a point's outcome gets the counter (a
        point counted once, also when a retried job's journal kept it)."""
        match = POINT_LINE.match(text)
        if match:
            self.seen.add(f"{match['job']} {match['point']}")
            elapsed = time.time() - self.started
            text = f"[{len(self.seen)}/{self.total} {elapsed:4.0f} s] {text.strip()}"
        print(text, file=self.out or sys.stdout, flush=True)


def write_unstarted(points, paths: dict, config_hash: str, threads: int, why: str) -> None:
    """The table and probe record of a job the deadline kept from starting: every point
    ``unavailable`` with ``why`` (``not_applicable`` where the variant does not exist in
    the framework, as the runner decides), written by this process, whose probe record
    says ``job_started: false``."""
    from crossover_study.core.files import write_csv_atomic
    from crossover_study.core.origin import placement, table_columns
    from crossover_study.measure.probe import probe_record, write_probe
    from crossover_study.study.programs import program_or_none
    from crossover_study.workloads import framework_mismatch

    now = datetime.now(UTC).isoformat(timespec="seconds")
    rows = []
    for point in points:
        mismatch = framework_mismatch(point)
        rows.append(
            {
                **point.as_row(),
                **placement(),
                "python_version": sys.version.split()[0],
                "config_hash": config_hash,
                "status": "not_applicable" if mismatch else "unavailable",
                "message": mismatch or why,
                "utc_time": now,
                "program": program_or_none(
                    point.case, point.framework, point.device, point.variant
                ),
            }
        )
    write_csv_atomic(rows, table_columns("timings"), paths["csv"])
    first = points[0]
    record = probe_record(first.framework, first.device, threads)
    write_probe({**record, "job_started": False, "job_not_started_because": why}, paths["probe"])
