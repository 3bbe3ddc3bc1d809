"""Snakemake job: results/<study>/manifest.json (see crossover_study.manifest) and the
resolved config beside it."""

import os
import sys
from pathlib import Path


def main(snakemake) -> None:
    sys.stderr = open(snakemake.log[0], "a")  # tracebacks land in the job's log
    sys.path.insert(0, snakemake.params.src)
    import yaml

    from crossover_study import config as study_config
    from crossover_study.manifest import build_manifest, write_json

    config = study_config.validate_config(snakemake.config)
    manifest = build_manifest(
        study=snakemake.params.study,
        config=config,
        config_hash=study_config.measurement_hash(config),
        config_files=snakemake.input.configfiles,
        workdir=os.getcwd(),
        results_dir=Path(snakemake.output.manifest).parent,
        tables={
            "timings": snakemake.input.timings,
            "crossover": snakemake.input.crossover,
            "wall": snakemake.input.wall,
        },
        report={"html": snakemake.input.html, "notebook": snakemake.input.notebook},
        figures_dir=snakemake.input.figures,
        snakemake_version=snakemake.params.snakemake_version,
        repo=snakemake.params.repo,
        reference_tables=snakemake.input.reference_timings,
    )
    write_json(manifest, snakemake.output.manifest)
    with open(snakemake.output.config, "w") as fh:
        fh.write("# The study's config as validated, every default filled in.\n")
        yaml.safe_dump(config, fh, sort_keys=False)
    with open(snakemake.log[0], "a") as log:
        print(
            f"{len(manifest['figures'])} figures, {len(manifest['points'])} per-job tables, "
            f"{len(manifest['probes'])} probe records, {len(manifest['runs'])} runs, "
            f"{len(manifest['reference_tables'])} reference tables, "
            f"{len(manifest['code'])} code files; git {manifest['git']}",
            file=log,
        )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
