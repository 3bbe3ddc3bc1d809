"""The reference set: a study measured on a lent GPU machine without Snakemake (the GPU
bundle, the run's job order, its finish, the run itself and its CPU rehearsal), a run's
archive imported and a run frozen into results/reference/. What runs on the GPU machine
before its bundle is installed imports the standard library only."""
