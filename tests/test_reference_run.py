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

from crossover_study.analysis.tables import read_timings
from crossover_study.audit.verify import audit
from crossover_study.core.paths import pins
from crossover_study.measure import launch
from crossover_study.reference import archive_import as reference_import
from crossover_study.reference import gpu_bundle
from crossover_study.reference import gpu_finish as reference_finish
from crossover_study.reference import gpu_run as reference_run
from crossover_study.reference.gpu_jobs import job_order

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
    locked = pins()
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
    assert sorted(jobs, key=job_order) == [
        ("s001-mlp", "torch", "cuda", 0),
        ("s001-mlp", "torch", "cpu", 0),
        ("s000-hjb", "torch", "cuda", 0),
        ("s002-iris", "torch", "cpu", 0),
        ("s001-mlp", "tensorflow", "cuda", 0),
    ]


def test_progress_counts_each_point_once(capsys):
    progress = launch.Progress(2, time.time())
    key = "s001-mlp|torch|cpu|eager|batch=64,d_in=1024,hidden=32"
    point = "[s001-mlp torch cpu · 1/1] eager synced batch=64 d_in=1024 hidden=32"
    for line in (
        f"  {key}: measured again (run abc measured it with other threads)",
        f"{point}: ok 1.00 ms/step (IQR 2%)",
        f"{point}: kept from run abc: ok 1.00 ms/step (IQR 2%)",  # a retried job's journal
        "probe: {...}",
    ):
        progress.line(line)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("  ") and "measured again" in out[0]  # not a result: no counter
    assert re.match(r"\[1/2 +\d+ s\] \[s001-mlp torch cpu · 1/1\] eager ", out[1])
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
def test_jobs_past_the_deadline_are_not_started_and_their_rows_say_so(tmp_path):
    study = tmp_path / "tiny.yaml"
    study.write_text(yaml.safe_dump(TINY))
    # A budget below the grace and the finishing reserve: the deadline has passed
    # before the first job, so none is started, and the run still ends with an archive.
    started = time.time()
    archive = reference_run.run(study, tmp_path / "out", tmp_path / "work", None, budget_s=10)
    assert time.time() - started < 60
    results = tmp_path / "work" / "results" / "tiny-reference"
    timings = pd.read_csv(results / "timings.csv")
    measurable = timings[timings["status"] != "not_applicable"]
    assert set(measurable["status"]) == {"unavailable"}
    assert measurable["message"].str.contains("passed before this job started").all()
    probe = json.loads((results / "points/s001-mlp/torch/cpu/batch-0.probe.json").read_text())
    assert probe["job_started"] is False
    runner = json.loads((results / "manifest.json").read_text())["runner"]
    assert [j["started"] for j in runner["jobs"]] == [False, False]
    assert archive.is_file() and not (tmp_path / "out" / "partial-tiny-reference.tar.gz").exists()


def test_points_past_the_deadline_inside_a_job_are_unavailable_rows(tmp_path, monkeypatch):
    from crossover_study.measure import frameworks
    from crossover_study.measure.runner import GroupSpec, run_group
    from crossover_study.study.points import TimingPolicy
    from crossover_study.study.spec import PointSpec

    initialised = []
    monkeypatch.setattr(
        frameworks, "initialise_device", lambda *a, **k: initialised.append(a) or 0.0
    )
    point = PointSpec("s001-mlp", "torch", "cpu", "eager", {"batch": 8, "d_in": 8, "hidden": 8})
    group = GroupSpec("s001-mlp", "torch", "cpu", (point,), 1, TimingPolicy(), "skip", "h")
    rows = run_group(
        group, tmp_path / "j", tmp_path / "o.csv", log=lambda _: None, deadline=time.time() - 1
    )
    assert rows[0]["status"] == "unavailable"
    assert "deadline" in rows[0]["message"] and "passed before this point" in rows[0]["message"]
    assert initialised == []  # nothing to measure: the device is not initialised


def fake_bundle(folder, versions=("3.12", "3.11"), pins=None):
    """A bundle folder with stand-in wheels (a few bytes each) named as pip names them."""
    wheels = folder / "wheels"
    wheels.mkdir(parents=True)
    pins = pins or gpu_bundle.requirements(gpu_bundle.BUNDLE_PACKAGES)
    entries = []
    for pin in pins:
        name, version = pin.split("==")
        stem = f"{gpu_bundle._normalise(name)}-{version}"
        if name in ("attrs", "jsonschema"):
            files = [f"{stem}-py3-none-any.whl"]
        else:
            tags = [f"cp{v.replace('.', '')}" for v in versions]
            files = [f"{stem}-{t}-{t}-manylinux_2_17_x86_64.whl" for t in tags]
        for file in files:
            (wheels / file).write_bytes(file.encode())
            entries.append({"file": file, "sha256": gpu_bundle._sha256(wheels / file)})
    record = {"packages": pins, "python_versions": list(versions), "wheels": entries}
    (folder / "bundle.json").write_text(json.dumps(record))
    return folder


