"""Snakemake job: check each job's table against its probe record, concatenate the
tables into timings.csv and record wall time."""

import json
import sys


def main(snakemake) -> None:
    sys.stderr = open(snakemake.log[0], "a")  # tracebacks land in the job's log
    sys.path.insert(0, snakemake.params.src)
    from crossover_study.environments import EnvironmentMixError, check_environments
    from crossover_study.probe import check_tables
    from crossover_study.tables import collect_timings, wall_summary

    # Refuses (naming the file) an accelerator row with status ok whose job saw no
    # such device: a lost GPU request must not become a CPU timing under its name.
    check_tables(snakemake.input.csvs, snakemake.input.probes)
    timings = collect_timings(snakemake.input.csvs, snakemake.output.timings)
    # Stops (naming the rows) when one curve mixes hosts, devices or library versions,
    # unless the config merges them on purpose; then the differences are logged.
    try:
        merged = check_environments(
            timings, merge=snakemake.params.merge_environments, source=snakemake.output.timings
        )
    except EnvironmentMixError as error:
        print(error, file=sys.__stderr__)  # on the console too, not only in the log
        raise
    summary = wall_summary(timings, snakemake.input.benchmarks)
    with open(snakemake.output.wall, "w") as fh:
        json.dump(summary, fh, indent=1)
    with open(snakemake.log[0], "a") as log:
        print(f"{len(timings)} rows; {json.dumps(summary)}", file=log)
        for line in merged:
            print(f"merged on purpose (merge_environments: true): {line}", file=log)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
