"""Provenance of the smoke study end to end: manifest, RO-Crate, Snakemake's report,
the audit catching a figure drawn from other data, the collect step refusing mixed
environments, and `snakemake paper` from the committed reference runs."""

from __future__ import annotations

import json
import shutil
import time
import zipfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import yaml
from conftest import run_crate_validator, run_snakemake

from crossover_study.analysis.tables import read_timings_text
from crossover_study.audit import verify as audit
from crossover_study.core.files import sha256_file
from crossover_study.core.paths import REPO_ROOT
from crossover_study.figures import data as figure_data
from crossover_study.figures import files as figure_files
from crossover_study.figures import report as figures
from crossover_study.figures.paper import PAPER_FIGURES, PAPER_FORMATS
from crossover_study.provenance.manifest import load_manifest
from crossover_study.reference import freeze

pytestmark = pytest.mark.slow


def _copy(smoke_run, tmp_path) -> Path:
    workdir, _ = smoke_run
    dest = tmp_path / "work"
    shutil.copytree(workdir, dest, symlinks=True)
    return dest


def test_manifest_records_inputs_outputs_and_runs(smoke_run):
    workdir, _ = smoke_run
    manifest = load_manifest(workdir / "results/smoke")
    figures_dir = workdir / "reports/smoke/figures"
    on_disk = sorted(p.name for p in figures_dir.iterdir() if p.suffix in (".png", ".svg", ".pdf"))
    assert sorted(Path(f["path"]).name for f in manifest["figures"]) == on_disk
    assert len(on_disk) == 3 * len(list(figures_dir.glob("*.png")))
    timings = workdir / "results/smoke/timings.csv"
    assert manifest["tables"]["timings"]["sha256"] == sha256_file(timings)
    for figure in manifest["figures"]:
        assert figure["sources"]["timings.csv"] == sha256_file(timings)
    results = workdir / "results/smoke"
    per_job = sorted(results.glob("points/**/*.csv"))
    assert len(per_job) >= 2 * 2 * 2  # cases x frameworks x devices (or their batches)
    assert [Path(p["path"]).name for p in manifest["points"]] == [p.name for p in per_job]
    probes = sorted(results.glob("points/**/*.probe.json"))  # where the jobs write them
    assert [Path(p["path"]).name for p in manifest["probes"]] == [p.name for p in probes]
    df = read_timings_text(timings)  # run_id lies in environment.csv beside it
    assert {r["run_id"] for r in manifest["runs"]} == set(df["run_id"])
    for run in manifest["runs"]:  # the measuring jobs' environment, from their probes
        assert run["packages"]["python"] == run["python_version"]
        dist = {"torch": "torch", "tensorflow": "tensorflow_cpu"}[run["framework"]]
        assert run["packages"][dist] == run["framework_version"]
    # Each row carries its case's own config hash (config.measurement_hash(config, case)).
    hashes = manifest["config"]["case_hashes"]
    assert set(hashes) == set(df["case"]) and len(set(hashes.values())) == len(hashes)
    assert (df["config_hash"] == df["case"].map(hashes)).all()
    assert manifest["config"]["files"][0]["path"].endswith("smoke.yaml")
    assert manifest["snakemake_version"] == "9.27.1"
    assert manifest["packages"]["pandas"]["installed"] == "3.1.1"  # the manifest job's env
    assert {"Snakefile", "workflow/rules/provenance.smk"} <= {c["path"] for c in manifest["code"]}
    report = audit.audit(workdir / "results/smoke")
    assert report.ok, report.text()


def test_crate_links_figures_to_tables_and_runs(smoke_run):
    workdir, _ = smoke_run
    graph = json.loads((workdir / "results/smoke/ro-crate-metadata.json").read_text())["@graph"]
    by_id = {e["@id"]: e for e in graph}
    # Outside the crate's folder: named by its path in the working directory.
    figure = by_id["#workdir:reports/smoke/figures/s001-mlp-step-time-hidden.png"]
    assert figure["@type"] == "CreativeWork"
    based_on = {b["@id"] for b in figure["isBasedOn"]}
    assert {"timings.csv", "crossover.csv"} <= based_on
    assert any(p.startswith("points/s001-mlp/torch/cpu") for p in based_on)
    assert not any(p.startswith("points/s000-hjb") for p in based_on)
    runs = [e for e in graph if e["@id"].startswith("#run-")]
    run_ids = read_timings_text(workdir / "results/smoke/timings.csv")["run_id"]
    assert len(runs) == run_ids.nunique()
    for run in runs:
        assert by_id[run["location"]["@id"]]["@type"] == "Place"
        assert by_id[run["instrument"]["@id"]]["@type"] == "SoftwareApplication"


def test_fresh_crate_passes_the_validator_and_holds_no_machine_path(smoke_run):
    """roc-validator (offline, crossover_study.provenance.crate_validation) finds no issue in a
    fresh study's crate, which holds the workflow's copy and no machine path."""
    workdir, _ = smoke_run
    crate = workdir / "results/smoke"
    result = run_crate_validator(crate)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{crate}: OK" in result.stdout
    assert (crate / "code/Snakefile").read_bytes() == (REPO_ROOT / "Snakefile").read_bytes()
    text = (crate / "ro-crate-metadata.json").read_text() + (crate / "manifest.json").read_text()
    assert str(workdir) not in text and "file://" not in text and "site-packages" not in text


