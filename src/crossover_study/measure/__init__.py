"""One measuring job, from pinned threads to the job's table and probe record: the timing
harness, the GPU's state, the per-point watchdog, the journal, the frameworks' set-up
and device probe, one point's measurement, where its step's time goes (the attribution,
and on a GPU the device's trace), the runner of a group, the rates job, the measuring job,
its supervisor (the job ends when its points are done), the timer agreement, and the
jobs launched as processes without Snakemake (by the check and the GPU reference run)."""
