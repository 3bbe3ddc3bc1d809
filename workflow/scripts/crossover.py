"""Snakemake job: crossover.csv from timings.csv (see crossover_study.crossover)."""

import sys


def main(snakemake) -> None:
    sys.stderr = open(snakemake.log[0], "a")  # tracebacks land in the job's log
    sys.path.insert(0, snakemake.params.src)
    import pandas as pd

    from crossover_study.crossover import crossover_table
    from crossover_study.runner import write_csv_atomic

    timings = pd.read_csv(snakemake.input.timings)
    table = crossover_table(timings, n_boot=snakemake.params.bootstrap, seed=snakemake.params.seed)
    write_csv_atomic(table.to_dict("records"), table.columns, snakemake.output[0])
    with open(snakemake.log[0], "a") as log:
        print(table.to_string(), file=log)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
