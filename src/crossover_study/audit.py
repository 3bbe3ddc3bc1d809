"""Audit a study run or the paper figures against their manifest.

``python -m crossover_study.audit results/<study>`` (or a reference run under
``results/reference/<name>``, or ``reports/paper``; with no argument every manifest
under ``results/`` and ``reports/paper/``) recomputes what the manifest recorded and
checks that each table and figure derives from the recorded results:

- every recorded output and record (tables, report, figures, per-job tables, probe
  records) exists and has its recorded sha256; a file that was modified or is missing
  is reported with the expected (recorded) and actual sha256; a missing probe record is
  a failure whenever the manifest recorded probes, and per-job tables, probe records or
  figures that the manifest does not know are failures too;
- ``timings.csv`` holds exactly the rows of the per-job tables (collected again), each
  row carries the manifest's config hash, and no curve mixes environments unless the
  config says ``merge_environments: true``;
- ``crossover.csv`` is what the crossover step computes from ``timings.csv`` with the
  recorded bootstrap and seed;
- every figure records (in its metadata) the sha256 of the tables it was drawn from,
  which must be the recorded tables: the study's own, or the reference runs' tables
  the report drew beside them (``reference/<run>/timings.csv``, recorded under
  ``reference_tables``, which must still be there unchanged); ``report.html`` shows
  exactly the recorded PNGs; the RO-Crate's file hashes match the files;
- provenance travels: no string of the manifest or the RO-Crate is a machine's path
  (absolute, ``file://`` or into a ``site-packages`` folder), and every ``@id`` of the
  crate lies inside the crate's folder (files elsewhere are ``#workdir:``, ``#repo:``,
  ``#package:`` entities, see :mod:`crossover_study.crate`);
- paper figures are redrawn from the reference runs and must be identical byte for
  byte (when matplotlib is the recorded version).

Changed code, config files, data files or package versions since the run are notes
(``--strict`` makes them failures). Exit status: 0 when nothing failed, 1 otherwise,
2 when there was nothing to audit.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import cases as case_registry
from .files import MANIFEST_NAME, sha256_file, write_csv_atomic
from .harness import TimingPolicy
from .manifest import load_manifest, locate_package_file
from .paper import PAPER_FIGURES, paper_figures, reference_dirs
from .provenance import REPO_ROOT
from .spec import POINT_COLUMNS, size_columns

#: Rows listed per finding before "... and N more".
MAX_ROWS = 8
#: A string that names a place on the machine that wrote it: an absolute POSIX or
#: Windows path, a file:// URI, or a path into an installed environment.
#: (TensorFlow's device names, ``/physical_device:CPU:0``, are not paths.)
MACHINE_PATH = re.compile(
    r"^(/[\w.-]+/|file:|[A-Za-z]:[\\/])|site-packages|/(home|root|tmp|work|opt|usr)/"
)


@dataclass
class Finding:
    """One result of an audit. ``level`` is ``FAIL`` or ``note``; ``expected`` and
    ``actual`` are sha256 hex digests where a hash was compared; ``details`` are lines
    printed under the finding."""

    level: str
    kind: str
    path: str
    message: str = ""
    expected: str | None = None
    actual: str | None = None
    details: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The finding as printed: a heading line, details, expected and actual hash."""
        head = f"  {self.level} {self.kind}: {self.path}"
        if self.message:
            head += f": {self.message}"
        lines = [head]
        lines += [f"       {d}" for d in self.details]
        if self.expected is not None or self.actual is not None:
            lines.append(f"       expected sha256 {self.expected or '-'}")
            lines.append(f"       actual   sha256 {self.actual or '-'}")
        return "\n".join(lines)


