"""Snakemake job: the paper figures from the committed reference runs (see
crossover_study.paper) and reports/paper/manifest.json."""

import sys
from pathlib import Path


def main(snakemake) -> None:
    sys.stderr = open(snakemake.log[0], "a")  # tracebacks land in the job's log
    sys.path.insert(0, snakemake.params.src)
    import matplotlib

    matplotlib.use("Agg")
    from crossover_study.manifest import write_json
    from crossover_study.paper import paper_figures, paper_manifest

    dirs = [Path(p).parent for p in snakemake.input.timings]
    written = paper_figures(dirs, Path(snakemake.output.manifest).parent)
    write_json(paper_manifest(dirs, written), snakemake.output.manifest)
    with open(snakemake.log[0], "a") as log:
        print(f"{len(written)} files from reference runs {snakemake.params.references}", file=log)


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake's script directive
