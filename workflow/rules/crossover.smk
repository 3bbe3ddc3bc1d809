# Stage 3: the crossover size (with its bootstrap interval) and N* per case and axis.


rule crossover:
    input:
        timings=f"{RESULTS}/timings.csv",
    output:
        report(
            f"{RESULTS}/crossover.csv",
            caption="../report/crossover.rst",
            category="Tables",
        ),
    log:
        f"logs/{STUDY}/crossover.log",
    conda:
        "../../envs/report.yaml"
    # Light work on the cpu class's partition; memory and time from default-resources.
    resources:
        slurm_partition=get_slurm_partition,
        slurm_account=get_slurm_account,
    params:
        bootstrap=config["crossover"]["bootstrap"],
        seed=config["crossover"]["seed"],
        src=SRC,
    script:
        "../scripts/crossover.py"
