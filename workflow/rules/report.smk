# Stage 4: the report. The notebook runs through Snakemake's notebook directive and is
# kept executed; nbconvert renders it to HTML with its figures embedded.


rule report_notebook:
    input:
        timings=f"{RESULTS}/timings.csv",
        crossover=f"{RESULTS}/crossover.csv",
        wall=f"{RESULTS}/wall.json",
        # The device cards' predictions (the predict rule), labelled as such.
        predicted=f"{RESULTS}/predicted.csv",
        predicted_crossover=f"{RESULTS}/predicted_crossover.csv",
        # Committed reference runs (possibly none), drawn beside this study's rows.
        reference_timings=get_reference_files("timings.csv"),
    output:
        figures=report(
            directory(f"{REPORTS}/figures"),
            # <case>-<kind>.png; the .svg and .pdf beside each PNG stay out of the report.
            patterns=[f"{{case,{CASE_NAMES}}}-{{kind}}.png"],
            caption="../report/figures.rst",
            category="Figures",
            labels={"case": "{case}", "figure": "{kind}"},
        ),
    log:
        notebook=f"{REPORTS}/report.ipynb",
    conda:
        "../../envs/report.yaml"
    # Light work on the cpu class's partition; memory and time from default-resources.
    resources:
        slurm_partition=get_slurm_partition,
        slurm_account=get_slurm_account,
    params:
        study=STUDY,
        src=SRC,
    notebook:
        "../notebooks/report.py.ipynb"


rule report_html:
    input:
        notebook=f"{REPORTS}/report.ipynb",
        figures=f"{REPORTS}/figures",
    output:
        report(
            f"{REPORTS}/report.html",
            caption="../report/report_html.rst",
            category="Report",
        ),
    log:
        f"logs/{STUDY}/report_html.log",
    conda:
        "../../envs/report.yaml"
    # Light work on the cpu class's partition; memory and time from default-resources.
    resources:
        slurm_partition=get_slurm_partition,
        slurm_account=get_slurm_account,
    params:
        outdir=get_output_dir,
        # The lab template without CDN scripts, so that the report works offline.
        template=get_html_template(),
    # Every path quoted (:q): a checkout or working directory may have spaces in its name.
    shell:
        "jupyter nbconvert --to html --no-input --template-file {params.template:q} "
        "--output-dir {params.outdir:q} --output report.html {input.notebook:q} > {log:q} 2>&1"
