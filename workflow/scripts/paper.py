"""Snakemake job: the paper figures from the committed reference runs (see
crossover_study.figures.paper) and reports/paper/manifest.json."""

import sys
from pathlib import Path


def main(snakemake) -> None:
    sys.stderr = open(snakemake.log[0], "a")  # tracebacks land in the job's log
    sys.path.insert(0, snakemake.params.src)
    import matplotlib

    matplotlib.use("Agg")
    from crossover_study.audit.verify import audited
    from crossover_study.figures.paper import paper_figures
    from crossover_study.provenance.manifest import paper_manifest, write_json

    # Only reference runs that pass their audit are drawn; a failing one (a hand-edited
    # copy) is named in the log and left out (the paper's audit then names it too).
    with open(snakemake.log[0], "a") as log:
        dirs = audited(
            [Path(p).parent for p in snakemake.input.timings],
            log=lambda line: print(line, file=log, flush=True),
        )
    written = paper_figures(dirs, Path(snakemake.output.manifest).parent)
    write_json(paper_manifest(dirs, written), snakemake.output.manifest)
    with open(snakemake.log[0], "a") as log:
        names = [d.name for d in dirs]
        print(f"{len(written)} files from reference runs {names}", file=log)


if __name__ == "__main__":
    # A full or read-only disk: one line on Snakemake's terminal, not only in the log.
    sys.path.insert(0, snakemake.params.src)  # noqa: F821 - injected by Snakemake
    from crossover_study.core.errors import disk_errors_in_one_line

    kept = "the reference runs it draws from are untouched; free space, then run it again"
    with disk_errors_in_one_line("rule paper", snakemake.log[0], kept):  # noqa: F821
        main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