@dataclass
class AuditReport:
    """Findings of one audited target (a results folder or ``reports/paper``) and the
    number of files whose hash was recomputed."""

    target: Path
    title: str = ""
    findings: list[Finding] = field(default_factory=list)
    files_checked: int = 0

    @property
    def failures(self) -> list[Finding]:
        """Findings of level ``FAIL``."""
        return [f for f in self.findings if f.level == "FAIL"]

    @property
    def ok(self) -> bool:
        """True when nothing failed (notes do not count)."""
        return not self.failures

    def add(self, level: str, kind: str, path, message: str = "", **kw) -> None:
        """Record a finding about ``path``."""
        self.findings.append(Finding(level, kind, str(path), message, **kw))

    def text(self) -> str:
        """The report as printed by the command line."""
        lines = [f"audit {self.target}{f' ({self.title})' if self.title else ''}"]
        order = {"FAIL": 0, "note": 1}
        lines += [f.text() for f in sorted(self.findings, key=lambda f: order[f.level])]
        notes = len(self.findings) - len(self.failures)
        verdict = "OK" if self.ok else "FAILED"
        lines.append(
            f"  {verdict}: {self.files_checked} files hashed, {len(self.failures)} failure(s), "
            f"{notes} note(s)"
        )
        return "\n".join(lines)


class _Layout:
    """Where the files a manifest names are now: ``results_dir`` may have been copied
    elsewhere (a reference run); files outside it then are not part of the copy."""

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
        """The file of a manifest record, or None when this copy does not hold it."""
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

    def shown(self, path: Path) -> str:
        """A path as printed: relative to the working directory when possible."""
        try:
            return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
        except ValueError:
            return str(path)


def _check_file(
    report: AuditReport, layout: _Layout, record: dict, kind: str = "", modified_too=False
) -> Path | None:
    """Hash one recorded output; FAIL when missing or modified. Returns its path when
    it exists with the recorded hash (or, with ``modified_too``, when it exists)."""
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


def _check_inputs(report: AuditReport, layout: _Layout, manifest: dict, strict: bool) -> None:
    """Config, code and data files: changed or missing since the run (notes; failures
    when ``strict``). A plug-in file of a case of the study's own (``plugins``) that
    changed or went missing always fails: it *is* the program that was timed, and no
    commit of this repository holds it."""
    for group, records, level in (
        ("config", manifest["config"]["files"], "FAIL" if strict else "note"),
        ("code", manifest["code"], "FAIL" if strict else "note"),
        ("data", manifest.get("data", []), "FAIL" if strict else "note"),
        ("plug-in", manifest.get("plugins", []), "FAIL"),
    ):
        changed, missing = [], []
        for record in records:
            path = layout.locate(record)
            if path is None or not path.is_file():
                missing.append(record["path"])
                continue
            report.files_checked += 1
            if sha256_file(path) != record["sha256"]:
                changed.append(record["path"])
        if changed:
            report.add(
                level,
                f"{group} changed since the run",
                f"{len(changed)} file(s)",
                ", ".join(changed[:MAX_ROWS]) + (" ..." if len(changed) > MAX_ROWS else ""),
            )
        if missing:
            report.add(
                level,
                f"{group} not found",
                f"{len(missing)} file(s)",
                ", ".join(missing[:MAX_ROWS]) + (" ..." if len(missing) > MAX_ROWS else ""),
            )


def _id_columns(table) -> list[str]:
    """Columns that identify a row of a timings table (a point: its spec and sizes, and
    the run that measured it), those of them ``table`` has."""
    wanted = (*POINT_COLUMNS, *size_columns(table), "run_id")
    return [c for c in wanted if c in table.columns]


def _canonical_rows(path: Path):
    """A CSV as text cells exactly as written (no type conversion, empty cells "")."""
    import pandas as pd

    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _ident(row, columns) -> tuple:
    """Identity of a row; sizes compared as integers (``64`` in a per-job table is
    ``64.0`` in timings.csv, where the column has gaps). Other columns stay text: a hex
    ``run_id`` such as ``123e4567abcd`` is not a number."""
    text = set(POINT_COLUMNS) | {"run_id"}
    return tuple(str(row[c]) if c in text else _size_text(str(row[c])) for c in columns)


def _size_text(value: str) -> str:
    try:
        return str(int(float(value)))
    except (ValueError, OverflowError):
        return value


def _row_label(row) -> str:
    """``case/framework/device/variant/timing size=value,...`` of a timings row."""
    sizes = ",".join(
        f"{c}={_size_text(str(row[c]))}"
        for c in size_columns([row])
        if c in row and str(row[c]) != ""
    )
    parts = [str(row.get(c, "")) for c in ("case", "framework", "device", "variant", "timing")]
    replicas = str(row.get("replicas", ""))
    if replicas not in ("", "1", "1.0", "nan"):  # replicated points: which one
        parts.append(f"x{_size_text(replicas)} {row.get('scaling', '')}".rstrip())
    return f"{'/'.join(parts)} {sizes}"


