"""The rates job (crossover_study.measure.rates_job): the machine's rates measured once per
framework and device, into one file that the measuring jobs read; and the workflow's
rates rule, which runs it before the measuring jobs of its framework and device."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from conftest import REPO_ROOT, run_snakemake

from crossover_study.core.files import sha256_file
from crossover_study.measure import device_probe, frameworks, rates_job
from crossover_study.measure.rates_job import read_rates
from crossover_study.stepmodel import rates as step_rates

#: Rates as step_rates.measure_rates returns them, made up (nothing timed).
FAKE = {
    "eager_op_s": {"median": 7e-6, "iqr": 1e-7, "blocks": [7e-6, 7.1e-6]},
    "flop_per_s": {"median": 3e10, "iqr": 1e9, "blocks": [3e10], "unit": "FLOP/s"},
    "mem_curve": {"bytes_per_op": [1e3, 1e6], "bytes_per_s": [2e9, 5e9]},
    "seconds": 0.25,
}

QUICK = {"min_block_s": 0.01, "blocks": 3, "max_warmup_s": 0.1, "max_point_s": 1.0}


def _no_timing(*args, **kwargs):
    raise AssertionError("the rates job timed something")


def test_a_device_not_visible_gives_available_false_and_times_nothing(tmp_path, monkeypatch):
    """cuda on a machine without a GPU: the file says so with the probe's reason; no
    rate is timed (never a CPU timing under the accelerator's name)."""
    monkeypatch.setattr(
        device_probe,
        "probe",
        lambda fw, device: device_probe.DeviceProbe(
            False, None, "no CUDA device visible to torch (test)", None, None, "none"
        ),
    )
    monkeypatch.setattr(step_rates, "measure_rates", _no_timing)
    monkeypatch.setattr(frameworks, "initialise_device", _no_timing)
    out = tmp_path / "rates" / "torch" / "cuda.json"
    lines = []
    record = rates_job.rates_job("torch", "cuda", 1, out, tmp_path / "rates.log", lines.append)
    written = json.loads(out.read_text())
    assert written == json.loads(json.dumps(record))
    assert written["available"] is False and written["rates"] is None
    assert written["reason"] == "no CUDA device visible to torch (test)"
    assert (written["framework"], written["device"], written["threads"]) == ("torch", "cuda", 1)
    assert written["probe"]["framework"] == "torch" and written["probe"]["device"] == "cuda"
    assert any("not measured: no CUDA device visible" in line for line in lines)
    assert "not measured" in (tmp_path / "rates.log").read_text()
    # a measuring job reading it keeps its rate columns empty and says why
    rates, said = read_rates(out, "torch", "cuda", 1)
    assert rates is None and "no CUDA device visible to torch (test)" in said


def test_a_framework_that_does_not_import_gives_available_false(tmp_path, monkeypatch):
    def no_import(*args, **kwargs):
        raise ImportError("No module named 'tensorflow' (test)")

    monkeypatch.setattr(frameworks, "import_framework", no_import)
    monkeypatch.setattr(step_rates, "measure_rates", _no_timing)
    # The probe record would import the (here importable) TensorFlow and start its
    # runtime, whose thread pools a later test of this process must still be able to set.
    monkeypatch.setattr(
        rates_job, "probe_record", lambda framework, device, threads: {"framework": framework}
    )
    record = rates_job.rates_job("tensorflow", "cpu", 1, tmp_path / "r.json")
    assert record["available"] is False and "tensorflow" in record["reason"]


def test_the_rates_file_holds_the_rates_their_spread_and_the_machine(tmp_path, monkeypatch):
    monkeypatch.setattr(
        step_rates, "measure_rates", lambda fw, device: json.loads(json.dumps(FAKE))
    )
    out = tmp_path / "cpu.json"
    rates_job.rates_job("torch", "cpu", 1, out)
    written = json.loads(out.read_text())
    assert written["available"] is True and written["rates_version"] == rates_job.RATES_VERSION
    assert written["seconds"] == 0.25 and written["wall_s"] > 0  # seconds: made up here
    assert written["rates"]["eager_op_s"] == FAKE["eager_op_s"]  # median, iqr, blocks
    assert "seconds" not in written["rates"]
    probe = written["probe"]
    assert probe["cpus"]["threads"] == 1 and probe["framework_version"]
    rates, said = read_rates(out, "torch", "cpu", 1)
    assert rates == FAKE and said == f"rates: from {out}"
    # rates of other threads are not this job's
    assert read_rates(out, "torch", "cpu", 2)[0] is None
    assert "not torch/cpu at 2" in read_rates(out, "torch", "cpu", 2)[1]
    assert read_rates(tmp_path / "none.json", "torch", "cpu", 1)[0] is None
    assert "no rates file given" in read_rates(None, "torch", "cpu", 1)[1]


def test_rates_of_the_same_key_are_reused_from_an_earlier_study_and_say_so(tmp_path, monkeypatch):
    """A second study on this machine copies the first one's rates (same key) instead of
    timing them, naming the file, its sha256 and when they were measured; another thread
    count, changed rate-measuring code or no reuse folder measures afresh."""
    monkeypatch.setattr(
        step_rates, "measure_rates", lambda fw, device: json.loads(json.dumps(FAKE))
    )
    results = tmp_path / "results"
    first = results / "one" / "rates" / "torch" / "cpu.json"
    rates_job.rates_job("torch", "cpu", 1, first, reuse_from=[results])
    measured = json.loads(first.read_text())
    assert len(measured["key"]) == 64 and "reused_from" not in measured
    monkeypatch.setattr(step_rates, "measure_rates", _no_timing)
    second = results / "two" / "rates" / "torch" / "cpu.json"
    lines = []
    rates_job.rates_job("torch", "cpu", 1, second, echo=lines.append, reuse_from=[results])
    reused = json.loads(second.read_text())
    assert reused["rates"] == measured["rates"] and reused["key"] == measured["key"]
    assert reused["reused_from"] == {
        "path": first.as_posix(),
        "sha256": sha256_file(first),
        "measured_utc": measured["probe"]["utc_time"],
    }
    assert any(f"reused from {first.as_posix()}" in line for line in lines)
    assert read_rates(second, "torch", "cpu", 1)[0] == FAKE  # a measuring job reads them
    # a copy is never copied again: a third study names the file that was measured
    third = results / "three" / "rates" / "torch" / "cpu.json"
    rates_job.rates_job("torch", "cpu", 1, third, reuse_from=[results])
    assert json.loads(third.read_text())["reused_from"]["path"] == first.as_posix()
    # other threads, other rate-measuring code, or reuse off: timed afresh (here the
    # timing fails on purpose, and the file says so)
    other = tmp_path / "other.json"
    for threads, code, reuse in ((2, None, [results]), (1, "changed", [results]), (1, None, [])):
        if code:
            monkeypatch.setattr(rates_job, "sha256_file", lambda path: "0" * 64)
        written = rates_job.rates_job("torch", "cpu", threads, other, reuse_from=reuse)
        assert "reused_from" not in written and "timed something" in written["error"]
        monkeypatch.setattr(rates_job, "sha256_file", sha256_file)


def test_the_command_line_refuses_bad_arguments_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        rates_job.main(["--framework", "torch", "--device", "gpu", "--threads", "1", "--out", "x"])
    assert exit_.value.code == 2 and "--device" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rates_job.main(["--framework", "torch", "--device", "cpu", "--out", "x"])
    assert "give --threads or --config" in capsys.readouterr().err


def test_a_measuring_job_writes_the_rates_files_rates_into_its_rows(tmp_path, monkeypatch):
    """measure_job reads the rates file: every row carries its medians
    (step_rates.row_columns) and the probe record its rates; without one the rate
    columns stay empty and the log says so. It times no rates itself."""
    from crossover_study.measure.job import measure_job

    rates_file = tmp_path / "rates.json"
    monkeypatch.setattr(
        step_rates, "measure_rates", lambda fw, device: json.loads(json.dumps(FAKE))
    )
    rates_job.rates_job("torch", "cpu", 1, rates_file)
    monkeypatch.setattr(step_rates, "measure_rates", _no_timing)
    study = {
        "study": "rates-read",
        "sweep": {"frameworks": ["torch"], "devices": ["cpu"], "variants": ["eager"]},
        "timing": QUICK,
        "cases": {"s001-mlp": {"axes": {"batch": [4], "d_in": [4], "hidden": [4]}}},
    }
    for name, given in (("with", rates_file), ("without", None)):
        out = {k: tmp_path / name / f"job.{k}" for k in ("csv", "probe", "journal", "log")}
        out["csv"].parent.mkdir()
        rows = measure_job(study, "s001-mlp", "torch", "cpu", 0, 1, *out.values(), rates=given)
        probe = json.loads(out["probe"].read_text())
        log = out["log"].read_text()
        assert rows and all(row["status"] == "ok" for row in rows)
        if given is None:
            assert all(row["rate_eager_op_s"] is None for row in rows)
            assert probe["rates"] is None and "rates: none (no rates file given)" in log
        else:
            assert all(row["rate_eager_op_s"] == 7e-6 for row in rows)
            assert all(row["rate_flop_per_s"] == 3e10 for row in rows)
            assert json.loads(rows[0]["rate_mem_curve"]) == [[1e3, 2e9], [1e6, 5e9]]
            assert probe["rates"]["eager_op_s"] == FAKE["eager_op_s"]
            assert f"rates: from {rates_file}" in log


def test_the_workflow_runs_a_rates_job_per_framework_and_device_before_its_jobs(tmp_path):
    """Dry run of the smoke study: one rates job per (framework, device) with measuring
    jobs, each measuring job reading its pair's file (ancient: ordered after it), and
    collect and the manifest taking every rates file."""
    smoke = yaml.safe_load((REPO_ROOT / "config/studies/smoke.yaml").read_text())
    study = smoke["study"]
    out = run_snakemake(
        tmp_path, "-n", "--configfile", str(REPO_ROOT / "config/studies/smoke.yaml")
    ).stdout
    pairs = {(f, d) for f in smoke["sweep"]["frameworks"] for d in smoke["sweep"]["devices"]}
    stats = dict(re.findall(r"^(\w+)\s+(\d+)$", out, re.MULTILINE))
    assert int(stats["rates"]) == len(pairs)
    blocks = re.split(r"\n(?=\[[^\]]+\]\n)|\n\n", out)
    for framework, device in pairs:
        rates = f"results/{study}/rates/{framework}/{device}.json"
        made = [b for b in blocks if "rule rates:" in b and f"output: {rates}" in b]
        assert len(made) == 1, rates
        assert f"log: logs/{study}/rates/{framework}/{device}.log" in made[0]
        readers = [
            b for b in blocks if "rule measure:" in b and f"/{framework}/{device}/batch-" in b
        ]
        assert readers and all(rates in b.split("output:")[0] for b in readers)
    for rule in ("collect", "manifest"):
        (block,) = [b for b in blocks if f"rule {rule}:" in b]
        assert all(f"results/{study}/rates/{f}/{d}.json" in block for f, d in pairs)
    collect = next(b for b in blocks if "rule collect:" in b)
    assert f"logs/{study}/benchmarks/rates/" in collect


def test_a_rates_job_gets_the_partition_and_resources_of_its_device_class(tmp_path):
    """Through the Slurm profile (no cluster): each rates job runs where its device
    class's measuring jobs run, with their GPUs (the getters read no case or batch)."""
    from conftest import slurm_dry_run

    config = yaml.safe_load((REPO_ROOT / "config/studies/smoke.yaml").read_text())
    config["sweep"] = {"frameworks": ["torch"], "devices": ["cpu", "cuda", "tpu"]}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(config))
    out = slurm_dry_run(tmp_path, path)
    jobs = re.findall(r"wildcards: framework=torch, device=(\w+)\n\s+resources: ([^\n]+)", out)
    assert sorted(device for device, _ in jobs) == ["cpu", "cuda", "tpu"], out[-3000:]
    for device, resources in jobs:
        res = dict(kv.split("=", 1) for kv in resources.split(", "))
        assert res["slurm_partition"] == {"cpu": "cpu", "cuda": "gpu", "tpu": "tpu"}[device]
        assert res.get("gpu") == ("1" if device == "cuda" else None)
        assert int(res["cpus_per_task"]) >= 1


