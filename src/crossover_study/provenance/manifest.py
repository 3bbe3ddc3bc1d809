"""The manifest of a study run: what went in, what came out, and their sha256.

``results/<study>/manifest.json`` records, for one run of the workflow:

- inputs: the config file(s) with the resolved config and its hash, the code
  (``Snakefile``, ``workflow/**``, ``src/crossover_study/**``, the lock file and conda
  envs), data files (scikit-learn's Iris CSV when ``s002-iris`` is measured) and the
  plug-in file of every case of the study's own (``plugins``: case, framework and the
  file's record; :func:`plugin_files`);
- outputs: ``timings.csv`` and the tables beside it (format 3:
  :mod:`crossover_study.analysis.table_split`), ``crossover.csv``, ``wall.json``, the report (HTML and
  executed notebook) and every figure (PNG, SVG, PDF) with the table hashes each figure
  says it was drawn from (see :func:`crossover_study.figures.files.figure_sources`);
- reference tables: the committed reference runs' ``timings.csv`` the report drew
  beside this study (its cross-machine figures), keyed by the name a figure records
  for them (:func:`reference_source_name`: ``reference/<run>/timings.csv``);
- records: every measuring job's table (``points/**/*.csv``) and probe record
  (``points/**/*.probe.json``, when the jobs wrote them) that ``timings.csv`` was
  collected from (a workflow run names them: the study's jobs now; the tables of jobs
  it no longer has, a case or batch dropped from its config, are moved to
  ``retired/`` first, :func:`retire_tables`), the rates files they read
  (``rates``: ``rates/<framework>/<device>.json``, :mod:`crossover_study.measure.rates_job`),
  and one entry per measuring
  run (``run_id`` of ``timings.csv``) with its machine and software, including
  ``packages``: the package versions of the environment its measuring jobs ran in, from
  their probe records (:func:`run_packages`; under ``--sdm conda`` a
  ``torch-*``/``tensorflow-*`` env, not the manifest job's);
- the environment of the manifest job itself (under ``--sdm conda``:
  ``envs/report.yaml``, not the measuring jobs'): git commit and dirty flag,
  ``packages`` (installed versions of every package pinned in ``requirements.lock``),
  Python, platform and Snakemake version.

Every file entry is ``{"path", "root", "sha256", "bytes"}``; ``root`` says what
``path`` is relative to: ``workdir`` (Snakemake's working directory), ``repo`` (this
repository), ``package`` (inside an installed distribution: ``package`` and
``package_version`` name it, ``path`` is the file's path in the distribution's
RECORD, e.g. ``sklearn/datasets/data/iris.csv``) or ``outside`` (a file that lies in
none of these, such as a config file given by an absolute path: ``path`` is its file
name only). No entry holds an absolute path, so a run's provenance means the same on
any machine; :mod:`crossover_study.audit.verify` fails a manifest that does, and recomputes
the hashes.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from crossover_study.analysis.table_split import tables_beside
from crossover_study.analysis.tables import read_csv_text, read_timings_text
from crossover_study.core.files import MANIFEST_NAME, written_as
from crossover_study.core.origin import git_state
from crossover_study.core.paths import REPO_ROOT
from crossover_study.figures.files import FIGURE_FORMATS, figure_sources
from crossover_study.provenance.inputs import (
    code_files,
    data_files,
    file_record,
    package_versions,
    plugin_files,
    reference_source_name,
)
from crossover_study.study.points import measurement_hash

#: Version of the manifest's layout; the audit refuses other versions.
MANIFEST_VERSION = 1
#: Columns that describe where and with what a row was measured (compared by the
#: environment check and recorded per run).
RUN_COLUMNS: tuple[str, ...] = (
    "case",
    "framework",
    "device",
    "host",
    "node",
    "partition",
    "cpu_model",
    "device_name",
    "framework_version",
    "cuda_version",
    "python_version",
    "threads",
    "interop_threads",
    "git_commit",
    "git_dirty",
    "config_hash",
)


def _json_ready(value):
    """Table cells as JSON: NaN -> None, numpy scalars -> Python."""
    if value is None:
        return None
    if isinstance(value, float) and value != value:
        return None
    if hasattr(value, "item"):
        return _json_ready(value.item())
    return value


def run_records(timings: pd.DataFrame, point_tables: Mapping[str, pd.DataFrame]) -> list[dict]:
    """One entry per measuring run (``run_id``) of ``timings``: its case, framework,
    device, machine (host, node, partition, cpu_model, device_name), software
    (framework, CUDA and Python versions, threads), git state and config hash as the
    rows recorded them, the number of rows and statuses, first and last ``utc_time``,
    and ``points``: the per-job tables (keys of ``point_tables``) holding its rows.

    A run whose rows disagree on a column records the distinct values as a list.
    """
    runs = []
    if timings.empty or "run_id" not in timings:
        return runs
    holders: dict[str, list[str]] = {}
    for name, table in point_tables.items():
        for run_id in table.get("run_id", pd.Series(dtype=str)).dropna().astype(str).unique():
            holders.setdefault(run_id, []).append(name)
    for run_id, rows in timings.groupby(timings["run_id"].astype(str), sort=True):
        entry: dict = {"run_id": run_id}
        for column in RUN_COLUMNS:
            if column not in rows:
                continue
            values = sorted({_json_ready(v) for v in rows[column]}, key=str)
            entry[column] = values[0] if len(values) == 1 else values
        times = rows.get("utc_time", pd.Series(dtype=str)).dropna().astype(str)
        entry["rows"] = len(rows)
        entry["statuses"] = {str(k): int(v) for k, v in rows["status"].value_counts().items()}
        entry["first_utc"] = times.min() if len(times) else None
        entry["last_utc"] = times.max() if len(times) else None
        entry["points"] = sorted(holders.get(run_id, []))
        runs.append(entry)
    return runs


def run_packages(runs: list[dict], probes: Iterable[Mapping]) -> list[dict]:
    """``runs`` (:func:`run_records`) with ``packages`` added to each: the package
    versions of the environment its measuring jobs ran in, from the probe records
    (``probes``: the manifest's entries, ``{"path", "record", ...}``) beside the per-job
    tables holding its rows (``batch-<i>.probe.json`` beside ``batch-<i>.csv``), as
    :func:`crossover_study.measure.probe.installed_packages` recorded them (``{name:
    version}``, ``python`` included). A package those probes disagree on lists the
    distinct versions; None when none of them recorded packages (probes older than
    version 3, or none written). A probe is written by the job that wrote the table;
    rows it kept from its journal were measured by an earlier process of that job."""
    by_table = {}
    for probe in probes:
        record = probe.get("record") or {}
        if isinstance(record.get("packages"), Mapping):
            table = re.sub(r"\.probe\.json$", ".csv", str(probe["path"]))
            by_table[table] = record["packages"]
    for run in runs:
        seen = [by_table[t] for t in run.get("points", []) if t in by_table]
        packages = None
        if seen:
            packages = {}
            for name in sorted({n for p in seen for n in p}, key=str.lower):
                values = sorted({p.get(name) for p in seen}, key=str)
                packages[name] = values[0] if len(values) == 1 else values
        run["packages"] = packages
    return runs


def unreported_manifest(
    config: Mapping,
    config_file: str | Path,
    workdir: str | Path,
    results: str | Path,
    study: str | None = None,
    **kwargs,
) -> dict:
    """The manifest (:func:`build_manifest`) of a study run measured without Snakemake
    and without its report (the GPU reference run, ``crossover-study check``): its
    tables are ``<results>/timings.csv``, ``crossover.csv`` and ``wall.json`` (and
    ``predicted.csv`` and ``predicted_crossover.csv`` where written), no report,
    figures or Snakemake version; ``study`` is the run's name (default: the config's);
    ``kwargs`` (``point_tables``, ``probe_records``, ``extra``) go on to
    :func:`build_manifest`. Raises OSError when a table is missing."""
    results = Path(results)
    tables = {role: results / f"{role}.{ext}" for role, ext in _STUDY_TABLES}
    tables.update(
        {
            role: results / f"{role}.{ext}"
            for role, ext in _PREDICTION_TABLES
            if (results / f"{role}.{ext}").is_file()
        }
    )
    return build_manifest(
        study=study or config["study"],
        config=config,
        config_hash=measurement_hash(config),
        config_files=[config_file],
        workdir=workdir,
        results_dir=results,
        tables=tables,
        report={},
        figures_dir=None,
        snakemake_version=None,
        **kwargs,
    )


#: A study run's tables: (role, file extension), the file named after its role.
_STUDY_TABLES = (("timings", "csv"), ("crossover", "csv"), ("wall", "json"))
#: The device cards' prediction tables, recorded where the run wrote them.
_PREDICTION_TABLES = (("predicted", "csv"), ("predicted_crossover", "csv"))


def build_manifest(
    *,
    study: str,
    config: Mapping,
    config_hash: str,
    config_files: Iterable[str | Path],
    workdir: str | Path,
    results_dir: str | Path,
    tables: Mapping[str, str | Path],
    report: Mapping[str, str | Path],
    figures_dir: str | Path | None,
    snakemake_version: str | None,
    repo: str | Path = REPO_ROOT,
    reference_tables: Iterable[str | Path] = (),
    extra: Mapping | None = None,
    point_tables: Iterable[str | Path] | None = None,
    probe_records: Iterable[str | Path] | None = None,
    rates_files: Iterable[str | Path] | None = None,
) -> dict:
    """The manifest of one study run as a JSON-ready dict (see the module docstring).

    ``tables`` maps a role (``timings``, ``crossover``, ``wall``) to its file (the
    tables beside ``timings.csv``, format 3, are added under their names: ``blocks``,
    ``environment`` ...) and
    ``report`` a role (``html``, ``notebook``) to its file (empty for a run measured
    without its report, such as the GPU reference run); ``figures_dir`` holds the
    figures (None: none); per-job tables and probe records are found under
    ``<results_dir>/points/`` and rates files under ``<results_dir>/rates/`` unless
    ``point_tables``, ``probe_records`` or ``rates_files`` name them. ``reference_tables`` are the reference runs' tables the
    report read (``results/reference/<run>/timings.csv``), recorded under
    ``reference_tables`` as ``{reference_source_name(path): file record}``. Each
    figure's ``derived_from`` lists the recorded files (study tables and reference
    tables) it names among its sources. Paths may be relative to ``workdir``. ``extra``
    keys are added as they are (the reference run records its runner there). Raises
    OSError when a named file is missing.
    """
    workdir = Path(workdir).resolve()
    results = Path(results_dir)
    results_abs = results if results.is_absolute() else workdir / results

    def rec(path):
        return file_record(path, workdir, repo)

    # The tables beside timings.csv (format 3), each under its own role.
    timings_file = Path(tables["timings"])
    timings_file = timings_file if timings_file.is_absolute() else workdir / timings_file
    beside = {p.stem: p for p in tables_beside(timings_file) if p.stem not in tables}
    tables = {**tables, **beside}
    table_records = {role: rec(path) for role, path in tables.items()}
    reference_records = {reference_source_name(p): rec(p) for p in reference_tables}
    # A figure's sources name the study's tables by file name, reference tables by
    # reference_source_name; derived_from lists the recorded files among them.
    known = {Path(r["path"]).name: r["path"] for r in table_records.values()}
    known.update({name: r["path"] for name, r in reference_records.items()})
    figures_abs = Path(figures_dir) if figures_dir is not None else None
    if figures_abs is not None and not figures_abs.is_absolute():
        figures_abs = workdir / figures_abs
    figures = []
    for path in sorted(figures_abs.iterdir()) if figures_abs and figures_abs.is_dir() else []:
        if path.suffix.lstrip(".") in FIGURE_FORMATS and path.is_file():
            sources = figure_sources(path)
            derived_from = [p for name, p in known.items() if name in sources]
            figures.append({**rec(path), "sources": sources, "derived_from": derived_from})

    def listed(paths, pattern):
        if paths is None:
            return sorted(results_abs.glob(pattern))
        return sorted(Path(p) if Path(p).is_absolute() else workdir / p for p in paths)

    point_paths = listed(point_tables, "points/**/*.csv")
    probe_paths = listed(probe_records, "points/**/*.probe.json")
    rates_paths = listed(rates_files, "rates/**/*.json")
    point_tables = {}
    for path in point_paths:
        point_tables[rec(path)["path"]] = read_csv_text(path)
    probes = []
    for path in probe_paths:
        entry = rec(path)
        try:
            entry["record"] = json.loads(path.read_text())
        except ValueError as exc:
            entry["record"] = None
            entry["error"] = f"not JSON: {exc}"
        probes.append(entry)

    timings = read_timings_text(timings_file)
    commit, dirty = git_state(Path(repo))
    data = data_files(config)
    resolved = json.loads(json.dumps(dict(config), default=str))
    return {
        "manifest_version": MANIFEST_VERSION,
        "kind": "study",
        "study": study,
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "results_dir": Path(os.path.relpath(results_abs, workdir)).as_posix(),
        "config": {
            "files": [rec(p) for p in config_files],
            "hash": config_hash,
            # Each case's own hash, which its rows carry (config.measurement_hash).
            "case_hashes": {
                case: measurement_hash(config, case) for case in config.get("cases", {})
            },
            "merge_environments": bool(config.get("merge_environments", False)),
            "resolved": resolved,
        },
        # Code is the repository's, also when the working directory is the repository
        # itself (make study): root repo, which the crate copies into its code/ folder.
        "code": [{**file_record(p, repo, repo), "root": "repo"} for p in code_files(repo)],
        "data": data,
        "plugins": [
            {"case": case, "framework": framework, **rec(path)}
            for case, framework, path in plugin_files(config)
        ],
        "tables": table_records,
        "reference_tables": reference_records,
        "report": {role: rec(path) for role, path in report.items()},
        "figures": figures,
        "points": [rec(p) for p in point_paths],
        "probes": probes,
        "rates": [rec(p) for p in rates_paths],
        "runs": run_packages(run_records(timings, point_tables), probes),
        "measured_with": {
            "git_commits": sorted(set(timings.get("git_commit", pd.Series()).dropna())),
            "config_hashes": sorted(set(timings.get("config_hash", pd.Series()).dropna())),
        },
        "git": {"commit": commit, "dirty": dirty},
        "packages": package_versions(Path(repo) / "requirements.lock"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "snakemake_version": snakemake_version,
        **dict(extra or {}),
    }


#: Where :func:`retire_tables` moves the per-job tables of jobs a study no longer has
#: (relative to its results folder; the layout below it is that of ``points/``).
RETIRED_DIR = "retired"


def retire_tables(results_dir: str | Path, keep: Iterable[str | Path]) -> list[Path]:
    """Move every per-job table and probe record under ``<results_dir>/points/`` that is
    not in ``keep`` (the study's jobs now: the collect step's inputs) to
    ``<results_dir>/retired/``, at the same path below it (one retired earlier is
    replaced; folders left empty are removed). A study whose cases, devices or batches
    changed keeps the tables of the jobs it dropped there, out of its records: its
    manifest, its audit (which fails a per-job table the manifest does not record) and
    a frozen copy hold what the study now holds. Nothing measured is lost: the journals stay under ``journal/``, so a
    case added back is written again from them without measuring. Paths in ``keep``
    may be relative to the working directory. Returns the new paths, sorted."""
    results = Path(results_dir).resolve()
    points = results / "points"
    kept = {Path(p).resolve() for p in keep}
    moved = []
    for pattern in ("**/*.csv", "**/*.probe.json"):
        for path in sorted(points.glob(pattern)):
            if path.resolve() in kept or not path.is_file():
                continue
            target = results / RETIRED_DIR / path.relative_to(points)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
            moved.append(target)
    for path in moved:  # folders left empty go too (points/<dropped case>/...)
        folder = points / path.parent.relative_to(results / RETIRED_DIR)
        while folder != points and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent
    return sorted(moved)


def _portable_record(record: dict) -> dict:
    """A file record without an absolute path: a file inside an installed package
    (``package`` key, path through ``site-packages``) gets root ``package`` and its
    RECORD path; any other absolute path keeps its file name only (root ``outside``)."""
    if record.get("root") != "absolute":
        return record
    path = record["path"]
    if record.get("package") and "site-packages/" in path:
        return {**record, "root": "package", "path": path.split("site-packages/", 1)[1]}
    return {**record, "root": "outside", "path": Path(path).name}


def portable_manifest(manifest: Mapping) -> dict:
    """``manifest`` with every file record made portable (:func:`_portable_record`), for
    a run frozen before manifests held relative paths only. Hashes are kept: the
    files are the same."""
    out = json.loads(json.dumps(manifest))
    out["config"]["files"] = [_portable_record(r) for r in out["config"]["files"]]
    for group in ("code", "data", "plugins", "figures", "points", "probes"):
        out[group] = [_portable_record(r) for r in out.get(group, [])]
    for group in ("tables", "reference_tables", "report"):
        out[group] = {k: _portable_record(r) for k, r in out.get(group, {}).items()}
    return out


def write_json(data: Mapping, path: str | Path) -> Path:
    """Write ``data`` as indented, key-sorted JSON via a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with written_as(tmp, path):  # a full disk: no temporary file left, the error names path
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
        os.replace(tmp, path)
    return path


