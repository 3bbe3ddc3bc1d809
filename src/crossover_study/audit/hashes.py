"""The audit's hash checks: every file a manifest records (outputs, per-job tables,
probe records, inputs, the RO-Crate's files) is found where the run left it and hashed
again, and the manifest and crate name no place on the machine that wrote them
(:mod:`crossover_study.audit.verify`). Nothing here re-derives a table: that is
:mod:`crossover_study.audit.stages`."""

from __future__ import annotations

import importlib.metadata
import json
import re
from pathlib import Path

from crossover_study.audit.findings import MAX_ROWS, AuditReport, clipped
from crossover_study.core.files import PLUGIN_COPY_DIR, sha256_file
from crossover_study.core.origin import git_state
from crossover_study.core.paths import REPO_ROOT, shown_path
from crossover_study.provenance.inputs import locate_package_file

#: A string that names a place on the machine that wrote it: an absolute POSIX or
#: Windows path, a file:// URI, or a path into an installed environment.
#: (TensorFlow's device names, ``/physical_device:CPU:0``, are not paths.)
MACHINE_PATH = re.compile(
    r"^(/[\w.-]+/|file:|[A-Za-z]:[\\/])|site-packages|/(home|root|tmp|work|opt|usr)/"
)


class Layout:
    """Where the files a manifest names are now: ``results_dir`` may have been copied
    elsewhere (a reference run); files outside it then are not part of the copy.

    ``target`` is the audited folder, ``results_dir`` the manifest's ``results_dir``
    (relative to the run's working directory; None for ``reports/paper``, whose caller
    sets ``original`` and ``workdir``). ``original`` is True when ``target`` is that
    folder where the run wrote it, ``workdir`` then the run's working directory."""

    def __init__(self, target: Path, results_dir: str | None):
        self.target = target
        self.results_dir = Path(results_dir) if results_dir else None
        self.original = False
        self.workdir = None
        if self.results_dir is not None:
            depth = len(self.results_dir.parts)
            parents = target.resolve().parents
            if len(parents) >= depth:
                workdir = parents[depth - 1]
                if (workdir / self.results_dir).resolve() == target.resolve():
                    self.original, self.workdir = True, workdir

    def locate(self, record: dict) -> Path | None:
        """The file of a manifest record (a dict with ``path`` and ``root``: ``repo``,
        ``package``, ``workdir``), or None when this copy does not hold it. Raises
        KeyError for a record without those keys."""
        path = Path(record["path"])
        if record["root"] == "repo":
            return REPO_ROOT / path
        if record["root"] == "package":
            return locate_package_file(record)
        if record["root"] != "workdir":  # outside (or an old absolute path)
            return None
        if self.results_dir is not None and path.is_relative_to(self.results_dir):
            return self.target / path.relative_to(self.results_dir)
        return self.workdir / path if self.original else None

    def locate_plugin(self, record: dict) -> Path | None:
        """The plug-in file of a manifest ``plugins`` record: where the run read it
        (:meth:`locate`), or in a copy of the run (a frozen reference run) its copy
        under ``<target>/plugins/<recorded path>`` (:func:`crossover_study.reference.freeze.freeze`
        puts it there); None when neither holds it or the recorded path would leave
        that folder."""
        path = self.locate(record)
        if path is not None or self.original or record.get("root") != "workdir":
            return path
        base = (self.target / PLUGIN_COPY_DIR).resolve()
        copy = (base / record["path"]).resolve()
        return copy if copy.is_relative_to(base) else None

    def shown(self, path: Path) -> str:
        """A path as printed: relative to the working directory when possible
        (:func:`crossover_study.core.paths.shown_path`)."""
        return shown_path(path)


def check_file(
    report: AuditReport, layout: Layout, record: dict, kind: str = "", modified_too=False
) -> Path | None:
    """Hash one recorded output (a manifest record with ``path``, ``root`` and
    ``sha256``); FAIL ``missing <kind>`` or ``modified <kind>`` in ``report``. Returns
    its path when it exists with the recorded hash (or, with ``modified_too``, when it
    exists), else None; None too when this copy does not hold it (nothing reported)."""
    path = layout.locate(record)
    if path is None:
        return None
    shown = layout.shown(path)
    if not path.is_file():
        report.add("FAIL", f"missing {kind}".strip(), shown, expected=record["sha256"])
        return None
    actual = sha256_file(path)
    report.files_checked += 1
    if actual != record["sha256"]:
        report.add(
            "FAIL",
            f"modified {kind}".strip(),
            shown,
            "sha256 differs from the manifest",
            expected=record["sha256"],
            actual=actual,
        )
        return path if modified_too else None
    return path