def test_the_audit_notes_reused_rates_and_whether_their_source_changed(tmp_path):
    """A rates file copied from an earlier study is a note of the audit naming its source
    and when it was measured; a source changed or deleted since is said, never a failure
    (the copy holds the rates itself); measured rates give no note."""
    from crossover_study.audit.findings import AuditReport
    from crossover_study.audit.hashes import Layout, note_reused_rates

    source = tmp_path / "one.json"
    source.write_text('{"rates": {}}')
    copy = tmp_path / "two.json"

    def notes(reused_from) -> list[str]:
        copy.write_text(json.dumps({"rates": {}, "reused_from": reused_from}))
        report = AuditReport(tmp_path)
        note_reused_rates(report, Layout(tmp_path, None), copy)
        assert not report.failures
        return [f"{f.kind}: {f.message}" for f in report.findings]

    given = {"path": str(source), "sha256": sha256_file(source), "measured_utc": "T0"}
    assert notes(given) == [f"reused rates: copied from {source} (measured T0; unchanged)"]
    source.write_text('{"rates": {"x": 1}}')
    assert notes(given)[0].endswith("(measured T0; changed since)")
    source.unlink()
    assert notes(given)[0].endswith("(measured T0; no longer there)")
    assert notes(None) == []  # measured by the run itself
