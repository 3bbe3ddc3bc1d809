"""The per-point deadline (timing.point_deadline_s): a step that never returns is ended,
every thread's stack lands in the job log, the point is an error naming the deadline,
and the job goes on (or, stuck in C holding the GIL, is ended with its row journaled)."""

import json
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest

from crossover_study.core.paths import REPO_ROOT
from crossover_study.measure import frameworks, watchdog
from crossover_study.measure.job import measure_job
from crossover_study.measure.journal import Journal
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study.points import TimingPolicy
from crossover_study.study.spec import PointSpec

SEED = {"batch": 64, "d_in": 1024}
POLICY = TimingPolicy(min_block_s=0.01, n_blocks=3, max_warmup_s=0.1, max_point_s=1)
STUDY = {
    "study": "deadline",
    "sweep": {"frameworks": ["torch"], "devices": ["cpu"], "variants": ["eager"]},
    "cases": {"s001-mlp": {"axes": {"hidden": [128, 256]}}},
    "timing": {
        "min_block_s": 0.01,
        "blocks": 3,
        "max_warmup_s": 0.1,
        "max_point_s": 1,
        "sync_check_s": 0,
        "point_deadline_s": 1,
    },
}


def group(deadline, hidden=(128, 256)):
    pts = tuple(
        PointSpec("s001-mlp", "torch", "cpu", "eager", {**SEED, "hidden": h}) for h in hidden
    )
    return GroupSpec("s001-mlp", "torch", "cpu", pts, 1, POLICY, "skip", "h", deadline)


def sleeping_at(monkeypatch, hidden):
    """The MLP, except that its step at ``hidden`` sleeps forever in Python (and
    swallows every Exception, as careless workload code might)."""
    real = frameworks.workload_class("torch", "s001-mlp")

    class Sleeps(real):
        def run(self, n_steps):
            if self.sizes["hidden"] == hidden:
                while True:
                    try:
                        time.sleep(3600)
                    except Exception:  # noqa: BLE001, S110 - the deadline is no Exception
                        pass
            super().run(n_steps)

    monkeypatch.setattr(frameworks, "workload_class", lambda *_: Sleeps)


def test_a_step_that_never_returns_is_ended_and_the_job_goes_on(tmp_path, monkeypatch):
    sleeping_at(monkeypatch, 128)
    out = {k: tmp_path / f"job.{k}" for k in ("csv", "probe", "journal", "log")}
    # A deadline well above what the fine point needs: its soft budget (max_point_s) is
    # 1 s, and on a slow shared VM its cold start and first step come on top (a deadline
    # of 1 s ended it too in a CI run, 2026-12-02).
    study = {**STUDY, "timing": {**STUDY["timing"], "point_deadline_s": 5}}
    started = time.monotonic()
    rows = measure_job(study, "s001-mlp", "torch", "cpu", 0, 1, *out.values())
    assert time.monotonic() - started < 60
    stuck, fine = rows
    assert stuck["status"] == "error"
    assert stuck["message"].startswith("point exceeded timing.point_deadline_s=5 s (ended after")
    assert "in run (test_point_deadline.py:" in stuck["message"]
    # the watchdog's clock starts just before the point's own (a CI run read 4.9997 s)
    assert 4.95 <= stuck["measured_s"] < 15
    assert fine["status"] == "ok" and fine["step_time_s"] > 0, fine.get("message")
    log = out["log"].read_text()
    assert "still running at timing.point_deadline_s=5 s; every thread's stack:" in log
    # faulthandler's dump of every thread, the sleeping step among them
    assert "Current thread" in log and 'test_point_deadline.py", line' in log
    assert "in run" in log
    assert list(pd.read_csv(out["csv"])["status"]) == ["error", "ok"]
    # The error is final under the same deadline: a rerun keeps it.
    settings = json.loads(out["journal"].read_text().splitlines()[0])["settings"]
    journal = Journal(out["journal"], settings)
    key = group(1.0).points[0].key()
    assert journal.final_row(key)["status"] == "error" and journal.ended_at[key] == 5
    # No helper process is left behind.
    assert psutil.Process().children() == []


def test_a_point_ended_at_a_deadline_is_measured_again_under_a_longer_one(tmp_path, monkeypatch):
    journal, out = tmp_path / "j.jsonl", tmp_path / "o.csv"
    with monkeypatch.context() as patch:
        sleeping_at(patch, 128)
        first = run_group(group(1.0, (128,)), journal, out, log=lambda _: None)
    assert first[0]["status"] == "error"
    said = []
    kept = run_group(group(1.0, (128,)), journal, out, log=said.append)
    assert kept[0]["run_id"] == first[0]["run_id"]
    again = run_group(group(30.0, (128,)), journal, out, log=said.append)
    assert again[0]["status"] == "ok"
    assert any("ended it at a point deadline of 1 s; the deadline is now 30 s" in s for s in said)
    # Measured under a deadline it met: kept from now on, also without a deadline.
    assert run_group(group(None, (128,)), journal, out, log=said.append)[0] == again[0]


