# Stage 5: provenance. The manifest hashes every input and output of the run and records
# the environment; the RO-Crate describes the run, its machines and software in the
# Workflow Run Crate vocabulary. `make audit` checks both against the files.


rule manifest:
    input:
        timings=f"{RESULTS}/timings.csv",
        crossover=f"{RESULTS}/crossover.csv",
        wall=f"{RESULTS}/wall.json",
        # The device cards' predictions (their cards are hashed with the code).
        predicted=f"{RESULTS}/predicted.csv",
        predicted_crossover=f"{RESULTS}/predicted_crossover.csv",
        html=f"{REPORTS}/report.html",
        notebook=f"{REPORTS}/report.ipynb",
        figures=f"{REPORTS}/figures",
        # The per-job tables and probe records timings.csv was collected from (the
        # study's jobs now); others under points/ (a dropped case) are moved to retired/.
        points=get_batch_csvs(),
        probes=get_batch_probes(),
        # The rates files the measuring jobs read (one per framework and device).
        rates=get_rates_files(),
        # The reference tables the report read (its cross-machine figures' sources).
        reference_timings=get_reference_files("timings.csv"),
        configfiles=get_config_files(),
    output:
        manifest=report(
            f"{RESULTS}/manifest.json",
            caption="../report/manifest.rst",
            category="Provenance",
            labels={"file": "manifest.json", "what": "sha256 of inputs and outputs"},
        ),
        config=report(
            f"{RESULTS}/config.resolved.yaml",
            caption="../report/config.rst",
            category="Provenance",
            labels={"file": "config.resolved.yaml", "what": "the study's config"},
        ),
    log:
        f"logs/{STUDY}/manifest.log",
    conda:
        "../../envs/report.yaml"
    params:
        study=STUDY,
        repo=get_repo_root,
        snakemake_version=get_snakemake_version(),
        src=SRC,
    script:
        "../scripts/manifest.py"


rule ro_crate:
    input:
        manifest=f"{RESULTS}/manifest.json",
    output:
        crate=report(
            f"{RESULTS}/ro-crate-metadata.json",
            caption="../report/ro_crate.rst",
            category="Provenance",
            labels={"file": "ro-crate-metadata.json", "what": "Workflow Run Crate"},
        ),
        # The crate's copy of the workflow definition it ran (Snakefile and rules).
        code=directory(f"{RESULTS}/code"),
    log:
        f"logs/{STUDY}/ro_crate.log",
    conda:
        "../../envs/report.yaml"
    params:
        repo=get_repo_root,
        src=SRC,
    script:
        "../scripts/ro_crate.py"
