# Paper figures: a fixed list, redrawn only from the reference runs committed under
# results/reference/ (every one present). Nothing is measured: `snakemake paper`.
from crossover_study.figures.paper import PAPER_FIGURES  # noqa: E402


localrules:
    paper,


rule paper:
    input:
        timings=get_reference_files("timings.csv"),
        # A format 3 run's tables beside its timings.csv (none for format 1 or 2): an
        # edit to any of them redraws the figures too.
        beside=get_reference_tables_beside(),
        crossover=get_reference_files("crossover.csv"),
        manifests=get_reference_files("manifest.json"),
    output:
        pdf=[f"{PAPER}/{name}.pdf" for name in PAPER_FIGURES],
        png=[
            report(
                f"{PAPER}/{name}.png",
                caption="../report/paper.rst",
                category="Paper figures",
                labels={"figure": name, "shows": what},
            )
            for name, what in PAPER_FIGURES.items()
        ],
        manifest=f"{PAPER}/manifest.json",
    log:
        "logs/paper.log",
    conda:
        "../../envs/report.yaml"
    params:
        references=get_reference_runs(),
        src=SRC,
    script:
        "../scripts/paper.py"
