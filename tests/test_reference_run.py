"""The GPU reference run's pieces on the CPU: the bundle's pins and preflight, the run
without Snakemake (jobs as processes, deadline, archive), the import (name from the
probes, crate, audit, refusals) and the rehearsal of the whole chain."""

import json
import re
import tarfile
import time

import pandas as pd
import pytest
import yaml

from crossover_study import gpu_bundle, reference_import, reference_run
from crossover_study.audit import audit

TINY = {
    "study": "tiny-reference",
    "sweep": {
        "frameworks": ["torch"],
        "devices": ["cpu", "cuda"],
        "variants": ["eager", "cuda_graph"],
        "timing": ["synced"],
    },
    "devices": {"cpu": {"threads": 1}, "cuda": {"threads": 1, "gpu": 1}},
    "timing": {
        "min_block_s": 0.005,
        "blocks": 3,
        "max_warmup_s": 0.05,
        "max_point_s": 0.5,
        "sync_check_s": 0.05,
    },
    "crossover": {"bootstrap": 100, "seed": 0},
    "cases": {"s001-mlp": {"axes": {"hidden": [32, 128]}}},
}


# --- the bundle ------------------------------------------------------------------------


def test_bundle_and_gpu_machine_packages_are_pinned_by_the_lock():
    locked = gpu_bundle.pins()
    for wanted in gpu_bundle.requirements(
        gpu_bundle.BUNDLE_PACKAGES + gpu_bundle.GPU_MACHINE_PACKAGES
    ):
        name, version = wanted.split("==")
        assert locked[name] == version
    # Nothing is both bundled and assumed present on the GPU machine.
    bundled = {n.lower() for n in gpu_bundle.BUNDLE_PACKAGES}
    assert not bundled & {n.lower() for n in gpu_bundle.GPU_MACHINE_PACKAGES}
    with pytest.raises(gpu_bundle.BundleError, match="not-a-package is not pinned"):
        gpu_bundle.requirements(["not-a-package"])


def test_every_required_module_is_on_the_machine_or_in_the_bundle():
    provided = {n.lower() for n in gpu_bundle.BUNDLE_PACKAGES + gpu_bundle.GPU_MACHINE_PACKAGES}
    assert {d.lower() for d in gpu_bundle.REQUIRED_MODULES.values()} <= provided


def test_missing_modules_names_the_module_and_what_to_install():
    missing = gpu_bundle.missing_modules({"json": "json", "jsonschemaa": "jsonschema"})
    assert len(missing) == 1
    assert missing[0].startswith("jsonschemaa (pip: jsonschema==4.26.0): ModuleNotFoundError")


def test_a_missing_bundle_says_how_to_make_one(tmp_path):
    assert not gpu_bundle.is_current(tmp_path)
    with pytest.raises(gpu_bundle.BundleError, match="run `make gpu-bundle`"):
        gpu_bundle.load_record(tmp_path)


# --- the run without Snakemake ----------------------------------------------------------


def test_jobs_run_case_by_case_gpu_first_other_frameworks_last():
    jobs = [
        ("s002-iris", "torch", "cpu", 0),
        ("s001-mlp", "tensorflow", "cuda", 0),
        ("s001-mlp", "torch", "cpu", 0),
        ("s000-hjb", "torch", "cuda", 0),
        ("s001-mlp", "torch", "cuda", 0),
    ]
    assert sorted(jobs, key=reference_run.job_order) == [
        ("s001-mlp", "torch", "cuda", 0),
        ("s001-mlp", "torch", "cpu", 0),
        ("s000-hjb", "torch", "cuda", 0),
        ("s002-iris", "torch", "cpu", 0),
        ("s001-mlp", "tensorflow", "cuda", 0),
    ]


