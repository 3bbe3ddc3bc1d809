"""Import a reference run's archive (from :mod:`crossover_study.reference_run`) on any
machine with the project's environment: ``make reference-import ARCHIVE=...``.

The archive holds ``results/<study>/`` (per-job tables, probe records, journals,
``timings.csv``, ``crossover.csv``, ``wall.json``, the resolved config and the
manifest) and ``logs/<study>/``. Importing it:

1. unpacks it into a temporary working directory (members are checked: no absolute
   paths, no ``..``, no links; :func:`tarfile.data_filter`);
2. writes the run's RO-Crate there (the GPU machine has no ``rocrate``);
3. freezes the run into ``results/reference/<name>/`` (:func:`freeze.freeze`: audited
   first, refused when the audit fails), where ``<name>`` is ``<gpu>-<date>`` from the
   probe records (e.g. ``h200-2026-12-01``; ``cpu-<n>core-<date>`` when no probe saw a
   GPU) unless given;
4. audits the frozen copy and prints the report.

The report (its "Beside the reference machines" section) and ``snakemake paper`` then
draw the run beside the others, each labelled with its machine.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
import tempfile
from pathlib import Path

from .files import MANIFEST_NAME, REFERENCE_DIR, sha256_file
from .freeze import freeze
from .manifest import load_manifest
from .provenance import REPO_ROOT
from .reference_run import slug


class ArchiveError(ValueError):
    """The archive is not a reference run, or cannot be imported (the message says why)."""


def run_name(results: str | Path) -> str:
    """``<gpu>-<date>`` for the run in ``results`` (a study's results folder): the first
    GPU any probe record lists, without the vendor (``NVIDIA H200`` -> ``h200``), and the
    date of the manifest; ``cpu-<n>core-<date>`` when no probe saw a GPU (n: the CPUs
    of the first probe). Raises FileNotFoundError without a manifest."""
    results = Path(results)
    manifest = load_manifest(results)
    date = manifest["created_utc"][:10]
    cpus = None
    for path in sorted(results.glob("points/**/*.probe.json")):
        record = json.loads(path.read_text())
        names = [
            g.get("name") for g in (record.get("gpu_state") or {}).get("end", {}).get("gpus", [])
        ]
        names = [n for n in names if n] or [
            re.sub(r"^cuda:\d+\s*", "", g) for g in record.get("gpus") or []
        ]
        if names:
            model = re.sub(r"^(nvidia|amd)\s+", "", names[0], flags=re.IGNORECASE)
            return f"{slug(model)}-{date}"
        cpus = cpus or (record.get("cpus") or {}).get("os_cpu_count")
    return f"cpu-{cpus or 'unknown'}core-{date}"


def _extract(archive: Path, dest: Path) -> None:
    """Unpack ``archive`` into ``dest``: only regular files and folders (a reference
    run has no links), no absolute paths or ``..`` (:func:`tarfile.data_filter`)."""
    try:
        with tarfile.open(archive) as tar:
            links = [m.name for m in tar.getmembers() if m.issym() or m.islnk()]
            if links:
                raise ArchiveError(f"{archive}: holds links ({', '.join(links[:3])}); refused")
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise ArchiveError(f"{archive}: cannot unpack: {exc}") from exc


def already_imported(manifest_path: Path, reference_root: Path) -> Path | None:
    """The reference run under ``reference_root`` whose manifest has the same bytes as
    ``manifest_path`` (the same run imported before), or None."""

    digest = sha256_file(manifest_path)
    for other in sorted(Path(reference_root).glob(f"*/{MANIFEST_NAME}")):
        if sha256_file(other) == digest:
            return other.parent
    return None


def import_archive(
    archive: str | Path,
    reference_root: str | Path = REFERENCE_DIR,
    name: str | None = None,
    log=print,
) -> Path:
    """Import ``archive`` into ``<reference_root>/<name>`` (see the module docstring) and
    return that folder. Raises :class:`ArchiveError` for an archive that holds no
    study run (or several), FileExistsError when the destination exists (give another
    ``name``), ValueError when the run fails its audit (nothing is copied)."""
    from .audit import audit
    from .crate import CRATE_NAME, write_crate

    archive = Path(archive)
    if not archive.is_file():
        raise ArchiveError(f"{archive}: no such archive file")
    with tempfile.TemporaryDirectory(prefix="crossover-import-") as tmp:
        work = Path(tmp)
        _extract(archive, work)
        found = sorted(work.glob(f"results/*/{MANIFEST_NAME}"))
        if len(found) != 1:
            raise ArchiveError(
                f"{archive}: expected one results/<study>/{MANIFEST_NAME}, found {len(found)}"
            )
        results = found[0].parent
        manifest = load_manifest(results)
        if manifest.get("kind") != "study" or "runner" not in manifest:
            raise ArchiveError(f"{archive}: {found[0].relative_to(work)} is not a reference run's")
        before = already_imported(found[0], Path(reference_root))
        if before is not None:
            raise FileExistsError(f"{archive.name} was already imported as {before}")
        for stem in manifest["runner"].get("incomplete_jobs", []):
            log(f"note: job {stem} of this run did not finish; its points are not in the run")
        write_crate(
            manifest,
            workdir=work,
            out=results / CRATE_NAME,
            repo=REPO_ROOT,
            manifest_path=results / MANIFEST_NAME,
        )
        dest = Path(reference_root) / (name or run_name(results))
        if dest.exists():
            raise FileExistsError(
                f"{dest} exists (another run of that GPU on that day): give another name, "
                "make reference-import ARCHIVE=... REFERENCE_NAME=<name>"
            )
        freeze(results, dest)
    report = audit(dest)
    log(report.text())
    if not report.ok:
        raise ValueError(f"{dest} fails its audit after the import")
    rows = sum(1 for _ in (dest / "timings.csv").open()) - 1
    log(f"imported {archive.name} as {dest} ({rows} rows); next: `make paper` and `make study`")
    return dest


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Command line of :func:`import_archive`. Returns 0, or 1 with the reason on
    stderr."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("archive", help="reference-<study>-<host>-<date>.tar.gz")
    parser.add_argument(
        "--name", help="folder name under results/reference/ (default: from the probes)"
    )
    parser.add_argument("--reference", default=str(REFERENCE_DIR), help="folder of reference runs")
    args = parser.parse_args(argv)
    try:
        import_archive(args.archive, args.reference, args.name)
    except (ArchiveError, FileExistsError, ValueError) as exc:
        print(f"reference import: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