def test_snakemake_report_zip_has_figures_config_and_code(smoke_run):
    workdir, _ = smoke_run
    out = workdir / "reports/smoke/snakemake-report.zip"
    smoke = workdir / "Snakefile"  # the clone's workflow, which ran the study
    run_snakemake(
        workdir, "--configfile", str(workdir / "smoke.yaml"), "--report", str(out), snakefile=smoke
    )
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
        html = zf.read("snakemake-report/report.html").decode()
    pngs = {p.name for p in (workdir / "reports/smoke/figures").glob("*.png")}
    assert pngs <= {Path(n).name for n in names}
    assert {"manifest.json", "config.resolved.yaml", "ro-crate-metadata.json"} <= {
        Path(n).name for n in names
    }
    assert "smoke.yaml" in html  # the config file
    assert "collect_study" in html and "build_manifest" in html  # the rules' scripts
    for category in ('"Figures"', '"Tables"', '"Provenance"', '"Report"'):
        assert category in html
    assert '"labels": {"case": "s001-mlp", "figure": "step-time-hidden"}' in html


def test_audit_catches_a_figure_drawn_from_other_data(smoke_run, tmp_path, capsys):
    work = _copy(smoke_run, tmp_path)
    results = work / "results/smoke"
    recorded = sha256_file(results / "timings.csv")
    other = pd.read_csv(results / "timings.csv")
    other["step_time_s"] *= 3
    other.to_csv(tmp_path / "other.csv", index=False)
    fig, ax = plt.subplots(figsize=(7, 4.6), layout="constrained")
    figures.step_time_vs_size(figure_data.programs(other), "s001-mlp", "hidden", ax=ax)
    target = work / "reports/smoke/figures/s001-mlp-step-time-hidden.png"
    figure_files.save_figure(
        fig, target, sources={"timings.csv": sha256_file(tmp_path / "other.csv")}
    )
    plt.close(fig)
    assert audit.main([str(results)]) == 1
    out = capsys.readouterr().out
    assert "FAIL figure from other data" in out and "s001-mlp-step-time-hidden.png" in out
    assert f"expected sha256 {recorded}" in out
    assert f"actual   sha256 {sha256_file(tmp_path / 'other.csv')}" in out
    assert "FAIL report shows another figure" in out


def test_collect_refuses_rows_from_different_environments(smoke_run, tmp_path):
    work = _copy(smoke_run, tmp_path)
    per_job = work / "results/smoke/points/s001-mlp/torch/cpu/batch-0.csv"  # batch-1: replicas
    df = pd.read_csv(per_job, dtype=str, keep_default_na=False)
    df.loc[1, "host"] = "another-host"
    df.to_csv(per_job, index=False)
    args = ("results/smoke/timings.csv", "--configfile", str(work / "smoke.yaml"))
    smoke = smoke_run[0] / "Snakefile"  # the clone's workflow, which ran the study
    result = run_snakemake(work, *args, check=False, snakefile=smoke)
    assert result.returncode != 0
    output = result.stdout + result.stderr  # the job's message is on the console
    assert "curve s001-mlp/torch/cpu/eager/synced mixes 2 environments (host differ)" in output
    assert "host=another-host; run " in output and "(batch=64,d_in=1024,hidden=512)" in output
    run_snakemake(work, *args, "--config", "merge_environments=True", snakefile=smoke)
    log = (work / "logs/smoke/collect.log").read_text()
    assert "merged on purpose (merge_environments: true)" in log


def test_paper_rule_redraws_from_committed_results_only(tmp_path):
    work = tmp_path / "paper"
    shutil.copytree(REPO_ROOT / "results/reference", work / "results/reference")
    config = ("--configfile", str(REPO_ROOT / "config/config.yaml"))
    started = time.perf_counter()
    result = run_snakemake(work, "paper", *config)
    elapsed = time.perf_counter() - started
    assert elapsed < 60, elapsed
    assert "rule measure" not in result.stdout + result.stderr
    assert "1 of 1 steps (100%) done" in result.stdout + result.stderr
    for name in PAPER_FIGURES:
        for fmt in PAPER_FORMATS:
            assert (work / f"reports/paper/{name}.{fmt}").stat().st_size > 0
    report = audit.audit(work / "reports/paper")
    assert report.ok, report.text()
    again = run_snakemake(work, "paper", "-n", *config)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_dropping_a_case_and_rerunning_keeps_the_run_auditable(smoke_run, tmp_path):
    # issue 36: the manifest recorded the dropped case's per-job tables too, the audit
    # collected them again beside the rest ('1024.0' vs '1024': pandas writes an int
    # column with gaps as floats) and failed "not derived", and freeze refused the run.
    work = _copy(smoke_run, tmp_path)
    config = yaml.safe_load((work / "smoke.yaml").read_text())
    del config["cases"]["s000-hjb"]
    (work / "smoke.yaml").write_text(yaml.safe_dump(config))
    smoke = smoke_run[0] / "Snakefile"  # the clone's workflow, which ran the study
    run_snakemake(work, "--configfile", str(work / "smoke.yaml"), snakefile=smoke)
    results = work / "results/smoke"
    report = audit.audit(results)
    assert report.ok, report.text()
    manifest = load_manifest(results)
    recorded = [r["path"] for r in manifest["points"] + manifest["probes"]]
    assert recorded and not [p for p in recorded if "s000-hjb" in p]
    assert set(pd.read_csv(results / "timings.csv")["case"]) == {"s001-mlp"}
    # The dropped case's tables are kept out of points/, not lost (nor its journals).
    assert not (results / "points/s000-hjb").exists()
    for name in ("batch-0.csv", "batch-0.probe.json"):
        assert (results / "retired/s000-hjb/torch/cpu" / name).is_file()
    assert list((results / "journal/s000-hjb").glob("**/*.jsonl"))
    frozen = freeze.freeze(results, tmp_path / "frozen")
    assert tmp_path / "frozen/timings.csv" in frozen
    assert not [p for p in frozen if "s000-hjb" in str(p) or "retired" in str(p)]
