"""Snakemake job: check each job's table against its probe record, collect the tables
into the study's tables (timings.csv and the tables beside it, one per concern) and
record where the study's wall time went (wall.json: crossover_study.analysis.tables.
collect_study, crossover_study.analysis.wall.wall_summary)."""

import json
import sys


def main(snakemake) -> None:
    sys.stderr = open(snakemake.log[0], "a")  # tracebacks land in the job's log
    sys.path.insert(0, snakemake.params.src)
    from crossover_study.analysis.environments import EnvironmentMixError
    from crossover_study.analysis.tables import collect_study

    try:
        timings, summary, merged = collect_study(
            snakemake.input.csvs,
            snakemake.input.probes,
            snakemake.input.benchmarks,
            snakemake.output.timings,
            snakemake.output.wall,
            merge_environments=snakemake.params.merge_environments,
            noise_threshold=snakemake.params.noise_threshold,
            # The rates jobs' benchmark files (the collect rule's input once rates are
            # their own stage; none before).
            rates_benchmarks=snakemake.input.get("rates_benchmarks", []),
        )
    except EnvironmentMixError as error:
        print(error, file=sys.__stderr__)  # on the console too, not only in the log
        raise
    with open(snakemake.log[0], "a") as log:
        print(f"{len(timings)} rows; {json.dumps(summary)}", file=log)
        for line in merged:
            print(f"merged on purpose (merge_environments: true): {line}", file=log)


if __name__ == "__main__":
    # A full or read-only disk: one line on Snakemake's terminal, not only in the log.
    sys.path.insert(0, snakemake.params.src)  # noqa: F821 - injected by Snakemake
    from crossover_study.core.errors import STUDY_KEPT, disk_errors_in_one_line

    with disk_errors_in_one_line("rule collect", snakemake.log[0], STUDY_KEPT):  # noqa: F821
        main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