def load_manifest(path: str | Path) -> dict:
    """Read a manifest (a file, or a folder holding ``manifest.json``). Raises
    FileNotFoundError when missing and ValueError for another layout version."""
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_NAME
    data = json.loads(path.read_text())
    if data.get("manifest_version") != MANIFEST_VERSION:
        raise ValueError(
            f"{path}: manifest version {data.get('manifest_version')!r}, "
            f"this code reads {MANIFEST_VERSION}"
        )
    return data


def _run_tables(folder: Path) -> list[str]:
    """File names of a run's timings: ``timings.csv`` and, for a run of format 3, the
    tables beside it (:func:`crossover_study.analysis.table_split.tables_beside`)."""
    return ["timings.csv", *(p.name for p in tables_beside(folder / "timings.csv"))]


def paper_manifest(
    run_dirs: Iterable[str | Path],
    written: Iterable[str | Path],
    workdir: str | Path = ".",
    repo: str | Path = REPO_ROOT,
) -> dict:
    """The paper's manifest: every reference run's tables and manifest (sha256), every
    figure written (sha256, the sources it records), package versions, git state."""
    workdir = Path(workdir)
    runs = []
    for path in run_dirs:
        path = Path(path)
        files = {
            table: file_record(path / table, workdir, repo)
            for table in (*_run_tables(path), "crossover.csv", MANIFEST_NAME)
            if (path / table).exists()
        }
        runs.append({"name": path.name, "files": files})
    commit, dirty = git_state(Path(repo))
    return {
        "manifest_version": MANIFEST_VERSION,
        "kind": "paper",
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "reference_runs": runs,
        "figures": [
            {**file_record(p, workdir, repo), "sources": figure_sources(p)} for p in written
        ],
        "git": {"commit": commit, "dirty": dirty},
        "packages": package_versions(Path(repo) / "requirements.lock"),
        "python": sys.version.split()[0],
    }
