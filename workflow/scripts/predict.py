"""Snakemake job: predicted.csv and predicted_crossover.csv from timings.csv and the
study's device cards (crossover_study.analysis.card_prediction.write_predictions)."""

import sys


def main(snakemake) -> None:
    sys.stderr = open(snakemake.log[0], "a")  # tracebacks land in the job's log
    sys.path.insert(0, snakemake.params.src)
    from crossover_study.analysis.card_prediction import write_predictions
    from crossover_study.study import cases
    from crossover_study.study.device_cards import load_cards

    cases.use(snakemake.config)  # the study's own cases' seed sizes and axes
    predicted, crossovers = write_predictions(
        snakemake.input.timings,
        load_cards(snakemake.params.cards),
        snakemake.output.predicted,
        snakemake.output.crossover,
    )
    with open(snakemake.log[0], "a") as log:
        priced = predicted["predicted_step_s"].notna().sum()
        print(
            f"{len(predicted)} predicted rows ({priced} priced), {len(crossovers)} crossovers",
            file=log,
        )


if __name__ == "__main__":
    # A full or read-only disk: one line on Snakemake's terminal, not only in the log.
    sys.path.insert(0, snakemake.params.src)  # noqa: F821 - injected by Snakemake
    from crossover_study.core.errors import STUDY_KEPT, disk_errors_in_one_line

    with disk_errors_in_one_line("rule predict", snakemake.log[0], STUDY_KEPT):  # noqa: F821
        main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
