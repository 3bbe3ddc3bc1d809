"""Snakemake job: measure one case x framework x device group (see crossover_study.runner)."""

import sys


def main(snakemake) -> None:
    sys.stderr = open(snakemake.log[0], "a")  # tracebacks land in the job's log
    sys.path.insert(0, snakemake.params.src)
    from crossover_study import config as study_config
    from crossover_study.runner import GroupSpec, run_group

    w = snakemake.wildcards
    config = study_config.validate_config(snakemake.config)
    group = GroupSpec(
        case=w.case,
        framework=w.framework,
        device=w.device,
        points=tuple(study_config.points(config, w.case, w.framework, w.device)),
        threads=snakemake.threads,
        policy=study_config.timing_policy(config),
        missing_device=snakemake.params.missing_device,
        config_hash=study_config.measurement_hash(config),
    )
    with open(snakemake.log[0], "a") as log:

        def say(text: str) -> None:
            print(text, file=log, flush=True)

        run_group(group, snakemake.params.journal, snakemake.output[0], log=say)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
