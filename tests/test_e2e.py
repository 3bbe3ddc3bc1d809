"""The smoke study end to end through Snakemake, in a temporary working directory."""

import re
import shutil

import pandas as pd
import pytest
from conftest import run_snakemake

from crossover_study.analysis import table_split
from crossover_study.analysis.tables import collect_timings, read_timings, validate_study_tables
from crossover_study.audit import verify as audit
from crossover_study.core import columns as col
from crossover_study.core.files import sha256_file
from crossover_study.core.paths import REPO_ROOT
from crossover_study.provenance.manifest import load_manifest

# One runner of the workflow for all end-to-end tests (tests/conftest.py).
snakemake = run_snakemake


# The smoke study itself (fixture smoke_run) runs once per session: tests/conftest.py.


@pytest.mark.slow
def test_smoke_study_rows_and_statuses(smoke_run):
    workdir, config = smoke_run
    all_rows = read_timings(workdir / "results/smoke/timings.csv")  # the whole rows
    replicated = all_rows[all_rows["variant"].isin(["ddp", "mirrored"])]
    df = all_rows.drop(replicated.index)
    # Per case, framework and device: eager at two sizes, copy_data_each_step and the
    # unsynced eager at the seed's size.
    assert len(df) == 2 * 2 * 2 * (2 + 1 + 1)
    assert (df["replicas"] == 1).all() and df["scaling"].isna().all()
    # s001-mlp on cpu: ddp and mirrored on one replica (the scaling baseline) and x
    # strong and weak on 2 replicas, in both frameworks.
    assert len(replicated) == 2 * 2 * 3 and set(replicated["device"]) == {"cpu"}
    measured = replicated[replicated["status"] == "ok"]
    assert sorted(
        zip(
            measured["framework"],
            measured["variant"],
            measured["replicas"],
            measured["scaling"].fillna("baseline"),
            strict=True,
        )
    ) == [
        ("tensorflow", "mirrored", 1, "baseline"),
        ("tensorflow", "mirrored", 2, "strong"),
        ("tensorflow", "mirrored", 2, "weak"),
        ("torch", "ddp", 1, "baseline"),
        ("torch", "ddp", 2, "strong"),
        ("torch", "ddp", 2, "weak"),
    ]
    measured = measured[measured["replicas"] == 2]
    assert (measured["global_batch"] == measured["scaling"].map({"strong": 64, "weak": 128})).all()
    assert (measured["allreduce_share"] > 0).all() and (measured["samples_per_s"] > 0).all()
    assert set(replicated.loc[replicated["status"] != "ok", "status"]) == {"not_applicable"}
    cpu, cuda = df[df["device"] == "cpu"], df[df["device"] == "cuda"]
    assert set(cpu["timing"]) == {"synced", "unsynced"}
    # the unsynced anti-pattern is an accelerator's: on the CPU a row with the reason,
    # never a timing
    unsynced = cpu[cpu["timing"] == "unsynced"]
    assert set(unsynced["status"]) == {"not_applicable"}
    assert unsynced["message"].str.startswith("on the CPU a step's ops have finished").all()
    assert unsynced["step_time_s"].isna().all()
    cpu = cpu[cpu["timing"] == "synced"]
    assert set(cpu["status"]) == {"ok"}
    assert cpu["sync_check"].isin(["passed", "failed"]).all()
    tf_hjb = cpu[(cpu["framework"] == "tensorflow") & (cpu["case"] == "s000-hjb")]
    assert (tf_hjb["traces_first_step"] >= 1).all()
    assert (cpu["step_time_s"] > 0).all() and (cpu["cold_start_s"] > 0).all()
    assert set(cuda["status"]) == {"unavailable"}
    assert cuda["step_time_s"].isna().all()  # never a CPU timing under the GPU's name
    assert cuda["message"].str.contains("no (?:CUDA device|GPU) visible").all()
    assert set(df["case"]) == set(config["cases"])
    assert df.loc[df["case"] == "s001-mlp", "hidden"].dropna().astype(int).tolist().count(512) == 4


@pytest.mark.slow
def test_smoke_study_tables_by_concern(smoke_run, tmp_path):
    """timings.csv is a table a person reads (at most 40 columns, no JSON in a cell);
    every table beside it has its schema and passes it; the tables join back into
    exactly the rows collected whole from the same per-job tables (rates from the
    rates files: in a fresh study no row is priced at other rates)."""
    workdir, _ = smoke_run
    results = workdir / "results/smoke"
    timings = results / "timings.csv"
    text = pd.read_csv(timings, dtype=str, keep_default_na=False)
    assert len(text.columns) <= 40
    for column in text.columns:
        assert not text[column].str.lstrip().str[:1].isin(["{", "["]).any(), column
    assert [p.stem for p in validate_study_tables(timings)] == list(col.STUDY_TABLES)
    assert pd.read_csv(results / "rates.csv").empty
    joined = read_timings(timings)
    jobs = sorted(results.glob("points/**/batch-*.csv"))
    whole = collect_timings(jobs, tmp_path / "whole.csv", columns=list(joined.columns))
    order = [c for c in joined.columns if c in table_split.key_columns(joined)]
    pd.testing.assert_frame_equal(
        joined.sort_values(order).reset_index(drop=True),
        read_timings(tmp_path / "whole.csv").sort_values(order).reset_index(drop=True),
    )
    assert len(whole) == len(joined)


