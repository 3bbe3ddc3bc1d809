"""A study measured without Snakemake, packed into one archive: the GPU reference run.

The reference GPU machine has torch built for CUDA but no Snakemake, papermill or
network, and one command there may run for at most a few minutes. ``make
reference-gpu`` (``python -m crossover_study.reference_run``) does there what the
workflow's ``measure``, ``collect`` and ``crossover`` rules and the manifest do:

1. installs the GPU bundle (:mod:`crossover_study.gpu_bundle`) and refuses to start,
   naming what is missing, when a module the run imports still fails to import;
2. validates the study and runs each measuring job as its own process
   (``python -m crossover_study.measure_job``: the code the ``measure`` rule runs),
   one job at a time, most informative jobs first, printing a line per point; a job
   whose process fails (a device lost to a sticky CUDA error) runs once more and
   measures only what its journal lacks; points not started before the deadline are
   ``unavailable`` rows that say so;
3. collects the tables against the probe records, computes the crossover, writes the
   resolved config and the manifest (``report`` empty: the report and the RO-Crate are
   made where the archive is imported, :mod:`crossover_study.reference_import`);
4. packs ``results/<study>/`` and ``logs/<study>/`` into
   ``<out>/reference-<study>-<host>-<UTC date>.tar.gz`` (at most :data:`ARCHIVE_LIMIT_BYTES`).

Only the standard library and :mod:`gpu_bundle` are imported before the bundle is
installed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from datetime import UTC, datetime
from pathlib import Path

from . import gpu_bundle

REPO_ROOT = Path(__file__).resolve().parents[2]
SRC = REPO_ROOT / "src"
#: Files that come back from the GPU machine may be at most 16 MiB each.
ARCHIVE_LIMIT_BYTES = 16 * 1024 * 1024
#: Default wall-clock budget of the whole run (install, measure, collect, pack): the
#: issue's 8 minutes. Measuring stops early enough to leave :data:`FINISH_RESERVE_S`.
BUDGET_S = 480.0
#: Seconds kept for collecting, the crossover's bootstrap, the manifest and the archive.
FINISH_RESERVE_S = 45.0
#: Seconds a job may run past the deadline (its point in flight) before it is killed.
GRACE_S = 30.0
#: Order of the jobs when the deadline may cut the run short: a case's accelerator and
#: CPU jobs together (a crossover needs both), cases by what the GPU run is checked
#: against first (s001 and s000 carry its targets), the accelerator before the CPU; the
#: LSTM last, as its CPU job is the longest (its torch.compile point alone: 39 s to
#: compile and 2.4 s per step against eager's 0.063 s, on 2 cores here).
CASE_ORDER = ("s001-mlp", "s000-hjb", "s002-iris", "s004-lstm")
DEVICE_ORDER = ("cuda", "cpu", "cuda_multi", "tpu")


def job_order(job: tuple[str, str, str, int]) -> tuple:
    """Sort key of a measuring job ``(case, framework, device, batch)``: torch's jobs
    first (another framework that is not installed fails in a second anyway), then
    :data:`CASE_ORDER`, then :data:`DEVICE_ORDER`."""
    case, framework, device, batch = job
    rank = {name: i for i, name in enumerate(CASE_ORDER)}
    dev = {name: i for i, name in enumerate(DEVICE_ORDER)}
    return (framework != "torch", rank.get(case, 9), case, dev.get(device, 9), framework, batch)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "unknown"


#: A point's line in a job's log (runner.run_group): two spaces, the point's key, its
#: outcome ("kept" for a point its journal already held).
POINT_LINE = re.compile(
    r"^  (?P<key>[^\s:]+\|[^\s:]*): (?P<what>ok|unavailable|oom|error|not_applicable|kept)\b"
)


class Progress:
    """Prints one line per point of the whole run: ``[i/n elapsed] key: status ...``."""

    def __init__(self, total: int, started: float, out=None):
        self.total, self.started, self.out = total, started, out
        self.seen: set[str] = set()

    def line(self, text: str) -> None:
        """Pass one log line of a job through; a point's outcome gets the counter."""
        match = POINT_LINE.match(text)
        if match:
            self.seen.add(match["key"])
            elapsed = time.time() - self.started
            text = f"[{len(self.seen)}/{self.total} {elapsed:4.0f} s] {text.strip()}"
        print(text, file=self.out or sys.stdout, flush=True)


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
    a new folder under the system's temporary folder, outside the repository, so that
    the manifest names code by its path in the repository (root ``repo``) and results by
    their path in the run (root ``workdir``), wherever the archive is imported. ``bundle``: the GPU bundle folder to
    install first (None: install nothing, the interpreter already has everything);
    ``site``: where to install it (default: a folder under the system's temporary
    folder). ``budget_s``: wall seconds for the whole run, measured from the start of
    this call. Returns the archive's path.

    Raises :class:`gpu_bundle.BundleError` (before measuring) when the bundle does not
    install or a required module does not import, :class:`config.ConfigError` for a bad
    study, and RuntimeError when no job produced a table or the archive exceeds
    :data:`ARCHIVE_LIMIT_BYTES`.
    """
    started = time.time()
    if not Path(study).is_file():
        raise FileNotFoundError(f"study file {study} not found")
    if workdir is None:
        import tempfile

        workdir = tempfile.mkdtemp(prefix="crossover-reference-")
    workdir, out = Path(workdir).resolve(), Path(out).resolve()
    print(f"results and logs under {workdir}", flush=True)
    record = None
    if bundle is not None:
        record = gpu_bundle.load_record(bundle)
        site = Path(site or Path(os.environ.get("TMPDIR", "/tmp")) / "crossover-gpu-bundle")
        gpu_bundle.install(bundle, site)
    missing = gpu_bundle.missing_modules()
    if missing:
        raise gpu_bundle.BundleError(
            "cannot start: these modules do not import:\n  "
            + "\n  ".join(missing)
            + "\nAdd them to the GPU bundle (gpu_bundle.BUNDLE_PACKAGES, `make gpu-bundle`)."
        )
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    import yaml

    from . import config as study_config
    from .crossover import write_crossover
    from .manifest import build_manifest, write_json
    from .provenance import GIT_ENV, git_state
    from .tables import collect_study
    from .workloads.torch_cases import compile_toolchain_missing

    commit, dirty = git_state()
    git_source = "git"
    if commit == "unknown" and record is not None and record.get("git", {}).get("commit"):
        # A copy without .git: the commit the bundle was made from (its code hashes are
        # in the manifest, so the audit tells whether the files still match it).
        os.environ[GIT_ENV[0]] = record["git"]["commit"]
        os.environ[GIT_ENV[1]] = "true" if record["git"].get("dirty") else "false"
        commit, dirty = git_state()
        git_source = "gpu bundle record (no .git in this copy)"
    print(f"git: {commit}{' (dirty)' if dirty else ''} from {git_source}", flush=True)
    for device in ("cpu", "cuda"):
        print(
            f"torch.compile on {device}: {compile_toolchain_missing(device) or 'toolchain found'}"
        )

    config = study_config.load_config(study)
    name = config["study"]
    results, logs = workdir / "results" / name, workdir / "logs" / name
    for folder in (results, logs):
        if folder.exists():
            shutil.rmtree(folder)
    results.mkdir(parents=True)
    resolved = results / "config.resolved.yaml"
    with resolved.open("w") as fh:
        fh.write("# The study's config as validated, every default filled in.\n")
        yaml.safe_dump(config, fh, sort_keys=False)

    jobs = sorted(study_config.measure_jobs(config), key=job_order)
    total = sum(len(study_config.batches(config, c, f, d)[b]) for c, f, d, b in jobs)
    print(f"study {name}: {len(jobs)} measuring jobs, {total} points, budget {budget_s:.0f} s")
    deadline = started + budget_s - FINISH_RESERVE_S
    progress = Progress(total, started)
    paths_now = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *paths_now])}
    env["PYTHONUNBUFFERED"] = "1"
    done_jobs, job_log = [], []
    for case, framework, device, batch in jobs:
        stem = f"{case}/{framework}/{device}/batch-{batch}"
        paths = {
            "csv": results / "points" / f"{stem}.csv",
            "probe": results / "points" / f"{stem}.probe.json",
            "journal": results / "journal" / f"{stem}.jsonl",
            "log": logs / "measure" / f"{stem}.log",
        }
        bench = logs / "benchmarks" / "measure" / f"{stem}.tsv"
        cmd = [
            sys.executable,
            "-m",
            "crossover_study.measure_job",
            f"--config={resolved}",
            f"--case={case}",
            f"--framework={framework}",
            f"--device={device}",
            f"--batch={batch}",
            "--echo",
            *(f"--{k}={v}" for k, v in paths.items()),
        ]
        attempts, wall = [], 0.0
        for _attempt in range(2):  # a failed job once more: its journal keeps its points
            if time.time() > deadline and attempts:
                break
            timeout = max(10.0, deadline + GRACE_S - time.time())
            code, seconds = _run_job([*cmd, f"--deadline={deadline}"], env, timeout, progress)
            attempts.append(code)
            wall += seconds
            if code == 0:
                break
            print(f"job {stem} exited with status {code}", flush=True)
        salvaged = False
        if attempts[-1] != 0 and paths["journal"].is_file():
            # The job died past its retry or the deadline killed it mid-point: run it
            # once more with the deadline passed, which measures nothing and writes its
            # table from the journal, so the points it measured are not lost (the
            # others are unavailable rows that say the deadline passed).
            code, seconds = _run_job([*cmd, "--deadline=0"], env, 120.0, progress)
            wall += seconds
            salvaged = code == 0
            print(f"job {stem}: table written from its journal: {salvaged}", flush=True)
        # A benchmark file as Snakemake's benchmark directive writes it (the collect
        # step's wall-time summary reads column s): this job's wall seconds.
        bench.parent.mkdir(parents=True, exist_ok=True)
        bench.write_text(f"s\th:m:s\n{wall:.4f}\t{time.strftime('%H:%M:%S', time.gmtime(wall))}\n")
        ok = (attempts[-1] == 0 or salvaged) and paths["csv"].is_file()
        ok = ok and paths["probe"].is_file()
        job_log.append(
            {
                "job": stem,
                "exit_status": attempts,
                "salvaged_from_journal": salvaged,
                "wall_s": round(wall, 3),
            }
        )
        if ok:
            done_jobs.append((paths["csv"], paths["probe"], bench))
    if not done_jobs:
        raise RuntimeError("no measuring job wrote its table; see the job logs above")

    csvs, probes, benches = (list(x) for x in zip(*done_jobs, strict=True))
    timings, summary, _ = collect_study(
        csvs,
        probes,
        benches,
        results / "timings.csv",
        results / "wall.json",
        merge_environments=config["merge_environments"],
    )
    write_crossover(
        results / "timings.csv",
        results / "crossover.csv",
        n_boot=config["crossover"]["bootstrap"],
        seed=config["crossover"]["seed"],
    )
    incomplete = [j["job"] for j in job_log if j["exit_status"][-1] != 0]
    manifest = build_manifest(
        study=name,
        config=config,
        config_hash=study_config.measurement_hash(config),
        config_files=[Path(study).resolve()],
        workdir=workdir,
        results_dir=results,
        tables={
            "timings": results / "timings.csv",
            "crossover": results / "crossover.csv",
            "wall": results / "wall.json",
        },
        report={},
        figures_dir=None,
        snakemake_version=None,
        extra={
            "runner": {
                "name": "crossover_study.reference_run (no Snakemake)",
                "budget_s": budget_s,
                "jobs": job_log,
                "incomplete_jobs": incomplete,
                "git_source": git_source,
                "bundle": None
                if record is None
                else {k: record.get(k) for k in ("created_utc", "packages", "git")},
            }
        },
    )
    write_json(manifest, results / "manifest.json")

    host = _slug(socket.gethostname())
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%MZ")
    out.mkdir(parents=True, exist_ok=True)
    archive = out / f"reference-{name}-{host}-{stamp}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for folder in (results, logs):
            tar.add(folder, arcname=folder.relative_to(workdir).as_posix())
    size = archive.stat().st_size
    statuses = ", ".join(f"{k} {v}" for k, v in timings["status"].value_counts().items())
    print(
        f"reference run: {len(timings)} rows ({statuses}), {len(job_log)} jobs "
        f"({len(incomplete)} incomplete), archive {archive} {size / 2**20:.2f} MiB, "
        f"{time.time() - started:.0f} s",
        flush=True,
    )
    if size > ARCHIVE_LIMIT_BYTES:
        raise RuntimeError(
            f"{archive} is {size / 2**20:.1f} MiB, over the {ARCHIVE_LIMIT_BYTES / 2**20:.0f} "
            "MiB that can come back from the GPU machine"
        )
    return archive


def main(argv: list[str] | None = None) -> int:
    """Command line of :func:`run`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    except (gpu_bundle.BundleError, FileNotFoundError) as exc:
        print(f"reference run: {exc}", file=sys.stderr, flush=True)
        return 2
    except ValueError as exc:  # config.ConfigError: one line naming the key path
        print(f"reference run: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
