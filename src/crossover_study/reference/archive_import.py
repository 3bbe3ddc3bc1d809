"""Import a reference run's archive (from :mod:`crossover_study.reference.gpu_run`) on any
machine with the project's environment: ``make reference-import ARCHIVE=...``.

The archive holds ``results/<study>/`` (per-job tables, probe records, journals,
``timings.csv``, ``crossover.csv``, ``wall.json``, the resolved config and the
manifest) and ``logs/<study>/``. Importing it:

1. unpacks it into a temporary working directory while reading it as a stream,
   checking each member before a byte of it is written: only regular files and folders,
   no absolute path, no ``..``, at most :data:`MAX_MEMBERS` members and
   :data:`MAX_UNPACKED_BYTES` bytes unpacked in all (a gzip bomb is refused at its first
   member past the limit, naming it); :func:`tarfile.data_filter` as a second guard;
2. builds the run's folder name and checks it: ``<name>`` is ``<gpu>-<date>`` from the
   probe records (e.g. ``h200-2026-12-01``; ``cpu-<n>core-<date>`` when no probe saw a
   GPU) unless given (``--name``); the date must be the manifest's ISO ``created_utc``,
   the CPU count a positive integer, and the name a folder name
   (:data:`NAME_PATTERN`) that resolves inside ``results/reference/``;
3. writes the run's RO-Crate in the temporary directory (the GPU machine has no
   ``rocrate``);
4. freezes the run into ``results/reference/<name>/`` (:func:`freeze.freeze`: audited
   first, refused when the audit fails);
5. audits the frozen copy and prints the report.

An archive whose members, manifest or probe records would put a file anywhere else, or
that is not a reference run's (a manifest ``runner`` without its ``name``), is refused
whole, with one line naming the field, before anything is written under
``results/reference/``.

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
from datetime import datetime
from pathlib import Path, PurePosixPath

from crossover_study.core.files import MANIFEST_NAME, REFERENCE_DIR, sha256_file
from crossover_study.core.paths import REPO_ROOT
from crossover_study.provenance.manifest import load_manifest
from crossover_study.reference.freeze import freeze
from crossover_study.reference.gpu_jobs import slug


class ArchiveError(ValueError):
    """The archive is not a reference run, or cannot be imported (the message says why)."""


#: A reference run's folder name: lower-case letters, digits, ``.``, ``_`` and ``-``,
#: starting with a letter or digit, at most 64 characters, never ``..`` (checked with
#: :func:`check_name`, a full match: ``$`` would let a trailing newline through).
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def check_name(name: object, field: str) -> str:
    """``name`` when it is a folder name (:data:`NAME_PATTERN`, no ``..``). Raises
    :class:`ArchiveError` naming ``field`` (e.g. ``--name``) otherwise."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or ".." in name:
        raise ArchiveError(
            f"{field} {name!r} is not a folder name (lower-case letters, digits, '.', '_', "
            "'-', at most 64, no '..')"
        )
    return name


def _iso_date(value: object) -> str:
    """The ``YYYY-MM-DD`` of the manifest's ``created_utc`` (an ISO date or date-time).
    Raises :class:`ArchiveError` naming the field for anything else."""
    try:
        if not isinstance(value, str):
            raise ValueError(value)
        return datetime.fromisoformat(value).date().isoformat()
    except ValueError:
        raise ArchiveError(f"manifest.created_utc {value!r} is not an ISO date") from None


def _probe_record(path: Path, results: Path) -> dict:
    """A probe record (a JSON object). Raises :class:`ArchiveError` naming the file."""
    try:
        record = json.loads(path.read_text())
    except (ValueError, OSError) as exc:
        raise ArchiveError(f"{path.relative_to(results)}: unreadable probe record: {exc}") from None
    if not isinstance(record, dict):
        raise ArchiveError(f"{path.relative_to(results)}: a probe record is a JSON object")
    return record


def _mapping(value: object) -> dict:
    """``value`` when a probe record has a JSON object there, else ``{}``."""
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list:
    """``value`` when a probe record has a JSON list there, else ``[]``."""
    return value if isinstance(value, list) else []


