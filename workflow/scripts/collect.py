"""Snakemake job: check each job's table against its probe record, concatenate the
tables into timings.csv and record wall time."""

import json
import sys


def main(snakemake) -> None:
    sys.path.insert(0, snakemake.params.src)
    from crossover_study.probe import check_tables
    from crossover_study.tables import collect_timings, wall_summary

    # Refuses (naming the file) an accelerator row with status ok whose job saw no
    # such device: a lost GPU request must not become a CPU timing under its name.
    check_tables(snakemake.input.csvs, snakemake.input.probes)
    timings = collect_timings(snakemake.input.csvs, snakemake.output.timings)
    summary = wall_summary(timings, snakemake.input.benchmarks)
    with open(snakemake.output.wall, "w") as fh:
        json.dump(summary, fh, indent=1)
    with open(snakemake.log[0], "w") as log:
        print(f"{len(timings)} rows; {json.dumps(summary)}", file=log)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
