"""Paths as provenance records them: never a machine's absolute path.

Standard library only (the GPU reference run imports it before its bundle is
installed). :mod:`crossover_study.audit.verify` fails a manifest or crate holding an absolute
path, so everything a run writes about where a file was goes through
:func:`portable_path`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

#: The repository root (this file is src/crossover_study/core/paths.py).
REPO_ROOT = Path(__file__).resolve().parents[3]
#: The lock file: every package of the study, pinned (``name==version`` lines).
LOCK = REPO_ROOT / "requirements.lock"


def portable_path(path: str | Path, bases: Iterable[str | Path] | None = None) -> str:
    """``path`` without the machine's folders: relative to the first of ``bases``
    (default: the working directory, then the repository) that holds it, else relative
    to this Python's environment (``<prefix name>/bin/python3``), else its file name.
    A relative ``path`` is taken from the working directory. Never raises for a path
    that does not exist."""
    path = Path(path).absolute()
    for base in bases if bases is not None else (Path.cwd(), REPO_ROOT):
        base = Path(base).absolute()
        if path.is_relative_to(base):
            return path.relative_to(base).as_posix()
    prefix = Path(sys.prefix).absolute()
    if path.is_relative_to(prefix):
        return f"{prefix.name}/{path.relative_to(prefix).as_posix()}"
    return path.name


def shown_path(path: str | Path) -> str:
    """``path`` as a message prints it: relative to the working directory when it lies
    inside it (as people type it: ``config/x.yaml``), else as given."""
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def pins(lock: str | Path = LOCK) -> dict[str, str]:
    """``{name: version}`` of every ``name==version`` line of the lock file (comments
    and other lines ignored). Standard library only: it runs before the bundle is
    installed (:mod:`crossover_study.reference.gpu_bundle`)."""
    out = {}
    for line in Path(lock).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out[name.strip()] = version.strip()
    return out
