# Stage 1: measure. One job per case x framework x device runs all its sizes and variants
# in one process, so that framework import and process start are paid once per job.


rule measure:
    output:
        f"{RESULTS}/points/{{case}}/{{framework}}/{{device}}.csv",
    log:
        f"logs/{STUDY}/measure/{{case}}/{{framework}}/{{device}}.log",
    benchmark:
        f"logs/{STUDY}/benchmarks/measure/{{case}}/{{framework}}/{{device}}.tsv"
    conda:
        get_env
    # Threads come from the device class's config; the harness pins the framework to them.
    threads: get_threads
    params:
        points=get_point_keys,
        # Not an output: Snakemake deletes outputs before a job runs; the journal must
        # survive a crash so that a rerun measures only the missing points.
        journal=f"{RESULTS}/journal/{{case}}/{{framework}}/{{device}}.jsonl",
        timing=config["timing"],
        missing_device=config["missing_device"],
        src=SRC,
    script:
        "../scripts/measure.py"
