"""The one-size check, ``crossover-study check``: one model at one size measured on every
device class present, without Snakemake, and its answer. Its input is checked and made a
study config in :mod:`~crossover_study.quickcheck.inputs`; the jobs are launched, collected
and answered in :mod:`~crossover_study.quickcheck.command`."""