def check_inputs(report: AuditReport, layout: Layout, manifest: dict, strict: bool) -> None:
    """Config, code and data files: changed or missing since the run (notes; failures
    when ``strict``). A plug-in file of a case of the study's own (``plugins``) that
    changed or went missing always fails: it *is* the program that was timed, and no
    commit of this repository holds it. Findings go to ``report``; returns None."""
    for group, records, level in (
        ("config", manifest["config"]["files"], "FAIL" if strict else "note"),
        ("code", manifest["code"], "FAIL" if strict else "note"),
        ("data", manifest.get("data", []), "FAIL" if strict else "note"),
        ("plug-in", manifest.get("plugins", []), "FAIL"),
    ):
        changed, missing = [], []
        for record in records:
            path = layout.locate_plugin(record) if group == "plug-in" else layout.locate(record)
            if path is None or not path.is_file():
                missing.append(record["path"])
                continue
            report.files_checked += 1
            if sha256_file(path) != record["sha256"]:
                changed.append(record["path"])
        for what, paths in (("changed since the run", changed), ("not found", missing)):
            if paths:
                report.add(
                    level,
                    f"{group} {what}",
                    f"{len(paths)} file(s)",
                    ", ".join(paths[:MAX_ROWS]) + (" ..." if len(paths) > MAX_ROWS else ""),
                )


def note_reused_rates(report: AuditReport, layout: Layout, path: Path) -> None:
    """A rates file copied from an earlier study (its ``reused_from``,
    :mod:`crossover_study.measure.rates_job`): a ``note`` naming the file it was copied from and
    when those rates were measured, and whether that file is still there with the sha256
    it had (the copy stands alone: a changed or deleted source is a note, not a
    failure). Nothing for rates measured by the run, or a file that is not JSON."""
    try:
        source = json.loads(path.read_text()).get("reused_from")
    except (OSError, ValueError, AttributeError):
        return
    if not isinstance(source, dict):
        return
    origin = Path(source.get("path", ""))
    if not origin.is_absolute():
        origin = REPO_ROOT / origin
    if not origin.is_file():
        state = "no longer there"
    elif sha256_file(origin) != source.get("sha256"):
        state = "changed since"
    else:
        state = "unchanged"
    report.add(
        "note",
        "reused rates",
        layout.shown(path),
        f"copied from {source.get('path')} (measured {source.get('measured_utc')}; {state})",
    )


def check_records(report: AuditReport, layout: Layout, manifest: dict) -> list[Path]:
    """Per-job tables and probe records: recorded ones present and unchanged, none
    unrecorded (findings in ``report``); recorded rates files present and unchanged.
    Returns the paths of the per-job tables found intact, in the manifest's order."""
    points = []
    for record in manifest["points"]:
        path = check_file(report, layout, record, "per-job table")
        if path is not None:
            points.append(path)
    for record in manifest["probes"]:
        path = layout.locate(record)
        if path is not None and not path.is_file():
            report.add(
                "FAIL",
                "missing probe record",
                layout.shown(path),
                "the manifest recorded it",
                expected=record["sha256"],
            )
        else:
            check_file(report, layout, record, "probe record")
    for record in manifest.get("rates", []):  # manifests written before rates jobs: none
        path = check_file(report, layout, record, "rates file")
        if path is not None:
            note_reused_rates(report, layout, path)
    results = layout.target
    known = {
        layout.locate(r).resolve()
        for r in manifest["points"] + manifest["probes"]
        if layout.locate(r)
    }
    for pattern, what in (
        ("points/**/*.probe.json", "probe record"),
        ("points/**/*.csv", "per-job table"),
    ):
        for path in sorted(results.glob(pattern)):
            if path.resolve() not in known:
                report.add(
                    "FAIL",
                    f"unrecorded {what}",
                    layout.shown(path),
                    "not in the manifest",
                    actual=sha256_file(path),
                )
    return points


def machine_paths(value, where: str = "") -> list[str]:
    """``key: value`` of every string in a JSON value that :data:`MACHINE_PATH` matches
    (keys named by their path below ``where``, e.g. ``data[0].path``), in document
    order; an empty list when none does."""
    if isinstance(value, str):
        return [f"{where}: {value}"] if MACHINE_PATH.search(value) else []
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = ((f"[{i}]", v) for i, v in enumerate(value))
    else:
        return []
    found = []
    for key, item in items:
        key = str(key)
        found += machine_paths(item, f"{where}{key if key.startswith('[') else '.' + key}")
    return found


