# Stage 2: collect the per-job tables into the study's tables (timings.csv and the tables
# beside it, one per concern), validated against their schemas and against each job's
# probe record (no accelerator row without the accelerator).


rule collect:
    input:
        csvs=get_batch_csvs(),
        probes=get_batch_probes(),
        benchmarks=get_batch_benchmarks(),
        # The rates jobs' files and their benchmark files (the wall-time summary).
        rates=get_rates_files(),
        rates_benchmarks=get_rates_benchmarks(),
    output:
        timings=report(
            f"{RESULTS}/timings.csv",
            caption="../report/timings.rst",
            category="Tables",
        ),
        # The tables beside timings.csv, keyed by the point (format 3).
        beside=[
            report(
                f"{RESULTS}/{table}.csv",
                caption="../report/tables.rst",
                category="Tables",
                labels={"file": f"{table}.csv"},
            )
            for table in STUDY_TABLES[1:]
        ],
        wall=f"{RESULTS}/wall.json",
    log:
        f"logs/{STUDY}/collect.log",
    conda:
        "../../envs/report.yaml"
    # Light work on the cpu class's partition; memory and time from default-resources.
    resources:
        slurm_partition=get_slurm_partition,
        slurm_account=get_slurm_account,
    params:
        # false: refuse a curve whose rows come from different environments.
        merge_environments=config["merge_environments"],
        # A point measured in several runs (timing.repeats) is flagged noisy from all of them.
        noise_threshold=config["timing"]["noise_threshold"],
        src=SRC,
    script:
        "../scripts/collect.py"