def run_name(results: str | Path) -> str:
    """``<gpu>-<date>`` for the run in ``results`` (a study's results folder): the first
    GPU any probe record lists, without the vendor (``NVIDIA H200`` -> ``h200``), and the
    date of the manifest; ``cpu-<n>core-<date>`` when no probe saw a GPU (n: the CPUs
    of the first probe). Raises FileNotFoundError without a manifest,
    :class:`ArchiveError` naming the field for a ``created_utc`` that is not an ISO
    date, an ``os_cpu_count`` that is not a positive integer or a name that is not a
    folder name (:func:`check_name`)."""
    results = Path(results)
    manifest = load_manifest(results)
    date = _iso_date(manifest.get("created_utc"))
    cpus = None
    for path in sorted(results.glob("points/**/*.probe.json")):
        record = _probe_record(path, results)
        end = _list(_mapping(_mapping(record.get("gpu_state")).get("end")).get("gpus"))
        names = [n for n in (_mapping(g).get("name") for g in end) if isinstance(n, str) and n]
        names = names or [
            re.sub(r"^cuda:\d+\s*", "", g) for g in _list(record.get("gpus")) if isinstance(g, str)
        ]
        if names:
            model = re.sub(r"^(nvidia|amd)\s+", "", names[0], flags=re.IGNORECASE)
            return check_name(f"{slug(model)}-{date}", f"{path.relative_to(results)}: GPU name")
        count = _mapping(record.get("cpus")).get("os_cpu_count")
        if count is not None and (type(count) is not int or count < 1):
            raise ArchiveError(
                f"{path.relative_to(results)}: cpus.os_cpu_count {count!r} is not a "
                "positive integer"
            )
        cpus = cpus or count
    return check_name(f"cpu-{cpus or 'unknown'}core-{date}", "probe records: cpus.os_cpu_count")


#: The most bytes an archive may unpack to. A reference run's results and logs are small
#: (the committed CPU run: about 1 MB; a GPU run of the reference study: a few MB); 512 MiB
#: leaves room for a study of many thousands of points and refuses a gzip bomb (a few MB
#: that would unpack to gigabytes) before it fills the disk.
MAX_UNPACKED_BYTES = 512 * 2**20
#: The most members an archive may hold (files and folders): a study's jobs write five
#: files each; 20 000 is far beyond any study here.
MAX_MEMBERS = 20_000


def _check_member(member: tarfile.TarInfo, archive: Path) -> None:
    """Refuse the archive, naming ``member``, unless it is a regular file or a folder (a
    reference run has no links, devices or sparse files) whose relative path stays
    inside the folder it is unpacked into (no absolute path, no ``..``)."""
    path = PurePosixPath(member.name)
    if member.issym() or member.islnk():
        raise ArchiveError(f"{archive}: holds links ({member.name})")
    if not (member.isfile() or member.isdir()) or member.issparse():
        raise ArchiveError(f"{archive}: member {member.name!r} is not a file or folder")
    if path.is_absolute() or ".." in path.parts:
        raise ArchiveError(f"{archive}: member {member.name!r} leaves its folder")


def _extract(
    archive: Path,
    dest: Path,
    max_bytes: int = MAX_UNPACKED_BYTES,
    max_members: int = MAX_MEMBERS,
) -> int:
    """Unpack ``archive`` into ``dest`` member by member, reading it once as a stream
    (:mod:`tarfile`'s ``r|*`` mode: each member's header is read before its data, and
    nothing of the archive is read ahead). Each member is checked before a byte of it is
    written: :func:`_check_member`, at most ``max_members`` members, and the bytes
    unpacked so far plus the member's size (from its header; tarfile writes exactly that
    many bytes) at most ``max_bytes``. The first member past a check refuses the archive
    with :class:`ArchiveError` naming it, so nothing larger than ``max_bytes`` is ever
    written (a gzip bomb is refused at its first big member, not after it filled the
    disk). :func:`tarfile.data_filter` guards each member as well. Returns the bytes
    unpacked. Raises :class:`ArchiveError` for an archive that cannot be read."""
    total = 0
    try:
        with tarfile.open(archive, mode="r|*") as tar:
            for count, member in enumerate(tar, start=1):
                _check_member(member, archive)
                if count > max_members:
                    raise ArchiveError(
                        f"{archive}: member {member.name!r} is past the limit of "
                        f"{max_members} members (a reference run has far fewer)"
                    )
                if member.isfile() and total + member.size > max_bytes:
                    raise ArchiveError(
                        f"{archive}: member {member.name!r} ({member.size} bytes) would "
                        f"unpack the archive past the limit of {max_bytes} bytes (a "
                        "reference run is a few MB; a gzip bomb?)"
                    )
                tar.extract(member, dest, filter="data")
                total += member.size if member.isfile() else 0
    except (tarfile.TarError, OSError) as exc:
        raise ArchiveError(f"{archive}: cannot unpack: {exc}") from exc
    return total


def already_imported(manifest_path: Path, reference_root: Path) -> Path | None:
    """The reference run under ``reference_root`` whose manifest has the same bytes as
    ``manifest_path`` (the same run imported before), or None."""

    digest = sha256_file(manifest_path)
    for other in sorted(Path(reference_root).glob(f"*/{MANIFEST_NAME}")):
        if sha256_file(other) == digest:
            return other.parent
    return None


