"""A study measured without Snakemake, packed into one archive: the GPU reference run.

The reference GPU machine has torch built for CUDA but no Snakemake, papermill or
network, and one command there may run for at most a few minutes. ``make
reference-gpu`` (``crossover-study reference-gpu``) does there what the
workflow's ``measure``, ``collect`` and ``crossover`` rules and the manifest do:

1. installs the GPU bundle (:mod:`crossover_study.reference.gpu_bundle`) and refuses to start,
   naming what is missing, when a module the run imports still fails to import;
2. validates the study and runs each measuring job as its own process
   (``crossover-study measure-job``: the code the ``measure`` rule runs),
   one job at a time, most informative jobs first, printing a line per point; before
   the first job of a framework and device, that pair's rates job (``python -m
   crossover_study.measure.rates_job``: the ``rates`` rule's code), whose file its measuring
   jobs read (``results/<study>/rates/``, in the archive; not run again when a resumed
   run has it). A job
   whose process fails (a device lost to a sticky CUDA error) is started again and
   measures only what its journal lacks (``runner.MAX_ATTEMPTS`` crashes of one point's
   own make it an ``error`` row); one still failing, or killed inside a point by the
   deadline, is started once more with the deadline passed, which writes its table from
   its journal. Points not started before the deadline are ``unavailable`` rows that say
   so, and jobs not started by then are not started at all. After each job the results
   so far are packed into ``<out>/partial-<study>.tar.gz``: if the command is killed,
   ``crossover-study reference-gpu finish`` completes that on any machine;
3. collects the tables against the probe records, computes the crossover, writes the
   resolved config and the manifest (``report`` empty: the report and the RO-Crate are
   made where the archive is imported, :mod:`crossover_study.reference.archive_import`);
4. packs ``results/<study>/`` and ``logs/<study>/`` into
   ``<out>/reference-<study>-<host>-<UTC date>.tar.gz`` (at most :data:`ARCHIVE_LIMIT_BYTES`)
   and removes the partial archive.

The jobs' order is :mod:`crossover_study.reference.gpu_jobs`'s; their files, commands and
progress lines are :mod:`crossover_study.measure.launch`'s (the check launches its jobs
the same way); steps 3 and 4 (and ``finish``) are
:mod:`crossover_study.reference.gpu_finish`'s. Only the standard library,
:mod:`gpu_bundle` and those three modules (standard library only at their top) are
imported before the bundle is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from datetime import UTC, datetime
from pathlib import Path

from crossover_study.core.paths import REPO_ROOT, portable_path
from crossover_study.measure.launch import (
    Progress,
    job_command,
    job_files,
    rates_command,
    rates_files,
    write_benchmark,
    write_unstarted,
)
from crossover_study.reference import gpu_bundle
from crossover_study.reference.gpu_finish import RUNNER_RECORD, finish, finish_partial, pack
from crossover_study.reference.gpu_jobs import job_order

#: The public names, those of the jobs and of the finishing steps included (callers
#: import them from here).
__all__ = [
    "BUDGET_S",
    "FINISH_RESERVE_S",
    "GRACE_S",
    "SALVAGE_TIMEOUT_S",
    "SRC",
    "main",
    "prepare",
    "run",
]

SRC = REPO_ROOT / "src"
#: Default wall-clock budget of the whole run (install, measure, collect, pack): the
#: issue's 8 minutes. The measuring deadline is the budget less :data:`GRACE_S` and
#: :data:`FINISH_RESERVE_S`, so that a point in flight and the finishing steps fit in it.
BUDGET_S = 480.0
#: Seconds kept for collecting, the crossover's bootstrap, the manifest and the archive.
FINISH_RESERVE_S = 40.0
#: Seconds a job may run past the deadline (its point in flight) before it is killed.
GRACE_S = 20.0
#: Seconds a job started only to write its table from its journal may take.
SALVAGE_TIMEOUT_S = 30.0


def _run_job(cmd: list[str], env: dict, timeout: float, progress: Progress) -> tuple[int, float]:
    """Run one measuring job's process, streaming its lines; kill its process group
    after ``timeout`` seconds. Returns (exit status, wall seconds); -9 when killed."""
    import threading

    start = time.time()
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            progress.line(line.rstrip("\n"))
        code = proc.wait()
    finally:
        timer.cancel()
    if killed.is_set():
        print(f"killed after {timeout:.0f} s (the run's deadline)", flush=True)
        return -9, time.time() - start
    return code, time.time() - start


def _rates(config_path, results, logs, pair, env, deadline, progress, runner_info) -> None:
    """The rates job of ``pair`` (framework, device) as its own process, before that
    pair's first measuring job, unless its rates file is there already (a resumed run,
    or a job of the same pair before); its benchmark file beside the jobs'. A rates
    job that fails or passes the deadline leaves no file: its measuring jobs then leave
    their rate columns empty. Recorded in ``runner_info["rates_jobs"]`` (``job``,
    ``exit_status``, ``wall_s``)."""
    paths = rates_files(results, logs, *pair)
    if paths["out"].is_file():
        return
    timeout = max(5.0, deadline + GRACE_S - time.time())
    code, wall = _run_job(rates_command(config_path, *pair, paths), env, timeout, progress)
    write_benchmark(paths["bench"], wall)
    entry = {"job": "/".join(pair), "exit_status": code, "wall_s": round(wall, 3)}
    runner_info["rates_jobs"].append(entry)


def prepare(bundle: str | Path | None, site: str | Path | None = None) -> dict | None:
    """Check the GPU bundle against the lock and this Python (:func:`gpu_bundle.problems`),
    install it into ``site`` (default: a folder under the system's temporary folder)
    and check that every module the run imports imports. Returns the bundle's record
    (None without a bundle). Raises :class:`gpu_bundle.BundleError` saying what is
    wrong and what to do, before anything is measured."""
    record = None
    if bundle is not None:
        found = gpu_bundle.problems(bundle, for_python=gpu_bundle.this_python())
        if found:
            raise gpu_bundle.BundleError(
                f"the GPU bundle at {bundle} cannot be used here:\n  "
                + "\n  ".join(found)
                + "\nRun `make gpu-bundle` on a machine with PyPI and carry .gpu-bundle again."
            )
        record = gpu_bundle.load_record(bundle)
        site = Path(site or Path(os.environ.get("TMPDIR", "/tmp")) / "crossover-gpu-bundle")
        gpu_bundle.install(bundle, site)
    missing = gpu_bundle.missing_modules()
    if missing:
        own = {
            m
            for m, d in gpu_bundle.REQUIRED_MODULES.items()
            if d in gpu_bundle.GPU_MACHINE_PACKAGES
        }
        machine = [m for m in missing if m.split(" ", 1)[0] in own]
        advice = (
            f"{', '.join(m.split(' ', 1)[0] for m in machine)}: the GPU machine's own "
            f"python3 has these; is {sys.executable} that python3 (make PYTHON=...)?"
            if machine
            else "Add them to the GPU bundle (gpu_bundle.BUNDLE_PACKAGES, `make gpu-bundle`)."
        )
        raise gpu_bundle.BundleError(
            "cannot start: these modules do not import:\n  " + "\n  ".join(missing) + f"\n{advice}"
        )
    return record


def _git_source(record: dict | None) -> str:
    """Where the run's git state comes from, printed with it: ``git``, or in a copy
    without ``.git`` the commit the GPU bundle's ``record`` was stamped with (set in the
    environment for the jobs; its code hashes are in the manifest, so the audit tells
    whether the files still match it)."""
    from crossover_study.core.origin import GIT_ENV, git_state

    commit, dirty = git_state()
    source = "git"
    if commit == "unknown" and record is not None and record.get("git", {}).get("commit"):
        os.environ[GIT_ENV[0]] = record["git"]["commit"]
        os.environ[GIT_ENV[1]] = "true" if record["git"].get("dirty") else "false"
        commit, dirty = git_state()
        source = "gpu bundle record (no .git in this copy)"
    print(f"git: {commit}{' (dirty)' if dirty else ''} from {source}", flush=True)
    return source


def _measure_job(
    config, resolved, results, logs, job, env, deadline, progress, runner_info
) -> dict:
    """One measuring job ``(case, framework, device, batch)`` of the study ``config``
    (written at ``resolved``), its files under ``results`` and ``logs``
    (:func:`job_files`), its benchmark file written at the end: not started when
    ``deadline`` has passed and it has no table (its table then says so,
    :func:`write_unstarted`); else after its pair's rates job (:func:`_rates`), started
    again while its process fails (at most ``MAX_ATTEMPTS`` + 1 times, not past the
    deadline once it ran), then, still failing with a journal, once more with the
    deadline passed, which writes its table from the journal. Returns its entry of the
    runner record: ``job``, ``started``, ``exit_status`` (each start's), ``wall_s``,
    ``salvaged_from_journal``; a rates job run is added to ``runner_info["rates_jobs"]``
    (``runner_info``: the runner record so far)."""
    from crossover_study.measure.journal import MAX_ATTEMPTS
    from crossover_study.study import points as study_points

    case, framework, device, batch = job
    stem = f"{case}/{framework}/{device}/batch-{batch}"
    paths = job_files(results, logs, job)
    cmd = job_command(resolved, job, paths)
    entry = {"job": stem, "started": False, "exit_status": [], "salvaged_from_journal": False}
    wall = 0.0
    if time.time() > deadline and not paths["csv"].is_file():
        when = datetime.fromtimestamp(deadline, UTC).isoformat(timespec="seconds")
        why = f"not measured: the run's deadline ({when}) passed before this job started"
        points = study_points.batches(config, case, framework, device)[batch]
        threads = config["devices"][device]["threads"]
        write_unstarted(
            points, paths, study_points.measurement_hash(config, points[0].case), threads, why
        )
        print(f"job {stem}: not started (deadline passed)", flush=True)
        entry["wall_s"] = round(wall, 3)
        write_benchmark(paths["bench"], wall)
        return entry
    entry["started"] = True
    _rates(resolved, results, logs, (framework, device), env, deadline, progress, runner_info)
    # A job whose process dies is started again: its journal keeps its points, and a
    # point whose own crashes ended MAX_ATTEMPTS processes becomes an error row (a point
    # ended from outside counts no attempt: it is measured again while this loop lasts,
    # then left to the salvage below).
    for _attempt in range(MAX_ATTEMPTS + 1):
        if time.time() > deadline and entry["exit_status"]:
            break
        timeout = max(5.0, deadline + GRACE_S - time.time())
        code, seconds = _run_job([*cmd, f"--deadline={deadline}"], env, timeout, progress)
        entry["exit_status"].append(code)
        wall += seconds
        if code == 0:
            break
        print(f"job {stem} exited with status {code}", flush=True)
    if entry["exit_status"][-1] != 0 and paths["journal"].is_file():
        # Still failing, or killed inside a point: once more with the deadline passed,
        # which measures nothing and writes the table from the journal.
        code, seconds = _run_job([*cmd, "--deadline=0"], env, SALVAGE_TIMEOUT_S, progress)
        wall += seconds
        entry["salvaged_from_journal"] = code == 0
        print(f"job {stem}: table written from its journal: {code == 0}", flush=True)
    entry["wall_s"] = round(wall, 3)
    write_benchmark(paths["bench"], wall)
    return entry


def _write_resolved(config: dict, results: Path) -> Path:
    """The study's config as validated, every default filled in, written into
    ``results`` (made) as ``config.resolved.yaml``, the file the jobs read. Returns its
    path."""
    import yaml

    results.mkdir(parents=True, exist_ok=True)
    resolved = results / "config.resolved.yaml"
    with resolved.open("w") as fh:
        fh.write("# The study's config as validated, every default filled in.\n")
        yaml.safe_dump(config, fh, sort_keys=False)
    return resolved


def _job_env() -> dict:
    """The jobs' environment: this one, with this repository's ``src`` first on
    ``PYTHONPATH`` and Python's output unbuffered (a job's lines arrive as printed)."""
    paths_now = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *paths_now])}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _runner_record(study, budget_s: float, when: str, git_source: str, record) -> dict:
    """The head of the runner record (:data:`RUNNER_RECORD`): the run's budget and
    deadline (``when``, UTC), where its git state came from, the GPU bundle's
    ``record`` (None without a bundle) and the study file's portable path; its ``jobs``
    and ``rates_jobs`` are filled as they run."""
    return {
        "name": "crossover_study.reference.gpu_run (no Snakemake)",
        "budget_s": budget_s,
        "deadline_utc": when,
        "git_source": git_source,
        "bundle": None
        if record is None
        else {k: record.get(k) for k in ("created_utc", "packages", "git")},
        "study_file": portable_path(study),  # provenance holds no machine path
        "jobs": [],
        "rates_jobs": [],
    }


def run(
    study: str | Path,
    out: str | Path,
    workdir: str | Path | None = None,
    bundle: str | Path | None = gpu_bundle.BUNDLE_DIR,
    budget_s: float = BUDGET_S,
    site: str | Path | None = None,
) -> Path:
    """Measure ``study`` here without Snakemake and write its archive into ``out``.

    ``workdir``: where ``results/<study>/`` and ``logs/<study>/`` are written; by default
    a new folder under the system's temporary folder (removed at the end), outside the
    repository, so that the manifest names code by its path in the repository (root
    ``repo``) and results by their path in the run (root ``workdir``). A ``workdir``
    that already holds the study's results is resumed: journaled points are kept.
    ``bundle``: the GPU bundle folder to install first (None: install nothing, the
    interpreter already has everything); ``site``: where to install it. ``budget_s``:
    wall seconds from the start of this call to the archive (the measuring deadline is
    :data:`GRACE_S` + :data:`FINISH_RESERVE_S` earlier). Returns the archive's path.

    Raises FileNotFoundError for a missing study file and
    :class:`gpu_bundle.BundleError` (both before installing or measuring anything),
    :class:`config.ConfigError` for a bad study (before measuring), and RuntimeError
    when no job produced a table or the archive exceeds :data:`ARCHIVE_LIMIT_BYTES`.
    """
    started = time.time()
    if not Path(study).is_file():
        raise FileNotFoundError(f"study file {study} not found")
    record = prepare(bundle, site)
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))

    from crossover_study.study import config as study_config
    from crossover_study.study import points as study_points
    from crossover_study.workloads.torch_base import compile_toolchain_missing

    config = study_config.load_config(study)  # a bad study stops here, nothing measured
    name = config["study"]
    own_workdir = workdir is None
    if own_workdir:
        import tempfile

        workdir = tempfile.mkdtemp(prefix="crossover-reference-")
    workdir, out = Path(workdir).resolve(), Path(out).resolve()
    results, logs = workdir / "results" / name, workdir / "logs" / name
    if results.exists():
        print(f"resuming the run in {results}: its journals keep the points measured")
    print(f"results and logs under {workdir}", flush=True)
    git_source = _git_source(record)
    for device in ("cpu", "cuda"):
        print(
            f"torch.compile on {device}: {compile_toolchain_missing(device) or 'toolchain found'}"
        )
    resolved = _write_resolved(config, results)

    jobs = sorted(study_points.measure_jobs(config), key=job_order)
    total = sum(len(study_points.batches(config, c, f, d)[b]) for c, f, d, b in jobs)
    print(f"study {name}: {len(jobs)} measuring jobs, {total} points, budget {budget_s:.0f} s")
    deadline = started + budget_s - FINISH_RESERVE_S - GRACE_S
    when = datetime.fromtimestamp(deadline, UTC).isoformat(timespec="seconds")
    progress = Progress(total, started)
    env = _job_env()
    out.mkdir(parents=True, exist_ok=True)
    partial = out / f"partial-{name}.tar.gz"
    runner_info = _runner_record(study, budget_s, when, git_source, record)
    for job in jobs:
        entry = _measure_job(
            config, resolved, results, logs, job, env, deadline, progress, runner_info
        )
        runner_info["jobs"].append(entry)
        (results / RUNNER_RECORD).write_text(json.dumps(runner_info, indent=1) + "\n")
        pack(partial, workdir, (results, logs))

    archive = finish(workdir, name, config, Path(study), runner_info, out)
    partial.unlink(missing_ok=True)
    if own_workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{time.time() - started:.0f} s in all", flush=True)
    return archive


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Command line of :func:`run` (and ``finish PARTIAL --out DIR``: :func:`finish_partial`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["finish"]:
        finisher = argparse.ArgumentParser(prog=f"{prog or 'reference-gpu'} finish")
        finisher.add_argument("partial", help="partial-<study>.tar.gz of a killed run")
        finisher.add_argument("--out", required=True, help="folder for the final archive")
        args = finisher.parse_args(argv[1:])
        try:
            finish_partial(args.partial, args.out)
        except (OSError, ValueError, RuntimeError, tarfile.TarError) as exc:
            print(f"reference run finish: {exc}", file=sys.stderr, flush=True)
            return 2
        return 0
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--study", required=True, help="the study file, e.g. config/studies/reference-gpu.yaml"
    )
    parser.add_argument(
        "--out", required=True, help="folder the archive is written to ($OUT on the GPU machine)"
    )
    parser.add_argument(
        "--workdir", help="where results/ and logs/ go (default: a new temporary folder)"
    )
    parser.add_argument(
        "--bundle",
        default=str(gpu_bundle.BUNDLE_DIR),
        help="GPU bundle folder ('none': install nothing)",
    )
    parser.add_argument(
        "--budget-s", type=float, default=BUDGET_S, help="wall seconds for the whole run"
    )
    args = parser.parse_args(argv)
    bundle = None if args.bundle == "none" else args.bundle
    try:
        run(args.study, args.out, args.workdir, bundle, args.budget_s)
    except (gpu_bundle.BundleError, FileNotFoundError, RuntimeError) as exc:
        print(f"reference run: {exc}", file=sys.stderr, flush=True)
        return 2
    except ValueError as exc:  # config.ConfigError: one line naming the key path
        print(f"reference run: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0
