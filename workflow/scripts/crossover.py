"""Snakemake job: crossover.csv from timings.csv (crossover_study.analysis.crossover.write_crossover)."""

import sys


def main(snakemake) -> None:
    sys.stderr = open(snakemake.log[0], "a")  # tracebacks land in the job's log
    sys.path.insert(0, snakemake.params.src)
    from crossover_study.analysis.crossover import write_crossover
    from crossover_study.study import cases

    cases.use(snakemake.config)  # the study's own cases' seed sizes and axes

    table = write_crossover(
        snakemake.input.timings,
        snakemake.output[0],
        n_boot=snakemake.params.bootstrap,
        seed=snakemake.params.seed,
    )
    with open(snakemake.log[0], "a") as log:
        print(table.to_string(), file=log)


if __name__ == "__main__":
    # A full or read-only disk: one line on Snakemake's terminal, not only in the log.
    sys.path.insert(0, snakemake.params.src)  # noqa: F821 - injected by Snakemake
    from crossover_study.core.errors import STUDY_KEPT, disk_errors_in_one_line

    with disk_errors_in_one_line("rule crossover", snakemake.log[0], STUDY_KEPT):  # noqa: F821
        main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
