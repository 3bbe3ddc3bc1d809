"""The runner: journal and resume, failures recorded per point, missing devices."""

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from crossover_study.core import errors
from crossover_study.core.origin import table_columns
from crossover_study.core.paths import REPO_ROOT
from crossover_study.measure import frameworks, runner
from crossover_study.measure import point as point_measure
from crossover_study.measure.journal import Journal
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study.points import TimingPolicy
from crossover_study.study.spec import PointSpec
from crossover_study.workloads import UNSYNCED_ON_CPU

SEED = {"batch": 64, "d_in": 1024, "hidden": 128}


def mlp_group(device="cpu", hidden=(128, 256), missing="skip", framework="torch"):
    pts = tuple(
        PointSpec("s001-mlp", framework, device, "eager", {**SEED, "hidden": h}) for h in hidden
    )
    policy = TimingPolicy(min_block_s=0.01, n_blocks=3, max_warmup_s=0.1, max_point_s=1)
    return GroupSpec("s001-mlp", framework, device, pts, 1, policy, missing, "testhash")


def test_rows_have_documented_columns_units_and_provenance(tmp_path):
    rows = run_group(mlp_group(), tmp_path / "j.jsonl", tmp_path / "out.csv", log=lambda _: None)
    df = pd.read_csv(tmp_path / "out.csv")
    assert list(df.columns) == list(table_columns("timings"))
    assert list(df["status"]) == ["ok", "ok"]
    assert list(df["hidden"]) == [128, 256]
    for row in rows:
        blocks = json.loads(row["block_step_times_s"])
        assert len(blocks) == row["n_blocks"] >= 3
        assert min(blocks) <= row["step_time_s"] <= max(blocks)
        # Seconds per step of a small CPU MLP: between a microsecond and a second.
        assert 1e-6 < row["step_time_s"] < 1.0
        assert row["cold_start_s"] >= row["device_init_s"] > 0
        assert row["import_s"] > 0 and row["threads"] == 1
        assert row["loss_read_every"] == 1000 and row["steps_per_call"] == 1
        assert row["config_hash"] == "testhash" and len(row["git_commit"]) >= 7
        assert row["device_name"] and row["cpu_model"] and row["framework_version"]
        # The host load beside the timed blocks (read outside them), as the load average
        # when the point finished; other work's CPUs when the window was long enough.
        assert row["host_load_start"] >= 0 and row["host_load_end"] >= 0
        assert row["host_load_1m"] >= 0
        others = row["host_cpus_others"]
        assert others is None or 0 <= others <= os.cpu_count() + 1


def test_rerun_keeps_measured_points_and_measures_only_new_ones(tmp_path, monkeypatch):
    journal, out = tmp_path / "j.jsonl", tmp_path / "out.csv"
    first = run_group(mlp_group(hidden=(128,)), journal, out, log=lambda _: None)
    calls = []
    original = point_measure.measure_point

    def counting(point, *args):
        calls.append(point.sizes["hidden"])
        return original(point, *args)

    monkeypatch.setattr(runner, "measure_point", counting)
    second = run_group(mlp_group(hidden=(128, 256)), journal, out, log=lambda _: None)
    assert calls == [256]
    assert second[0] == first[0]  # kept verbatim, run_id included
    assert second[1]["run_id"] != first[0]["run_id"]


