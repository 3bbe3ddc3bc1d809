# Stage 1: measure. One job per case x framework x device runs all its sizes and variants
# in one process, so that framework import and process start are paid once per job; a
# group larger than max_points_per_job is split into batches (one job and journal each).


rule measure:
    input:
        # The machine's rates for this framework and device (rates.smk), measured once
        # before the measuring jobs; ancient: a rewritten rates file orders the jobs but
        # reruns none of them.
        rates=ancient(RATES),
        # timing.repeats: run r waits for run r - 1 on every device (none for run 0).
        previous_round=get_previous_round,
        # A case of your own: its plug-in file (none for a seed).
        workload=get_workload_files,
    output:
        csv=f"{POINTS}.csv",
        # What the job was given and saw (host, Slurm job, partition, CPUs, GPUs, TPUs).
        probe=f"{POINTS}.probe.json",
    log:
        f"logs/{STUDY}/measure/{{case}}/{{framework}}/{{device}}/batch-{{batch}}.log",
    benchmark:
        f"logs/{STUDY}/benchmarks/measure/{{case}}/{{framework}}/{{device}}/batch-{{batch}}.tsv"
    conda:
        get_env
    # Threads come from the device class's config; the harness pins the framework to them.
    threads: get_threads
    # Slurm resources of the device class (snakemake-executor-plugin-slurm names). GPUs are
    # asked for with gpu/gres, never slurm_extra; cpus_per_task is the job's threads.
    resources:
        slurm_partition=get_slurm_partition,
        slurm_account=get_slurm_account,
        constraint=get_constraint,
        gpu=get_gpu,
        gpu_model=get_gpu_model,
        gres=get_gres,
        cpus_per_task=get_cpus_per_task,
        mem_mb=get_mem_mb,
        runtime=get_runtime,
        # Local runs: one GPU job at a time (common.smk registers gpu_jobs=1).
        gpu_jobs=get_gpu_jobs,
    params:
        points=get_point_keys,
        # Not an output: Snakemake deletes outputs before a job runs; the journal must
        # survive a crash so that a rerun measures only the missing points.
        journal=f"{RESULTS}/journal/{{case}}/{{framework}}/{{device}}/batch-{{batch}}.jsonl",
        # Sorted: the same settings written in another key order are not a change
        # (Snakemake reruns a job whose params changed). Without point_deadline_s, which
        # changes no measurement (study_points.NOT_MEASUREMENT_TIMING_KEYS).
        timing=study_points.measurement_timing(config),
        missing_device=config["missing_device"],
        src=SRC,
    script:
        "../scripts/measure.py"
