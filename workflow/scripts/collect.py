"""Snakemake job: concatenate the per-job tables into timings.csv and record wall time."""

import json
import sys


def main(snakemake) -> None:
    sys.stderr = open(snakemake.log[0], "a")  # tracebacks land in the job's log
    sys.path.insert(0, snakemake.params.src)
    from crossover_study.tables import collect_timings, wall_summary

    timings = collect_timings(snakemake.input.csvs, snakemake.output.timings)
    summary = wall_summary(timings, snakemake.input.benchmarks)
    with open(snakemake.output.wall, "w") as fh:
        json.dump(summary, fh, indent=1)
    with open(snakemake.log[0], "a") as log:
        print(f"{len(timings)} rows; {json.dumps(summary)}", file=log)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
