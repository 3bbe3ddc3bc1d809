"""Steps 3 and 4 of the GPU reference run (:mod:`crossover_study.reference.gpu_run`):
collect the jobs' tables, compute the crossover, write the manifest and pack
``results/<study>/`` and ``logs/<study>/`` into the archive that comes back from the GPU
machine; also from a partial archive left by a killed run, on any machine.

Only the standard library, :mod:`crossover_study.reference.gpu_jobs` and
:mod:`crossover_study.measure.launch` are imported at the top (the run imports this module before the GPU bundle is installed); the collecting
code is imported where it is used.
"""

from __future__ import annotations

import json
import os
import socket
import tarfile
from datetime import UTC, datetime
from pathlib import Path

from crossover_study.measure.launch import job_files
from crossover_study.reference.gpu_jobs import job_order, slug

#: Files that come back from the GPU machine may be at most 16 MiB each.
ARCHIVE_LIMIT_BYTES = 16 * 1024 * 1024
#: Per-job record of the run, rewritten after each job (read by ``finish``).
RUNNER_RECORD = "runner.json"


def pack(archive: Path, workdir: Path, folders) -> Path:
    """Write ``folders`` (below ``workdir``) into the tar.gz ``archive`` (temporary file
    and rename, so a reader never sees half of it). Returns ``archive``."""
    tmp = archive.with_name(f".{archive.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for folder in folders:
            if folder.exists():
                tar.add(folder, arcname=folder.relative_to(workdir).as_posix())
    os.replace(tmp, archive)
    return archive


def finish(
    workdir: Path, name: str, config: dict, study_file: Path, runner_info: dict, out: Path
) -> Path:
    """Collect, crossover, manifest and archive of the run in ``workdir`` (steps 3 and 4
    of :mod:`crossover_study.reference.gpu_run`'s docstring): only jobs with both their table and their probe record
    are collected; the others are listed as ``incomplete_jobs`` in the manifest's
    ``runner``. Prints the summary line and returns the archive's path. Raises
    RuntimeError when no job has a table or the archive exceeds
    :data:`ARCHIVE_LIMIT_BYTES` (the archive is then removed)."""
    from crossover_study.analysis.crossover import write_crossover
    from crossover_study.analysis.tables import collect_study
    from crossover_study.provenance.manifest import unreported_manifest, write_json
    from crossover_study.study import points as study_points

    results, logs = workdir / "results" / name, workdir / "logs" / name
    done, incomplete = [], []
    for job in sorted(study_points.measure_jobs(config), key=job_order):
        paths = job_files(results, logs, job)
        files = (paths["csv"], paths["probe"], paths["bench"])
        stem = "{}/{}/{}/batch-{}".format(*job)
        (done if all(f.is_file() for f in files) else incomplete).append((stem, files))
    if not done:
        raise RuntimeError("no measuring job wrote its table; see the job logs above")
    csvs, probes, benches = (list(x) for x in zip(*(f for _, f in done), strict=True))
    timings, _, _ = collect_study(
        csvs,
        probes,
        benches,
        results / "timings.csv",
        results / "wall.json",
        merge_environments=config["merge_environments"],
        noise_threshold=config["timing"]["noise_threshold"],
    )
    write_crossover(
        results / "timings.csv",
        results / "crossover.csv",
        n_boot=config["crossover"]["bootstrap"],
        seed=config["crossover"]["seed"],
    )
    runner_info = {**runner_info, "incomplete_jobs": [stem for stem, _ in incomplete]}
    manifest = unreported_manifest(
        config, study_file.resolve(), workdir, results, study=name, extra={"runner": runner_info}
    )
    write_json(manifest, results / "manifest.json")
    host = slug(socket.gethostname())
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%MZ")
    out.mkdir(parents=True, exist_ok=True)
    archive = pack(out / f"reference-{name}-{host}-{stamp}.tar.gz", workdir, (results, logs))
    size = archive.stat().st_size
    if size > ARCHIVE_LIMIT_BYTES:
        archive.unlink()
        raise RuntimeError(
            f"the archive would be {size / 2**20:.1f} MiB, over the "
            f"{ARCHIVE_LIMIT_BYTES / 2**20:.0f} MiB that can come back from the GPU machine"
        )
    statuses = ", ".join(f"{k} {v}" for k, v in timings["status"].value_counts().items())
    print(
        f"reference run: {len(timings)} rows ({statuses}), {len(done) + len(incomplete)} jobs "
        f"({len(incomplete)} incomplete), archive {archive} {size / 2**20:.2f} MiB",
        flush=True,
    )
    return archive


def finish_partial(partial: str | Path, out: str | Path) -> Path:
    """Complete a partial archive (``partial-<study>.tar.gz``, left when the run was
    killed) on any machine with the project's environment: collect, crossover,
    manifest and the final archive in ``out``. The manifest's ``runner`` says where it
    was finished; its package versions are those of the finishing machine (the rows
    keep the measuring machine's framework, CUDA and Python versions). Raises
    RuntimeError as :func:`finish` does, ValueError for an archive without a run."""
    import tempfile

    import yaml

    from crossover_study.study import config as study_config

    with tempfile.TemporaryDirectory(prefix="crossover-finish-") as tmp:
        work = Path(tmp)
        with tarfile.open(partial) as tar:
            tar.extractall(work, filter="data")
        records = sorted(work.glob(f"results/*/{RUNNER_RECORD}"))
        if len(records) != 1:
            raise ValueError(f"{partial}: no results/<study>/{RUNNER_RECORD}: not a partial run")
        results = records[0].parent
        config = study_config.validate_config(
            yaml.safe_load((results / "config.resolved.yaml").read_text())
        )
        runner_info = json.loads(records[0].read_text())
        runner_info["finished_from_partial"] = {
            "archive": Path(partial).name,
            "host": socket.gethostname(),
            "utc": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        return finish(
            work, results.name, config, results / "config.resolved.yaml", runner_info, Path(out)
        )
