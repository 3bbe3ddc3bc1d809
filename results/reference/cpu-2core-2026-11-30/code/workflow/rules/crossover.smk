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
    params:
        bootstrap=config["crossover"]["bootstrap"],
        seed=config["crossover"]["seed"],
        src=SRC,
    script:
        "../scripts/crossover.py"
