"""Cases of your own end to end (issue 13): a small study of the two examples through
Snakemake, its report sections, its provenance and audit, and its Slurm routing."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import OWN_MODELS, run_snakemake, slurm_dry_run

from crossover_study.analysis.tables import read_timings
from crossover_study.core.paths import REPO_ROOT


@pytest.fixture(scope="module")
def own_tiny(tmp_path_factory):
    """own-models.yaml cut down to a minute: both example plug-ins, copied into the
    working directory (so their stored paths are relative to it), at two sizes each,
    with one factor and one remedy per framework, on cpu and (not visible: unavailable)
    cuda. Returns ``(workdir, config)``."""
    workdir = tmp_path_factory.mktemp("own")
    config = yaml.safe_load(OWN_MODELS.read_text())
    config["study"] = "own-tiny"
    config["sweep"]["variants"] = ["eager", "read_loss_every_1000", "xla", "cuda_graph"]
    config["sweep"]["timing"] = ["synced"]
    config["timing"] = {"min_block_s": 0.02, "blocks": 3, "max_warmup_s": 0.2, "max_point_s": 2}
    config["crossover"]["bootstrap"] = 200
    plugins = workdir / "plugins"
    plugins.mkdir()
    for name, axes in (("digits-cnn", {"batch": [8, 32]}), ("digits-keras-fit", {"batch": [256]})):
        case = config["cases"][name]
        source = REPO_ROOT / case["workload"]
        shutil.copy(source, plugins / source.name)
        case["workload"] = f"plugins/{source.name}"  # relative to the study file's folder
        case["axes"] = axes
        case.pop("grid", None)
    config["cases"]["digits-keras-fit"]["seed"] = {"batch": 256, "units": 8}
    study = workdir / "own-tiny.yaml"
    study.write_text(yaml.safe_dump(config, sort_keys=False))
    run_snakemake(workdir, "--configfile", str(study))
    return workdir, config


@pytest.mark.slow
def test_both_examples_are_measured_and_answered(own_tiny):
    workdir, config = own_tiny
    timings = read_timings(workdir / "results/own-tiny/timings.csv")  # the whole rows
    assert set(timings["case"]) == {"digits-cnn", "digits-keras-fit"}
    # Each case in its own framework, its own axes as columns, format 3.
    assert set(zip(timings["case"], timings["framework"], strict=True)) == {
        ("digits-cnn", "torch"),
        ("digits-keras-fit", "tensorflow"),
    }
    assert {"channels", "units"} <= set(timings.columns)
    assert set(timings["format_version"]) == {3}
    cpu = timings[timings["device"] == "cpu"].set_index(["case", "variant", "batch"])
    assert cpu.loc[("digits-cnn", "eager", 8), "status"] == "ok"
    assert cpu.loc[("digits-cnn", "read_loss_every_1000", 32), "status"] == "ok"
    assert cpu.loc[("digits-keras-fit", "xla", 256), "status"] == "ok"
    assert cpu.loc[("digits-cnn", "cuda_graph", 32), "status"] == "not_applicable"
    # The accelerator is never timed on the CPU under its name.
    assert set(timings.loc[timings["device"] == "cuda", "status"]) <= {
        "unavailable",
        "not_applicable",
    }
    # Every row names its plug-in file (relative to the working directory) and sha256.
    files = dict(zip(timings["case"], timings["workload_file"], strict=True))
    assert files == {
        "digits-cnn": "plugins/digits_cnn.py",
        "digits-keras-fit": "plugins/digits_keras_fit.py",
    }
    html = (workdir / "reports/own-tiny/report.html").read_text()
    for name in ("digits-cnn", "digits-keras-fit"):
        question = config["cases"][name]["question"]
        assert f"{name} — {question}" in html
    assert "At the seed's size (batch=32, channels=16) the CPU takes" in html
    figures = {p.name for p in (workdir / "reports/own-tiny/figures").glob("*.png")}
    assert "digits-cnn-step-time-batch.png" in figures


@pytest.mark.slow
def test_manifest_crate_and_audit_hold_the_plugin_files(own_tiny, tmp_path):
    workdir, _ = own_tiny
    manifest = json.loads((workdir / "results/own-tiny/manifest.json").read_text())
    plugins = {r["case"]: r for r in manifest["plugins"]}
    assert plugins["digits-cnn"]["root"] == "workdir"
    assert plugins["digits-cnn"]["path"] == "plugins/digits_cnn.py"
    crate = (workdir / "results/own-tiny/ro-crate-metadata.json").read_text()
    assert "#workdir:plugins/digits_cnn.py" in crate
    audit = [sys.executable, "-m", "crossover_study", "audit"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    copy = tmp_path / "w"
    shutil.copytree(workdir, copy)
    ok = subprocess.run(
        [*audit, "results/own-tiny"], cwd=copy, capture_output=True, text=True, env=env, timeout=600
    )
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-2000:]
    plugin = copy / "plugins/digits_cnn.py"
    plugin.write_text(plugin.read_text().replace("lr=1e-3", "lr=1e-2"))
    changed = subprocess.run(
        [*audit, "results/own-tiny"], cwd=copy, capture_output=True, text=True, env=env, timeout=600
    )
    assert changed.returncode != 0
    assert "plug-in changed since the run" in changed.stdout and "digits_cnn.py" in changed.stdout


@pytest.mark.slow
def test_a_frozen_run_keeps_its_plugins_and_audits_ok(own_tiny, tmp_path):
    """freeze copies the plug-in files of a study's own cases under plugins/ of the
    frozen run, whose audit then finds them there (it failed 'plug-in not found'); an
    edited copy fails its audit."""
    from crossover_study.audit.verify import audit
    from crossover_study.reference.freeze import freeze

    workdir, _ = own_tiny
    dest = tmp_path / "reference" / "own-tiny-frozen"
    written = freeze(workdir / "results/own-tiny", dest)
    copy = dest / "plugins" / "plugins" / "digits_cnn.py"
    assert copy in written and copy.read_bytes() == (workdir / "plugins/digits_cnn.py").read_bytes()
    report = audit(dest)
    assert report.ok, report.text()
    copy.write_text(copy.read_text().replace("lr=1e-3", "lr=1e-2"))
    edited = audit(dest)
    assert not edited.ok
    assert "plug-in changed since the run" in edited.text()


@pytest.mark.slow
def test_plugin_jobs_go_to_their_device_class_partition(tmp_path):
    """A dry run through the Slurm profile: the examples' measuring jobs get the
    partition and GPUs of their device class, as the seeds' do."""
    config = yaml.safe_load(OWN_MODELS.read_text())
    path = tmp_path / "study.yaml"
    for case in config["cases"].values():
        case["workload"] = str(REPO_ROOT / case["workload"])
    path.write_text(yaml.safe_dump(config))
    out = slurm_dry_run(tmp_path, path)
    jobs = re.findall(
        r"wildcards: case=(digits-\S+), framework=(\w+), device=(\w+), batch=0\n\s+"
        r"resources: ([^\n]+)",
        out,
    )
    assert {(c, f, d) for c, f, d, _ in jobs} == {
        ("digits-cnn", "torch", "cpu"),
        ("digits-cnn", "torch", "cuda"),
        ("digits-keras-fit", "tensorflow", "cpu"),
        ("digits-keras-fit", "tensorflow", "cuda"),
    }
    for _, _, device, resources in jobs:
        res = dict(kv.split("=", 1) for kv in resources.split(", "))
        assert res["slurm_partition"] == {"cpu": "cpu", "cuda": "gpu"}[device]
        assert res.get("gpu") == ("1" if device == "cuda" else None)