def test_a_row_measured_under_other_threads_or_timing_is_measured_again(tmp_path, monkeypatch):
    import dataclasses

    journal, out = tmp_path / "j.jsonl", tmp_path / "out.csv"
    first = run_group(mlp_group(hidden=(128,)), journal, out, log=lambda _: None)
    calls, said = [], []
    original = point_measure.measure_point

    def counting(point, *args):
        calls.append(point.sizes["hidden"])
        return original(point, *args)

    monkeypatch.setattr(runner, "measure_point", counting)
    same = mlp_group(hidden=(128,))
    for changed in (
        dataclasses.replace(same, threads=2),
        dataclasses.replace(same, policy=dataclasses.replace(same.policy, min_block_s=0.02)),
    ):
        assert changed.settings() != same.settings()
        again = run_group(changed, journal, out, log=said.append)
        assert again[0]["run_id"] != first[0]["run_id"]
    assert calls == [128, 128]
    assert any("measured again" in line and first[0]["run_id"] in line for line in said)
    # Back to the last settings: kept, not measured a third time.
    run_group(
        dataclasses.replace(same, policy=dataclasses.replace(same.policy, min_block_s=0.02)),
        journal,
        out,
        log=said.append,
    )
    assert calls == [128, 128]


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    real = frameworks.workload_class("torch", "s001-mlp")

    class Broken(real):
        def run(self, n_steps):
            if self.sizes["hidden"] == 128:
                raise RuntimeError("boom at hidden 128")
            super().run(n_steps)

    monkeypatch.setattr(frameworks, "workload_class", lambda *_: Broken)
    rows = run_group(mlp_group(), tmp_path / "j.jsonl", tmp_path / "o.csv", log=lambda _: None)
    assert rows[0]["status"] == "error" and "boom at hidden 128" in rows[0]["message"]
    assert rows[1]["status"] == "ok" and rows[1]["step_time_s"] > 0
    # An error is final: a rerun does not try the point again.
    journal = Journal(tmp_path / "j.jsonl", mlp_group().settings())
    assert journal.final_row(mlp_group().points[0].key())["status"] == "error"


@pytest.mark.parametrize(
    "exc, expected",
    [
        (MemoryError(), True),
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
        (type("OutOfMemoryError", (RuntimeError,), {})("x"), True),
        (type("ResourceExhaustedError", (Exception,), {})("OOM when allocating"), True),
        (ValueError("shapes do not match"), False),
    ],
)
def test_oom_is_told_apart_from_other_errors(exc, expected):
    assert frameworks.is_oom(exc) is expected


def test_missing_device_skip_gives_unavailable_rows_never_cpu_timings(tmp_path):
    rows = run_group(
        mlp_group("cuda"), tmp_path / "j.jsonl", tmp_path / "o.csv", log=lambda _: None
    )
    assert [r["status"] for r in rows] == ["unavailable", "unavailable"]
    assert all("no CUDA device visible to torch" in r["message"] for r in rows)
    assert all(r.get("step_time_s") is None for r in rows)
    assert all(r["device"] == "cuda" and r["device_name"] is None for r in rows)
    # Unavailable is not final: a rerun (on a machine with the device) measures it.
    key = mlp_group("cuda").points[0].key()
    journal = Journal(tmp_path / "j.jsonl", mlp_group("cuda").settings())
    assert journal.done[key]["status"] == "unavailable"
    assert journal.final_row(key) is None


def test_missing_device_fail_stops_before_measuring(tmp_path):
    with pytest.raises(errors.DeviceMissingError, match="'cuda' was asked for .* not visible"):
        run_group(mlp_group("cuda", missing="fail"), tmp_path / "j.jsonl", tmp_path / "o.csv")
    assert not (tmp_path / "o.csv").exists()


