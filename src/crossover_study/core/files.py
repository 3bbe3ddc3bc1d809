"""Files every layer reads or writes: the names of the study's folders and manifest, a
file's sha256, and a table written atomically.

A leaf of the package (:mod:`crossover_study`'s layer order): it imports nothing of the
package, so measurement, analysis and provenance all take their file helpers from here
instead of from one another.
"""

from __future__ import annotations

import hashlib
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
    pd.DataFrame(list(rows), columns=list(columns)).to_csv(tmp, index=False)
    with tmp.open("rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