HOLDS_THE_GIL = """
import ctypes, pathlib, subprocess, sys
sys.path.insert(0, {src!r})
from crossover_study.measure import frameworks
from crossover_study.measure.harness import TimingPolicy
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study.spec import PointSpec

real = frameworks.workload_class("torch", "s001-mlp")
libc = ctypes.PyDLL(None)  # PyDLL: the call keeps the GIL
mutex = ctypes.create_string_buffer(64)  # a zeroed pthread_mutex_t: a default mutex


class Deadlocks(real):
    def run(self, n_steps):
        if self.sizes["hidden"] == 128 and sys.argv[3] == "stuck":
            follower = subprocess.Popen(["sleep", "600"])  # as a DDP follower would be
            pathlib.Path(sys.argv[4]).with_suffix(".child").write_text(str(follower.pid))
            libc.pthread_mutex_lock(mutex)
            libc.pthread_mutex_lock(mutex)  # waits forever, in C, holding the GIL
        super().run(n_steps)


frameworks.workload_class = lambda *_: Deadlocks
pts = tuple(
    PointSpec("s001-mlp", "torch", "cpu", "eager", {{"batch": 64, "d_in": 1024, "hidden": h}})
    for h in (128, 256)
)
policy = TimingPolicy(min_block_s=0.01, n_blocks=3, max_warmup_s=0.1, max_point_s=1)
group = GroupSpec("s001-mlp", "torch", "cpu", pts, 1, policy, "skip", "h", 5.0)
with open(sys.argv[4], "a") as log:
    say = lambda text: print(text, file=log, flush=True)
    run_group(group, sys.argv[1], sys.argv[2], log=say, stacks=log)
"""


def test_a_wait_in_c_holding_the_gil_ends_the_process_and_the_rerun_measures_the_rest(
    tmp_path,
):
    # A 5 s deadline, not 1 s: the rerun measures the other point under the same
    # deadline, and on a loaded 2-core VM its cold start and first step alone passed 1 s.
    script = tmp_path / "holds.py"
    script.write_text(HOLDS_THE_GIL.format(src=str(REPO_ROOT / "src")))
    journal, out, log = tmp_path / "j.jsonl", tmp_path / "o.csv", tmp_path / "job.log"
    cmd = [sys.executable, str(script), str(journal), str(out)]
    started = time.monotonic()
    proc = subprocess.run([*cmd, "stuck", str(log)], capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    text = log.read_text()
    assert proc.returncode == -9, (proc.returncode, proc.stderr[-2000:], text[-3000:])
    assert took < 60
    assert not out.exists()  # no half-written table
    assert (
        "watchdog: s001-mlp|torch|cpu|eager|" in text
        and "still running 7 s after it started" in text
    )
    assert "timing.point_deadline_s=5 s" in text
    # faulthandler's C-level dump of every thread, the stuck call's frame among them
    assert "Current thread" in text and 'holds.py", line' in text and "in run" in text
    assert "journaled as status=error" in text
    follower = int(log.with_suffix(".child").read_text())
    deadline = time.monotonic() + 10
    while psutil.pid_exists(follower) and time.monotonic() < deadline:
        if psutil.Process(follower).status() == psutil.STATUS_ZOMBIE:
            break  # killed; its new parent has not reaped it
        time.sleep(0.05)
    assert not psutil.pid_exists(follower) or (
        psutil.Process(follower).status() == psutil.STATUS_ZOMBIE
    )
    entries = [json.loads(line) for line in journal.read_text().splitlines()]
    done = [e for e in entries if e["event"] == "done"]
    assert len(done) == 1 and done[0]["point_deadline_s"] == 5
    row = done[0]["row"]
    assert row["status"] == "error" and row["hidden"] == 128 and row["utc_time"]
    assert row["message"].startswith("point exceeded timing.point_deadline_s=5 s and did not stop")
    # The rerun keeps the error row and measures only the missing point.
    subprocess.run([*cmd, "stuck", str(log)], check=True, timeout=120)
    table = pd.read_csv(out)
    assert list(table["hidden"]) == [128, 256]
    assert list(table["status"]) == ["error", "ok"]
    assert "kept from run" in log.read_text()


def test_grace_and_messages():
    assert watchdog.grace_s(1) == 2 and watchdog.grace_s(100) == 10
    assert watchdog.grace_s(600) == 60 and watchdog.grace_s(3600) == 60
    assert watchdog.ended_at_deadline({"status": "error", "message": watchdog.hard_message(5)})
    assert not watchdog.ended_at_deadline({"status": "error", "message": "boom"})
    with pytest.raises(ValueError, match="must be positive"):
        watchdog.PointWatchdog(0, sys.stderr)
