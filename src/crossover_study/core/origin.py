"""Where a number came from: host, CPU, git state, Slurm placement, tables' columns."""

from __future__ import annotations

import copy
import os
import platform
import socket
import subprocess
from functools import cache
from pathlib import Path

import yaml

from crossover_study.core.paths import REPO_ROOT

SCHEMAS = REPO_ROOT / "workflow" / "schemas"


@cache
def _parsed_schema(table: str) -> dict:
    # Parsed once per process: reading a study's tables asks for the same schema dozens
    # of times, and PyYAML's pure-Python parse of timings.schema.yaml took about 0.1 s a
    # time (the report notebook spent 4-5 s of its 25 s there, 2026-12-05). libyaml's
    # loader where PyYAML has it; the same YAML either way.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load((SCHEMAS / f"{table}.schema.yaml").read_text(), Loader=loader)


def table_schema(table: str) -> dict:
    """The JSON schema of ``table`` (``timings``, ``crossover`` or a table beside them:
    ``blocks``, ``counts`` ...) as ``workflow/schemas/<table>.schema.yaml`` holds it, a
    copy the caller may change. Raises FileNotFoundError for an unknown table,
    yaml.YAMLError for a schema that is not YAML."""
    return copy.deepcopy(_parsed_schema(table))


@cache
def table_columns(table: str) -> tuple[str, ...]:
    """Documented columns of ``timings`` or ``crossover``, in schema order.

    The schema in ``workflow/schemas/<table>.schema.yaml`` is the one place where each
    column is described. Raises FileNotFoundError for an unknown table.
    """
    return tuple(_parsed_schema(table)["properties"])


def cpu_model() -> str:
    """The host CPU's model name from /proc/cpuinfo, else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


#: Set where the code runs from a copy without ``.git`` (the GPU reference machine gets
#: a copy of the working tree): the commit the copy was made from and whether its tree
#: was dirty ("true"/"false"), as the GPU bundle recorded them (``gpu_bundle.build``).
#: The manifest's code hashes say whether the copied files still match that commit.
GIT_ENV = ("CROSSOVER_STUDY_GIT_COMMIT", "CROSSOVER_STUDY_GIT_DIRTY")


def git_state(repo: Path = REPO_ROOT) -> tuple[str, bool]:
    """(commit, dirty) of ``repo``; outside a git checkout the commit and dirty flag of
    :data:`GIT_ENV` when set, else ("unknown", False).

    Dirty means tracked files differ from the commit (generated, untracked results do
    not count).
    """
    try:
        top, commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--show-toplevel", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.split()
        if Path(top).resolve() != Path(repo).resolve():
            # A copy without .git inside another checkout: that one's commit is not ours.
            raise subprocess.SubprocessError(f"{repo} is not the top of the checkout {top}")
        status = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, ValueError, subprocess.SubprocessError):
        commit = os.environ.get(GIT_ENV[0])
        if commit:
            return commit, os.environ.get(GIT_ENV[1], "false").lower() == "true"
        return "unknown", False
    return commit, bool(status)


def placement() -> dict[str, str | None]:
    """Host and Slurm placement of this process: host, node, partition."""
    host = socket.gethostname()
    return {
        "host": host,
        "node": os.environ.get("SLURMD_NODENAME", host),
        "partition": os.environ.get("SLURM_JOB_PARTITION"),
    }
