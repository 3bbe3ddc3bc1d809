"""What went into a run, as the manifest records it: file records (path, root, sha256,
bytes; never an absolute path), the workflow's code files, data files inside installed
distributions, the plug-in files of a study's own cases and the locked packages'
versions (:mod:`crossover_study.provenance.manifest` builds the manifest from them).
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Mapping
from pathlib import Path

from crossover_study.core.files import sha256_file
from crossover_study.core.paths import LOCK, REPO_ROOT, pins
from crossover_study.study import cases

#: Code whose hash is recorded: glob patterns relative to the repository root.
CODE_PATTERNS: tuple[str, ...] = (
    "Snakefile",
    "workflow/**/*",
    "src/crossover_study/**/*",
    "requirements.lock",
    "pyproject.toml",
    "envs/*.yaml",
    # The device cards predictions are priced on (analysis.card_prediction).
    "config/devices/**/*.yaml",
)


#: Generated files that are not code even when they sit in a code folder.
_NOT_CODE = re.compile(r"(__pycache__|\.pyc$|\.snakemake_timestamp$|\.ipynb_checkpoints)")


def reference_source_name(path: str | Path) -> str:
    """The name under which a figure records a reference run's table (and the manifest
    its file record): ``results/reference/<run>/timings.csv`` ->
    ``reference/<run>/timings.csv``. Distinct from the study's own tables, which are
    recorded by file name (``timings.csv``)."""
    path = Path(path)
    return f"reference/{path.parent.name}/{path.name}"


def file_record(path: str | Path, workdir: str | Path, repo: str | Path = REPO_ROOT) -> dict:
    """``{"path", "root", "sha256", "bytes"}`` of one file.

    ``path`` is stored relative to ``workdir`` when inside it (root ``workdir``), else
    relative to ``repo`` (root ``repo``), else as its file name alone (root
    ``outside``: where it lay on the measuring machine is not recorded). Raises OSError
    for a missing file.
    """
    path = Path(path)
    resolved = path.resolve() if path.is_absolute() else (Path(workdir) / path).resolve()
    root, rel = "outside", resolved.name
    for name, base in (("workdir", Path(workdir).resolve()), ("repo", Path(repo).resolve())):
        if resolved.is_relative_to(base):
            root, rel = name, resolved.relative_to(base).as_posix()
            break
    return {
        "path": rel,
        "root": root,
        "sha256": sha256_file(resolved),
        "bytes": resolved.stat().st_size,
    }


def code_files(repo: str | Path = REPO_ROOT) -> list[Path]:
    """The workflow's code files (:data:`CODE_PATTERNS`), sorted, caches left out."""
    repo = Path(repo)
    found = set()
    for pattern in CODE_PATTERNS:
        for path in repo.glob(pattern):
            rel = path.relative_to(repo).as_posix()
            if path.is_file() and not _NOT_CODE.search(rel):
                found.add(path)
    return sorted(found)


#: Data files that ship inside an installed distribution, per case: (case, name,
#: distribution, path in the distribution's RECORD).
PACKAGE_DATA: tuple[tuple[str, str, str, str], ...] = tuple(
    (case.name, *data) for case in cases.SEEDS.values() for data in case.package_data
)


def package_file_record(distribution: str, path: str) -> dict:
    """``{"path", "root": "package", "package", "package_version", "sha256", "bytes"}``
    of a file inside the installed ``distribution`` (``path`` as its RECORD lists it).
    Where it was installed is not recorded. Raises
    ``importlib.metadata.PackageNotFoundError`` when the distribution is not installed
    and OSError when the file is missing."""
    dist = importlib.metadata.distribution(distribution)
    located = Path(str(dist.locate_file(path)))
    return {
        "path": path,
        "root": "package",
        "package": distribution,
        "package_version": dist.version,
        "sha256": sha256_file(located),
        "bytes": located.stat().st_size,
    }


def locate_package_file(record: Mapping) -> Path | None:
    """Where the file of a ``package`` record lies in this environment, or None when its
    distribution is not installed here."""
    try:
        dist = importlib.metadata.distribution(record["package"])
    except importlib.metadata.PackageNotFoundError:
        return None
    return Path(str(dist.locate_file(record["path"])))


def plugin_files(config: Mapping) -> list[tuple[str, str, Path]]:
    """(case, framework, absolute path) of the plug-in file of every case of a validated
    ``config`` that is not a seed (:mod:`crossover_study.study.cases`), in config order."""
    found = []
    for name, spec in config.get("cases", {}).items():
        if name in cases.SEEDS or "workload" not in spec:
            continue
        found.append((name, spec["framework"], cases.resolve_stored(spec["workload"])))
    return found


def data_files(config: Mapping) -> list[dict]:
    """Data files a study reads, as :func:`package_file_record` entries with a ``name``:
    scikit-learn's bundled Iris CSV when ``s002-iris`` is measured (the other cases make
    their data from a seed). A distribution missing from the environment that writes
    the manifest raises ``importlib.metadata.PackageNotFoundError``: the data file
    would silently drop out of the provenance otherwise (envs/report.yaml carries
    scikit-learn for that reason)."""
    return [
        {"name": name, **package_file_record(distribution, path)}
        for case, name, distribution, path in PACKAGE_DATA
        if case in config.get("cases", {})
    ]


def package_versions(lock: str | Path = LOCK) -> dict[str, dict]:
    """Pinned and installed version (``importlib.metadata``, in this process's
    environment: the manifest job's) of every locked package:
    ``{name: {"pinned": "2.13.0", "installed": "2.13.0+cpu"}}``; ``installed`` is None
    for a package that is not installed."""
    out = {}
    for name, pinned in sorted(pins(lock).items(), key=lambda kv: kv[0].lower()):
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        out[name] = {"pinned": pinned, "installed": installed}
    return out
