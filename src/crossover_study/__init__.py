"""crossover-study: when is the GPU, the TPU or a multi-GPU node faster than the CPU?

The package is read top-down in layers; a module imports only from its own layer or
the layers below it, never from above, and the imports form no cycle (counting those
inside functions; ``tests/test_layers.py`` checks both). :data:`LAYERS` lists every
module, bottom first:

0. **leaves**: paths, files and hashing, figure files and the sources they record
   (``figure_files``), errors, where a number came from (``provenance``), the plug-in
   contract, the timing harness, float precision, the GPU's state, the per-point
   deadline, the progress lines a person watches (``progress``), the seed cases' data;
1. **study**: the case registry, the point spec and the one selection of its rows
   (``spec.select_rows``), which variant applies where (one table: ``applicability``)
   and which program runs (``programs``), the study file (``study_file``: reading it, the
   checks its schema cannot express), the study config and its points;
2. **measurement**: the frameworks' set-up and device probes, the workloads, the probe
   record, the journal, one point's measurement, the runner, the rates job and the
   measuring job, the timer agreement, the GPU bundle;
3. **analysis**: repeats, the timings table and its one reader (``tables``), environments,
   the crossover, the answers (their rows, formats, remedies, replicas), two runs
   compared;
4. **presentation**: the report's figures (their tidy data in pandas, their style, their
   drawing with seaborn), the browser check;
5. **provenance and audit**: the manifest, the RO-Crate, the paper figures from the
   committed reference runs, the audit (its report model, its hash checks, one check per
   stage that calls the stage's own function), freezing a run into the reference set, the
   GPU reference run and its import, its rehearsal; the one-size check without
   Snakemake (``check``, its answer's text ``check_text``);
6. **entry points**: the command line (``crossover-study``).

An import inside a function is there for a heavy package (a framework, matplotlib) or
for start-up time (the workflow imports some modules while it is parsed), never to dodge
a cycle. An ``if __name__ == "__main__":`` block is its own program's top and may reach
any layer: it never runs on import.
"""

#: Layer of every module of the package (dotted name below ``crossover_study``; the
#: package itself is ``""``), bottom first; see the module docstring.
LAYERS: dict[str, int] = {
    # 0: leaves
    "": 0,
    "core": 0,
    "core.paths": 0,
    "core.files": 0,
    "figures.files": 0,
    "figures": 0,
    "core.errors": 0,
    "core.origin": 0,
    "plugin": 0,
    "core.host_load": 0,
    "workloads.precision": 0,
    "measure.gpu_state": 0,
    "measure.watchdog": 0,
    "core.progress": 0,
    "study.seed_data": 0,
    # 1: the study
    "study": 1,
    "study.cases": 1,
    "study.spec": 1,
    "study.applicability": 1,
    "workloads": 1,
    "study.programs": 1,
    "study.points": 1,
    "study.study_file": 1,
    "study.config": 1,
    # 2: measurement
    "measure.device_probe": 2,
    "measure.frameworks": 2,
    "workloads.torch_base": 2,
    "workloads.torch_cases": 2,
    "workloads.tf_base": 2,
    "workloads.tf_cases": 2,
    "workloads.tf_strategy_step": 2,
    "workloads.tf_strategy": 2,
    "workloads.ddp_rank": 2,
    "workloads.torch_ddp": 2,
    "workloads.plugins": 2,
    "workloads.plugin_torch": 2,
    "workloads.plugin_tf": 2,
    "measure.probe": 2,
    "measure.journal": 2,
    "measure.point": 2,
    "measure.runner": 2,
    "measure.rates_job": 2,
    "measure.job": 2,
    "measure": 2,
    "measure.harness": 2,
    "measure.agreement": 2,
    "stepmodel": 2,
    "stepmodel.record": 2,
    "stepmodel.counts_torch": 2,
    "stepmodel.counts_tf": 2,
    "stepmodel.counts": 2,
    "stepmodel.timing": 2,
    "stepmodel.faults": 2,
    "stepmodel.fit_rates": 2,
    "stepmodel.rates": 2,
    "stepmodel.replay": 2,
    # 3: analysis
    "analysis": 3,
    "analysis.repeats": 3,
    "analysis.tables": 3,
    "analysis.environments": 3,
    "analysis.crossover": 3,
    "answers": 3,
    "answers.wording": 3,
    "answers.rows": 3,
    "answers.remedies": 3,
    "answers.replicas": 3,
    "answers.regime": 3,
    "answers.sentences": 3,
    "analysis.compare_runs": 3,
    "stepmodel.model": 3,
    "stepmodel.columns": 3,
    "analysis.prediction": 3,
    # 4: presentation
    "figures.data": 4,
    "figures.grid": 4,
    "figures.scaling": 4,
    "figures.style": 4,
    "figures.draw": 4,
    "figures.report": 4,
    "figures.browser": 4,
    # 5: provenance and audit
    "provenance": 5,
    "provenance.inputs": 5,
    "provenance.manifest": 5,
    "provenance.crate_files": 5,
    "provenance.crate": 5,
    "provenance.crate_validation": 5,
    "figures.paper": 5,
    "audit": 5,
    "audit.findings": 5,
    "audit.hashes": 5,
    "audit.stages": 5,
    "audit.check": 5,
    "reference": 5,
    "reference.gpu_bundle": 5,
    "reference.freeze": 5,
    "reference.gpu_jobs": 5,
    "reference.gpu_finish": 5,
    "reference.gpu_run": 5,
    "reference.archive_import": 5,
    "reference.rehearsal": 5,
    "answers.check_text": 5,
    "reference.quick_check": 5,
    # 6: entry points
    "cli": 6,
    "__main__": 6,
}
