"""Where a file of a run stands in its RO-Crate (:mod:`crossover_study.provenance.crate`), and the
crate's copy of the workflow definition.

A file inside the results folder (the crate's root) is a ``File`` whose id is its path
relative to that folder (:func:`crate_path`); any other file is a contextual entity
whose ``@id`` names where it is, never a machine's absolute path (:func:`outside_id`).
``code/`` holds the Snakefile and its rules as they ran (:func:`copy_workflow`), read
from the working tree or from the recorded git commit, whichever still has the bytes
the manifest hashed.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from crossover_study.core.files import sha256_file
from crossover_study.core.paths import REPO_ROOT

#: Folder of the crate that holds the copy of the workflow's definition.
CODE_DIR = "code"
#: Code files (repository paths) copied into the crate: the Snakefile and its rules.
WORKFLOW_FILES = re.compile(r"^(Snakefile|workflow/rules/[^/]+\.smk)$")


def crate_path(record: Mapping, results_dir: str) -> str | None:
    """Path of a manifest file record relative to the crate's root (the results folder
    ``results_dir``, relative to the working directory), or None when the file lies
    outside the folder."""
    if record["root"] != "workdir":
        return None
    try:
        return PurePosixPath(record["path"]).relative_to(results_dir).as_posix()
    except ValueError:
        return None


def outside_id(record: Mapping) -> str:
    """The ``@id`` of a file outside the crate (see :mod:`crossover_study.provenance.crate`):
    ``#workdir:reports/s/report.html``, ``#repo:config/config.yaml``,
    ``#package:scikit-learn==1.9.1:sklearn/datasets/data/iris.csv`` or
    ``#outside:my-study.yaml``."""
    if record["root"] == "package":
        return f"#package:{record['package']}=={record['package_version']}:{record['path']}"
    return f"#{record['root']}:{record['path']}"


def outside_where(record: Mapping) -> str:
    """Where the file of a manifest record outside the crate lies, in words (the
    description of its entity)."""
    root = record["root"]
    if root == "package":
        return (
            f"inside the installed distribution {record['package']} "
            f"{record['package_version']}, at {record['path']} (its RECORD path)"
        )
    return {
        "workdir": f"at {record['path']}, relative to the working directory of the run",
        "repo": f"at {record['path']}, relative to the repository root",
    }.get(root, f"outside the working directory and repository (file {record['path']})")


def _workflow_bytes(record: Mapping, repo: Path, commit: str | None) -> bytes:
    """The bytes of a recorded code file: the working tree's when they still hash as
    recorded, else the recorded git commit's. Raises ValueError when neither does."""
    path = repo / record["path"]
    if path.is_file() and sha256_file(path) == record["sha256"]:
        return path.read_bytes()
    if commit:
        shown = subprocess.run(
            ["git", "-C", str(repo), "show", f"{commit}:{record['path']}"],
            capture_output=True,
            check=False,
        )
        if shown.returncode == 0 and hashlib.sha256(shown.stdout).hexdigest() == record["sha256"]:
            return shown.stdout
    raise ValueError(
        f"{record['path']}: the workflow file the manifest recorded (sha256 "
        f"{record['sha256'][:12]}...) is neither in {repo} nor at git commit {commit}"
    )


def copy_workflow(manifest: Mapping, crate_dir: str | Path, repo: str | Path = REPO_ROOT):
    """Copy the workflow's definition the manifest recorded (:data:`WORKFLOW_FILES`) into
    ``<crate_dir>/code/`` under its repository paths; returns the copies' paths relative
    to ``crate_dir``. Raises ValueError when a recorded file cannot be found with its
    recorded hash (see :func:`_workflow_bytes`)."""
    crate_dir, repo = Path(crate_dir), Path(repo)
    commit = manifest.get("git", {}).get("commit")
    written = []
    for record in manifest["code"]:
        if record["root"] == "repo" and WORKFLOW_FILES.match(record["path"]):
            target = crate_dir / CODE_DIR / record["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(_workflow_bytes(record, repo, commit))
            written.append(f"{CODE_DIR}/{record['path']}")
    return written
