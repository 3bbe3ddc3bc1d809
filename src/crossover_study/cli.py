"""``crossover-study``: one command line in front of the study's tools.

    crossover-study study [--config FILE] [--cores N] [--directory DIR] [-- SNAKEMAKE ARGS]
    crossover-study check FILE.py --size AXIS=N ... | check SEED_CASE [--size AXIS=N]
    crossover-study devices [CARD ...]
    crossover-study rates --framework F --device D (--threads N | --config FILE) --out FILE
    crossover-study validate STUDY_FILE ...
    crossover-study compare RUN_A RUN_B
    crossover-study audit [TARGET ...]
    crossover-study agreement [--runs N] [--against-itself]
    crossover-study freeze RESULTS DEST | refreeze DEST | paper [NAME ...]
    crossover-study reference-import ARCHIVE [--name NAME]
    crossover-study measure-job --config FILE --case C --framework F --device D ...
    crossover-study fresh-point < REQUEST.json
    crossover-study gpu-bundle build|check [--dest DIR]
    crossover-study reference-gpu --study FILE --bundle DIR --out DIR | reference-gpu finish ...
    crossover-study rehearse [--study FILE] [--keep]
    crossover-study browser PAGE [--screenshot PNG]
    crossover-study validate-crate --context FILE CRATE ...

Installed by ``make setup`` (an editable install of the package); ``python -m
crossover_study`` is the same. Each subcommand is the command line of the module that
does the work (its ``--help`` says more), so the tools stay usable on their own; this
module only routes, and imports a subcommand's module (:func:`importlib.import_module`)
when that subcommand runs, so that ``--help`` answers at once.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from crossover_study.core.errors import describe_os_error, disk_error
from crossover_study.core.paths import REPO_ROOT

PROG = "crossover-study"


@dataclass(frozen=True)
class Command:
    """A subcommand: one line of help and what runs it (``argv``, ``prog`` -> status)."""

    summary: str
    run: Callable[[list[str], str], int]


def _study(argv: list[str], prog: str) -> int:
    """Run a study through Snakemake, as ``make study`` does, where the user is: ``snakemake
    -s SNAKEFILE -d DIR --cores N --keep-going --rerun-incomplete --configfile FILE`` in
    ``DIR`` (``--directory``, default the current folder), whose own ``Snakefile`` runs
    when it has one (a checkout: two checkouts sharing one environment each run their
    own workflow), else the workflow of the checkout this package was installed from.
    Prints one line saying which workflow runs and where its results and report go
    before Snakemake starts. This Python's ``bin`` goes first on PATH (the jobs find its
    jupyter and python there). ``--config`` is taken from the current folder, else
    ``DIR``, else the workflow's folder. Arguments after ``--`` go to Snakemake. Exits 2
    when the config file or the folder is missing, 1 when the config is invalid."""
    extra: list[str] = []
    if "--" in argv:
        argv, extra = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run a study (sweep, timings, crossover, report) through Snakemake.",
        epilog="Arguments after -- go to snakemake, e.g. -- -n for a dry run.",
    )
    parser.add_argument(
        "--config",
        default="config/config.yaml",
        help="the study's config file (default: config/config.yaml, the default study)",
    )
    parser.add_argument("--cores", default="all", help="CPU cores Snakemake may use (default: all)")
    parser.add_argument(
        "--directory",
        "-d",
        default=".",
        help="where the study runs: results/<study>/, reports/<study>/ and logs/ go there "
        "(default: the current folder); its Snakefile runs if it has one",
    )
    args = parser.parse_args(argv)
    directory = Path(args.directory).resolve()
    if not directory.is_dir():
        parser.error(f"--directory {args.directory}: no such folder")
    try:  # Snakemake's own error names no cause: a read-only folder is said here
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as exc:
        parser.error(f"--directory {directory}: cannot write there: {describe_os_error(exc)}")
    snakefile = directory / "Snakefile"
    if not snakefile.is_file():
        snakefile = REPO_ROOT / "Snakefile"
    config = Path(args.config)
    if not config.is_absolute():
        found = [base / config for base in (Path.cwd(), directory, snakefile.parent)]
        config = next((p for p in found if p.exists()), found[0]).resolve()
    if not config.is_file():
        parser.error(f"--config {args.config}: no such file")
    status, studies = _checked([str(config)], f"{prog.rsplit(' ', 1)[0]} validate", quiet=True)
    if status:
        return 1
    study = studies[0]
    print(
        f"{prog}: study {study}: the workflow {snakefile} runs in {directory}; results go to "
        f"{directory / 'results' / study}, the report to "
        f"{directory / 'reports' / study / 'report.html'}",
        flush=True,
    )
    command = [sys.executable, "-m", "snakemake", "-s", str(snakefile), "-d", str(directory)]
    command += ["--cores", str(args.cores), "--keep-going", "--rerun-incomplete"]
    command += ["--configfile", str(config), *extra]
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.call(command, cwd=directory, env=env)


def _validate(argv: list[str], prog: str, quiet: bool = False) -> int:
    """Check study files as the workflow will, before Snakemake reads them (its own
    YAML error names no file or line): a syntax error or a key given twice as
    ``FILE:LINE:COLUMN: ...``, then the schema, the cases' plug-ins and the plan of
    points and jobs (:func:`crossover_study.study.config.load_config`,
    :func:`crossover_study.study.points.measure_jobs`). Prints one line per file (errors on
    stderr; ``quiet``: errors only); returns 0 when every file is valid, else 1."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Check study files (YAML, schema, plug-ins, plan) as the workflow will.",
    )
    parser.add_argument("files", nargs="+", metavar="STUDY_FILE")
    args = parser.parse_args(argv)
    return _checked(args.files, prog, quiet)[0]


