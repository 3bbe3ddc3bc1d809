"""Provenance without running the study: reproducible figures, the environment check,
the manifest's pieces, the RO-Crate, the paper figures and the audit of the committed
reference run (results/reference/)."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from conftest import (
    SYNTHETIC_CPU_NAME,
    SYNTHETIC_GPU_NAME,
    run_crate_validator,
    synthetic_reference_gpu,
)

from crossover_study.analysis.environments import (
    EnvironmentMixError,
    check_environments,
    environment_conflicts,
)
from crossover_study.audit import verify as audit
from crossover_study.core.files import sha256_file
from crossover_study.core.paths import REPO_ROOT
from crossover_study.figures import files as figure_files
from crossover_study.figures import paper
from crossover_study.figures import report as figures
from crossover_study.provenance.inputs import code_files, file_record, package_versions
from crossover_study.provenance.manifest import load_manifest
from crossover_study.reference import freeze
from crossover_study.study.config import validate_config
from crossover_study.study.points import measurement_hash
from crossover_study.study.study_file import ConfigError

REFERENCE_RUNS = paper.reference_dirs(REPO_ROOT / "results" / "reference")


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _table(overrides: dict | None = None) -> pd.DataFrame:
    """Four ok rows of one curve (s001-mlp, torch, cpu, eager) from one environment;
    ``overrides`` maps (row, column) to a new value."""
    rows = []
    for hidden, step in ((32, 3.0e-4), (128, 5.2e-4), (512, 2.9e-3), (2048, 2.0e-3)):
        rows.append(
            {
                "case": "s001-mlp",
                "framework": "torch",
                "device": "cpu",
                "variant": "eager",
                "timing": "synced",
                "batch": 64,
                "d_in": 1024,
                "hidden": hidden,
                "status": "ok",
                "step_time_s": step,
                "step_time_iqr_s": step * 0.02,
                "noisy": False,
                "host": "host-a",
                "cpu_model": "Xeon A",
                "device_name": "Xeon A",
                "framework_version": "2.13.0",
                "cuda_version": None,
                "python_version": "3.11.7",
                "run_id": "run-a",
            }
        )
    df = pd.DataFrame(rows)
    for (row, column), value in (overrides or {}).items():
        df.loc[row, column] = value
    return df


# ------------------------------------------------------------- reproducible figures
def test_save_figure_writes_identical_bytes_in_every_format(tmp_path):
    sources = {"timings.csv": "a" * 64, "crossover.csv": "b" * 64}
    for out in ("one", "two"):
        fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
        figures.step_time_vs_size(_table(), "s001-mlp", "hidden", ax=ax)
        figure_files.save_figure(
            fig, tmp_path / out / "f.png", formats=("svg", "pdf"), sources=sources
        )
        plt.close(fig)
    for fmt in figure_files.FIGURE_FORMATS:
        one, two = tmp_path / "one" / f"f.{fmt}", tmp_path / "two" / f"f.{fmt}"
        assert one.read_bytes() == two.read_bytes(), fmt
        data = one.read_bytes()
        assert b"Matplotlib v" not in data and b"CreationDate" not in data
        assert figure_files.figure_sources(one) == sources
    assert b"<dc:date>" not in (tmp_path / "one" / "f.svg").read_bytes()


def test_save_figure_rejects_an_unknown_format(tmp_path):
    fig, _ = plt.subplots()
    with pytest.raises(ValueError, match="unknown figure format"):
        figure_files.save_figure(fig, tmp_path / "f.jpg")
    plt.close(fig)


_DRAW = """
import sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from crossover_study.figures import files as figure_files
from crossover_study.figures import report as figures
fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
figures.step_time_vs_size(pd.read_csv(sys.argv[1]), "s001-mlp", "hidden", ax=ax)
figure_files.save_figure(fig, sys.argv[2], formats=("svg", "pdf"), sources={"timings.csv": "0" * 64})
"""


def test_figures_regenerate_byte_for_byte_in_fresh_processes(tmp_path):
    """Two processes (each with its own random state) draw the same figure."""
    table = tmp_path / "timings.csv"
    _table().to_csv(table, index=False)
    env = {"PYTHONPATH": str(REPO_ROOT / "src"), "PATH": str(Path(sys.executable).parent)}
    hashes = []
    for out in ("a", "b"):
        target = tmp_path / out / "fig.png"
        subprocess.run([sys.executable, "-c", _DRAW, str(table), str(target)], check=True, env=env)
        hashes.append({f: _sha(target.with_suffix(f".{f}")) for f in figure_files.FIGURE_FORMATS})
    assert hashes[0] == hashes[1]


# ------------------------------------------------------------------ environments
def test_rows_from_one_environment_pass():
    assert check_environments(_table()) == []


def test_a_curve_mixing_hosts_is_refused_naming_the_rows():
    df = _table({(2, "host"): "host-b", (3, "host"): "host-b", (2, "run_id"): "run-b"})
    df.loc[3, "run_id"] = "run-b"
    with pytest.raises(EnvironmentMixError) as info:
        check_environments(df)
    text = str(info.value)
    assert "s001-mlp/torch/cpu/eager/synced mixes 2 environments (host differ)" in text
    assert "host=host-a; run run-a: row 0 (batch=64,d_in=1024,hidden=32)" in text
    assert "host=host-b; run run-b: row 2" in text and "row 3" in text
    assert "merge_environments: true" in text


def test_versions_and_devices_are_compared_too():
    df = _table({(1, "framework_version"): "2.12.0", (1, "device_name"): "Other CPU"})
    (conflict,) = environment_conflicts(df)
    assert len(conflict["environments"]) == 2
    with pytest.raises(EnvironmentMixError, match="device_name, framework_version differ"):
        check_environments(df)


def test_merging_on_purpose_returns_the_differences():
    df = _table({(1, "python_version"): "3.12.3"})
    lines = check_environments(df, merge=True)
    assert lines and "python_version differ" in lines[0]


def test_other_curves_and_other_statuses_may_differ():
    df = pd.concat([_table(), _table()], ignore_index=True)
    df.loc[4:, "device"] = "cuda"
    df.loc[4:, "host"] = "gpu-host"
    df.loc[4:, "device_name"] = "Some GPU"
    df.loc[0, "status"] = "unavailable"
    df.loc[0, "host"] = "elsewhere"
    assert environment_conflicts(df) == []


def test_merge_environments_config_key():
    base = {"study": "t", "cases": {"s001-mlp": {}}}
    assert validate_config(base)["merge_environments"] is False
    assert validate_config({**base, "merge_environments": True})["merge_environments"] is True
    with pytest.raises(ConfigError, match="merge_environments: 'yes' is not of type 'boolean'"):
        validate_config({**base, "merge_environments": "yes"})
    # Changing it after measuring does not make the rows "another config".
    assert measurement_hash(validate_config(base)) == measurement_hash(
        validate_config({**base, "merge_environments": True})
    )


# ---------------------------------------------------------------------- manifest
def test_file_records_and_code_files(tmp_path):
    (tmp_path / "x.txt").write_text("abc")
    record = file_record("x.txt", tmp_path)
    assert record == {
        "path": "x.txt",
        "root": "workdir",
        "sha256": hashlib.sha256(b"abc").hexdigest(),
        "bytes": 3,
    }
    assert file_record(REPO_ROOT / "Snakefile", tmp_path)["root"] == "repo"
    # Outside both: the file name only, never where it lay on this machine.
    elsewhere = tmp_path / "elsewhere" / "my-study.yaml"
    elsewhere.parent.mkdir()
    elsewhere.write_text("study: x\n")
    outside = file_record(elsewhere, tmp_path / "workdir", repo=tmp_path / "repo")
    assert (outside["root"], outside["path"]) == ("outside", "my-study.yaml")
    code = {p.relative_to(REPO_ROOT).as_posix() for p in code_files()}
    assert {"Snakefile", "src/crossover_study/provenance/manifest.py", "requirements.lock"} <= code
    assert "workflow/rules/provenance.smk" in code
    assert not any("__pycache__" in p for p in code)


def test_package_data_is_named_by_package_not_by_install_path():
    from crossover_study.provenance.inputs import data_files, locate_package_file

    (iris,) = data_files({"cases": {"s002-iris": {}}})
    assert iris["root"] == "package"
    assert (iris["package"], iris["path"]) == ("scikit-learn", "sklearn/datasets/data/iris.csv")
    assert iris["package_version"] == package_versions()["scikit-learn"]["installed"]
    assert iris["sha256"] == sha256_file(locate_package_file(iris))
    assert data_files({"cases": {"s001-mlp": {}}}) == []


def test_package_versions_pin_and_install():
    versions = package_versions()
    assert versions["torch"]["pinned"] == "2.13.0"
    assert versions["rocrate"] == {"pinned": "0.16.0", "installed": "0.16.0"}


def _mini_manifest(workdir: Path, **kwargs) -> dict:
    """``build_manifest`` of the study ``mini`` in ``workdir/results/mini``, whose
    ``timings.csv`` the test wrote (``crossover.csv`` and ``wall.json`` are written here
    as stubs); ``kwargs`` go on to ``build_manifest``."""
    from crossover_study.provenance.manifest import build_manifest

    results = Path(workdir) / "results" / "mini"
    for name in ("crossover.csv", "wall.json"):
        (results / name).write_text("{}")
    return build_manifest(
        study="mini",
        config={"cases": {}},
        config_hash="h",
        config_files=[],
        workdir=workdir,
        results_dir="results/mini",
        tables={
            t.split(".")[0]: f"results/mini/{t}"
            for t in ("timings.csv", "crossover.csv", "wall.json")
        },
        report={},
        figures_dir=None,
        snakemake_version=None,
        **kwargs,
    )


def test_runs_carry_the_packages_their_jobs_probes_recorded(tmp_path):
    """Each run's ``packages`` come from the probe records beside the per-job tables
    holding its rows (the measuring jobs' envs), not from the manifest job's env."""

    results = tmp_path / "results" / "mini"
    points = results / "points" / "s001-mlp" / "torch" / "cpu"
    points.mkdir(parents=True)
    row = {"case": "s001-mlp", "framework": "torch", "device": "cpu", "status": "ok"}
    timings = pd.DataFrame([{**row, "run_id": r} for r in ("a", "a", "d", "b", "d", "c")])
    tables = {"batch-0": ["a", "a", "d"], "batch-1": ["b", "d"], "batch-2": ["c"]}
    for name, run_ids in tables.items():
        pd.DataFrame([{**row, "run_id": r} for r in run_ids]).to_csv(
            points / f"{name}.csv", index=False
        )
    env = {"python": "3.11.7", "torch": "2.13.0", "numpy": "2.4.6"}
    probes = {
        "batch-0": {"device": "cpu", "probe_version": 3, "packages": env},
        "batch-1": {"device": "cpu", "probe_version": 3, "packages": {**env, "torch": "2.12.0"}},
        "batch-2": {"device": "cpu", "probe_version": 2},  # before packages were recorded
    }
    for name, record in probes.items():
        (points / f"{name}.probe.json").write_text(json.dumps(record))
    timings.to_csv(results / "timings.csv", index=False)
    manifest = _mini_manifest(tmp_path)
    runs = {r["run_id"]: r for r in manifest["runs"]}
    assert runs["a"]["packages"] == env
    assert runs["b"]["packages"] == {**env, "torch": "2.12.0"}
    assert runs["c"]["packages"] is None  # its only table's probe is version 2
    assert runs["d"]["packages"] == {**env, "torch": ["2.12.0", "2.13.0"]}
    # The top-level packages stay: the manifest job's own environment.
    assert manifest["packages"]["pandas"]["installed"] == "3.1.1"


def test_a_study_that_dropped_a_job_records_only_what_it_holds(tmp_path, monkeypatch):
    """The manifest records the per-job tables it is given (the study's jobs now); the
    tables of a dropped job leave points/ for retired/ (retire_tables), none lost."""
    from crossover_study.provenance.manifest import retire_tables

    monkeypatch.chdir(tmp_path)  # the workflow's paths are relative to its workdir
    results = Path("results/mini")
    row = {"case": "s001-mlp", "framework": "torch", "device": "cpu", "status": "ok"}
    jobs = {"s001-mlp/torch/cpu/batch-0": "a", "s000-hjb/torch/cpu/batch-0": "b"}
    for stem, run_id in jobs.items():
        table = results / "points" / f"{stem}.csv"
        table.parent.mkdir(parents=True)
        pd.DataFrame([{**row, "run_id": run_id}]).to_csv(table, index=False)
        table.with_suffix(".probe.json").write_text(json.dumps({"device": "cpu"}))
    pd.DataFrame([{**row, "run_id": "a"}]).to_csv(results / "timings.csv", index=False)
    keep = [str(results / "points/s001-mlp/torch/cpu/batch-0") + s for s in (".csv", ".probe.json")]
    moved = retire_tables(results, keep)
    retired = (results / "retired/s000-hjb/torch/cpu").resolve()
    assert moved == sorted(retired / n for n in ("batch-0.csv", "batch-0.probe.json"))
    assert not (results / "points/s000-hjb").exists()  # nor its emptied folders
    assert (results / "points/s001-mlp/torch/cpu/batch-0.csv").is_file()
    assert retire_tables(results, keep) == []  # nothing left to move
    manifest = _mini_manifest(tmp_path, point_tables=keep[:1], probe_records=keep[1:])
    assert [r["path"] for r in manifest["points"]] == [keep[0]]
    assert [r["path"] for r in manifest["probes"]] == [keep[1]]
    assert [r["points"] for r in manifest["runs"]] == [[keep[0]]]


def test_the_manifest_records_a_case_named_like_a_missing_value(tmp_path):
    """A case named ``nan`` (or ``NA``) is that name in the manifest's runs, as in the
    tables (tables.read_csv_text), not a missing value."""

    results = tmp_path / "results" / "mini"
    table = results / "points" / "nan" / "torch" / "cpu" / "batch-0.csv"
    table.parent.mkdir(parents=True)
    rows = pd.DataFrame(
        [
            {"case": c, "framework": "torch", "device": "cpu", "status": "ok", "run_id": c}
            for c in ("nan", "NA")
        ]
    )
    rows.to_csv(table, index=False)
    rows.to_csv(results / "timings.csv", index=False)
    manifest = _mini_manifest(tmp_path)
    runs = {r["run_id"]: r for r in manifest["runs"]}
    assert {k: r["case"] for k, r in runs.items()} == {"nan": "nan", "NA": "NA"}
    assert all(r["points"] for r in runs.values())


# ------------------------------------------------------- committed reference runs
def _reference() -> Path:
    if not REFERENCE_RUNS:
        pytest.fail("no reference run committed under results/reference/")
    return REFERENCE_RUNS[0]


def test_reference_run_is_complete_and_audits_clean():
    ref = _reference()
    for name in ("timings.csv", "crossover.csv", "manifest.json", "ro-crate-metadata.json"):
        assert (ref / name).is_file(), name
    report = audit.audit(ref)
    assert report.ok, report.text()
    manifest = load_manifest(ref)
    assert manifest["tables"]["timings"]["sha256"] == sha256_file(ref / "timings.csv")
    assert manifest["git"]["dirty"] is False


def test_reference_runs_hold_no_machine_path():
    """No committed file names a place on the machine that measured it (issue 15's
    check: grep -rE '/(home|root|tmp|work|opt|usr)/' results/reference)."""
    import re

    pattern = re.compile(r"/(home|root|tmp|work|opt|usr)/|file://|site-packages")
    found = [
        f"{path.relative_to(REPO_ROOT)}: {line.strip()[:120]}"
        for ref in REFERENCE_RUNS
        for path in sorted(ref.rglob("*"))
        if path.is_file()
        for line in path.read_text(errors="replace").splitlines()
        if pattern.search(line)
    ]
    assert not found, "\n".join(found[:10])


def test_audit_fails_machine_paths_and_ids_that_leave_the_crate(tmp_path):
    dest = _copy_reference(tmp_path)
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["data"][0]["path"] = "/home/someone/.venv/lib/site-packages/sklearn/iris.csv"
    (dest / "manifest.json").write_text(json.dumps(manifest))
    crate = json.loads((dest / "ro-crate-metadata.json").read_text())
    crate["@graph"].append({"@id": "../../reports/x/report.html", "@type": "File"})
    (dest / "ro-crate-metadata.json").write_text(json.dumps(crate))
    report = audit.audit(dest)
    kinds = {(f.level, f.kind) for f in report.findings}
    assert ("FAIL", "machine path") in kinds, report.text()
    assert ("FAIL", "outside the RO-Crate") in kinds, report.text()
    assert "data[0].path: /home/someone" in report.text()
    # A path quoted inside an error message is a note: the run stays usable.
    manifest["runs"][0]["device_reason"] = "no tensorflow in /opt/env/bin/python"
    dest.joinpath("manifest.json").write_text(json.dumps({**manifest, "data": []}))
    kinds = {(f.level, f.kind) for f in audit.audit(dest).findings}
    assert ("note", "machine path in text") in kinds
    assert ("FAIL", "machine path") not in kinds


def test_crate_validator_passes_every_reference_crate_and_fails_a_broken_one(tmp_path):
    """roc-validator at the REQUIRED level, offline (crossover_study.provenance.crate_validation)."""
    broken = _copy_reference(tmp_path)
    crate = json.loads((broken / "ro-crate-metadata.json").read_text())
    root = next(e for e in crate["@graph"] if e["@id"] == "./")
    root["hasPart"].append({"@id": "figures/not-there.png"})
    crate["@graph"].append({"@id": "figures/not-there.png", "@type": "File", "name": "x"})
    (broken / "ro-crate-metadata.json").write_text(json.dumps(crate))
    result = run_crate_validator(*REFERENCE_RUNS, broken)
    for ref in REFERENCE_RUNS:
        assert f"{ref}: OK" in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"{broken}: 1 issue(s)" in result.stdout, result.stdout[-3000:]
    assert "figures/not-there.png" in result.stdout
    assert result.returncode == 1


def test_refreeze_makes_an_old_reference_portable_without_touching_measurements(tmp_path):
    dest = _copy_reference(tmp_path)
    manifest = json.loads((dest / "manifest.json").read_text())
    (iris,) = manifest["data"]
    # As frozen before manifests were portable: the measuring machine's install path.
    manifest["data"][0] = {
        **iris,
        "root": "absolute",
        "path": f"/work/x/site-packages/{iris['path']}",
    }
    (dest / "manifest.json").write_text(json.dumps(manifest))
    shutil.rmtree(dest / "code")
    measured = {p: _sha(p) for p in dest.rglob("*.csv")}
    freeze.refreeze(dest)
    assert json.loads((dest / "manifest.json").read_text())["data"] == [iris]
    assert (dest / "code" / "Snakefile").is_file()
    assert {p: _sha(p) for p in dest.rglob("*.csv")} == measured
    report = audit.audit(dest)
    assert report.ok, report.text()


def test_reference_crate_links_runs_to_machines_and_software():
    from rocrate.rocrate import ROCrate

    ref = _reference()
    crate = ROCrate(ref)
    profiles = {e.id for e in crate.root_dataset["conformsTo"]}
    assert "https://w3id.org/ro/wfrun/workflow/0.6" in profiles
    assert "ComputationalWorkflow" in crate.mainEntity.type
    runs = [e for e in crate.get_by_type("CreateAction") if e.id.startswith("#run-")]
    timings = pd.read_csv(ref / "timings.csv", dtype=str)
    assert {r.id[len("#run-") :] for r in runs} == set(timings["run_id"])
    for run in runs:
        machine = run["location"]
        names = {p["name"] for p in machine["additionalProperty"]}
        assert {"host", "cpu_model", "device_name"} <= names
        assert run["instrument"]["softwareVersion"]
        assert run["instrument"]["name"] in ("torch", "tensorflow")
        assert run["result"]  # its per-job table


def test_paper_figures_regenerate_byte_for_byte(tmp_path):
    written = {}
    for out in ("a", "b"):
        files = paper.paper_figures(REFERENCE_RUNS, tmp_path / out)
        written[out] = {p.name: _sha(p) for p in files}
    expected = {f"{n}.{f}" for n in paper.PAPER_FIGURES for f in paper.PAPER_FORMATS}
    assert set(written["a"]) == expected
    assert written["a"] == written["b"]
    fig = tmp_path / "a" / "fig-5-speedup-heatmap.png"
    recorded = figure_files.figure_sources(fig)
    assert recorded == paper.table_sources([paper.load_reference(r) for r in REFERENCE_RUNS])


def _copy_reference(tmp_path: Path) -> Path:
    dest = tmp_path / "results" / "reference" / _reference().name
    shutil.copytree(_reference(), dest)
    return dest


def test_audit_reports_a_hand_edited_timings_row(tmp_path, capsys):
    ref = _copy_reference(tmp_path)
    recorded = sha256_file(ref / "timings.csv")
    df = pd.read_csv(ref / "timings.csv", dtype=str, keep_default_na=False)
    df.loc[0, "step_time_s"] = str(float(df.loc[0, "step_time_s"]) / 2)
    df.to_csv(ref / "timings.csv", index=False)
    assert audit.main([str(ref)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL modified: {ref}/timings.csv" in out or "FAIL modified:" in out
    assert f"expected sha256 {recorded}" in out
    assert f"actual   sha256 {sha256_file(ref / 'timings.csv')}" in out
    assert "FAIL not derived" in out and "step_time_s per-job" in out


def test_audit_fails_a_run_whose_crate_was_deleted(tmp_path, capsys):
    ref = _copy_reference(tmp_path)
    (ref / "ro-crate-metadata.json").unlink()
    report = audit.audit(ref)
    assert "missing RO-Crate" in {f.kind for f in report.failures}, report.text()
    assert audit.main([str(ref)]) == 1
    assert "FAIL missing RO-Crate" in capsys.readouterr().out


def test_audit_reports_missing_and_unrecorded_probe_records(tmp_path):
    ref = _copy_reference(tmp_path)
    manifest = json.loads((ref / "manifest.json").read_text())
    point = manifest["points"][0]["path"]
    probe = point.removesuffix(".csv") + ".probe.json"
    manifest["probes"] = [
        {"path": probe, "root": "workdir", "sha256": "0" * 64, "bytes": 2, "record": {}}
    ]
    (ref / "manifest.json").write_text(json.dumps(manifest))
    report = audit.audit(ref)
    kinds = {f.kind for f in report.failures}
    assert "missing probe record" in kinds, report.text()
    (ref / "points" / "extra.probe.json").write_text("{}")
    report = audit.audit(ref)
    assert "unrecorded probe record" in {f.kind for f in report.failures}


def test_audit_refuses_mixed_environments(tmp_path):
    ref = _copy_reference(tmp_path)
    df = pd.read_csv(ref / "timings.csv", dtype=str, keep_default_na=False)
    df.loc[0, "host"] = "another-host"
    df.to_csv(ref / "timings.csv", index=False)
    report = audit.audit(ref)
    assert "mixed environments" in {f.kind for f in report.failures}, report.text()


def test_audit_runs_the_collect_and_crossover_jobs_own_functions(tmp_path, monkeypatch):
    """The audit derives timings.csv and crossover.csv again through the very functions
    the workflow's collect and crossover scripts call, with the run's settings."""
    from crossover_study.analysis import crossover, tables

    ref = _copy_reference(tmp_path)
    manifest = json.loads((ref / "manifest.json").read_text())
    calls = []
    collect_study, write_crossover = tables.collect_study, crossover.write_crossover

    def spy_collect(csvs, probes, *args, **kw):
        calls.append(("collect", len(list(csvs)), probes, kw["merge_environments"]))
        return collect_study(csvs, probes, *args, **kw)

    def spy_crossover(timings, out, **kw):
        calls.append(("crossover", kw["n_boot"], kw["seed"]))
        return write_crossover(timings, out, **kw)

    monkeypatch.setattr(tables, "collect_study", spy_collect)
    monkeypatch.setattr(crossover, "write_crossover", spy_crossover)
    report = audit.audit(ref)
    assert report.ok, report.text()
    settings = manifest["config"]["resolved"]["crossover"]
    assert calls == [
        ("collect", len(manifest["points"]), None, False),  # recorded without probes
        ("crossover", settings["bootstrap"], settings["seed"]),
    ]


def test_audit_without_manifest_fails(tmp_path):
    assert audit.main([str(tmp_path)]) == 1


# ------------------------------------------------------- cross-machine comparison
def test_paper_cross_machine_figure_one_curve_per_run_and_device(tmp_path):
    """fig-6 from the committed CPU run and a SYNTHETIC GPU run (conftest): a panel per
    case, every run its own curves, labelled with the run's name and device_name."""
    synthetic = synthetic_reference_gpu(tmp_path / "reference").parent
    runs = [paper.load_reference(p) for p in (_reference(), synthetic)]
    fig = paper.draw("fig-6-cross-machine", runs)
    panels = [ax for ax in fig.axes if ax.get_lines()]
    assert len(panels) == 4  # the four cases, each measured by both runs
    xeon = "Intel(R) Xeon(R) Processor"
    expected_axes = {"s000-hjb": "batch", "s001-mlp": "d_in", "s002-iris": "batch"}
    expected_axes["s004-lstm"] = "units"  # ties go to the first axis; lstm swept units only
    for ax, case in zip(panels, expected_axes, strict=True):
        assert ax.get_title().startswith(f"{case}: step time vs {expected_axes[case]}")
        assert "cross-machine comparison" in ax.get_title()
        labels = [line.get_label() for line in ax.get_lines() if line.get_gid() == "step-time"]
        curves = {label.rsplit(" · ", 1)[0] for label in labels}
        assert curves == {
            f"{_reference().name}: cpu ({xeon})",
            f"reference-gpu: cpu ({SYNTHETIC_CPU_NAME})",
            f"reference-gpu: cuda ({SYNTHETIC_GPU_NAME})",
        }, case
        assert len(labels) == 3 * 2  # (run, device) x framework, none merged
        assert not [line for line in ax.get_lines() if line.get_gid() == "crossover"]
    plt.close(fig)
    written = paper.paper_figures(
        [_reference(), synthetic], tmp_path / "out", ["fig-6-cross-machine"]
    )
    recorded = figure_files.figure_sources(written[0])
    assert recorded["reference-gpu/timings.csv"] == sha256_file(synthetic / "timings.csv")
    assert f"{_reference().name}/timings.csv" in recorded


def _study_with_cross_machine_figure(tmp_path: Path):
    """A study folder whose report has one cross-machine figure, with its manifest:
    the committed CPU run's tables as this study's, beside a SYNTHETIC reference GPU run
    (conftest) under results/reference/. Returns (study results folder, figure PNG,
    the reference timings)."""
    from crossover_study.provenance.crate import CRATE_NAME, write_crate
    from crossover_study.provenance.inputs import reference_source_name
    from crossover_study.provenance.manifest import build_manifest, write_json

    work = tmp_path / "work"
    results = work / "results" / "mini"
    results.mkdir(parents=True)
    for table in ("timings.csv", "crossover.csv", "wall.json"):
        shutil.copy2(_reference() / table, results / table)
    reference = synthetic_reference_gpu(work / "results" / "reference")
    committed = load_manifest(_reference())
    fig, ax = plt.subplots(figsize=(7, 6.2), layout="constrained")
    curves = [
        ("this study", pd.read_csv(results / "timings.csv")),
        ("reference-gpu", pd.read_csv(reference)),
    ]
    figures.cross_machine_step_time(curves, "s001-mlp", "hidden", ax=ax)
    png = work / "reports" / "mini" / "figures" / "s001-mlp-cross-machine-hidden.png"
    sources = {
        "timings.csv": sha256_file(results / "timings.csv"),
        reference_source_name(reference): sha256_file(reference),
    }
    figure_files.save_figure(fig, png, formats=("svg", "pdf"), sources=sources)
    plt.close(fig)
    html = work / "reports" / "mini" / "report.html"
    html.write_text(
        f'<img src="data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()}">'
    )
    (html.parent / "report.ipynb").write_text("{}")
    manifest = build_manifest(
        study="mini",
        config=committed["config"]["resolved"],
        config_hash=committed["config"]["hash"],
        config_files=[REPO_ROOT / "config/studies/reference-cpu.yaml"],
        workdir=work,
        results_dir="results/mini",
        tables={
            t.split(".")[0]: f"results/mini/{t}"
            for t in ("timings.csv", "crossover.csv", "wall.json")
        },
        report={"html": "reports/mini/report.html", "notebook": "reports/mini/report.ipynb"},
        figures_dir="reports/mini/figures",
        snakemake_version=None,
        reference_tables=["results/reference/reference-gpu/timings.csv"],
    )
    write_json(manifest, results / "manifest.json")
    write_crate(manifest, work, results / CRATE_NAME, manifest_path=results / "manifest.json")
    return results, png, reference


def test_manifest_records_the_reference_tables_a_cross_machine_figure_used(tmp_path):
    results, png, reference = _study_with_cross_machine_figure(tmp_path)
    manifest = load_manifest(results)
    assert manifest["reference_tables"] == {
        "reference/reference-gpu/timings.csv": {
            "path": "results/reference/reference-gpu/timings.csv",
            "root": "workdir",
            "sha256": sha256_file(reference),
            "bytes": reference.stat().st_size,
        }
    }
    (record,) = [f for f in manifest["figures"] if f["path"].endswith(".png")]
    assert record["sources"] == figure_files.figure_sources(png)
    assert record["derived_from"] == [
        "results/mini/timings.csv",
        "results/reference/reference-gpu/timings.csv",
    ]
    report = audit.audit(results)
    assert report.ok, report.text()
    # The RO-Crate says the same: the figure is based on both runs' timings.
    from crossover_study.provenance.crate import build_crate

    crate = build_crate(manifest, results.parents[1])
    figure = crate.get("#workdir:reports/mini/figures/s001-mlp-cross-machine-hidden.png")
    based_on = {e.id for e in figure["isBasedOn"]}
    assert {"timings.csv", "#workdir:results/reference/reference-gpu/timings.csv"} <= based_on
    assert "crossover.csv" not in based_on  # not drawn from it
    table = crate.get("#workdir:results/reference/reference-gpu/timings.csv")
    assert table["identifier"] == f"sha256:{sha256_file(reference)}"


def test_audit_fails_a_cross_machine_figure_whose_reference_hash_differs(tmp_path, capsys):
    results, png, reference = _study_with_cross_machine_figure(tmp_path)
    recorded = sha256_file(reference)
    # Redraw the figure from another (edited) copy of the reference run's table.
    other = tmp_path / "other" / "reference-gpu" / "timings.csv"
    other.parent.mkdir(parents=True)
    edited = pd.read_csv(reference)
    edited["step_time_s"] *= 3
    edited.to_csv(other, index=False)
    sources = dict(figure_files.figure_sources(png))
    sources["reference/reference-gpu/timings.csv"] = sha256_file(other)
    fig, ax = plt.subplots(figsize=(7, 6.2), layout="constrained")
    curves = [("this study", pd.read_csv(results / "timings.csv")), ("reference-gpu", edited)]
    figures.cross_machine_step_time(curves, "s001-mlp", "hidden", ax=ax)
    figure_files.save_figure(fig, png, formats=("svg", "pdf"), sources=sources)
    plt.close(fig)
    assert audit.main([str(results)]) == 1
    out = capsys.readouterr().out
    assert "FAIL figure from other data" in out
    assert "drawn from a reference/reference-gpu/timings.csv that is not the recorded one" in out
    assert f"expected sha256 {recorded}" in out
    assert f"actual   sha256 {sha256_file(other)}" in out


def test_audit_fails_a_changed_or_unrecorded_reference_table(tmp_path):
    results, png, reference = _study_with_cross_machine_figure(tmp_path)
    # A figure naming a reference run the manifest never recorded.
    sources = {**figure_files.figure_sources(png), "reference/elsewhere/timings.csv": "0" * 64}
    fig, _ = plt.subplots()
    figure_files.save_figure(fig, png.with_suffix(".svg"), sources=sources)
    plt.close(fig)
    report = audit.audit(results)
    found = {(f.kind, f.message, f.expected) for f in report.failures}
    message = "drawn from a reference/elsewhere/timings.csv that is not the recorded one"
    assert ("figure from other data", message, None) in found, report.text()
    # The reference table itself edited after the report was drawn from it.
    reference.write_text(reference.read_text().replace("synthetic-gpu-host", "edited-host"))
    report = audit.audit(results)
    assert "modified reference table" in {f.kind for f in report.failures}, report.text()
    reference.unlink()
    report = audit.audit(results)
    assert "missing reference table" in {f.kind for f in report.failures}, report.text()


# ------------------------------------------------------------- the paper's command line
def test_paper_refuses_a_missing_reference_folder_in_one_line(tmp_path, capsys):
    status = freeze.main(["paper", "--reference", str(tmp_path / "none"), "--out", str(tmp_path)])
    assert status == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"paper: --reference {tmp_path / 'none'}: no such folder"]
    assert not list(tmp_path.glob("fig-*"))
    (tmp_path / "empty").mkdir()
    assert freeze.main(["paper", "--reference", str(tmp_path / "empty"), "--out", str(tmp_path)])
    assert "no reference run under" in capsys.readouterr().err
    assert not list(tmp_path.glob("fig-*"))


def test_paper_names_an_unknown_figure_and_the_known_ones(tmp_path, capsys):
    assert freeze.main(["paper", "fig-99", "--out", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("paper: unknown figure 'fig-99'; known: fig-1-s000-hjb-step-time")
    assert all(name in line for name in paper.PAPER_FIGURES)
    assert not list(tmp_path.iterdir())


def test_paper_leaves_out_a_reference_run_that_fails_its_audit(tmp_path, capsys):
    ref = _copy_reference(tmp_path)
    edited = ref.parent / "edited-copy"
    shutil.copytree(ref, edited)
    df = pd.read_csv(edited / "timings.csv", dtype=str, keep_default_na=False)
    df.loc[0, "step_time_s"] = str(float(df.loc[0, "step_time_s"]) / 2)
    df.to_csv(edited / "timings.csv", index=False)
    out = tmp_path / "paper"
    args = ["paper", "--reference", str(ref.parent), "--out", str(out), "fig-6-cross-machine"]
    assert freeze.main(args) == 0
    err = capsys.readouterr().err
    assert "paper: reference run edited-copy left out: it fails its audit" in err
    sources = figure_files.figure_sources(out / "fig-6-cross-machine.png")
    assert {name.split("/")[0] for name in sources} == {ref.name}