@pytest.mark.slow
def test_smoke_study_crossover_table(smoke_run):
    workdir, _ = smoke_run
    table = pd.read_csv(workdir / "results/smoke/crossover.csv")
    # (frameworks x variants) x (s000 axes + s001 axes); unsynced rows are never used
    assert len(table) == 2 * 2 * (2 + 3)
    assert set(table["outcome"]) == {"no_accelerator_data"}
    assert table["reason"].str.contains("visible").all()


@pytest.mark.slow
def test_smoke_study_report_has_sections_and_images(smoke_run):
    workdir, _ = smoke_run
    html = (workdir / "reports/smoke/report.html").read_text()
    for case in ("s000-hjb", "s001-mlp"):
        assert re.search(rf"<h2[^>]*>{case}", html), case
    images = re.findall(r"<img[^>]*src=\"data:image/png;base64,", html)
    figures = sorted(p.name for p in (workdir / "reports/smoke/figures").glob("*.png"))
    assert len(figures) >= 9 and len(images) >= len(figures)
    assert {"s000-hjb-variants.png", "s001-mlp-variants.png", "s001-mlp-scaling.png"} <= set(
        figures
    )
    assert "Data-parallel scaling" in html
    assert "unsynced: wrong" in html or "Measurement warnings" in html
    assert "wall-time share" in html or "measured work" in html


@pytest.mark.slow
def test_smoke_report_draws_the_reference_machines_beside_it(smoke_run):
    """The committed CPU reference run (copied into the working directory by the
    fixture) is drawn beside the smoke study per case and swept axis, recorded in the
    manifest as a reference table, and the audit accepts it."""
    workdir, _ = smoke_run
    run = sorted((workdir / "results/reference").glob("*/timings.csv"))[0].parent.name
    figures_dir = workdir / "reports/smoke/figures"
    # The smoke study sweeps s000-hjb along batch and s001-mlp along hidden; the
    # reference run also d_in and width.
    cross = sorted(p.name for p in figures_dir.glob("*-cross-machine-*.png"))
    assert cross == [
        "s000-hjb-cross-machine-batch.png",
        "s000-hjb-cross-machine-width.png",
        "s001-mlp-cross-machine-d_in.png",
        "s001-mlp-cross-machine-hidden.png",
    ]
    manifest = load_manifest(workdir / "results/smoke")
    timings = workdir / "results/smoke/timings.csv"
    reference = workdir / f"results/reference/{run}/timings.csv"
    name = f"reference/{run}/timings.csv"
    assert manifest["reference_tables"][name]["sha256"] == sha256_file(reference)
    for figure in manifest["figures"]:
        if "-cross-machine-" in figure["path"]:
            # This study's timings and its device cards' predictions, drawn dashed beside
            # the reference run's curves.
            assert figure["sources"] == {
                "timings.csv": sha256_file(workdir / "results/smoke/timings.csv"),
                # and the tables beside it, which its rows are joined from
                **{p.name: sha256_file(p) for p in table_split.tables_beside(timings)},
                "predicted.csv": sha256_file(workdir / "results/smoke/predicted.csv"),
                name: sha256_file(reference),
            }
    html = (workdir / "reports/smoke/report.html").read_text()
    assert "Beside the reference machines" in html and f"reference runs: {run}" in html
    assert audit.audit(workdir / "results/smoke").ok


@pytest.mark.slow
def test_report_without_reference_runs_says_so(smoke_run, tmp_path):
    """With no results/reference/ the report_notebook rule gets an empty input list:
    the section says so in one line, no cross-machine figure, nothing recorded."""
    workdir, _ = smoke_run
    smoke = workdir / "Snakefile"
    work = tmp_path / "work"
    shutil.copytree(workdir, work, symlinks=True)
    shutil.rmtree(work / "results/reference")
    # The workflow the study ran (the clone's: its params name its src/).
    result = snakemake(work, "--configfile", str(work / "smoke.yaml"), snakefile=smoke)
    assert "rule measure" not in result.stdout + result.stderr  # nothing measured again
    assert not list((work / "reports/smoke/figures").glob("*-cross-machine-*"))
    html = (work / "reports/smoke/report.html").read_text()
    assert "no reference run: no results/reference/&lt;run&gt;/timings.csv" in html
    manifest = load_manifest(work / "results/smoke")
    assert manifest["reference_tables"] == {}
    report = audit.audit(work / "results/smoke")
    assert report.ok, report.text()


@pytest.mark.slow
def test_rerun_measures_nothing_again(smoke_run):
    workdir, _ = smoke_run
    smoke = workdir / "Snakefile"  # the clone's workflow, which ran the study
    result = snakemake(workdir, "--configfile", str(workdir / "smoke.yaml"), "-n", snakefile=smoke)
    assert "Nothing to be done" in result.stdout + result.stderr


@pytest.mark.slow
def test_bad_config_stops_before_any_job(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("study: bad\ncases:\n  s001-mlp:\n    axes:\n      hidden: [128, -1]\n")
    result = snakemake(tmp_path, "--configfile", str(path), check=False)
    assert result.returncode != 0
    assert "cases.s001-mlp.axes.hidden[1]: -1 is less than the minimum of 1" in result.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_workflow_lints_clean():
    result = snakemake(REPO_ROOT, "--lint")
    assert "Congratulations, your workflow is in a good condition" in result.stdout + result.stderr