def test_journal_ignores_a_torn_last_line(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_text(
        json.dumps({"event": "done", "key": "a", "row": {"status": "ok"}}) + "\n" + '{"event": "do'
    )
    journal = Journal(path)
    assert journal.final_row("a") == {"status": "ok"}


#: What faulthandler writes into the journal when the step crashes its process
#: (Journal.recording_crashes), as Python 3.11 writes it.
SEGFAULT_REPORT = (
    "Fatal Python error: Segmentation fault\n\n"
    "Current thread 0x00007f0000000000 (most recent call first):\n"
    '  File "/x/workload.py", line 12 in run\n\n'
    "Extension modules: numpy.core._multiarray_umath (total: 1)\n"
)


def test_a_point_killed_from_outside_twice_is_measured_on_the_next_run(tmp_path):
    # Two processes ended from outside in the point (the OOM killer, a preempted Slurm
    # job: SIGKILL leaves the start line only): not the point's fault, measured again.
    group = mlp_group(hidden=(128,))
    key = group.points[0].key()
    journal = tmp_path / "j.jsonl"
    start = {"event": "start", "key": key, "settings": group.settings()}
    journal.write_text("".join(json.dumps(start) + "\n" for _ in range(2)))
    said = []
    rows = run_group(group, journal, tmp_path / "o.csv", log=said.append)
    assert rows[0]["status"] == "ok" and rows[0]["step_time_s"] > 0
    assert rows[0]["attempts"] == 3  # the row says how often it was tried
    assert any("ended from outside, which does not count" in line for line in said)
    assert pd.read_csv(tmp_path / "o.csv")["attempts"].tolist() == [3]
    # Kept by the next run as it is.
    again = run_group(group, journal, tmp_path / "o.csv", log=lambda _: None)
    assert again[0] == rows[0]


def test_a_point_killed_before_is_measured_after_the_others(tmp_path, monkeypatch):
    # One that the OOM killer takes every time must not cost the rest of its job.
    group = mlp_group(hidden=(128, 256))
    journal = tmp_path / "j.jsonl"
    start = {"event": "start", "key": group.points[0].key(), "settings": group.settings()}
    journal.write_text(json.dumps(start) + "\n")
    calls, original = [], point_measure.measure_point

    def counting(point, *args):
        calls.append(point.sizes["hidden"])
        return original(point, *args)

    monkeypatch.setattr(runner, "measure_point", counting)
    rows = run_group(group, journal, tmp_path / "o.csv", log=lambda _: None)
    assert calls == [256, 128]
    assert [(r["hidden"], r["attempts"]) for r in rows] == [(128, 2), (256, 1)]
    assert pd.read_csv(tmp_path / "o.csv")["hidden"].tolist() == [128, 256]


def test_a_point_that_crashes_its_process_twice_becomes_an_error(tmp_path, monkeypatch):
    group = mlp_group(hidden=(128,))
    key = group.points[0].key()
    journal = tmp_path / "j.jsonl"
    start = json.dumps({"event": "start", "key": key, "settings": group.settings()}) + "\n"
    # Crashed itself twice, and was killed from outside once in between (not counted).
    journal.write_text(start + SEGFAULT_REPORT + start + start + SEGFAULT_REPORT)

    def never(*_):
        raise AssertionError("a point that crashed its process twice was measured again")

    monkeypatch.setattr(runner, "measure_point", never)
    rows = run_group(group, journal, tmp_path / "o.csv", log=lambda _: None)
    assert rows[0]["status"] == "error" and rows[0]["attempts"] == 3
    assert "ended its measuring process 2 times" in rows[0]["message"]
    assert "Segmentation fault" in rows[0]["message"]


def test_one_own_crash_is_tried_again(tmp_path):
    group = mlp_group(hidden=(128,))
    key = group.points[0].key()
    journal = tmp_path / "j.jsonl"
    start = json.dumps({"event": "start", "key": key, "settings": group.settings()}) + "\n"
    journal.write_text(start + SEGFAULT_REPORT)
    said = []
    rows = run_group(group, journal, tmp_path / "o.csv", log=said.append)
    assert rows[0]["status"] == "ok" and rows[0]["attempts"] == 2
    assert any("its own faults: 1 of 2, last Fatal Python error: Segmentation" in s for s in said)


CRASH_SCRIPT = """
import os, signal, sys
sys.path.insert(0, {src!r})
from crossover_study.measure import runner
from crossover_study.measure.harness import TimingPolicy
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study.spec import PointSpec

def crash(*_):  # a step that crashes its process (a segfault in a C extension)
    os.kill(os.getpid(), signal.SIGSEGV)

runner.measure_point = crash
seed = {{"batch": 64, "d_in": 1024}}
pts = (PointSpec("s001-mlp", "torch", "cpu", "eager", {{**seed, "hidden": 128}}),)
policy = TimingPolicy(min_block_s=0.01, n_blocks=3, max_warmup_s=0.1, max_point_s=1)
group = GroupSpec("s001-mlp", "torch", "cpu", pts, 1, policy, "skip", "testhash")
run_group(group, sys.argv[1], sys.argv[2], log=lambda _: None)
"""


@pytest.mark.slow
def test_a_step_that_segfaults_is_recorded_in_the_journal_and_given_up(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text(CRASH_SCRIPT.format(src=str(REPO_ROOT / "src")))
    journal, out = tmp_path / "j.jsonl", tmp_path / "o.csv"
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, str(script), str(journal), str(out)], capture_output=True, timeout=300
        )
        assert proc.returncode == -signal.SIGSEGV, proc.stderr.decode()[-2000:]
    group = mlp_group(hidden=(128,))
    assert (
        Journal(journal, group.settings()).faults[group.points[0].key()]
        == ["Fatal Python error: Segmentation fault"] * 2
    )
    rows = run_group(group, journal, out, log=lambda _: None)
    assert rows[0]["status"] == "error" and rows[0]["attempts"] == 2
    assert "ended its measuring process 2 times" in rows[0]["message"]