def _noise_threshold(manifest: dict) -> float:
    """The run's ``timing.noise_threshold`` (its resolved config), which merging a
    point's runs needs (:func:`point_runs.merge_repeats`)."""
    timing = manifest.get("config", {}).get("resolved", {}).get("timing", {})
    return float(timing.get("noise_threshold", TimingPolicy.noise_threshold))


def _check_timings_derivation(
    report: AuditReport, layout: _Layout, manifest: dict, timings: Path, points: list[Path]
) -> None:
    """timings.csv must hold exactly the rows of the per-job tables: they are collected
    again (in the order their rows appear in timings.csv, so that an unchanged table
    gives the recorded bytes) and compared cell by cell."""
    from .tables import TableError, collect_timings

    actual = _canonical_rows(timings)
    id_cols = _id_columns(actual)
    position = {_ident(r, id_cols): i for i, r in actual.iterrows()}

    def first_row(path: Path) -> float:
        rows = _canonical_rows(path)
        found = [
            position.get(_ident(r, id_cols))
            for _, r in rows.iterrows()
            if set(id_cols) <= set(r.index)
        ]
        return min((i for i in found if i is not None), default=float("inf"))

    points = sorted(points, key=lambda p: (first_row(p), str(p)))
    with tempfile.TemporaryDirectory() as tmp:
        expected_path = Path(tmp) / "timings.csv"
        try:
            # The run's own header: a run recorded before columns were added is
            # collected again as it was, not under today's schema.
            collect_timings(
                points,
                expected_path,
                columns=list(actual.columns),
                noise_threshold=_noise_threshold(manifest),
            )
        except (TableError, ValueError) as exc:
            report.add("FAIL", "per-job tables invalid", layout.shown(timings.parent), str(exc))
            return
        expected = _canonical_rows(expected_path)
        expected_hash = sha256_file(expected_path)
    actual_hash = sha256_file(timings)
    if expected_hash == actual_hash:
        return
    details = []
    exp_by = {_ident(r, id_cols): r for _, r in expected.iterrows()}
    for i, row in actual.iterrows():
        source = exp_by.get(_ident(row, id_cols))
        if source is None:
            details.append(f"row {i} {_row_label(row)}: not in any per-job table")
            continue
        diff = [c for c in actual.columns if c in source and source[c] != row[c]]
        if diff:
            details.append(
                f"row {i} {_row_label(row)}: "
                + "; ".join(f"{c} per-job {source[c]!r}, timings.csv {row[c]!r}" for c in diff)
            )
    for ident, row in exp_by.items():
        if ident not in position:
            details.append(f"{_row_label(row)}: in the per-job tables, missing from timings.csv")
    if list(expected.columns) != list(actual.columns):
        details.append(f"columns differ: {list(actual.columns)}")
    if not details:
        details.append("same rows, other order or formatting")
    more = len(details) - MAX_ROWS
    details = details[:MAX_ROWS] + ([f"... and {more} more"] if more > 0 else [])
    report.add(
        "FAIL",
        "not derived",
        layout.shown(timings),
        "differs from the per-job tables it was collected from (expected: collected again)",
        expected=expected_hash,
        actual=actual_hash,
        details=details,
    )


def _check_plugin_rows(report: AuditReport, layout: _Layout, manifest: dict, timings: Path) -> None:
    """Every row of a case of the study's own says which plug-in file measured it
    (``workload_sha256``): it must be the file the manifest recorded. A row measured with
    another version of the plug-in (the file edited between runs whose rows were kept)
    fails, naming the rows."""
    records = {(r["case"], r["framework"]): r for r in manifest.get("plugins", [])}
    if not records:
        return
    rows = _canonical_rows(timings)
    if "workload_sha256" not in rows.columns:
        return
    for (case, framework), record in records.items():
        mine = rows[(rows["case"] == case) & (rows["framework"] == framework)]
        stamped = mine[mine["workload_sha256"] != ""]
        other = stamped[stamped["workload_sha256"] != record["sha256"]]
        if len(other):
            labels = [_row_label(r) for _, r in other.head(MAX_ROWS).iterrows()]
            report.add(
                "FAIL",
                "measured by another plug-in version",
                layout.shown(timings),
                f"{len(other)} row(s) of {case} ({framework}) were measured with a plug-in "
                f"file other than the recorded {record['path']}: " + "; ".join(labels),
                expected=record["sha256"],
                actual=str(other["workload_sha256"].iloc[0]),
            )