def check_portable(report: AuditReport, path: Path, data, what: str) -> None:
    """FAIL for every string of a manifest or crate that is a machine path
    (:data:`MACHINE_PATH`); a note for one inside a sentence (an error message that
    quotes a path: the run stays usable, but the message should not name it).
    ``path`` is the file as printed, ``data`` its JSON value, ``what`` its name in the
    message (``manifest``, ``RO-Crate``)."""
    found = machine_paths(data)
    # "key: value" lines; a value with a space is text that quotes a path.
    paths = [f for f in found if " " not in f.split(": ", 1)[1]]
    texts = [f for f in found if f not in paths]
    for level, kind, lines, message in (
        ("FAIL", "machine path", paths, "name a place on the machine that wrote it"),
        ("note", "machine path in text", texts, "quote a place on the machine that wrote it"),
    ):
        if lines:
            report.add(
                level,
                kind,
                str(path),
                f"{len(lines)} string(s) of the {what} {message}; provenance must hold "
                "relative paths only",
                details=clipped(lines),
            )


def check_crate(report: AuditReport, layout: Layout) -> None:
    """The RO-Crate: portable (:func:`check_portable`), every ``@id`` inside its folder,
    and its files (``File`` inside the folder; ``#workdir:`` files beside the original
    results folder) present and unchanged. A missing crate is a FAIL (every run has
    one: the workflow writes it, and a reference run gets its own on import or freeze),
    as is an unreadable one (not JSON, no ``@graph``); findings go to ``report``."""
    crate = layout.target / "ro-crate-metadata.json"
    if not crate.is_file():
        report.add("FAIL", "missing RO-Crate", layout.shown(crate), "every run has one")
        return
    try:
        graph = json.loads(crate.read_text())["@graph"]
    except (ValueError, KeyError) as exc:
        report.add("FAIL", "RO-Crate unreadable", layout.shown(crate), str(exc))
        return
    check_portable(report, Path(layout.shown(crate)), graph, "RO-Crate")
    root = layout.target.resolve()
    for entity in graph:
        ident = str(entity.get("@id", ""))
        if ident.startswith("#") or re.match(r"^[a-z][a-z0-9+.-]*:", ident):
            continue  # a contextual entity or a web URI (the file: scheme is a machine path)
        if not (root / ident).resolve().is_relative_to(root):
            report.add(
                "FAIL",
                "outside the RO-Crate",
                layout.shown(crate),
                f"@id {ident!r} leaves the crate's folder",
            )
    for entity in graph:
        ident = str(entity.get("identifier", ""))
        types = entity.get("@type", [])
        types = types if isinstance(types, list) else [types]
        if not ident.startswith("sha256:"):
            continue
        if "File" in types and ":" not in entity["@id"]:
            path = (layout.target / entity["@id"]).resolve()
            if not path.is_relative_to(root):
                continue  # reported above
        elif entity["@id"].startswith("#workdir:") and layout.original:
            path = layout.workdir / entity["@id"][len("#workdir:") :]
        else:
            continue  # #repo:/#package: inputs are checked as the manifest's inputs
        if not path.is_file():
            report.add("FAIL", "missing (RO-Crate)", layout.shown(path), expected=ident[7:])
        elif (actual := sha256_file(path)) != ident[7:]:
            report.add(
                "FAIL",
                "modified (RO-Crate)",
                layout.shown(path),
                "sha256 differs from the RO-Crate",
                expected=ident[7:],
                actual=actual,
            )


def check_environment(report: AuditReport, manifest: dict) -> None:
    """Package versions and git commit now vs at the run (notes). A locked package
    that the run's environment did not have (the GPU machine has no Snakemake or
    TensorFlow) took no part in the run and is not listed. Findings go to ``report``."""
    changed = []
    for name, versions in manifest.get("packages", {}).items():
        if versions.get("installed") is None:
            continue
        try:
            now = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            now = None
        if now != versions.get("installed"):
            changed.append(f"{name} {versions.get('installed')} -> {now}")
    if changed:
        report.add(
            "note",
            "packages changed since the run",
            f"{len(changed)} package(s)",
            ", ".join(changed[:MAX_ROWS]),
        )
    commit, dirty = git_state()
    recorded = manifest.get("git", {})
    if recorded.get("commit") != commit or recorded.get("dirty"):
        report.add(
            "note",
            "git",
            "repository",
            f"run at {recorded.get('commit')}{' (dirty)' if recorded.get('dirty') else ''}, "
            f"now {commit}{' (dirty)' if dirty else ''}",
        )
