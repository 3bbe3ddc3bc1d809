"""Freeze a study run into the reference set (``results/reference/<name>/``), and the
command line of the paper figures.

A run is audited before it is copied (:func:`crossover_study.audit.verify.audit`), and the
audit redraws the paper figures (:mod:`crossover_study.figures.paper`) to compare their bytes:
so freezing sits above the audit, and the paper's drawing below it (the package's layer
order, :mod:`crossover_study`). :func:`main` (``crossover-study freeze`` / ``refreeze`` / ``paper``) takes ``paper`` (or
``figures``), ``freeze`` or ``refreeze``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from crossover_study.audit.hashes import Layout
from crossover_study.audit.verify import audit, audited
from crossover_study.core.columns import STUDY_TABLES
from crossover_study.core.files import MANIFEST_NAME, PAPER_DIR, PLUGIN_COPY_DIR, REFERENCE_DIR
from crossover_study.core.paths import REPO_ROOT
from crossover_study.figures.paper import PAPER_FIGURES, paper_figures, reference_dirs
from crossover_study.provenance.crate import CRATE_NAME, write_crate
from crossover_study.provenance.crate_files import CODE_DIR
from crossover_study.provenance.manifest import (
    load_manifest,
    paper_manifest,
    portable_manifest,
    write_json,
)

#: Files a reference run keeps (globs relative to the study's results folder).
REFERENCE_FILES: tuple[str, ...] = (
    "timings.csv",
    # The tables beside it (format 3: crossover_study.analysis.table_split).
    *(f"{table}.csv" for table in STUDY_TABLES[1:]),
    "crossover.csv",
    "wall.json",
    # The device cards' predictions, tables of the run (crossover_study.analysis.card_prediction).
    "predicted.csv",
    "predicted_crossover.csv",
    MANIFEST_NAME,
    "ro-crate-metadata.json",
    "config.resolved.yaml",
    "points/**/*.csv",
    "points/**/*.probe.json",
    # The rates files the measuring jobs read (crossover_study.measure.rates_job).
    "rates/**/*.json",
    # The crate's copy of the workflow definition (crossover_study.provenance.crate.copy_workflow).
    "code/Snakefile",
    "code/workflow/rules/*.smk",
)


def freeze(results: str | Path, dest: str | Path, audit_first: bool = True) -> list[Path]:
    """Copy a study run's results (:data:`REFERENCE_FILES`, and the plug-in files of
    its own cases under ``plugins/``) into ``dest`` (e.g. ``results/reference/<name>``)
    so that the paper can use it. The run is audited
    first (:func:`crossover_study.audit.verify.audit`): a run that fails its audit is not
    copied. Raises FileExistsError when ``dest`` exists, ValueError when the audit
    fails. Returns the files written."""
    results, dest = Path(results), Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest} exists; choose a new name for the reference run")
    if audit_first:
        report = audit(results)
        if not report.ok:
            raise ValueError(f"{results} fails its audit; not copied:\n{report.text()}")
    copies = [
        (path, dest / path.relative_to(results))
        for pattern in REFERENCE_FILES
        for path in sorted(results.glob(pattern))
    ]
    copies += _plugin_copies(results, dest)
    written = []
    for path, target in copies:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        written.append(target)
    return written


def _plugin_copies(results: Path, dest: Path) -> list[tuple[Path, Path]]:
    """``(source, target)`` for each plug-in file the run's manifest records (the
    programs of its own cases): copied to ``<dest>/plugins/<recorded path>``, where the
    audit of the copy finds it (:meth:`crossover_study.audit.hashes.Layout.locate_plugin`),
    so that a frozen run keeps the program it timed. Raises ValueError for a recorded
    path that would leave that folder, or a plug-in the run's folder cannot locate."""
    manifest = load_manifest(results)
    layout = Layout(results, manifest.get("results_dir"))
    base = (dest / PLUGIN_COPY_DIR).resolve()
    copies = []
    for record in manifest.get("plugins", []):
        source = layout.locate_plugin(record)
        target = (base / record["path"]).resolve()
        if record.get("root") != "workdir" or not target.is_relative_to(base):
            raise ValueError(f"plug-in {record['path']!r} is not a path inside the run's folder")
        if source is None or not source.is_file():
            raise ValueError(f"plug-in {record['path']} of case {record['case']} not found")
        copies.append((source, target))
    return copies