def _check_crossover_derivation(
    report: AuditReport, layout: _Layout, manifest: dict, timings: Path, crossover: Path
) -> None:
    """crossover.csv must be what the crossover step computes from timings.csv."""
    import numpy as np
    import pandas as pd

    from .crossover import crossover_table

    settings = manifest["config"]["resolved"].get("crossover", {})
    table = crossover_table(
        pd.read_csv(timings), n_boot=settings.get("bootstrap", 1000), seed=settings.get("seed", 0)
    )
    try:
        actual = pd.read_csv(crossover)
    except pd.errors.EmptyDataError:
        actual = pd.DataFrame()
    columns = list(table.columns)
    if len(actual.columns) and set(actual.columns) < set(columns):
        # The run's own header: a run recorded before columns were added (cpu_variant)
        # is computed again with its columns, not under today's schema.
        columns = [c for c in columns if c in set(actual.columns)]
    with tempfile.TemporaryDirectory() as tmp:
        expected_path = Path(tmp) / "crossover.csv"
        write_csv_atomic(table.to_dict("records"), columns, expected_path)
        expected_hash = sha256_file(expected_path)
        actual_hash = sha256_file(crossover)
        if expected_hash == actual_hash:
            return
        expected = pd.read_csv(expected_path)
    details = []
    if list(expected.columns) != list(actual.columns) or len(expected) != len(actual):
        details.append(
            f"{len(actual)} rows x {len(actual.columns)} columns, expected "
            f"{len(expected)} x {len(expected.columns)}"
        )
    else:
        for i in range(len(expected)):
            for c in expected.columns:
                e, a = expected.at[i, c], actual.at[i, c]
                same = (
                    (pd.isna(e) and pd.isna(a))
                    or (
                        isinstance(e, (int, float, np.number))
                        and isinstance(a, (int, float, np.number))
                        and np.isclose(e, a, rtol=1e-9, atol=0)
                    )
                    or e == a
                )
                if not same:
                    details.append(
                        f"row {i} ({expected.at[i, 'case']}, {expected.at[i, 'axis']}): {c} expected {e!r}, found {a!r}"
                    )
        if not details:
            return  # same numbers, other formatting (another pandas version)
    more = len(details) - MAX_ROWS
    details = details[:MAX_ROWS] + ([f"... and {more} more"] if more > 0 else [])
    report.add(
        "FAIL",
        "not derived",
        layout.shown(crossover),
        "differs from the crossover computed again from timings.csv (expected: computed again)",
        expected=expected_hash,
        actual=actual_hash,
        details=details,
    )


def _check_rows(report: AuditReport, layout: _Layout, manifest: dict, timings: Path) -> None:
    """Config hash of every row, and environments within each curve."""
    import pandas as pd

    from .environments import describe_conflicts, environment_conflicts

    df = pd.read_csv(timings)
    expected = manifest["config"]["hash"]
    if "config_hash" in df:
        # Rows carry their case's own hash (manifests since case_hashes); rows measured
        # before that (kept from a journal) carry the hash of the whole config.
        per_case = manifest["config"].get("case_hashes") or {}
        own = df["case"].map(lambda case: str(per_case.get(case, "")))
        hashes = df["config_hash"].astype(str)
        bad = df[(hashes != str(expected)) & (hashes != own)]
        if len(bad):
            details = [
                f"row {i} {_row_label(r.fillna(''))}: config_hash {r['config_hash']} (run {r.get('run_id')})"
                for i, r in bad.head(MAX_ROWS).iterrows()
            ]
            if len(bad) > MAX_ROWS:
                details.append(f"... and {len(bad) - MAX_ROWS} more")
            report.add(
                "FAIL",
                "other config",
                layout.shown(timings),
                f"{len(bad)} row(s) measured under another config than the manifest's "
                + ("hash of their case (config.case_hashes)" if per_case else str(expected)),
                details=details,
            )
    conflicts = environment_conflicts(df)
    if conflicts and not manifest["config"].get("merge_environments", False):
        report.add(
            "FAIL",
            "mixed environments",
            layout.shown(timings),
            "rows of one curve come from different environments (merge_environments: false)",
            details=describe_conflicts(df, conflicts, "timings.csv").splitlines(),
        )