KILL_SCRIPT = """
import sys
sys.path.insert(0, {src!r})
from crossover_study.measure.harness import TimingPolicy
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study.spec import PointSpec
seed = {{"batch": 64, "d_in": 1024}}
pts = tuple(PointSpec("s001-mlp", "torch", "cpu", "eager", {{**seed, "hidden": h}}) for h in (64, 128, 256, 512))
policy = TimingPolicy(min_block_s=0.2, n_blocks=5, max_warmup_s=0.3)
run_group(GroupSpec("s001-mlp", "torch", "cpu", pts, 1, policy, "skip", "h"), sys.argv[1], sys.argv[2])
"""


@pytest.mark.slow
def test_kill_9_then_rerun_gives_the_complete_table(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(KILL_SCRIPT.format(src=str(REPO_ROOT / "src")))
    journal, out = tmp_path / "j.jsonl", tmp_path / "out.csv"
    proc = subprocess.Popen([sys.executable, str(script), str(journal), str(out)])
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until at least one point is journaled
        if journal.exists() and '"event": "done"' in journal.read_text():
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not out.exists()  # no half-written table
    kept = {
        json.loads(line)["key"] for line in journal.read_text().splitlines() if '"done"' in line
    }
    assert 1 <= len(kept) < 4
    subprocess.run([sys.executable, str(script), str(journal), str(out)], check=True)
    df = pd.read_csv(out)
    assert list(df["hidden"]) == [64, 128, 256, 512]
    assert set(df["status"]) == {"ok"}
    assert df["run_id"].nunique() == 2  # the kept points keep the killed run's id


def test_not_applicable_and_unsynced_points_are_labelled(tmp_path):
    pts = (
        PointSpec("s001-mlp", "torch", "cpu", "custom_step", SEED),
        PointSpec("s001-mlp", "torch", "cpu", "eager", SEED, timing="unsynced"),
        PointSpec("s001-mlp", "torch", "cpu", "eager", SEED),
    )
    group = GroupSpec("s001-mlp", "torch", "cpu", pts, 1, mlp_group().policy, "skip", "h")
    rows = run_group(group, tmp_path / "j.jsonl", tmp_path / "o.csv", log=lambda _: None)
    assert rows[0]["status"] == "not_applicable" and "Keras" in rows[0]["message"]
    assert rows[0].get("step_time_s") is None
    # the unsynced anti-pattern is an accelerator's: on the CPU a call returns after its
    # work, so the row says why and is never timed
    assert rows[1]["status"] == "not_applicable" and rows[1]["timing"] == "unsynced"
    assert rows[1]["message"] == UNSYNCED_ON_CPU and rows[1].get("step_time_s") is None
    assert rows[2]["timing"] == "synced" and rows[2]["sync_check"] in ("passed", "failed")
    assert rows[2]["timer_overhead_s"] > 0
    assert rows[2]["traces_timed"] is None  # eager PyTorch compiles nothing


def test_a_variant_of_the_other_framework_is_not_applicable_even_without_the_device(tmp_path):
    group = mlp_group("cuda", hidden=(128,))
    xla = PointSpec("s001-mlp", "torch", "cuda", "xla", SEED)
    graph = PointSpec("s001-mlp", "torch", "cuda", "cuda_graph", SEED)
    group = GroupSpec(
        "s001-mlp", "torch", "cuda", (xla, graph), 1, group.policy, "skip", "testhash"
    )
    rows = run_group(group, tmp_path / "j.jsonl", tmp_path / "o.csv", log=lambda _: None)
    assert rows[0]["status"] == "not_applicable"
    assert rows[0]["message"] == "xla is a TensorFlow/Keras program variant"
    # cuda_graph exists in torch: without a GPU it is unavailable, never not_applicable.
    assert rows[1]["status"] == "unavailable" and "no CUDA device" in rows[1]["message"]
