# Helpers shared by every stage: the validated config, job lists and per-job settings.
import re
import sys
from pathlib import Path

# The library lives in src/ of this repository; jobs (also in conda envs made by
# --sdm conda, which copy env files elsewhere) import it through this absolute path.
SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC)

from crossover_study import config as study_config  # noqa: E402

# Validate before any job is planned: a bad key stops here with its key path.
config.update(study_config.validate_config(config))

STUDY = config["study"]
RESULTS = f"results/{STUDY}"
REPORTS = f"reports/{STUDY}"
GROUPS = study_config.groups(config)


def _alternatives(names):
    return "|".join(re.escape(n) for n in names)


wildcard_constraints:
    case=_alternatives(config["cases"]),
    framework=_alternatives(config["sweep"]["frameworks"]),
    device=_alternatives(config["sweep"]["devices"]),


def get_group_csvs():
    """Per-job timing tables of every case x framework x device of the study."""
    return [f"{RESULTS}/points/{c}/{f}/{d}.csv" for c, f, d in GROUPS]


def get_point_keys(wildcards):
    """Keys of the points a measuring job measures (a change reruns the job)."""
    pts = study_config.points(config, wildcards.case, wildcards.framework, wildcards.device)
    return [p.key() for p in pts]


def get_threads(wildcards):
    """CPU threads of a measuring job: the device class's configured threads."""
    return config["devices"][wildcards.device]["threads"]


def get_env(wildcards):
    """Conda env of a measuring job, per framework (used with --sdm conda)."""
    return f"../../envs/{wildcards.framework}.yaml"


def get_output_dir(wildcards, output):
    """Folder of a rule's first output (for tools that take a folder and a name)."""
    return str(Path(output[0]).parent)


def get_final_outputs():
    """What `snakemake` builds by default: tables, the rendered report, the manifest
    and the RO-Crate."""
    return [
        f"{RESULTS}/timings.csv",
        f"{RESULTS}/crossover.csv",
        f"{REPORTS}/report.html",
        f"{RESULTS}/manifest.json",
        f"{RESULTS}/ro-crate-metadata.json",
    ]


def get_config_files():
    """The study's config file(s) as Snakemake read them (--configfile, else the
    default study), for the manifest."""
    return [str(p) for p in workflow.configfiles]


def get_snakemake_version():
    """Version of the Snakemake running this workflow (recorded in the manifest)."""
    from snakemake import __version__

    return __version__


def get_repo_root():
    """This repository (code paths in the manifest are relative to it)."""
    return str(Path(workflow.basedir))


def get_html_template():
    """nbconvert template of the HTML report (the lab template without CDN scripts)."""
    return str(Path(workflow.basedir) / "workflow" / "notebooks" / "offline.html.j2")


# Committed results the paper figures are drawn from, and where those figures go.
REFERENCE = "results/reference"
PAPER = "reports/paper"


def get_reference_runs():
    """Names of the committed reference runs: folders of results/reference/ with a
    timings.csv (the paper figures are drawn from every one of them)."""
    return sorted(p.parent.name for p in Path(REFERENCE).glob("*/timings.csv"))


def get_reference_files(name):
    """One file (e.g. timings.csv) of every committed reference run."""
    return [f"{REFERENCE}/{run}/{name}" for run in get_reference_runs()]