def _check_figures(report: AuditReport, layout: _Layout, manifest: dict) -> None:
    """Recorded figures: hash, every recorded source a recorded table (the study's or a
    recorded reference table) with the recorded sha256, shown in the report."""
    from .figures import FIGURE_FORMATS, figure_sources

    # A figure may be drawn from the study's tables (recorded by file name) and, for the
    # cross-machine figures, from reference runs' tables (reference/<run>/timings.csv).
    tables = {Path(r["path"]).name: r["sha256"] for r in manifest["tables"].values()}
    tables.update({n: r["sha256"] for n, r in manifest.get("reference_tables", {}).items()})
    present = []
    for record in manifest["figures"]:
        # A modified figure is checked further: which tables does it say it shows?
        path = _check_file(report, layout, record, "figure", modified_too=True)
        if path is None:
            continue
        present.append((record, path))
        sources = figure_sources(path)
        if not sources:
            report.add(
                "FAIL", "figure without sources", layout.shown(path), "records no table hashes"
            )
        for name, digest in sorted(sources.items()):
            if tables.get(name) != digest:
                report.add(
                    "FAIL",
                    "figure from other data",
                    layout.shown(path),
                    f"drawn from a {name} that is not the recorded one",
                    expected=tables.get(name),
                    actual=digest,
                )
    figure_dirs = {layout.locate(r).parent for r in manifest["figures"] if layout.locate(r)}
    recorded = {layout.locate(r).resolve() for r in manifest["figures"] if layout.locate(r)}
    for folder in figure_dirs:
        for path in sorted(folder.iterdir()) if folder.is_dir() else []:
            if path.suffix.lstrip(".") in FIGURE_FORMATS and path.resolve() not in recorded:
                report.add(
                    "FAIL",
                    "unrecorded figure",
                    layout.shown(path),
                    "not in the manifest",
                    actual=sha256_file(path),
                )
    html_record = manifest["report"].get("html")
    html = layout.locate(html_record) if html_record else None
    if html is not None and html.is_file():
        text = html.read_text(errors="replace")
        for _record, path in present:
            if path.suffix == ".png":
                encoded = base64.b64encode(path.read_bytes()).decode()
                if encoded not in text:
                    report.add(
                        "FAIL",
                        "report shows another figure",
                        layout.shown(html),
                        f"does not embed {path.name} as it is now",
                        expected=sha256_file(path),
                    )


def _check_records(report: AuditReport, layout: _Layout, manifest: dict) -> list[Path]:
    """Per-job tables and probe records: recorded ones present and unchanged, none
    unrecorded. Returns the per-job tables found intact."""
    points = []
    for record in manifest["points"]:
        path = _check_file(report, layout, record, "per-job table")
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
            _check_file(report, layout, record, "probe record")
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


def _machine_paths(value, where: str = "") -> list[str]:
    """``key: value`` of every string in a JSON value that :data:`MACHINE_PATH` matches
    (keys named by their path, e.g. ``data[0].path``)."""
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
        found += _machine_paths(item, f"{where}{key if key.startswith('[') else '.' + key}")
    return found


def _check_portable(report: AuditReport, path: Path, data, what: str) -> None:
    """FAIL for every string of a manifest or crate that is a machine path
    (:data:`MACHINE_PATH`); a note for one inside a sentence (an error message that
    quotes a path: the run stays usable, but the message should not name it)."""
    found = _machine_paths(data)
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
                details=lines[:MAX_ROWS]
                + ([f"... and {len(lines) - MAX_ROWS} more"] if len(lines) > MAX_ROWS else []),
            )