def test_a_bundle_problem_is_named_before_anything_is_installed(tmp_path):
    good = fake_bundle(tmp_path / "good")
    assert gpu_bundle.problems(good, for_python="3.11") == []
    # Only wheels for this machine's Python: the GPU machine (3.12) could not install it.
    only_311 = fake_bundle(tmp_path / "only311", versions=("3.11",))
    found = gpu_bundle.problems(only_311, for_python="3.11")
    assert "no wheel of rpds-py==2026.9.1 for Python 3.12" in found
    # A wheel removed, a wheel changed, pins that are not the lock's.
    (good / "wheels" / "attrs-26.1.0-py3-none-any.whl").unlink()
    (good / "wheels" / "jsonschema-4.26.0-py3-none-any.whl").write_bytes(b"x")
    found = gpu_bundle.problems(good)
    assert "wheel attrs-26.1.0-py3-none-any.whl is missing" in found
    assert any("jsonschema-4.26.0-py3-none-any.whl changed" in f for f in found)
    stale = fake_bundle(tmp_path / "stale", pins=["jsonschema==4.0.0"])
    assert any("pins differ from requirements.lock" in f for f in gpu_bundle.problems(stale))
    with pytest.raises(gpu_bundle.BundleError, match=r"cannot be used here(.|\n)*make gpu-bundle"):
        reference_run.prepare(stale)


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


def archive_of(archive, path, arcname):
    """A tar.gz ``archive`` holding the one file (or link) ``path`` as ``arcname``."""
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(path, arcname=arcname)
    return archive


def test_an_archive_with_a_path_outside_its_folder_is_refused(tmp_path):
    evil = tmp_path / "evil.txt"
    evil.write_text("x")
    archive = archive_of(tmp_path / "evil.tar.gz", evil, "../../escaped.txt")
    with pytest.raises(reference_import.ArchiveError, match="leaves its folder"):
        reference_import.import_archive(archive, tmp_path / "ref")
    assert not (tmp_path / "ref").exists()


def test_an_archive_without_a_run_is_refused(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a run")
    archive = archive_of(tmp_path / "empty.tar.gz", notes, "results/x/notes.txt")
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
    with pytest.raises(FileExistsError, match="already imported as"):
        reference_import.import_archive(archive, tmp_path / "ref", name="other", log=print)


def test_an_archive_with_a_link_is_refused(tmp_path):
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "link").symlink_to("file.txt")
    archive = archive_of(tmp_path / "links.tar.gz", tmp_path / "link", "results/x/link")
    with pytest.raises(reference_import.ArchiveError, match="holds links"):
        reference_import.import_archive(archive, tmp_path / "ref")


@pytest.mark.slow
def test_a_partial_archive_of_a_killed_run_is_finished_elsewhere(tiny_run, tmp_path):
    tmp, _ = tiny_run
    work = tmp / "work"
    results = work / "results" / "tiny-reference"
    partial = tmp_path / "partial-tiny-reference.tar.gz"
    # What a run killed after its jobs leaves: tables, probes, journals, runner record,
    # no timings.csv, crossover.csv or manifest.
    finished = ("timings.csv", "crossover.csv", "manifest.json")
    with tarfile.open(partial, "w:gz") as tar:
        for path in sorted(results.rglob("*")):
            if path.is_file() and path.name not in finished:
                tar.add(path, arcname=path.relative_to(work).as_posix())
        tar.add(work / "logs", arcname="logs")
    archive = reference_finish.finish_partial(partial, tmp_path / "out")
    dest = reference_import.import_archive(archive, tmp_path / "ref", log=lambda _: None)
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["runner"]["finished_from_partial"]["archive"] == partial.name
    assert pd.read_csv(dest / "timings.csv").equals(pd.read_csv(results / "timings.csv"))


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
    from crossover_study.reference.rehearsal import rehearse

    lines = []
    result = rehearse(log=lines.append)
    assert re.fullmatch(r"rehearsal ok: \d+ rows, bundle \d+\.\d MiB, \d+ s", lines[-1])
    assert result["rows"] > 0 and result["bundle_mib"] <= 40
    text = "\n".join(lines)
    assert "tensorflow cannot be imported by this Python" in text  # as on the GPU machine
    assert "no CUDA device visible to torch" in text


def test_a_job_past_its_timeout_is_killed(capsys):
    progress = launch.Progress(1, time.time())
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
        measuring = "measure-job" in cmd  # not the rates job
        cpu_job = measuring and "--device=cpu" in cmd and "--deadline=0" not in cmd
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
    # Started MAX_ATTEMPTS + 1 times, each time keeping the journal's points.
    assert [c for c in calls if c[0] == "cpu"] == [("cpu", 0)] * 3
    results = tmp_path / "work" / "results" / "tiny-reference"
    timings = read_timings(results / "timings.csv")  # the whole rows (run_id: environment.csv)
    cpu = timings[(timings["device"] == "cpu") & (timings["variant"] == "eager")]
    assert set(cpu["status"]) == {"ok"} and cpu["run_id"].nunique() == 1
    jobs = json.loads((results / "manifest.json").read_text())["runner"]["jobs"]
    cpu_job = next(j for j in jobs if "/cpu/" in j["job"])
    assert cpu_job["exit_status"] == [1, 1, 1] and cpu_job["salvaged_from_journal"] is True
