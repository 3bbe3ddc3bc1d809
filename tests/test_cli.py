"""The crossover-study command line: routing, help, errors, and a real subcommand."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crossover_study import cli
from crossover_study.core.paths import REPO_ROOT

REFERENCE = REPO_ROOT / "results" / "reference" / "cpu-2core-2026-11-30"


def test_help_lists_every_subcommand(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("study", "compare", "audit", "agreement", "freeze", "paper"):
        assert f"  {name} " in out


@pytest.mark.parametrize("argv, problem", [([], "no command given"), (["bogus"], "'bogus'")])
def test_no_or_an_unknown_command_exits_2_with_the_usage(capsys, argv, problem):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert problem in err and "usage: crossover-study COMMAND" in err


def test_a_subcommand_gets_its_own_arguments_and_name(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["audit", "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: crossover-study audit ")
    with pytest.raises(SystemExit):
        cli.main(["paper", "--help"])
    assert capsys.readouterr().out.startswith("usage: crossover-study paper ")


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_subcommand_reaches_its_module(capsys, name):
    # --help of each: its module imports and its parser carries the subcommand's name.
    with pytest.raises(SystemExit) as exit_:
        cli.main([name, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: crossover-study {name} ")


def test_study_names_a_missing_config(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["study", "--config", "no/such/study.yaml"])
    assert exit_.value.code == 2
    assert "--config no/such/study.yaml: no such file" in capsys.readouterr().err


def test_compare_runs_the_repeat_comparison(tmp_path, capsys):
    # The committed reference run against a copy of itself: every point agrees.
    a, b = tmp_path / "a", tmp_path / "b"
    for run in (a, b):
        run.mkdir()
        (run / "timings.csv").write_bytes((REFERENCE / "timings.csv").read_bytes())
    assert cli.main(["compare", str(a), str(b)]) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith("repeat: ") and "b/a median 1.000" in summary


def test_audit_of_the_committed_reference_run_through_the_command(capsys):
    assert cli.main(["audit", "--no-redraw", str(REFERENCE)]) == 0
    assert "OK:" in capsys.readouterr().out


def test_make_setup_installs_the_command_and_python_m_runs_it():
    script = Path(sys.executable).parent / "crossover-study"
    assert script.exists(), "make setup installs the package: pip install --editable ."
    for command in ([str(script), "--help"], [sys.executable, "-m", "crossover_study", "--help"]):
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        assert "reference-import" in out


@pytest.mark.slow
def test_study_hands_snakemake_the_config_and_extra_arguments(capfd):
    # A dry run (-n after --) of the smoke study: Snakemake plans it, nothing runs.
    status = cli.main(
        ["study", "--config", "config/studies/smoke.yaml", "--cores", "1", "--", "-n"]
    )
    assert status == 0
    out = capfd.readouterr()
    assert "measure" in out.out + out.err


@pytest.mark.slow
def test_study_runs_in_the_checkout_the_user_is_in(tmp_path, monkeypatch, capfd):
    """Issue 47 item 11: a second checkout sharing this environment runs its own
    workflow in its own folder (not the one the package was installed from), and a
    folder without a Snakefile gets the installed checkout's workflow, its results
    where the user is; the line before Snakemake says which and where."""
    other = tmp_path / "checkout-b"
    for part in ("workflow", "profiles", "config"):
        shutil.copytree(REPO_ROOT / part, other / part)
    snakefile = (REPO_ROOT / "Snakefile").read_text()
    (other / "Snakefile").write_text(snakefile + '\nprint("parsed the workflow of checkout-b")\n')
    monkeypatch.chdir(other)
    argv = ["study", "--config", "config/studies/smoke.yaml", "--cores", "1", "--", "-n"]
    assert cli.main(argv) == 0
    out = capfd.readouterr().out
    assert f"the workflow {other / 'Snakefile'} runs in {other};" in out
    assert f"results go to {other / 'results' / 'smoke'}," in out
    assert "parsed the workflow of checkout-b" in out
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert (
        cli.main(argv[:1] + ["--config", str(other / "config/studies/smoke.yaml")] + argv[3:]) == 0
    )
    out = capfd.readouterr().out
    assert f"the workflow {REPO_ROOT / 'Snakefile'} runs in {elsewhere};" in out
    assert "checkout-b" not in out.split("results go to", 1)[1].splitlines()[0]
    assert "parsed the workflow of checkout-b" not in out