def test_progress_counts_each_point_once(capsys):
    progress = reference_run.Progress(2, time.time())
    key = "s001-mlp|torch|cpu|eager|batch=64,d_in=1024,hidden=32"
    for line in (
        f"  {key}: measured again (run abc measured it with other threads)",
        f"  {key}: ok 0.001",
        f"  {key}: kept from run abc (ok)",  # a retried job's journal
        "probe: {...}",
    ):
        progress.line(line)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("  ") and "measured again" in out[0]  # not a result: no counter
    assert re.match(r"\[1/2 +\d+ s\] s001-mlp\|", out[1])
    assert re.match(r"\[1/2 +\d+ s\] .*kept from run", out[2])
    assert out[3] == "probe: {...}"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The tiny study measured by reference_run.run, as on the GPU machine (without a
    bundle: this interpreter has every module)."""
    tmp = tmp_path_factory.mktemp("reference")
    study = tmp / "tiny.yaml"
    study.write_text(yaml.safe_dump(TINY))
    archive = reference_run.run(study, tmp / "out", tmp / "work", bundle=None, budget_s=300)
    return tmp, archive


@pytest.mark.slow
def test_the_run_writes_a_study_layout_into_one_archive(tiny_run):
    tmp, archive = tiny_run
    assert archive.parent == tmp / "out" and archive.stat().st_size < 1024 * 1024
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    base = "results/tiny-reference"
    for name in (
        "timings.csv",
        "crossover.csv",
        "wall.json",
        "manifest.json",
        "config.resolved.yaml",
        "points/s001-mlp/torch/cpu/batch-0.csv",
        "points/s001-mlp/torch/cuda/batch-0.probe.json",
        "journal/s001-mlp/torch/cpu/batch-0.jsonl",
    ):
        assert f"{base}/{name}" in names
    assert "logs/tiny-reference/measure/s001-mlp/torch/cpu/batch-0.log" in names
    timings = pd.read_csv(tmp / "work" / base / "timings.csv")
    cpu = timings[timings["device"] == "cpu"]
    assert set(cpu.loc[cpu["variant"] == "eager", "status"]) == {"ok"}
    assert set(cpu.loc[cpu["variant"] == "cuda_graph", "status"]) == {"not_applicable"}
    assert set(timings.loc[timings["device"] == "cuda", "status"]) == {"unavailable"}
    manifest = json.loads((tmp / "work" / base / "manifest.json").read_text())
    assert manifest["report"] == {} and manifest["snakemake_version"] is None
    runner = manifest["runner"]
    assert [j["exit_status"] for j in runner["jobs"]] == [[0], [0]]
    assert runner["incomplete_jobs"] == []
    # Code is recorded by its place in the repository, results by their place in the run.
    assert {r["root"] for r in manifest["code"]} == {"repo"}
    assert {r["root"] for r in manifest["points"]} == {"workdir"}
    wall = json.loads((tmp / "work" / base / "wall.json").read_text())
    assert wall["measuring_jobs_wall_s"] > wall["measured_work_s"] > 0


@pytest.mark.slow
def test_points_past_the_deadline_are_unavailable_rows_that_say_so(tmp_path):
    study = tmp_path / "tiny.yaml"
    study.write_text(yaml.safe_dump(TINY))
    # A budget below the finishing reserve: the deadline has passed before the first job.
    archive = reference_run.run(study, tmp_path / "out", tmp_path / "work", None, budget_s=10)
    timings = pd.read_csv(tmp_path / "work" / "results" / "tiny-reference" / "timings.csv")
    measurable = timings[timings["status"] != "not_applicable"]
    assert set(measurable["status"]) == {"unavailable"}
    cpu = measurable[measurable["device"] == "cpu"]
    assert cpu["message"].str.contains("not measured: the run's deadline").all()
    assert archive.is_file()


# --- the import ---------------------------------------------------------------------------


def write_probe(folder, gpus_end=(), gpus=(), cpus=16):
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "gpus": list(gpus),
        "cpus": {"os_cpu_count": cpus},
        "gpu_state": {"end": {"gpus": [{"name": n} for n in gpus_end]}},
    }
    (folder / "batch-0.probe.json").write_text(json.dumps(record))


def test_the_reference_name_comes_from_the_probes(tmp_path):
    (tmp_path / "manifest.json").write_text(
        json.dumps({"manifest_version": 1, "created_utc": "2026-12-01T10:00:00+00:00"})
    )
    write_probe(tmp_path / "points" / "a" / "torch" / "cpu")
    assert reference_import.run_name(tmp_path) == "cpu-16core-2026-12-01"
    write_probe(tmp_path / "points" / "a" / "torch" / "cuda", gpus=["cuda:0 NVIDIA H200"])
    assert reference_import.run_name(tmp_path) == "h200-2026-12-01"
    write_probe(tmp_path / "points" / "a" / "torch" / "cuda", gpus_end=["NVIDIA H100 80GB HBM3"])
    assert reference_import.run_name(tmp_path) == "h100-80gb-hbm3-2026-12-01"


def test_an_archive_with_a_path_outside_its_folder_is_refused(tmp_path):
    evil = tmp_path / "evil.txt"
    evil.write_text("x")
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(evil, arcname="../../escaped.txt")
    with pytest.raises(reference_import.ArchiveError, match="cannot unpack"):
        reference_import.import_archive(archive, tmp_path / "ref")
    assert not (tmp_path / "ref").exists()


def test_an_archive_without_a_run_is_refused(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a run")
    archive = tmp_path / "empty.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(notes, arcname="results/x/notes.txt")
    with pytest.raises(reference_import.ArchiveError, match="expected one results/<study>/"):
        reference_import.import_archive(archive, tmp_path / "ref")


@pytest.mark.slow
def test_an_archive_imports_audited_with_its_crate_and_not_twice(tiny_run, tmp_path):
    _, archive = tiny_run
    dest = reference_import.import_archive(archive, tmp_path / "ref", log=lambda _: None)
    assert dest.name.startswith("cpu-") and dest.parent == tmp_path / "ref"
    assert (dest / "ro-crate-metadata.json").is_file()
    report = audit(dest)
    assert report.ok, report.text()
    with pytest.raises(FileExistsError):
        reference_import.import_archive(archive, tmp_path / "ref", log=lambda _: None)


@pytest.mark.slow
def test_an_archive_whose_table_was_edited_is_not_imported(tiny_run, tmp_path):
    _, archive = tiny_run
    work = tmp_path / "unpacked"
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    timings = work / "results" / "tiny-reference" / "timings.csv"
    timings.write_text(timings.read_text().replace(",ok,", ",error,", 1))
    forged = tmp_path / "forged.tar.gz"
    with tarfile.open(forged, "w:gz") as tar:
        for folder in ("results", "logs"):
            tar.add(work / folder, arcname=folder)
    with pytest.raises(ValueError, match="fails its audit"):
        reference_import.import_archive(forged, tmp_path / "ref", log=lambda _: None)
    assert not (tmp_path / "ref").exists()


# --- the rehearsal --------------------------------------------------------------------------


@pytest.mark.slow
def test_the_rehearsal_passes_on_a_fresh_clone(tmp_path):
    """make reference-gpu REHEARSE=1: a throwaway env of what the GPU machine has, the
    bundle, the short study, the archive imported, audited and drawn by snakemake paper."""
    from crossover_study.rehearsal import rehearse

    lines = []
    result = rehearse(log=lines.append)
    assert re.fullmatch(r"rehearsal ok: \d+ rows, bundle \d+\.\d MiB, \d+ s", lines[-1])
    assert result["rows"] > 0 and result["bundle_mib"] <= 40
    text = "\n".join(lines)
    assert "tensorflow cannot be imported by this Python" in text  # as on the GPU machine
    assert "no CUDA device visible to torch" in text


def test_a_job_past_its_timeout_is_killed(capsys):
    progress = reference_run.Progress(1, time.time())
    script = "import time; print('started', flush=True); time.sleep(60)"
    code, seconds = reference_run._run_job(
        [reference_run.sys.executable, "-c", script], dict(reference_run.os.environ), 1.0, progress
    )
    assert code == -9 and seconds < 30
    assert "killed after 1 s" in capsys.readouterr().out


@pytest.mark.slow
def test_a_job_that_dies_keeps_its_measured_points(tmp_path, monkeypatch):
    """A job whose process dies after journaling its points (twice: the retry too) is
    run once more with the deadline passed: its table comes from its journal."""
    real = reference_run._run_job
    calls = []

    def dying(cmd, env, timeout, progress):
        code, seconds = real(cmd, env, timeout, progress)
        cpu_job = "--device=cpu" in cmd and "--deadline=0" not in cmd
        calls.append(("cpu" if cpu_job else "other", code))
        if cpu_job:  # the process "died" before writing its table
            csv = next(a.split("=", 1)[1] for a in cmd if a.startswith("--csv="))
            reference_run.Path(csv).unlink()
            return 1, seconds
        return code, seconds

    monkeypatch.setattr(reference_run, "_run_job", dying)
    study = tmp_path / "tiny.yaml"
    study.write_text(yaml.safe_dump(TINY))
    reference_run.run(study, tmp_path / "out", tmp_path / "work", None, budget_s=300)
    assert [c for c in calls if c[0] == "cpu"] == [("cpu", 0), ("cpu", 0)]  # and retried
    results = tmp_path / "work" / "results" / "tiny-reference"
    timings = pd.read_csv(results / "timings.csv")
    cpu = timings[(timings["device"] == "cpu") & (timings["variant"] == "eager")]
    assert set(cpu["status"]) == {"ok"} and cpu["run_id"].nunique() == 1
    jobs = json.loads((results / "manifest.json").read_text())["runner"]["jobs"]
    cpu_job = next(j for j in jobs if "/cpu/" in j["job"])
    assert cpu_job["exit_status"] == [1, 1] and cpu_job["salvaged_from_journal"] is True
