"""The journal: a point's own crashes told from ends from outside, and the lock that keeps
two live runs from measuring the same job at once."""

import json
import os
import signal
import subprocess
import sys

import pytest
import yaml

from crossover_study.core.paths import REPO_ROOT
from crossover_study.measure.job import measure_job
from crossover_study.measure.journal import Journal, JournalBusy, hold

HOLD_SCRIPT = """
import sys, time
sys.path.insert(0, {src!r})
from crossover_study.measure.journal import hold
with hold(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def _holder(tmp_path, journal) -> subprocess.Popen:
    """Another process holding ``journal`` (as a live measuring job of another run)."""
    script = tmp_path / "hold.py"
    script.write_text(HOLD_SCRIPT.format(src=str(REPO_ROOT / "src")))
    proc = subprocess.Popen([sys.executable, str(script), str(journal)], stdout=subprocess.PIPE)
    assert proc.stdout.readline().decode().strip() == "held"
    return proc


def test_a_second_process_refuses_a_held_journal_and_a_killed_holder_leaves_no_lock(tmp_path):
    journal = tmp_path / "journal" / "batch-0.jsonl"
    proc = _holder(tmp_path, journal)
    try:
        with pytest.raises(JournalBusy) as refused, hold(journal):
            pass
        message = str(refused.value)
        assert str(journal) in message and f"(pid {proc.pid})" in message
        assert "--unlock" in message and "\n" not in message
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # as kill -9 or a lost node would
        proc.wait()
    with hold(journal) as fh:  # released by the OS with the process: never stale
        with hold(journal) as again:  # re-entrant in one process
            assert again is fh


def test_measure_job_refuses_a_job_another_run_measures_and_writes_nothing(tmp_path):
    config = yaml.safe_load((REPO_ROOT / "config/studies/smoke.yaml").read_text())
    journal = tmp_path / "batch-0.jsonl"
    out = {k: tmp_path / f"batch-0.{k}" for k in ("csv", "probe.json", "log")}
    proc = _holder(tmp_path, journal)
    try:
        with pytest.raises(JournalBusy):
            measure_job(
                config, "s001-mlp", "torch", "cpu", 0, 2,
                out["csv"], out["probe.json"], journal, out["log"],
            )  # fmt: skip
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not out["csv"].exists() and not out["probe.json"].exists()
    assert journal.read_text() == ""  # no point started
    assert "job refused: " in out["log"].read_text()


@pytest.mark.slow
def test_two_live_runs_of_one_job_never_measure_at_once(tmp_path):
    # The measuring job's own command line, twice at once on one journal: one measures,
    # the other is refused at once (exit 1, one line), whichever takes the lock first.
    config = yaml.safe_load((REPO_ROOT / "config/studies/smoke.yaml").read_text())
    config["timing"].update(max_point_s=0.5, max_warmup_s=0.1)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    procs = {}
    for name in ("a", "b"):
        args = [f"--{k}={tmp_path / name}.{k}" for k in ("csv", "probe", "log")]
        cmd = [sys.executable, "-m", "crossover_study", "measure-job", f"--config={study}"]
        cmd += ["--case=s000-hjb", "--framework=torch", "--device=cpu", "--threads=1"]
        cmd += [f"--journal={tmp_path / 'j.jsonl'}", *args]
        procs[name] = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    ended = {n: (p.wait(timeout=600), p.stderr.read()) for n, p in procs.items()}
    measured = [n for n, (code, _) in ended.items() if code == 0]
    refused = [n for n, (code, err) in ended.items() if code == 1 and "job refused: " in err]
    assert len(measured) == len(refused) == 1, ended
    assert "Traceback" not in ended[refused[0]][1]
    assert not (tmp_path / f"{refused[0]}.csv").exists()
    assert not (tmp_path / f"{refused[0]}.probe").exists()
    starts = [
        json.loads(line)["key"]
        for line in (tmp_path / "j.jsonl").read_text().splitlines()
        if '"start"' in line
    ]
    assert starts and len(starts) == len(set(starts))  # each point started once


def test_a_crash_report_counts_only_for_the_point_started_just_before_it(tmp_path):
    start = {"event": "start", "key": "a", "settings": "s"}
    done = {"event": "done", "key": "a", "settings": "s", "row": {"status": "ok"}}
    other = {"event": "start", "key": "b", "settings": "old"}
    path = tmp_path / "j.jsonl"
    lines = [
        json.dumps(start),
        "Fatal Python error: Aborted",  # a's own crash
        "",
        "Current thread 0x1 (most recent call first):",
        "Fatal Python error: Segmentation fault",  # not after a start: counts for nothing
        json.dumps(other),
        "Fatal Python error: Segmentation fault",  # b under other settings: not counted
        json.dumps(start),  # killed from outside: a start only
        json.dumps(start),
        json.dumps(done),
    ]
    path.write_text("\n".join(lines) + "\n")
    journal = Journal(path, "s")
    assert journal.faults == {"a": ["Fatal Python error: Aborted"]}
    assert journal.attempts("a") == 3 and journal.attempts("b") == 0
    assert journal.final_row("a") == {"status": "ok"}


def test_a_line_after_a_torn_one_is_not_lost(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_text('{"event": "start", "key": "a", "sett')  # the process died writing it
    journal = Journal(path, "s")
    journal.fault("a", "left cuda unable to run work")
    journal.finish("a", {"status": "ok"})
    again = Journal(path, "s")
    assert again.faults == {"a": ["left cuda unable to run work"]}
    assert again.final_row("a") == {"status": "ok"}
