# Helpers shared by every stage: the validated config, job lists and per-job settings.
import re
import sys
from pathlib import Path

# The library lives in src/ of this repository; jobs (also in conda envs made by
# --sdm conda, which copy env files elsewhere) import it through this absolute path.
SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC)

from crossover_study.core.columns import STUDY_TABLES  # noqa: E402
from crossover_study.study import cases as case_registry  # noqa: E402
from crossover_study.study import config as study_config  # noqa: E402
from crossover_study.study import study_file, points as study_points  # noqa: E402

# Validate before any job is planned: a bad key stops here with its key path. Snakemake
# has read the study files keeping the last of a key given twice; read again, a duplicate
# is named with its file and both lines. A case of your own names its plug-in file
# relative to its study file or to the repository.
study_file.check_config_files(workflow.configfiles)
config.update(
    study_config.validate_config(config, study_dirs=[Path(f).parent for f in workflow.configfiles])
)


def check_local_threads():
    """A local run: Snakemake lowers a job's threads to --cores and --max-threads without
    a word (and the job runs on this machine's CPUs), so a device class with more
    threads stops the run before any job starts (onstart: the executor is known only
    once the Snakefile is read). A cluster executor skips it: there a job's cores are
    its node's, and the measuring job checks them itself before it measures
    (probe.check_cpus_given). A dry run does not check."""
    if workflow.local_exec and workflow.is_main_process:
        settings = workflow.resource_settings
        cores = study_file.local_cores(settings.cores, settings.max_threads)
        study_file.check_threads(config, *cores)


onstart:
    check_local_threads()


STUDY = config["study"]
RESULTS = f"results/{STUDY}"
REPORTS = f"reports/{STUDY}"
# Every measuring job as (case, framework, device, batch): a group with more than
# max_points_per_job points is split into batches, each its own job and journal.
MEASURE_JOBS = study_points.measure_jobs(config)
POINTS = f"{RESULTS}/points/{{case}}/{{framework}}/{{device}}/batch-{{batch}}"
# One rates job per (framework, device) the study has measuring jobs for: the machine's
# rates for the step-time model, measured once, before those measuring jobs.
RATES_JOBS = sorted({(f, d) for _, f, d, _ in MEASURE_JOBS})
RATES = f"{RESULTS}/rates/{{framework}}/{{device}}.json"
RATES_BENCHMARK = f"logs/{STUDY}/benchmarks/rates/{{framework}}/{{device}}.tsv"

# A local run measures on at most one GPU job at a time: two measuring jobs sharing a GPU
# would time each other's kernels. Each job that uses GPUs takes one gpu_jobs (see
# get_gpu_jobs); `--resources gpu_jobs=N` allows N at once. Cluster executors leave GPUs
# to Slurm's allocation instead, so no limit is registered there.
if workflow.local_exec and "gpu_jobs" not in workflow.global_resources:
    workflow.register_resource("gpu_jobs", 1)


def _alternatives(names):
    return "|".join(re.escape(n) for n in names)


# The study's case names as one regular expression (wildcards, report patterns).
CASE_NAMES = _alternatives(config["cases"])


wildcard_constraints:
    case=CASE_NAMES,
    framework=_alternatives(config["sweep"]["frameworks"]),
    device=_alternatives(config["sweep"]["devices"]),
    batch=r"\d+",


def _measure_paths(pattern):
    return [pattern.format(case=c, framework=f, device=d, batch=i) for c, f, d, i in MEASURE_JOBS]


def get_batch_csvs():
    """Timing tables of every measuring job (case x framework x device x batch)."""
    return _measure_paths(f"{POINTS}.csv")


def get_batch_probes():
    """Probe records of every measuring job, in the order of get_batch_csvs()."""
    return _measure_paths(f"{POINTS}.probe.json")


def get_batch_benchmarks():
    """Snakemake benchmark files of every measuring job (for the wall-time summary)."""
    return _measure_paths(
        f"logs/{STUDY}/benchmarks/measure/{{case}}/{{framework}}/{{device}}/batch-{{batch}}.tsv"
    )


def get_rates_files():
    """Rates files of every rates job (one per framework and device of the study)."""
    return [RATES.format(framework=f, device=d) for f, d in RATES_JOBS]


def get_rates_benchmarks():
    """Snakemake benchmark files of every rates job, in the order of get_rates_files()."""
    return [RATES_BENCHMARK.format(framework=f, device=d) for f, d in RATES_JOBS]


def get_previous_round(wildcards):
    """Probe records of the jobs a measuring job waits for: with timing.repeats, run r of
    a case and framework starts once every device's run r - 1 has finished (rounds, so
    that drift hits every device alike); none for run 0 (study_points.previous_round_jobs)."""
    jobs = study_points.previous_round_jobs(
        config, wildcards.case, wildcards.framework, wildcards.device, int(wildcards.batch)
    )
    return [
        f"{POINTS}.probe.json".format(case=c, framework=f, device=d, batch=i) for c, f, d, i in jobs
    ]


def get_point_keys(wildcards):
    """Keys of the points a measuring job measures (a change reruns the job)."""
    batches = study_points.batches(config, wildcards.case, wildcards.framework, wildcards.device)
    return [p.key() for p in batches[int(wildcards.batch)]]


