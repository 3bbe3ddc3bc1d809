"""Audit a study run or the paper figures against their manifest.

``crossover-study audit results/<study>`` (or a reference run under
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
  exactly the recorded PNGs; the RO-Crate is there (a run without one fails) and its
  file hashes match the files;
- provenance travels: no string of the manifest or the RO-Crate is a machine's path
  (absolute, ``file://`` or into a ``site-packages`` folder), and every ``@id`` of the
  crate lies inside the crate's folder (files elsewhere are ``#workdir:``, ``#repo:``,
  ``#package:`` entities, see :mod:`crossover_study.provenance.crate`);
- paper figures are redrawn from the reference runs and must be identical byte for
  byte (when matplotlib is the recorded version).

Changed code, config files, data files or package versions since the run are notes
(``--strict`` makes them failures); so is a manifest's ``incomplete`` (a check
interrupted, or one of its jobs ended at its deadline: not every point asked for was
measured). Exit status: 0 when nothing failed, 1 otherwise,
2 when there was nothing to audit.

The checks live beside this module: the report model in
:mod:`crossover_study.audit.findings`, the hash checks in
:mod:`crossover_study.audit.hashes`, and the re-derivations, one per stage of the
workflow through the same function its workflow script calls, in
:mod:`crossover_study.audit.stages`. This module runs them in the order of the stages.
"""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path

from crossover_study.audit.findings import AuditReport
from crossover_study.audit.hashes import (
    Layout,
    check_crate,
    check_environment,
    check_file,
    check_inputs,
    check_portable,
    check_records,
)
from crossover_study.audit.stages import (
    check_collect,
    check_crossover,
    check_paper,
    check_plugin_rows,
    check_predicted,
    check_rows,
)
from crossover_study.core.files import MANIFEST_NAME, sha256_file
from crossover_study.figures.paper import PAPER_FIGURES, reference_dirs
from crossover_study.provenance.manifest import load_manifest
from crossover_study.study import cases as case_registry

__all__ = [
    "audit",
    "audited",
    "discover",
    "main",
]


def _check_figures(report: AuditReport, layout: Layout, manifest: dict) -> None:
    """The report stage's figures: hash, every recorded source a recorded table (the
    study's or a recorded reference table) with the recorded sha256, shown in the
    report. They are not drawn again (the report notebook draws them)."""
    from crossover_study.figures.files import FIGURE_FORMATS, figure_sources

    # A figure may be drawn from the study's tables (recorded by file name) and, for the
    # cross-machine figures, from reference runs' tables (reference/<run>/timings.csv).
    tables = {Path(r["path"]).name: r["sha256"] for r in manifest["tables"].values()}
    tables.update({n: r["sha256"] for n, r in manifest.get("reference_tables", {}).items()})
    present = []
    for record in manifest["figures"]:
        # A modified figure is checked further: which tables does it say it shows?
        path = check_file(report, layout, record, "figure", modified_too=True)
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


def _audit_study(report: AuditReport, target: Path, manifest: dict, strict: bool) -> None:
    """A study run (or a copy of one): its files' hashes, the figures of the report
    stage, then the collect and crossover stages again, the crate and the inputs."""
    layout = Layout(target, manifest["results_dir"])
    report.title = f"study {manifest['study']}, manifest of {manifest['created_utc']}"
    # The run's own cases (its plug-ins' seed sizes and axes) for the re-derivations.
    case_registry.use(manifest["config"]["resolved"])
    check_portable(report, Path(layout.shown(target / MANIFEST_NAME)), manifest, "manifest")
    if not layout.original:
        report.add(
            "note",
            "copy",
            layout.shown(target),
            f"a copy of {manifest['results_dir']}: the report and figures are not part of it",
        )
    for record in [*manifest["tables"].values(), *manifest["report"].values()]:
        check_file(report, layout, record)
    points = check_records(report, layout, manifest)
    if layout.original:
        # Reference tables the report drew beside the study: still there, unchanged.
        for record in manifest.get("reference_tables", {}).values():
            check_file(report, layout, record, "reference table")
        _check_figures(report, layout, manifest)
    timings_path = layout.locate(manifest["tables"]["timings"])
    if timings_path is not None and timings_path.is_file():
        # The collect stage: its rows as recorded, then collected again.
        check_rows(report, layout, manifest, timings_path)
        check_plugin_rows(report, layout, manifest, timings_path)
        if manifest["points"] and len(points) == len(manifest["points"]):
            check_collect(report, layout, manifest, timings_path, points)
        # The crossover stage, from the recorded timings.csv.
        crossover_path = layout.locate(manifest["tables"]["crossover"])
        if crossover_path is not None and crossover_path.is_file():
            check_crossover(report, layout, manifest, timings_path, crossover_path)
        # The predict stage, from the recorded timings.csv and the run's cards.
        check_predicted(report, layout, manifest, timings_path)
    check_crate(report, layout)
    check_inputs(report, layout, manifest, strict)
    check_environment(report, manifest)


def _audit_paper(report: AuditReport, target: Path, manifest: dict, regenerate: bool) -> None:
    """Paper figures: hashes, sources = reference tables, redrawn byte for byte."""
    from crossover_study.figures.files import figure_sources

    report.title = f"paper figures, manifest of {manifest['created_utc']}"
    check_portable(report, target / MANIFEST_NAME, manifest, "manifest")
    workdir = target.resolve().parents[1]
    layout = Layout(target, None)
    layout.original, layout.workdir = True, workdir
    sources = {}
    run_dirs = []
    for run in manifest["reference_runs"]:
        for name, record in run["files"].items():
            path = check_file(report, layout, record, "reference table")
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
        path = check_file(report, layout, record, "figure")
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
    if regenerate and len(run_dirs) == len(manifest["reference_runs"]):
        check_paper(report, layout, manifest, run_dirs, figures)  # the paper stage


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
    incomplete = manifest.get("incomplete") if isinstance(manifest, dict) else None
    if incomplete:  # a check interrupted or a job ended early: what it holds is partial
        what = incomplete.get("reason") if isinstance(incomplete, dict) else incomplete
        counted = (
            f"{incomplete.get('points_measured')} of {incomplete.get('points')} points measured; "
            if isinstance(incomplete, dict) and "points" in incomplete
            else ""
        )
        report.add("note", "incomplete run", target, f"{counted}{what}")
    # A study's re-derivations use its own cases (case_registry.use); the caller's
    # registry (a report's study, the paper's seeds) is put back afterwards.
    with case_registry.kept():
        if manifest.get("kind") == "paper":
            _audit_paper(report, target, manifest, regenerate)
        else:
            _audit_study(report, target, manifest, strict)
    return report


def audited(run_dirs, log=print) -> list[Path]:
    """The runs of ``run_dirs`` (reference runs' folders) that pass their audit
    (:func:`audit`, paper figures not redrawn), in order. Each one that fails is named
    in one line through ``log`` (its folder name and first failure, never a machine
    path) and left out, so that nothing is drawn from a hand-edited copy."""
    kept = []
    for path in map(Path, run_dirs):
        report = audit(path, regenerate=False)
        if report.ok:
            kept.append(path)
            continue
        first = report.failures[0]
        log(
            f"reference run {path.name} left out: it fails its audit "
            f"({len(report.failures)} failure(s), first: {first.kind}); "
            f"see `crossover-study audit {path.parent.name}/{path.name}`"
        )
    return kept


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
