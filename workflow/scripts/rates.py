"""Snakemake job: the machine's rates for one framework and device
(crossover_study.measure.rates_job, the same code that `crossover-study rates`
runs without Snakemake)."""

import os
import sys


def main(snakemake) -> None:
    sys.stderr = open(snakemake.log[0], "a")  # tracebacks land in the job's log
    # So does what a framework's C++ side writes straight to descriptor 2 (TensorFlow's
    # absl and oneDNN lines), as in the measure rule's script.
    os.dup2(sys.stderr.fileno(), 2)
    sys.path.insert(0, snakemake.params.src)
    from crossover_study.measure.rates_job import rates_job

    w = snakemake.wildcards
    rates_job(
        w.framework,
        w.device,
        snakemake.threads,
        snakemake.output.rates,
        snakemake.log[0],
        reuse_from=snakemake.params.reuse_from,
    )


if __name__ == "__main__":
    # A full or read-only disk: one line on Snakemake's terminal, not only in the log.
    sys.path.insert(0, snakemake.params.src)  # noqa: F821 - injected by Snakemake
    from crossover_study.core.errors import STUDY_KEPT, disk_errors_in_one_line

    with disk_errors_in_one_line("rule rates", snakemake.log[0], STUDY_KEPT):  # noqa: F821
        main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