def _checked(files: list[str], prog: str, quiet: bool) -> tuple[int, list[str]]:
    """:func:`_validate` of ``files``: ``(status, the study names of the valid files)``."""
    study_config = importlib.import_module(f"{__package__}.study.config")
    study_file = importlib.import_module(f"{__package__}.study.study_file")
    study_points = importlib.import_module(f"{__package__}.study.points")
    status, studies = 0, []
    for path in files:
        try:
            config = study_config.load_config(path)
            jobs = study_points.measure_jobs(config)
        except study_file.ConfigError as error:
            print(f"{prog}: {error}", file=sys.stderr)
            status = 1
            continue
        studies.append(config["study"])
        if not quiet:
            print(f"{path}: valid (study {config['study']}, {len(jobs)} measuring jobs)")
    return status, studies


def _main_of(module: str, *head: str) -> Callable[[list[str], str], int]:
    """What runs a subcommand: ``crossover_study.<module>.main(argv, prog)``, imported
    when the subcommand runs (``--help`` stays quick). ``head`` goes before ``argv``
    (the subcommand of a module whose own command line has several), and then ``prog``
    is this program's name, to which that module's parser adds the subcommand."""

    def run(argv: list[str], prog: str) -> int:
        main = importlib.import_module(f"{__package__}.{module}").main
        return main([*head, *argv], prog.rsplit(" ", 1)[0] if head else prog)

    return run


COMMANDS: dict[str, Command] = {
    "study": Command("run a study through Snakemake (default: the default study)", _study),
    "check": Command(
        "one model at one size on every device: the answer in about a minute",
        _main_of("quickcheck.command"),
    ),
    "devices": Command(
        "the device cards predictions are priced on, with their sources",
        _main_of("answers.predicted"),
    ),
    "rates": Command(
        "the step-time model's machine rates for one framework and device, into a file",
        _main_of("measure.rates_job"),
    ),
    "validate": Command("check study files (YAML, schema, plug-ins, plan) before a run", _validate),
    "compare": Command(
        "two runs of one study: step-time ratios, intervals, crossovers",
        _main_of("analysis.compare_runs"),
    ),
    "audit": Command(
        "recompute a run's hashes; check its tables and figures", _main_of("audit.verify")
    ),
    "agreement": Command(
        "time the harness against the field's reference timers", _main_of("measure.agreement")
    ),
    "freeze": Command(
        "copy an audited run into results/reference/<name>", _main_of("reference.freeze", "freeze")
    ),
    "refreeze": Command(
        "rewrite a frozen run's manifest and RO-Crate", _main_of("reference.freeze", "refreeze")
    ),
    "paper": Command(
        "draw the paper figures from results/reference/", _main_of("reference.freeze", "paper")
    ),
    "reference-import": Command(
        "add a GPU reference run's archive to results/reference/",
        _main_of("reference.archive_import"),
    ),
    "measure-job": Command(
        "one measuring job without Snakemake (the measure rule's code)", _main_of("measure.job")
    ),
    "fresh-point": Command(
        "one point timed in a fresh process (a measuring job's child: a JSON request on stdin)",
        _main_of("measure.fresh_point"),
    ),
    "gpu-bundle": Command(
        "build or check the wheels a GPU machine without network lacks",
        _main_of("reference.gpu_bundle"),
    ),
    "reference-gpu": Command(
        "on a GPU machine: measure a study into one archive (or finish a partial one)",
        _main_of("reference.gpu_run"),
    ),
    "rehearse": Command(
        "the GPU reference run rehearsed on this CPU, in a throwaway environment",
        _main_of("reference.rehearsal"),
    ),
    "browser": Command(
        "load a report in headless Chromium: images, console", _main_of("figures.browser")
    ),
    "validate-crate": Command(
        "roc-validator on RO-Crates (run by the crate venv's python)",
        _main_of("provenance.crate_validation"),
    ),
}


def usage() -> str:
    """The top-level help: one line per subcommand."""
    width = max(map(len, COMMANDS))
    lines = [
        f"usage: {PROG} COMMAND [ARGS]  ({PROG} COMMAND --help for its arguments)",
        "",
        "When is the accelerator faster than the CPU, and why? The study's tools:",
        "",
        *(f"  {name:<{width}}  {c.summary}" for name, c in COMMANDS.items()),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Route ``argv`` (default: the process's arguments) to a subcommand. Returns its
    exit status; 0 after ``--help``, 2 with the usage for no or an unknown command, 1
    with one line naming the cause and the path when a disk takes no more writes (full,
    read-only: :func:`crossover_study.core.errors.describe_os_error`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if not argv or argv[0] not in COMMANDS:
        problem = f"unknown command {argv[0]!r}" if argv else "no command given"
        print(f"{PROG}: {problem}\n\n{usage()}", file=sys.stderr)
        return 2
    name, rest = argv[0], argv[1:]
    try:
        return COMMANDS[name].run(rest, f"{PROG} {name}")
    except OSError as exc:  # a full or read-only disk: one line, not a traceback
        if not disk_error(exc):
            raise
        print(
            f"{PROG} {name}: cannot write: {describe_os_error(exc)}; what was written before "
            "is kept",
            file=sys.stderr,
        )
        return 1
