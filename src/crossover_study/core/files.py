"""Files every layer reads or writes: the names of the study's folders and manifest, a
file's sha256, and a table written atomically.

A leaf of the package (:mod:`crossover_study`'s layer order): it imports nothing of the
package, so measurement, analysis and provenance all take their file helpers from here
instead of from one another.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

#: File name of a run's manifest (``results/<study>/manifest.json``,
#: ``reports/paper/manifest.json``).
MANIFEST_NAME = "manifest.json"
#: Where committed reference runs live, relative to the repository root.
REFERENCE_DIR = Path("results/reference")
#: Where the paper figures and their manifest are written, relative to the repository root.
PAPER_DIR = Path("reports/paper")
#: Folder of a frozen reference run that holds the plug-in files of its own cases (the
#: programs that were timed), under the path the manifest records for each.
PLUGIN_COPY_DIR = "plugins"


def sha256_file(path: str | Path) -> str:
    """sha256 (hex) of a file's bytes. Raises OSError when it cannot be read."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_csv_atomic(rows: Iterable[dict], columns: Iterable[str], path: str | Path) -> None:
    """Write ``rows`` (mappings of column to value) as CSV with ``columns`` (in that order;
    a column a row lacks is left empty) to ``path`` via a temporary file and a rename, so
    that readers never see a half-written table. Creates the parent folder. pandas is
    imported here, not at module level, so that the leaf stays light."""
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with written_as(tmp, path):
        pd.DataFrame(list(rows), columns=list(columns)).to_csv(tmp, index=False)
        with tmp.open("rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)


@contextlib.contextmanager
def written_as(tmp: str | Path, path: str | Path):
    """The block writes ``tmp`` and renames it to ``path``. Should it fail with an
    OSError (a full or read-only disk), ``tmp`` is removed (no half-written file is
    left behind) and an error that names no file (a failed ``write``) is raised again
    naming ``path``, so that its one-line message says where
    (:func:`crossover_study.core.errors.describe_os_error`)."""
    try:
        yield
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise


def read_chrome_trace(trace) -> dict:
    """A Chrome trace (what ``torch.profiler``'s ``export_chrome_trace`` writes) as its
    parsed JSON: ``trace`` is that dict already, or the path of a ``.json`` or
    ``.json.gz`` file. Raises ValueError when it has no ``traceEvents``,
    OSError/json.JSONDecodeError for an unreadable file."""
    if not isinstance(trace, dict):
        path = Path(trace)
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as handle:
            trace = json.load(handle)
    if "traceEvents" not in trace:
        raise ValueError("not a Chrome trace: no traceEvents")
    return trace
