"""Snakemake job: results/<study>/manifest.json (see crossover_study.provenance.manifest) and the
resolved config beside it. Per-job tables of jobs the study no longer has (a case,
device or batch dropped from its config) are moved to results/<study>/retired/ first,
so that the manifest, the audit and a frozen copy hold what the study now holds."""

import os
import sys
from pathlib import Path

from crossover_study.study import points as study_points


def main(snakemake) -> None:
    sys.stderr = open(snakemake.log[0], "a")  # tracebacks land in the job's log
    sys.path.insert(0, snakemake.params.src)
    import yaml

    from crossover_study.provenance.manifest import build_manifest, retire_tables, write_json
    from crossover_study.study import config as study_config

    config = study_config.validate_config(snakemake.config)
    results_dir = Path(snakemake.output.manifest).parent
    retired = retire_tables(results_dir, [*snakemake.input.points, *snakemake.input.probes])
    with open(snakemake.log[0], "a") as log:
        for path in retired:
            print(f"retired (a job the study no longer has): {os.path.relpath(path)}", file=log)
    manifest = build_manifest(
        study=snakemake.params.study,
        config=config,
        config_hash=study_points.measurement_hash(config),
        config_files=snakemake.input.configfiles,
        workdir=os.getcwd(),
        results_dir=results_dir,
        tables={
            "timings": snakemake.input.timings,
            "crossover": snakemake.input.crossover,
            "wall": snakemake.input.wall,
            "predicted": snakemake.input.predicted,
            "predicted_crossover": snakemake.input.predicted_crossover,
        },
        report={"html": snakemake.input.html, "notebook": snakemake.input.notebook},
        figures_dir=snakemake.input.figures,
        snakemake_version=snakemake.params.snakemake_version,
        repo=snakemake.params.repo,
        reference_tables=snakemake.input.reference_timings,
        point_tables=snakemake.input.points,
        probe_records=snakemake.input.probes,
        rates_files=snakemake.input.get("rates"),
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
    # A full or read-only disk: one line on Snakemake's terminal, not only in the log.
    sys.path.insert(0, snakemake.params.src)  # noqa: F821 - injected by Snakemake
    from crossover_study.core.errors import STUDY_KEPT, disk_errors_in_one_line

    with disk_errors_in_one_line("rule manifest", snakemake.log[0], STUDY_KEPT):  # noqa: F821
        main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
