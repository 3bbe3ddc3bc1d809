# Stage 3b: the accelerators the study did not measure, predicted from device cards
# (config/devices/): every CPU point priced on each card of the study's predict key.
# Written apart from the measurements; labelled as predictions wherever shown.


rule predict:
    input:
        timings=f"{RESULTS}/timings.csv",
        # Each card named by predict, and its family's per-call costs.
        cards=get_card_files(),
    output:
        predicted=report(
            f"{RESULTS}/predicted.csv",
            caption="../report/predicted.rst",
            category="Tables",
        ),
        crossover=f"{RESULTS}/predicted_crossover.csv",
    log:
        f"logs/{STUDY}/predict.log",
    conda:
        "../../envs/report.yaml"
    # Light work on the cpu class's partition; memory and time from default-resources.
    resources:
        slurm_partition=get_slurm_partition,
        slurm_account=get_slurm_account,
    params:
        cards=config["predict"],
        src=SRC,
    script:
        "../scripts/predict.py"
