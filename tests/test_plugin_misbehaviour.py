"""A plug-in that misbehaves cannot hang or end the measuring job (issue 47 items 2, 5
and 6): a step that calls ``sys.exit`` or ``os._exit`` gets its point an ``error`` row
naming the cause and the job goes on with its other points; what a plug-in leaves running
(a child process, a non-daemon thread) ends with the job; a job past its deadline ends
with one line, its measured points kept; a plug-in that sets its own thread count is
timed so, and flagged."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml
from test_plugins import FAST, _plugin_config

from crossover_study.answers.rows import flag_text
from crossover_study.core.paths import REPO_ROOT
from crossover_study.measure import frameworks, supervisor
from crossover_study.measure.point import measure_point
from crossover_study.study.config import validate_config
from crossover_study.study.spec import PointSpec

#: A torch plug-in that misbehaves by its size: ``batch`` 5 calls sys.exit(3) in its
#: step, 6 os._exit(0), 8 sleeps 600 s in build; every build starts a child process and
#: a non-daemon thread it never ends (``{marker}``: the child's unique argument).
MISBEHAVES = """
import os
import subprocess
import sys
import threading
import time

import torch

from crossover_study.plugin import TorchStep


def build(device, batch):
    subprocess.Popen(["sleep", "{marker}"])
    threading.Thread(target=time.sleep, args=(600,)).start()
    if batch == 8:
        time.sleep(600)
    w = torch.ones(batch, requires_grad=True, device=device)
    optimizer = torch.optim.SGD([w], lr=0.01)

    def step():
        if batch == 5:
            sys.exit(3)
        if batch == 6:
            os._exit(0)
        optimizer.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        optimizer.step()
        return loss

    return TorchStep(step, optimizer=optimizer)
"""


def _left_running(marker: str) -> list[int]:
    """Processes still running the plug-in's child (its unique ``sleep`` argument)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if marker in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc.pid)
    return found


def _job(tmp_path: Path, batches: list[int], marker: str, **timing):
    """A study of :data:`MISBEHAVES` at ``batches`` in ``tmp_path`` and the command line
    of its one measuring job (``crossover-study measure-job``, the supervisor)."""
    (tmp_path / "misbehaves.py").write_text(MISBEHAVES.format(marker=marker))
    study = {
        "study": "misbehaves",
        "sweep": {"frameworks": ["torch"], "devices": ["cpu"], "variants": ["eager"]},
        "devices": {"cpu": {"threads": 1}},
        "timing": {"min_block_s": 0.01, "blocks": 3, "max_warmup_s": 0.1, "max_point_s": 1.0}
        | {"sync_check_s": 0, **timing},
        "cases": {
            "misbehaves": {
                "workload": "misbehaves.py",
                "framework": "torch",
                "question": "Does it end?",
                "seed": {"batch": batches[0]},
                "axes": {"batch": batches},
            }
        },
    }
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    files = {k: tmp_path / f"job.{k}" for k in ("csv", "probe", "journal", "log")}
    cmd = [sys.executable, "-m", "crossover_study", "measure-job", "--config=study.yaml"]
    cmd += ["--case=misbehaves", "--framework=torch", "--device=cpu", "--echo"]
    cmd += [f"--{k}={v}" for k, v in files.items()]
    return cmd, files


def _run(cmd, cwd, timeout=240) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return done, time.monotonic() - started