def refreeze(dest: str | Path, repo: str | Path = REPO_ROOT) -> list[Path]:
    """Rewrite the provenance of a reference run frozen before it was portable: its
    manifest's file records lose their absolute paths
    (:func:`crossover_study.provenance.manifest.portable_manifest`), its RO-Crate is written anew
    (files inside the folder only, the workflow's copy under ``code/`` taken from the
    recorded git commit when the working tree has moved on). Measured files are not
    touched. Raises FileNotFoundError without a manifest, ValueError when the recorded
    workflow files are not in git. Returns the files written."""
    dest = Path(dest)
    manifest = portable_manifest(load_manifest(dest))
    written = [write_json(manifest, dest / MANIFEST_NAME)]
    # The original run's working directory is not needed: every file the crate
    # describes as a File lies in ``dest``.
    written.append(
        write_crate(manifest, dest, dest / CRATE_NAME, repo, manifest_path=dest / MANIFEST_NAME)
    )
    return written + sorted(p for p in (dest / CODE_DIR).rglob("*") if p.is_file())


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Command line: ``paper`` or ``figures`` (draw the paper figures from the reference
    runs that pass their audit), ``freeze`` (add a run) or ``refreeze`` (rewrite a
    frozen run's provenance). Returns the exit status: 0, 1 with one line on stderr
    (a missing ``--reference`` folder, no reference run that passes its audit, a
    refused freeze) or 2 for an unknown figure name (the line lists the known ones)."""
    parser = argparse.ArgumentParser(
        prog=prog, description="Paper figures from committed reference runs."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    fig = sub.add_parser("paper", aliases=["figures"], help="draw reports/paper/fig-*.pdf and .png")
    fig.add_argument("--reference", default=str(REFERENCE_DIR), help="folder of reference runs")
    fig.add_argument("--out", default=str(PAPER_DIR), help="output folder")
    fig.add_argument(
        "names", nargs="*", help=f"figures to draw (default: all: {', '.join(PAPER_FIGURES)})"
    )
    frz = sub.add_parser("freeze", help="copy an audited study run into results/reference/")
    frz.add_argument("results", help="the study's results folder, e.g. results/smoke")
    frz.add_argument("dest", help="e.g. results/reference/cpu-2core-2026-11-30")
    ref = sub.add_parser(
        "refreeze", help="rewrite a frozen run's manifest and RO-Crate without machine paths"
    )
    ref.add_argument("dest", help="e.g. results/reference/cpu-2core-2026-11-30")
    args = parser.parse_args(argv)
    if args.command in ("freeze", "refreeze"):
        try:
            written = (
                freeze(args.results, args.dest) if args.command == "freeze" else refreeze(args.dest)
            )
        except (FileExistsError, FileNotFoundError, ValueError) as exc:
            print(f"{args.command}: {exc}", file=sys.stderr)
            return 1
        for path in written:
            print(path)
        return 0
    unknown = [n for n in args.names if n not in PAPER_FIGURES]
    if unknown:
        print(
            f"paper: unknown figure {', '.join(map(repr, unknown))}; known: "
            f"{', '.join(PAPER_FIGURES)}",
            file=sys.stderr,
        )
        return 2
    if not Path(args.reference).is_dir():
        print(f"paper: --reference {args.reference}: no such folder", file=sys.stderr)
        return 1
    found = reference_dirs(args.reference)
    # Only runs that pass their audit are drawn; a failing one is named and left out.
    dirs = audited(found, log=lambda line: print(f"paper: {line}", file=sys.stderr))
    if not dirs:
        problem = "passes its audit" if found else "(a folder with timings.csv)"
        print(f"paper: no reference run under {args.reference} {problem}", file=sys.stderr)
        return 1
    import matplotlib

    matplotlib.use("Agg")
    written = paper_figures(dirs, args.out, names=args.names or None)
    if not args.names:
        write_json(paper_manifest(dirs, written), Path(args.out) / MANIFEST_NAME)
    for path in written:
        print(path)
    return 0