def _reference_run(manifest: object, where: str) -> dict:
    """The manifest when it is a reference run's: a study's (``kind``), with a
    ``runner`` that names itself and lists its incomplete jobs as strings. Raises
    :class:`ArchiveError` naming the field otherwise."""
    if not isinstance(manifest, dict) or manifest.get("kind") != "study":
        raise ArchiveError(f"{where} is not a reference run's (manifest.kind is not 'study')")
    runner = manifest.get("runner")
    if not isinstance(runner, dict):
        raise ArchiveError(f"{where} is not a reference run's (no manifest.runner)")
    if not isinstance(runner.get("name"), str) or not runner["name"].strip():
        raise ArchiveError(f"{where}: manifest.runner has no name")
    jobs = runner.get("incomplete_jobs", [])
    if not isinstance(jobs, list) or not all(isinstance(j, str) for j in jobs):
        raise ArchiveError(f"{where}: manifest.runner.incomplete_jobs is not a list of names")
    return manifest


def destination(reference_root: str | Path, name: str, field: str = "--name") -> Path:
    """``<reference_root>/<name>`` once ``name`` is a folder name (:func:`check_name`)
    and the folder resolves directly inside ``reference_root`` (a link on the way
    would lead elsewhere). Raises :class:`ArchiveError` naming ``field``."""
    root = Path(reference_root)
    dest = root / check_name(name, field)
    if dest.resolve().parent != root.resolve():
        raise ArchiveError(f"{field} {name!r} leads outside {root}")
    return dest


def import_archive(
    archive: str | Path,
    reference_root: str | Path = REFERENCE_DIR,
    name: str | None = None,
    log=print,
    max_bytes: int = MAX_UNPACKED_BYTES,
    max_members: int = MAX_MEMBERS,
) -> Path:
    """Import ``archive`` into ``<reference_root>/<name>`` (see the module docstring) and
    return that folder. Raises :class:`ArchiveError` (nothing written under
    ``reference_root``) for an archive that holds no study run (or several), a member
    that leaves its folder, a member past ``max_bytes`` unpacked in all or past
    ``max_members`` members (:func:`_extract`: refused while unpacking, before the
    member is written), a manifest or probe value that would lead the run's folder
    elsewhere (or a ``name`` that would), naming the member or field;
    FileExistsError when the destination exists (give another ``name``), ValueError
    when the run fails its audit (nothing is copied)."""
    from crossover_study.audit.verify import audit
    from crossover_study.provenance.crate import CRATE_NAME, write_crate

    archive = Path(archive)
    if name is not None:
        destination(reference_root, name)  # before the archive is even opened
    if not archive.is_file():
        raise ArchiveError(f"{archive}: no such archive file")
    with tempfile.TemporaryDirectory(prefix="crossover-import-") as tmp:
        work = Path(tmp)
        _extract(archive, work, max_bytes, max_members)
        found = sorted(work.glob(f"results/*/{MANIFEST_NAME}"))
        if len(found) != 1:
            raise ArchiveError(
                f"{archive}: expected one results/<study>/{MANIFEST_NAME}, found {len(found)}"
            )
        results = found[0].parent
        where = f"{archive}: {found[0].relative_to(work)}"
        try:
            manifest = _reference_run(load_manifest(results), where)
        except ArchiveError:  # already names the archive and the field
            raise
        except (ValueError, AttributeError) as exc:  # not JSON (an object), another version
            raise ArchiveError(f"{where}: {exc}") from None
        try:
            dest = destination(reference_root, name or run_name(results))
        except ArchiveError as exc:
            raise ArchiveError(f"{archive}: {exc}") from None
        before = already_imported(found[0], Path(reference_root))
        if before is not None:
            raise FileExistsError(f"{archive.name} was already imported as {before}")
        if dest.exists():
            raise FileExistsError(
                f"{dest} exists (another run of that GPU on that day): give another name, "
                "make reference-import ARCHIVE=... REFERENCE_NAME=<name>"
            )
        for stem in manifest["runner"].get("incomplete_jobs", []):
            log(f"note: job {stem} of this run did not finish; its points are not in the run")
        try:
            write_crate(
                manifest,
                workdir=work,
                out=results / CRATE_NAME,
                repo=REPO_ROOT,
                manifest_path=results / MANIFEST_NAME,
            )
        except (KeyError, TypeError, AttributeError) as exc:
            # A manifest whose layout the crate cannot read: one line, not a traceback.
            raise ArchiveError(
                f"{where}: not a study manifest ({type(exc).__name__}: {exc})"
            ) from None
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
    except ArchiveError as exc:
        print(f"reference import: {exc}; archive refused", file=sys.stderr)
        return 1
    except (FileExistsError, ValueError) as exc:
        print(f"reference import: {exc}", file=sys.stderr)
        return 1
    return 0
