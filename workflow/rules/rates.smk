# Stage 0: the machine's rates. One job per framework x device of the study measures the
# step-time model's rates (op costs, FLOP and bandwidth curves, DRAM, page faults, Keras
# fit's own costs) once, on the partition and with the threads of that device class's
# measuring jobs, which read them (crossover_study.measure.rates_job). Rates of the same machine,
# framework version, threads and code measured by an earlier study under results/ are
# copied, the file saying from where (rates.reuse: false measures afresh).


rule rates:
    output:
        rates=RATES,
    log:
        f"logs/{STUDY}/rates/{{framework}}/{{device}}.log",
    benchmark:
        RATES_BENCHMARK
    conda:
        get_env
    threads: get_threads
    # The device class's Slurm resources, as its measuring jobs get them (common.smk).
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
        gpu_jobs=get_gpu_jobs,
    params:
        src=SRC,
        # Earlier studies whose rates of the same key are copied (rates.reuse, default on).
        reuse_from=["results"] if config.get("rates", {}).get("reuse", True) else [],
    script:
        "../scripts/rates.py"
