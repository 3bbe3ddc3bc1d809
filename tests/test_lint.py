"""Catalogued like a Snakemake workflow: `snakemake --lint` finds nothing (what the
Snakemake workflow catalog runs on the repository), and .snakemake-workflow-catalog.yml
has the catalog's keys and the README's usage."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from crossover_study.core.paths import REPO_ROOT

SNAKEMAKE = Path(sys.executable).with_name("snakemake")
STUDIES = sorted((REPO_ROOT / "config/studies").glob("*.yaml"))


def lint(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SNAKEMAKE), "--lint", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _assert_clean(result: subprocess.CompletedProcess) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "Lints for" not in output, output
    assert "Congratulations, your workflow is in a good condition!" in output, output


def test_snakemake_lint_is_clean_with_the_default_study():
    """What the catalog runs: `snakemake --lint` in the repository root (about 2 s)."""
    _assert_clean(lint())


@pytest.mark.slow
@pytest.mark.parametrize("study", STUDIES, ids=[p.stem for p in STUDIES])
def test_snakemake_lint_is_clean_with_every_study(study):
    """A study file given with --configfile (absolute, as Snakemake records it) once
    made the manifest rule's `repo` param a lint finding."""
    _assert_clean(lint("--configfile", str(study)))


def test_a_lint_finding_fails_the_check(tmp_path):
    """The check reads Snakemake's exit status and output: a rule with a lint finding
    (here, no log) fails it."""
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(
        'rule a:\n    output:\n        "a.txt"\n    shell:\n        "touch {output}"\n'
    )
    result = subprocess.run(
        [str(SNAKEMAKE), "--lint", "-s", str(snakefile), "-d", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    with pytest.raises(AssertionError, match="Lints for rule a"):
        _assert_clean(result)


def test_catalog_file_has_the_catalogs_keys_and_the_readmes_usage():
    catalog = yaml.safe_load((REPO_ROOT / ".snakemake-workflow-catalog.yml").read_text())
    usage = catalog["usage"]
    assert set(usage) == {"mandatory-flags", "software-stack-deployment", "report"}
    assert set(usage["mandatory-flags"]) == {"desc", "flags"}
    deployment = usage["software-stack-deployment"]
    assert set(deployment) == {"conda", "apptainer", "apptainer+conda", "report"}
    assert deployment["conda"] is True and usage["report"] is deployment["report"] is True
    desc = " ".join(usage["mandatory-flags"]["desc"].split())
    readme = " ".join((REPO_ROOT / "README.md").read_text().split())
    for command in (
        "make study",
        "make install-profile",
        "snakemake --cores N --configfile config/studies/smoke.yaml",
        "snakemake --profile slurm --configfile config/studies/<study>.yaml",
        "--sdm conda",
    ):
        assert command in desc, command
    for command in (
        "make study",
        "make install-profile",
        "snakemake --cores 2 --configfile config/studies/smoke.yaml",
        "snakemake --profile slurm --configfile",
        "--sdm conda",
        "--report reports/smoke/snakemake-report.zip",
    ):
        assert command in readme, command
    # Its study files exist, and so does the configuration guide the catalog shows.
    assert (REPO_ROOT / "config/studies/smoke.yaml").is_file()
    assert (REPO_ROOT / "config/README.md").is_file()
