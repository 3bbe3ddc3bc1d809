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
    main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
