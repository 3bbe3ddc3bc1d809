"""The method lives in the repository: no tracked file points at the team's notes folder
beside the checkout (a clone does not have it), and every ``docs/...`` file that a
tracked file names exists in the clone.

The folder's name is spelt here only through :data:`TEAM_FOLDER`, so that this file
itself holds no path into it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Name of the team's notes folder beside the checkout.
TEAM_FOLDER = "shared"
#: A path into that folder (``<folder>/...`` or ``../<folder>/...``), not part of a longer
#: word (``/usr/share/`` and ``not-<folder>/`` do not match).
SHARED = re.compile(rf"(?<![\w-]){TEAM_FOLDER}/")
#: A file under docs/ named in text: docs/STUDY.md, docs/seeds/000_....txt.
DOCS_PATH = re.compile(r"(?<![\w/.-])docs/[\w./-]*\w\.(?:md|txt|json)")


def tracked_text_files(repo: Path = REPO) -> list[Path]:
    """Tracked files of ``repo`` that decode as UTF-8 (``git ls-files``). Skips the test
    when ``repo`` is not a git checkout (a source archive)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"not a git checkout: {exc}")
    files = []
    for name in filter(None, out.decode().split("\0")):
        path = repo / name
        try:
            path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        files.append(path)
    return files


def pointers(pattern: re.Pattern, files: list[Path], repo: Path = REPO) -> list[str]:
    """``path:line: match`` for each match of ``pattern`` in ``files``."""
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{path.relative_to(repo)}:{number}: {m}" for m in pattern.findall(line)]
    return found


def _others() -> list[Path]:
    """Tracked text files but this one (its examples name a missing docs/ file on
    purpose)."""
    return [p for p in tracked_text_files() if p != Path(__file__).resolve()]


def test_no_tracked_file_points_at_shared():
    files = _others()
    assert len(files) > 50  # the listing found the repository's files
    assert pointers(SHARED, files) == []


def test_every_docs_file_named_exists():
    files = _others()
    named = pointers(DOCS_PATH, files)
    assert any("docs/STUDY.md" in p for p in named)  # the README and docstrings name it
    missing = [p for p in named if not (REPO / p.rsplit(": ", 1)[1]).exists()]
    assert missing == []


def test_the_patterns_find_what_they_are_for(tmp_path):
    text = tmp_path / "a.md"
    text.write_text(
        f"see ../{TEAM_FOLDER}/design/STUDY.md and `{TEAM_FOLDER}/seeds/x.txt`\n"
        f"/usr/share/doc and not-{TEAM_FOLDER}/ are fine; docs/STUDY.md and docs/gone.md.\n"
    )
    assert pointers(SHARED, [text], tmp_path) == [
        f"a.md:1: {TEAM_FOLDER}/",
        f"a.md:1: {TEAM_FOLDER}/",
    ]
    assert pointers(DOCS_PATH, [text], tmp_path) == [
        "a.md:2: docs/STUDY.md",
        "a.md:2: docs/gone.md",
    ]
