"""``crossover-study check``: the answer for one model at one size, without Snakemake.

    crossover-study check FILE.py --size batch=32 --size channels=16
        [--framework torch|tensorflow] [--devices cpu,cuda] [--variants eager,compile]
        [--out DIR] [--quick] [--job-deadline SECONDS] [--predict t4,h200 | none]
    crossover-study check s001-mlp [--size hidden=128]

What a study does for one case at one size, in one command: an in-memory study config
for that case (the plug-in ``FILE.py`` with the given sizes as its seed, or a seed
case) is validated by :func:`config.validate_config` (every check of a study file,
the plug-in's static checks included) and written to ``<out>/study.yaml``; each device
class is measured by its own ``crossover-study measure-job`` process (the
measure rule's code: journal, point deadline, probe record, step counts), after the
rates job of its framework and device (``crossover-study rates``, the
rates rule's code; its file ``<out>/rates/<framework>/<device>.json`` is the rates the
rows carry);
the per-job tables are collected (:func:`tables.collect_study`), the crossover table,
the device cards' predictions (``predicted.csv``, :mod:`crossover_study.analysis.card_prediction`;
``--predict``), the manifest and the RO-Crate are written as the workflow writes them, so that
``crossover-study audit`` and ``compare`` work on ``<out>``. The answer
(:mod:`crossover_study.answers.check_text`) is printed and written to ``<out>/answer.json``,
and ``<out>/sweep.yaml`` is the study file of the full sweep for a crossover.

A device class asked for but absent (no NVIDIA GPU listed by NVML or nvidia-smi for
``cuda`` and ``cuda_multi``) is said in one line; its rows are ``unavailable`` and no
process is started for it (never a CPU timing under its name). Bad input exits with
status 2 and one line before anything is timed
(:class:`crossover_study.quickcheck.inputs.CheckError`; the input is checked and made
a study config by :mod:`crossover_study.quickcheck.inputs`). The folder is the
check's own (never one used before). A job that ends before its points are measured
(its deadline, a failure) or Ctrl-C leaves the folder holding what was measured, its
manifest and ``answer.json`` marked ``incomplete``, and one line saying so.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

from crossover_study.core.errors import describe_os_error, disk_error
from crossover_study.core.paths import REPO_ROOT
from crossover_study.core.progress import for_terminal
from crossover_study.measure.journal import FINAL
from crossover_study.measure.launch import (
    Progress,
    job_command,
    job_files,
    rates_command,
    rates_files,
    write_benchmark,
    write_unstarted,
)
from crossover_study.quickcheck.inputs import (
    CheckError,
    build_config,
    case_name,
    claim_folder,
    sweep_study,
)
from crossover_study.study import cases
from crossover_study.study import points as study_points


def _measure(config_path: Path, out: Path, job: tuple, progress: Progress) -> list[str]:
    """One measuring job as its own ``crossover-study measure-job`` process
    (the measure rule's code, under its supervisor: the job ends when its points are
    done, or at its deadline), its progress lines (:func:`progress.for_terminal`) through
    ``progress``; writes the Snakemake-style benchmark file beside the job's log, also
    after Ctrl-C (:func:`_process`), then raises KeyboardInterrupt again. Returns the
    job's ``job failed`` lines (none when it measured every point)."""
    paths = job_files(out, out / "logs", job)
    wall, failed, interrupted = _process(job_command(config_path, job, paths), progress)
    write_benchmark(paths["bench"], wall)
    if interrupted:
        raise KeyboardInterrupt
    return failed


def _rates(config_path: Path, out: Path, framework: str, device: str, progress: Progress) -> None:
    """The rates job of ``framework`` on ``device`` as its own ``python -m
    crossover_study.measure.rates_job`` process (the rates rule's code), before that pair's
    measuring jobs, which read its file; its benchmark file beside theirs (Ctrl-C: as
    :func:`_measure`)."""
    paths = rates_files(out, out / "logs", framework, device)
    wall, _, interrupted = _process(rates_command(config_path, framework, device, paths), progress)
    write_benchmark(paths["bench"], wall)
    if interrupted:
        raise KeyboardInterrupt


