"""The reference set: a study measured on a lent GPU machine without Snakemake (the GPU
bundle, the run's jobs, its finish, the run itself and its CPU rehearsal), a run's archive
imported, a run frozen into results/reference/, and the one-size check, which runs the
same jobs for one model on every device. What runs on the GPU machine before its bundle
is installed imports the standard library only."""
