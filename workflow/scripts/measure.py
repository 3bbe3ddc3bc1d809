"""Snakemake job: measure one batch of a case x framework x device group (see
crossover_study.runner), then write the job's probe record (crossover_study.probe)."""

import json
import sys


def main(snakemake) -> None:
    sys.stderr = open(snakemake.log[0], "a")  # tracebacks land in the job's log
    sys.path.insert(0, snakemake.params.src)
    from crossover_study import config as study_config
    from crossover_study.probe import probe_record, write_probe
    from crossover_study.runner import GroupSpec, run_group

    w = snakemake.wildcards
    config = study_config.validate_config(snakemake.config)
    batch = study_config.batches(config, w.case, w.framework, w.device)[int(w.batch)]
    group = GroupSpec(
        case=w.case,
        framework=w.framework,
        device=w.device,
        points=batch,
        threads=snakemake.threads,
        policy=study_config.timing_policy(config),
        missing_device=snakemake.params.missing_device,
        config_hash=study_config.measurement_hash(config),
    )
    with open(snakemake.log[0], "a") as log:

        def say(text: str) -> None:
            print(text, file=log, flush=True)

        say(f"batch {w.batch}: {len(batch)} points, {snakemake.threads} threads")
        try:
            run_group(group, snakemake.params.journal, snakemake.output.csv, log=say)
        except Exception as exc:
            say(f"job failed: {type(exc).__name__}: {exc}")
            raise
        finally:
            # After the measurement: the probe imports the framework's device queries,
            # which must not disturb the thread pinning or the import time. Written even
            # when the job fails, and copied to the log (a failed job's outputs go).
            record = probe_record(w.framework, w.device, snakemake.threads)
            write_probe(record, snakemake.output.probe)
            say(f"probe: {json.dumps(record, sort_keys=True)}")
            if record["threads_equal_cpus_given"] is False:
                say(
                    f"warning: {snakemake.threads} threads but {record['cpus']['given']} "
                    "CPUs given; set devices.<class>.cpus_per_task"
                )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