@pytest.mark.slow
def test_exits_in_a_step_are_error_rows_and_what_a_plugin_leaves_running_ends(tmp_path):
    """Items 5 and 2: sys.exit(3) and os._exit(0) in a step each give their point an
    error row naming the cause; the job measures its other points (a fresh process
    after os._exit), writes its table and ends although every build left a child
    process and a non-daemon thread running; nothing of theirs is left."""
    marker = f"599.{os.getpid()}1"
    cmd, files = _job(tmp_path, [4, 5, 6, 7], marker)
    done, took = _run(cmd, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert took < 200
    rows = pd.read_csv(files["csv"]).set_index("batch")
    assert list(rows["status"]) == ["ok", "error", "error", "ok"]
    assert rows.loc[5, "message"].startswith("the program called sys.exit(3), which would have")
    assert rows.loc[5, "message"].endswith("(raised in the plug-in at misbehaves.py:23 in step)")
    assert rows.loc[6, "message"].startswith(
        "the measuring process ended with status 0 inside this point"
    )
    assert rows.loc[7, "step_time_s"] > 0  # measured after the os._exit, in a new process
    assert (
        "warning: misbehaves|torch|cpu|eager|batch=6: the measuring process ended with "
        "status 0 inside this point" in done.stdout
    )
    assert files["probe"].is_file()
    time.sleep(0.5)
    assert _left_running(marker) == []


@pytest.mark.slow
def test_a_job_past_its_deadline_ends_with_one_line_and_keeps_its_points(tmp_path):
    """Item 2's deadline: a build that sleeps 600 s holds the job past
    timing.job_deadline_s; the job ends soon after it with one line naming the
    deadline, its table keeps the point measured before and marks the others
    unavailable (a rerun measures them), its journal keeps the measured point, and the
    sleeping build's processes are gone."""
    marker = f"599.{os.getpid()}2"
    cmd, files = _job(tmp_path, [4, 8], marker, job_deadline_s=15)
    done, took = _run(cmd, tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert 15 <= took < 150
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith(
        "job failed: misbehaves/torch/cpu batch 0 ended at its deadline "
        "(timing.job_deadline_s=15 s) after "
    )
    assert "its table holds the 1 of 2 points measured, the rest unavailable" in last
    assert last.endswith("its journal keeps what was measured and a rerun measures the rest")
    rows = pd.read_csv(files["csv"]).set_index("batch")
    assert rows.loc[4, "status"] == "ok"
    assert rows.loc[8, "status"] == "unavailable"
    assert rows.loc[8, "message"].startswith(
        "not measured: the job ended at its deadline (timing.job_deadline_s=15 s) after"
    )
    done = {
        entry["row"]["batch"]: entry["row"]["status"]
        for entry in map(json.loads, files["journal"].read_text().splitlines())
        if entry["event"] == "done"
    }
    assert done == {4: "ok", 8: "unavailable"}  # unavailable is not final: measured again
    assert _left_running(marker) == []


def test_the_open_point_of_a_journal_is_the_last_started_and_not_finished(tmp_path):
    path = tmp_path / "j.jsonl"
    lines = [
        {"event": "start", "key": "a", "settings": "s"},
        {"event": "done", "key": "a", "settings": "s", "row": {}},
        {"event": "start", "key": "b", "settings": "s"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert supervisor.open_point(path, 0) == ("b", "s", False)
    with path.open("a") as fh:
        fh.write("Fatal Python error: Segmentation fault\n")
    assert supervisor.open_point(path, 0) == ("b", "s", True)
    end = path.stat().st_size
    with path.open("a") as fh:
        fh.write(json.dumps({"event": "fault", "key": "b", "settings": "s", "cause": "x"}) + "\n")
    assert supervisor.open_point(path, 0) == (None, None, False)
    assert supervisor.open_point(path, end) == (None, None, False)


THREADS = """
import torch
from crossover_study.plugin import TorchStep


def build(device, batch, width):
    torch.set_num_threads(3)
    w = torch.ones(batch, width, requires_grad=True)

    def step():
        return (w * w).sum()

    return TorchStep(step)
"""


def test_a_plugin_that_sets_its_threads_is_timed_so_and_flagged(tmp_path):
    """Item 6: ``torch.set_num_threads(3)`` in build: the row records the 3 threads the
    step was timed with beside the job's 1, flags it (message, answers' flag), and the
    job's next point runs with the job's threads again."""
    validate_config(_plugin_config(tmp_path, textwrap.dedent(THREADS)))
    frameworks.import_framework("torch", "cpu", 1)
    point = PointSpec("mine", "torch", "cpu", "eager", {"batch": 8, "width": 2})
    row = measure_point(point, FAST, 0.0, 0.0, 1)
    assert row["status"] == "ok", row["message"]
    assert row["threads_timed"] == 3 and row["threads_changed"] is True
    assert "timed with 3 CPU threads, not the job's 1: the program set its own" in row["message"]
    assert "timed with other CPU threads than the job's" in flag_text(pd.DataFrame([row]))
    import torch

    assert torch.get_num_threads() == 1  # pinned again for the job's next point


def test_a_plugin_that_keeps_the_threads_is_not_flagged(tmp_path):
    validate_config(_plugin_config(tmp_path, textwrap.dedent(THREADS).replace("3)", "1)")))
    frameworks.import_framework("torch", "cpu", 1)
    point = PointSpec("mine", "torch", "cpu", "eager", {"batch": 8, "width": 2})
    row = measure_point(point, FAST, 0.0, 0.0, 1)
    assert row["threads_timed"] == 1 and row["threads_changed"] is False
    assert "CPU threads" not in (row["message"] or "")
    assert "threads" not in flag_text(pd.DataFrame([row]))


@pytest.mark.slow
def test_a_job_killed_from_outside_leaves_nothing_measuring(tmp_path):
    """The job's own process SIGKILLed (a scheduler, a runner's deadline) while a build
    sleeps: its measuring process and what the plug-in started end with it (nothing
    measures on, nothing holds the journal)."""
    marker = f"599.{os.getpid()}3"
    cmd, files = _job(tmp_path, [4, 8], marker)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    job = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    for line in job.stdout:
        if "batch=4: ok" in line:
            break
    time.sleep(2)  # into the second build, which sleeps
    assert _left_running(marker)
    job.kill()
    job.wait()
    deadline = time.monotonic() + 10
    while (_left_running(marker) or not _free(files["journal"])) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _left_running(marker) == []
    assert _free(files["journal"])  # the lock went with them: a rerun may measure


def _free(journal: Path) -> bool:
    """Whether no process holds the journal's lock."""
    with open(journal) as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        return True
