"""Snakemake job: measure one batch of a case x framework x device group, then write the
job's probe record (crossover_study.measure_job, the same code that
`python -m crossover_study.measure_job` runs without Snakemake)."""

import sys


def main(snakemake) -> None:
    sys.stderr = open(snakemake.log[0], "a")  # tracebacks land in the job's log
    sys.path.insert(0, snakemake.params.src)
    from crossover_study.measure_job import measure_job

    w = snakemake.wildcards
    measure_job(
        snakemake.config,
        w.case,
        w.framework,
        w.device,
        int(w.batch),
        snakemake.threads,
        snakemake.output.csv,
        snakemake.output.probe,
        snakemake.params.journal,
        snakemake.log[0],
        rates=snakemake.input.rates,
    )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