def _device_class(wildcards):
    """Config of the job's device class; jobs without a device wildcard (collect,
    crossover, report) belong to the cpu class."""
    return config["devices"].get(wildcards.get("device", "cpu"), {})


def get_threads(wildcards):
    """CPU threads of a measuring job: its device class's threads (= cpus_per_task)."""
    return config["devices"][wildcards.device]["threads"]


def get_cpus_per_task(wildcards, threads):
    """CPUs Slurm gives the job: always its threads, which the framework is pinned to."""
    return threads


def get_slurm_partition(wildcards):
    """The one Slurm partition of the job's device class (None: the cluster's default)."""
    return _device_class(wildcards).get("slurm_partition")


def get_slurm_account(wildcards):
    """Slurm account of the job's device class (None: the executor plugin guesses)."""
    return _device_class(wildcards).get("slurm_account")


def get_constraint(wildcards):
    """Node features of a measuring job's device class (None: any node)."""
    return config["devices"][wildcards.device].get("constraint")


def _gpu_resources(wildcards):
    """GPU resources of a measuring job: its device class's, except that a cuda_multi
    job of replicated points asks for as many GPUs as its points have replicas. A job
    without a case (the rates job of a framework and device) gets its class's own."""
    if wildcards.get("case") is None:
        spec = config["devices"][wildcards.device]
        return {k: spec.get(k) for k in ("gpu", "gpu_model", "gres")}
    return study_points.job_gpu_resources(
        config, wildcards.case, wildcards.framework, wildcards.device, int(wildcards.batch)
    )


def get_gpu(wildcards):
    """GPUs of a measuring job (plugin resource gpu, sbatch --gpus), or None."""
    return _gpu_resources(wildcards)["gpu"]


def get_gpu_model(wildcards):
    """GPU model of a measuring job (with gpu), or None."""
    return _gpu_resources(wildcards)["gpu_model"]


def get_gres(wildcards):
    """Generic resources of a measuring job (sbatch --gres), or None."""
    return _gpu_resources(wildcards)["gres"]


def get_gpu_jobs(wildcards):
    """1 for a measuring job that uses GPUs (cuda, cuda_multi), else 0: the local limit
    registered above counts these, so a local run never puts two on one GPU."""
    return 1 if wildcards.device in ("cuda", "cuda_multi") else 0


def get_mem_mb(wildcards):
    """Memory of a measuring job in MB (its device class's mem_mb)."""
    return config["devices"][wildcards.device]["mem_mb"]


def get_runtime(wildcards):
    """Wall-time limit of a measuring job in minutes (its device class's runtime)."""
    return config["devices"][wildcards.device]["runtime"]


def get_workload_files(wildcards):
    """A case of your own: its plug-in file, an input of its measuring jobs (an edited
    plug-in reruns them; its sha256 is in every row and the manifest). None for a seed,
    whose program is the library's code."""
    case = case_registry.get(wildcards.case)
    if case.builtin:
        return []
    return [str(case.plugin_file(wildcards.framework))]


def get_env(wildcards):
    """Conda env of a measuring job, per framework and device (used with --sdm conda)."""
    return f"../../{study_points.measure_env(wildcards.framework, wildcards.device)}"


def get_output_dir(wildcards, output):
    """Folder of a rule's first output (for tools that take a folder and a name)."""
    return str(Path(output[0]).parent)


def get_final_outputs():
    """What `snakemake` builds by default: tables, the rendered report, the manifest
    and the RO-Crate."""
    return [
        f"{RESULTS}/timings.csv",
        f"{RESULTS}/crossover.csv",
        f"{RESULTS}/predicted.csv",
        f"{REPORTS}/report.html",
        f"{RESULTS}/manifest.json",
        f"{RESULTS}/ro-crate-metadata.json",
    ]


def get_card_files():
    """The device cards the study's predict key names and their families' files
    (study.device_cards.card_inputs), for the predict rule's input: absolute paths in
    this repository, as the workflow may run in another working directory (-d)."""
    from crossover_study.study.device_cards import card_inputs

    return [str(p) for p in card_inputs(config["predict"])]


def get_config_files():
    """The study's config file(s) as Snakemake read them (--configfile, else the
    default study), for the manifest."""
    return [str(p) for p in workflow.configfiles]


def get_snakemake_version():
    """Version of the Snakemake running this workflow (recorded in the manifest)."""
    from snakemake import __version__

    return __version__


def get_repo_root(wildcards=None):
    """This repository (code paths in the manifest are relative to it). A params
    function, not a string: `snakemake --lint` takes a string param that prefixes an
    input (the study file given with --configfile, inside this repository) for a
    hard-coded output prefix; this one names where the code is, not a file prefix."""
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


def get_reference_tables_beside():
    """The tables beside every committed reference run's timings.csv that exist (a
    format 3 run's; none for format 1 or 2), as table_split.tables_beside names them:
    <table>.csv for each of STUDY_TABLES after timings (not imported here: it imports
    pandas, which every parse of the workflow would pay)."""
    return [
        f"{REFERENCE}/{run}/{table}.csv"
        for run in get_reference_runs()
        for table in STUDY_TABLES[1:]
        if Path(f"{REFERENCE}/{run}/{table}.csv").exists()
    ]