def _check_crate(report: AuditReport, layout: _Layout) -> None:
    """The RO-Crate: portable (:func:`_check_portable`), every ``@id`` inside its folder,
    and its files (``File`` inside the folder; ``#workdir:`` files beside the original
    results folder) present and unchanged."""
    crate = layout.target / "ro-crate-metadata.json"
    if not crate.is_file():
        report.add("note", "no RO-Crate", layout.shown(crate))
        return
    try:
        graph = json.loads(crate.read_text())["@graph"]
    except (ValueError, KeyError) as exc:
        report.add("FAIL", "RO-Crate unreadable", layout.shown(crate), str(exc))
        return
    _check_portable(report, Path(layout.shown(crate)), graph, "RO-Crate")
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


def _check_environment(report: AuditReport, manifest: dict) -> None:
    """Package versions and git commit now vs at the run (notes). A locked package
    that the run's environment did not have (the GPU machine has no Snakemake or
    TensorFlow) took no part in the run and is not listed."""
    import importlib.metadata

    from .provenance import git_state

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


def _audit_study(report: AuditReport, target: Path, manifest: dict, strict: bool) -> None:
    layout = _Layout(target, manifest["results_dir"])
    report.title = f"study {manifest['study']}, manifest of {manifest['created_utc']}"
    # The run's own cases (its plug-ins' seed sizes and axes) for the re-derivations.
    case_registry.use(manifest["config"]["resolved"])
    _check_portable(report, Path(layout.shown(target / MANIFEST_NAME)), manifest, "manifest")
    if not layout.original:
        report.add(
            "note",
            "copy",
            layout.shown(target),
            f"a copy of {manifest['results_dir']}: the report and figures are not part of it",
        )
    for record in [*manifest["tables"].values(), *manifest["report"].values()]:
        _check_file(report, layout, record)
    points = _check_records(report, layout, manifest)
    if layout.original:
        # Reference tables the report drew beside the study: still there, unchanged.
        for record in manifest.get("reference_tables", {}).values():
            _check_file(report, layout, record, "reference table")
        _check_figures(report, layout, manifest)
    timings_path = layout.locate(manifest["tables"]["timings"])
    if timings_path is not None and timings_path.is_file():
        _check_rows(report, layout, manifest, timings_path)
        _check_plugin_rows(report, layout, manifest, timings_path)
        if manifest["points"] and len(points) == len(manifest["points"]):
            _check_timings_derivation(report, layout, manifest, timings_path, points)
        crossover_path = layout.locate(manifest["tables"]["crossover"])
        if crossover_path is not None and crossover_path.is_file():
            _check_crossover_derivation(report, layout, manifest, timings_path, crossover_path)
    _check_crate(report, layout)
    _check_inputs(report, layout, manifest, strict)
    _check_environment(report, manifest)


