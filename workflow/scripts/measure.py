"""Snakemake job: measure one batch of a case x framework x device group, then write the
job's probe record (crossover_study.measure.job in a worker process under its supervisor,
crossover_study.measure.supervisor: the same code that `crossover-study measure-job` runs
without Snakemake). The job ends when its points are done, whatever the measured program
left running, and at its deadline (timing.job_deadline_s).

The job's log gets every line; its progress lines (the job's first line, one per point,
a failed job: crossover_study.core.progress) also go to the script's standard output, which
is Snakemake's terminal (on Slurm, the job's own Slurm log)."""

import os
import sys


def main(snakemake) -> None:
    sys.stderr = open(snakemake.log[0], "a")  # tracebacks land in the job's log
    # So does what a framework's C++ side writes straight to descriptor 2 (TensorFlow's
    # absl and oneDNN lines): the terminal keeps the progress lines only.
    os.dup2(sys.stderr.fileno(), 2)
    sys.path.insert(0, snakemake.params.src)
    from crossover_study.core.progress import for_terminal
    from crossover_study.measure.supervisor import supervise

    def echo(text: str) -> None:
        if for_terminal(text):
            print(text, file=sys.__stdout__, flush=True)

    w = snakemake.wildcards
    supervise(
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
        echo=echo,
        rates=snakemake.input.rates,
    )


if __name__ == "__main__":
    # A full or read-only disk: one line on Snakemake's terminal, not only in the log.
    sys.path.insert(0, snakemake.params.src)  # noqa: F821 - injected by Snakemake
    from crossover_study.core.errors import STUDY_KEPT, disk_errors_in_one_line

    with disk_errors_in_one_line("rule measure", snakemake.log[0], STUDY_KEPT):  # noqa: F821
        main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
