# crossover-study: when is the accelerator actually faster than the CPU, and why?
# The Snakefile is the table of contents; each stage has its own rule file.
from snakemake.utils import min_version

min_version("9.0")


# A study file given with --configfile is complete by itself: it replaces the default
# study instead of being merged into it (Snakemake would merge the cases dictionaries).
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/rates.smk"
include: "workflow/rules/measure.smk"
include: "workflow/rules/collect.smk"
include: "workflow/rules/crossover.smk"
include: "workflow/rules/predict.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/provenance.smk"
include: "workflow/rules/paper.smk"


rule all:
    default_target: True
    input:
        get_final_outputs(),