def _audit_paper(report: AuditReport, target: Path, manifest: dict, regenerate: bool) -> None:
    """Paper figures: hashes, sources = reference tables, redrawn byte for byte."""
    import importlib.metadata

    from .figures import figure_sources

    report.title = f"paper figures, manifest of {manifest['created_utc']}"
    _check_portable(report, target / MANIFEST_NAME, manifest, "manifest")
    workdir = target.resolve().parents[1]
    layout = _Layout(target, None)
    layout.original, layout.workdir = True, workdir
    sources = {}
    run_dirs = []
    for run in manifest["reference_runs"]:
        for name, record in run["files"].items():
            path = _check_file(report, layout, record, "reference table")
            if name != MANIFEST_NAME:
                sources[f"{run['name']}/{name}"] = record["sha256"]
            if name == "timings.csv" and path is not None:
                run_dirs.append(path.parent)
    recorded_runs = {run["name"] for run in manifest["reference_runs"]}
    for folder in reference_dirs(workdir / "results" / "reference"):
        if folder.name not in recorded_runs:
            report.add(
                "FAIL",
                "reference run not drawn",
                layout.shown(folder),
                "the paper figures predate it (run: snakemake paper)",
            )
    figures = {}
    for record in manifest["figures"]:
        path = _check_file(report, layout, record, "figure")
        if path is None:
            continue
        figures[path.name] = record
        recorded_sources = figure_sources(path)
        for name in sorted(set(recorded_sources) | set(sources)):
            if recorded_sources.get(name) != sources.get(name):
                report.add(
                    "FAIL",
                    "figure from other data",
                    layout.shown(path),
                    f"drawn from a {name} that is not the recorded one",
                    expected=sources.get(name),
                    actual=recorded_sources.get(name),
                )
    for path in sorted(target.glob("fig-*")):
        if path.name not in {Path(r["path"]).name for r in manifest["figures"]}:
            report.add("FAIL", "unrecorded figure", layout.shown(path), "not in the manifest")
    missing = [
        n for n in PAPER_FIGURES if not any(Path(r["path"]).stem == n for r in manifest["figures"])
    ]
    if missing:
        report.add("FAIL", "figures missing from the manifest", ", ".join(missing))
    if not regenerate or len(run_dirs) != len(manifest["reference_runs"]):
        return
    recorded_mpl = manifest.get("packages", {}).get("matplotlib", {}).get("installed")
    if recorded_mpl != importlib.metadata.version("matplotlib"):
        report.add(
            "note",
            "not redrawn",
            layout.shown(target),
            f"matplotlib {importlib.metadata.version('matplotlib')} here, {recorded_mpl} recorded",
        )
        return
    import matplotlib

    matplotlib.use("Agg")
    with tempfile.TemporaryDirectory() as tmp:
        formats = sorted(
            {Path(r["path"]).suffix.lstrip(".") for r in manifest["figures"]},
            key=lambda f: f != "pdf",
        )
        for path in paper_figures(sorted(run_dirs), tmp, formats=formats):
            record = figures.get(path.name)
            if record is None:
                continue
            redrawn = sha256_file(path)
            if redrawn != record["sha256"]:
                report.add(
                    "FAIL",
                    "not reproduced",
                    layout.shown(workdir / record["path"]),
                    "redrawn from the reference runs, the bytes differ (expected: redrawn)",
                    expected=redrawn,
                    actual=record["sha256"],
                )


def audit(target: str | Path, strict: bool = False, regenerate: bool = True) -> AuditReport:
    """Audit one results folder (a study run or a reference run) or ``reports/paper``.

    ``strict`` turns changed code, config, data and package versions into failures;
    ``regenerate`` redraws paper figures to compare their bytes. Never raises for a
    bad or missing file: everything becomes a :class:`Finding` of the returned report.
    """
    target = Path(target)
    if target.name == MANIFEST_NAME:
        target = target.parent
    report = AuditReport(target)
    try:
        manifest = load_manifest(target)
    except FileNotFoundError:
        report.add("FAIL", "missing manifest", target / MANIFEST_NAME)
        return report
    except (ValueError, KeyError) as exc:
        report.add("FAIL", "unreadable manifest", target / MANIFEST_NAME, str(exc))
        return report
    if manifest.get("kind") == "paper":
        _audit_paper(report, target, manifest, regenerate)
    else:
        _audit_study(report, target, manifest, strict)
    return report


def discover(root: str | Path = ".") -> list[Path]:
    """Every folder with a manifest: ``results/*/``, ``results/reference/*/`` and
    ``reports/paper/`` under ``root``."""
    root = Path(root)
    found = [
        *sorted(root.glob(f"results/*/{MANIFEST_NAME}")),
        *sorted(root.glob(f"results/reference/*/{MANIFEST_NAME}")),
        *sorted(root.glob(f"reports/paper/{MANIFEST_NAME}")),
    ]
    return [p.parent for p in found]


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Command line: audit the given folders (default: every manifest found). Returns 0
    when every audit is OK, 1 when one fails, 2 when there is nothing to audit."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "targets", nargs="*", help="results/<study>, results/reference/<name>, reports/paper"
    )
    parser.add_argument(
        "--strict", action="store_true", help="changed code, config, data or packages fail"
    )
    parser.add_argument("--no-redraw", action="store_true", help="do not redraw paper figures")
    args = parser.parse_args(argv)
    targets = [Path(t) for t in args.targets] or discover()
    if not targets:
        print(
            "nothing to audit: no results/*/manifest.json or reports/paper/manifest.json",
            file=sys.stderr,
        )
        return 2
    failed = False
    for target in targets:
        report = audit(target, strict=args.strict, regenerate=not args.no_redraw)
        print(report.text())
        failed |= not report.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