def _process(cmd: list, progress: Progress) -> tuple[float, list[str], bool]:
    """Run ``cmd`` with this repository's ``src`` first on its path, passing its point
    lines and failures through ``progress``. Returns its wall seconds, its lines that
    start ``job failed`` and whether Ctrl-C stopped it.

    Ctrl-C: the terminal's SIGINT reaches ``cmd`` too (one process group); a SIGINT sent
    to this process alone is passed on to it. A measuring job then writes its table
    from its journal and exits (:mod:`crossover_study.measure.supervisor`), and its last
    lines are passed on; a second Ctrl-C kills it."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    started = time.time()
    failed: list[str] = []
    interrupted = False

    def passed(lines) -> None:
        for line in lines:
            line = line.rstrip("\n")
            if for_terminal(line):
                progress.line(line)
            if line.startswith("job failed"):
                failed.append(line)

    with subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        try:
            passed(proc.stdout)
        except KeyboardInterrupt:
            interrupted = True
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            try:
                passed(proc.stdout)
            except KeyboardInterrupt:  # a second Ctrl-C: the job is not waited for
                proc.kill()
    return time.time() - started, failed, interrupted


def _unstarted(config: dict, out: Path, job: tuple, why: str) -> None:
    """The table and probe record of an absent device's job: ``unavailable`` rows
    saying ``why`` (:func:`crossover_study.measure.launch.write_unstarted`), no process started."""
    case, framework, device, batch = job
    paths = job_files(out, out / "logs", job)
    points = study_points.batches(config, case, framework, device)[batch]
    threads = config["devices"][device]["threads"]
    # Its probe record lists the framework's devices (an import here, nothing timed):
    # what the framework's C++ side writes to stderr at import (TensorFlow's absl and
    # oneDNN lines) goes to the job's log, as a measuring job's does.
    with _fd_stderr_to(paths["log"]):
        write_unstarted(points, paths, study_points.measurement_hash(config, case), threads, why)
    write_benchmark(paths["bench"], 0.0)


@contextlib.contextmanager
def _fd_stderr_to(path: Path):
    """File descriptor 2 appended to ``path`` inside the block (restored after).
    Hand-rolled: :func:`contextlib.redirect_stderr` moves only Python's ``sys.stderr``,
    not what a framework's C++ code writes to the descriptor itself."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "a") as log:
            os.dup2(log.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def _write_studies(config: dict, case: str, out: Path) -> tuple[Path, Path]:
    """The check's study config as validated (``study.yaml``, what its jobs read) and the
    study file of the full sweep for a crossover of ``case`` (``sweep.yaml``), written
    into ``out`` (made). Returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    config_path = out / "study.yaml"
    config_path.write_text(
        "# The check's study config as validated (crossover-study check).\n"
        + yaml.safe_dump(config, sort_keys=False)
    )
    sweep_path = out / "sweep.yaml"
    sweep_path.write_text(
        "# The full sweep for a crossover of this case (crossover-study check wrote it).\n"
        + yaml.safe_dump(sweep_study(config, case, f"{case}-sweep"), sort_keys=False)
    )
    return config_path, sweep_path


def _run_jobs(
    config: dict, config_path: Path, out: Path, jobs: list, absent: dict[str, str], total: int
) -> tuple[list[str], bool]:
    """Each of ``jobs`` in turn: an ``absent`` device's written as not started
    (:func:`_unstarted`), the others measured (:func:`_measure`) after the rates job of
    their framework and device (:func:`_rates`, once per pair), their points counted
    against ``total``. Returns the jobs' ``job failed`` lines and whether Ctrl-C
    stopped the run (the jobs not started then are left out)."""
    progress = Progress(total, time.time())
    rated, failed = set(), []
    try:
        for job in jobs:
            if job[2] in absent:
                _unstarted(config, out, job, f"not visible on this machine: {absent[job[2]]}")
                continue
            if job[1:3] not in rated:  # once per framework and device, before its jobs
                _rates(config_path, out, job[1], job[2], progress)
                rated.add(job[1:3])
            failed += _measure(config_path, out, job, progress)
    except KeyboardInterrupt:
        return failed, True
    return failed, False


def _derive_tables(config: dict, out: Path, done: list[dict]):
    """The jobs' tables (``done``: :func:`job_files` of each job that wrote one)
    collected into ``timings.csv`` and ``wall.json``, the crossover table and the
    device cards' predictions, written into ``out`` as the workflow writes them.
    Returns ``(timings, crossover, predicted)`` (DataFrames)."""
    from crossover_study.analysis.card_prediction import write_predictions
    from crossover_study.analysis.crossover import write_crossover
    from crossover_study.analysis.tables import collect_study
    from crossover_study.study.device_cards import load_cards

    timings, _, _ = collect_study(
        [f["csv"] for f in done],
        [f["probe"] for f in done],
        [f["bench"] for f in done],
        out / "timings.csv",
        out / "wall.json",
        merge_environments=config["merge_environments"],
        noise_threshold=config["timing"]["noise_threshold"],
    )
    crossover = write_crossover(
        out / "timings.csv",
        out / "crossover.csv",
        n_boot=config["crossover"]["bootstrap"],
        seed=config["crossover"]["seed"],
    )
    # The accelerators on the study's device cards, predicted, written apart.
    predicted, _ = write_predictions(
        out / "timings.csv",
        load_cards(config["predict"]),
        out / "predicted.csv",
        out / "predicted_crossover.csv",
    )
    return timings, crossover, predicted


def _record(config: dict, config_path: Path, workdir: Path, out: Path, done: list, result: dict):
    """The check's answer ``result`` written as ``answer.json``, its manifest (the study
    unreported, the jobs' tables and probe records ``done``, the answer and sweep
    files, ``incomplete`` where it is) and its RO-Crate, into ``out``; paths relative
    to ``workdir``."""
    from crossover_study.provenance.crate import write_crate
    from crossover_study.provenance.manifest import unreported_manifest, write_json

    write_json(result, out / "answer.json")
    manifest = unreported_manifest(
        config,
        config_path,
        workdir,
        out,
        point_tables=[f["csv"] for f in done],
        probe_records=[f["probe"] for f in done],
        extra={
            "check": {"answer": "answer.json", "sweep_study": "sweep.yaml"},
            **({"incomplete": result["incomplete"]} if result["incomplete"] else {}),
        },
    )
    write_json(manifest, out / "manifest.json")
    write_crate(
        manifest,
        workdir=workdir,
        out=out / "ro-crate-metadata.json",
        manifest_path=out / "manifest.json",
    )


def run_check(config: dict, case: str, absent: dict[str, str], out: Path, workdir: Path) -> dict:
    """Measure, collect, answer and record the check in ``out`` (see the module
    docstring); prints one line per point and the answer. Returns the answer (dict),
    whose ``incomplete`` is None, or ``{"reason", "points_measured", "points"}`` when a
    job ended before its points were measured (its deadline, a failure) or the check
    was interrupted (Ctrl-C: the jobs not started are left out, the one running writes
    its table from its journal); the manifest and ``answer.json`` say so too. Raises
    RuntimeError when no job wrote its table."""
    from crossover_study.answers.check_text import answer, answer_lines

    config_path, sweep_path = _write_studies(config, case, out)
    for device, why in absent.items():
        print(
            f"{device}: absent on this machine ({why}); not measured, never timed on the CPU",
            flush=True,
        )
    jobs = study_points.measure_jobs(config)
    measured = [j for j in jobs if j[2] not in absent]
    total = sum(len(study_points.batches(config, *j[:3])[j[3]]) for j in measured)
    failed, interrupted = _run_jobs(config, config_path, out, jobs, absent, total)
    files = [job_files(out, out / "logs", j) for j in jobs]
    done = [f for f in files if f["csv"].is_file() and f["probe"].is_file()]
    if not done:
        raise (KeyboardInterrupt if interrupted else RuntimeError)(
            f"no measuring job wrote its table; see {out / 'logs'}"
        )
    timings, crossover, predicted = _derive_tables(config, out, done)
    result = answer(timings, crossover, case, absent, sweep_path, predicted=predicted)
    kept = timings[~timings["device"].isin(list(absent)) & timings["status"].isin(FINAL)]
    result["incomplete"] = None
    if interrupted or failed:
        reason = "interrupted (Ctrl-C)" if interrupted else "; ".join(failed)
        result["incomplete"] = {"reason": reason, "points_measured": len(kept), "points": total}
    _record(config, config_path, workdir, out, done, result)
    if not interrupted:
        for line in answer_lines(result):
            print(line, flush=True)
        print(f"wrote {out} (timings.csv, answer.json, manifest.json; crossover-study audit {out})")
    return result


def _parser(prog: str | None) -> argparse.ArgumentParser:
    """The command line's parser (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="a plug-in file (FILE.py) or a seed case (s001-mlp)")
    parser.add_argument(
        "--size",
        action="append",
        default=[],
        metavar="AXIS=N",
        help="a size the builder takes (repeat per axis)",
    )
    parser.add_argument("--framework", help="torch or tensorflow (default: what the file imports)")
    parser.add_argument(
        "--devices", help="comma-separated device classes (default: every one present)"
    )
    parser.add_argument(
        "--variants", help="comma-separated variants (default: eager and every one that applies)"
    )
    parser.add_argument("--out", help="output folder (default: results/check-<case>-<UTC time>/)")
    parser.add_argument(
        "--quick", action="store_true", help="short timing (3 short blocks, no block-length check)"
    )
    parser.add_argument(
        "--job-deadline",
        type=float,
        metavar="SECONDS",
        help="end a device's measuring job after this long, keeping what it measured "
        "(default: 90%% of the device class's runtime, 54 minutes)",
    )
    parser.add_argument(
        "--predict",
        metavar="CARDS",
        help="comma-separated device cards to predict the step on (default: t4,a100-80gb,"
        "h100-sxm; none: no prediction; crossover-study devices lists them)",
    )
    return parser


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Command line (see the module docstring). Returns 0; 2 for bad input (one line on
    stderr, nothing timed); 1 when no job wrote its table, or a job ended before its
    points were measured (its deadline, a failure: one line, the folder marked
    incomplete); 130 after Ctrl-C (one line: how many points were measured, the folder
    marked incomplete)."""
    args = _parser(prog).parse_args(argv)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        name = case_name(Path(args.target)) if args.target not in cases.SEEDS else args.target
        config, case, _, absent = build_config(args, f"check-{name}-{stamp}")
    except CheckError as error:
        print(f"{prog or 'check'}: {error}", file=sys.stderr)
        return 2
    try:
        out = claim_folder(args.out, config["study"])
    except CheckError as error:
        print(f"{prog or 'check'}: {error}", file=sys.stderr)
        return 2
    config["study"] = config["study"] if args.out else out.name
    cwd = Path.cwd().resolve()
    workdir = cwd if out.is_relative_to(cwd) and out != cwd else out.parent
    name = prog or "check"
    try:
        result = run_check(config, case, absent, out, workdir)
    except KeyboardInterrupt as stopped:  # before a job wrote its table, or after collecting
        why = str(stopped) or f"{out} holds what was measured, without a manifest"
        print(f"{name}: interrupted; {why}", file=sys.stderr)
        return 130
    except RuntimeError as error:
        print(f"{name}: {error}", file=sys.stderr)
        return 1
    except OSError as exc:  # a full or read-only disk: one line, what was measured kept
        if not disk_error(exc):
            raise
        print(
            f"{name}: cannot write: {describe_os_error(exc)}; {out} keeps what was measured "
            "(its journals hold every point measured)",
            file=sys.stderr,
        )
        return 1
    incomplete = result["incomplete"]
    if incomplete is None:
        return 0
    measured = f"{incomplete['points_measured']} of {incomplete['points']} points"
    holds = f"{out} holds what was measured, marked incomplete"
    if incomplete["reason"].startswith("interrupted"):
        print(f"{name}: interrupted after {measured}; {holds}", file=sys.stderr, flush=True)
        return 130
    print(f"{name}: incomplete: {measured} measured; {holds}", file=sys.stderr, flush=True)
    return 1
