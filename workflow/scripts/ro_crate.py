"""Snakemake job: the Workflow Run Crate results/<study>/ro-crate-metadata.json (see
crossover_study.provenance.crate), from the study's manifest."""

import os
import sys


def main(snakemake) -> None:
    sys.stderr = open(snakemake.log[0], "a")  # tracebacks land in the job's log
    sys.path.insert(0, snakemake.params.src)
    from crossover_study.provenance.crate import write_crate
    from crossover_study.provenance.manifest import load_manifest
    from crossover_study.study import cases

    cases.use(snakemake.config)  # figure names start with the study's case names
    manifest = load_manifest(snakemake.input.manifest)
    write_crate(
        manifest,
        workdir=os.getcwd(),
        out=snakemake.output.crate,
        repo=snakemake.params.repo,
        manifest_path=snakemake.input.manifest,
    )
    with open(snakemake.log[0], "a") as log:
        print(f"wrote {snakemake.output.crate} ({len(manifest['runs'])} runs)", file=log)


if __name__ == "__main__":
    # A full or read-only disk: one line on Snakemake's terminal, not only in the log.
    sys.path.insert(0, snakemake.params.src)  # noqa: F821 - injected by Snakemake
    from crossover_study.core.errors import STUDY_KEPT, disk_errors_in_one_line

    with disk_errors_in_one_line("rule ro_crate", snakemake.log[0], STUDY_KEPT):  # noqa: F821
        main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
