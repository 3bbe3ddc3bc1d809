# Stage 2: collect the per-job tables into one tidy table, validated against its schema.


rule collect:
    input:
        csvs=get_group_csvs(),
        benchmarks=[f"logs/{STUDY}/benchmarks/measure/{c}/{f}/{d}.tsv" for c, f, d in GROUPS],
    output:
        timings=report(
            f"{RESULTS}/timings.csv",
            caption="../report/timings.rst",
            category="Tables",
        ),
        wall=f"{RESULTS}/wall.json",
    log:
        f"logs/{STUDY}/collect.log",
    conda:
        "../../envs/report.yaml"
    params:
        # false: refuse a curve whose rows come from different environments.
        merge_environments=config["merge_environments"],
        src=SRC,
    script:
        "../scripts/collect.py"
