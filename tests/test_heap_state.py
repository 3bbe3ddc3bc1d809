"""The C heap's state as part of the program (issue 51, items 1, 2 and 5): a step that
allocates and frees tens of MB is timed in the state a user's fresh process has, its
page faults are named in the answer with the measured remedy, and the allocator
variant is the same program."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from crossover_study.answers.page_faults import page_fault_short, page_fault_text
from crossover_study.answers.remedies import APART, remedy_sentence, remedy_table
from crossover_study.core.paths import REPO_ROOT
from crossover_study.measure import fresh_point, heap, pairing
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study import cases, programs
from crossover_study.study.config import validate_config
from crossover_study.study.points import TimingPolicy
from crossover_study.study.spec import PointSpec

CHURN = REPO_ROOT / "tests" / "plugins" / "torch_heap_churn.py"
FAST = TimingPolicy(min_block_s=0.02, n_blocks=3, max_warmup_s=0.2, max_point_s=2, sync_check_s=0)
glibc = pytest.mark.skipif(heap._malloc_trim() is None, reason="glibc's malloc_trim is needed")


def _churn_config() -> dict:
    return validate_config(
        {
            "study": "heap-test",
            "sweep": {"frameworks": ["torch"], "devices": ["cpu"], "variants": ["eager"]},
            "cases": {
                "churn": {
                    "workload": str(CHURN),
                    "framework": "torch",
                    "question": "A step that churns 32 MB: what does it cost?",
                    "seed": {"batch": 64, "mb": 32},
                    "axes": {"batch": [64], "mb": [32]},
                }
            },
        }
    )


class _NumpyChurn:
    """A workload whose step allocates ``blocks`` 3 MiB NumPy arrays at once and frees
    them (glibc serves them: the screen must see their pages). Under 4 MiB: NumPy asks
    for transparent huge pages from 4 MiB on, and a huge page is one fault."""

    steps_per_call = 1

    def __init__(self, blocks: int) -> None:
        self.blocks = blocks

    def run(self, n: int) -> None:
        for _ in range(n):
            temps = [np.ones(3 * 2**18, dtype=np.float32) for _ in range(self.blocks)]
            del temps

    def sync(self) -> None:
        pass


@glibc
def test_the_screen_counts_the_pages_a_step_touches_afresh_whatever_the_heap_holds():
    # Freed once, 64 MiB stay in this process's heap: without the trim the step would
    # reuse them and fault nothing, as the job's process did.
    keep = np.ones(2**24, dtype=np.float32)
    del keep
    faults = heap.trimmed_heap_faults(_NumpyChurn(8))
    assert faults >= 0.9 * 8 * 768  # eight 3 MiB blocks of 4 KiB pages
    assert heap.trimmed_heap_faults(_NumpyChurn(0)) < 100


def test_a_step_is_timed_again_only_where_its_fresh_faults_matter():
    row = {"status": "ok", "step_time_s": 0.010, "step_page_faults": 0.0}
    assert heap.needs_users_state({**row, "trimmed_page_faults": 9000.0}, 1.3e-6)
    assert not heap.needs_users_state({**row, "trimmed_page_faults": 100.0}, 1.3e-6)
    # 4 MiB at least: a 1 ms step's 900 faults are not worth a fresh process.
    assert not heap.needs_users_state(
        {**row, "step_time_s": 1e-3, "trimmed_page_faults": 900.0}, None
    )
    # Also where the job's process faulted itself: its history is not the user's.
    assert heap.needs_users_state(
        {**row, "step_page_faults": 9000.0, "trimmed_page_faults": 9000.0}, 1.3e-6
    )
    assert not heap.needs_users_state({**row, "trimmed_page_faults": None}, 1.3e-6)
    assert not heap.needs_users_state({"status": "error", "trimmed_page_faults": 9e9}, None)
    # Without a measured price the lowest measured one (1 µs) decides.
    assert heap.needs_users_state({**row, "trimmed_page_faults": 1200.0}, None)
    assert not heap.needs_users_state({**row, "trimmed_page_faults": 900.0}, None)
    # A cheap step's few faults are not worth a fresh process's import.
    tiny = {"status": "ok", "step_time_s": 1e-4, "step_page_faults": 0.0}
    assert not heap.needs_users_state({**tiny, "trimmed_page_faults": 200.0}, 1.3e-6)


class _Group:
    policy, threads, contention, point_deadline_s = FAST, 1, None, None


def _point(variant="eager", device="cpu") -> PointSpec:
    return PointSpec("s001-mlp", "torch", device, variant, {"batch": 64, "hidden": 32})


def test_a_flagged_row_takes_the_fresh_processs_steady_state_and_says_both(monkeypatch):
    job = {
        "status": "ok",
        "step_time_s": 0.010,
        "step_page_faults": 0.0,
        "trimmed_page_faults": 9000.0,
        "first_step_s": 0.5,
        "step_flops": 123.0,
        "message": None,
    }
    fresh = {"status": "ok", "step_time_s": 0.025, "step_page_faults": 8800.0, "first_step_s": 9}
    monkeypatch.setattr(
        fresh_point, "measure_fresh", lambda *a, **k: {**fresh, "fresh_process_s": 3.0}
    )
    row = fresh_point.in_users_state(_point(), _Group(), lambda: dict(job), 1.3e-6)
    assert row["step_time_s"] == 0.025 and row["step_page_faults"] == 8800.0
    assert row["step_state"] == "fresh_process" and row["fresh_process_s"] == 3.0
    assert row["job_step_time_s"] == 0.010 and row["job_page_faults"] == 0.0
    assert row["first_step_s"] == 0.5 and row["step_flops"] == 123.0  # the job's
    assert "timed in a fresh process" in row["message"] and "8800 page faults" in row["message"]
    # Not flagged: the job's row, said so.
    quiet = fresh_point.in_users_state(
        _point(), _Group(), lambda: {**job, "trimmed_page_faults": 10.0}, 1.3e-6
    )
    assert quiet["step_state"] == "job_process" and quiet["step_time_s"] == 0.010


def test_a_failed_fresh_process_keeps_the_job_row_and_says_why(monkeypatch):
    def fails(*args, **kwargs):
        raise fresh_point.FreshPointError("the fresh process ended with code 1 and no row: boom")

    monkeypatch.setattr(fresh_point, "measure_fresh", fails)
    job = {"status": "ok", "step_time_s": 0.01, "step_page_faults": 0.0, "trimmed_page_faults": 9e3}
    row = fresh_point.in_users_state(_point(), _Group(), lambda: dict(job), 1.3e-6)
    assert row["step_state"] == "job_process" and "boom" in row["message"]
    monkeypatch.setattr(fresh_point, "measure_fresh", fails)
    env = fresh_point.in_users_state(_point("malloc_env"), _Group(), lambda: pytest.fail(), None)
    assert env["status"] == "error" and "boom" in env["message"]


def test_the_allocator_variant_is_paired_with_eager_in_fresh_processes(monkeypatch):
    # Issue 62 item 5: malloc_env runs in a fresh process, so it is paired with the
    # eager program in fresh processes (no allocator settings), round by round, not
    # with the job process's eager row.
    started = []

    def fresh(point, policy, threads, contention, env, timeout_s):
        started.append((point.variant, env))
        remedy = env == heap.REMEDY_ENV
        assert point.variant == ("malloc_env" if remedy else "eager")
        step = [0.010, 0.011, 0.012][sum(1 for v, e in started if e == env) - 1]
        return {
            "status": "ok",
            "step_time_s": step if remedy else step * 1.02,
            "measured_s": 1.0,
            "fresh_process_s": 2.0,
        }

    monkeypatch.setattr(fresh_point, "measure_fresh", fresh)
    row = fresh_point.in_users_state(_point("malloc_env"), _Group(), pytest.fail, None)
    assert sorted(started, key=str) == sorted(
        [("eager", None)] * 3 + [("malloc_env", heap.REMEDY_ENV)] * 3, key=str
    )
    assert row["status"] == "ok" and row["step_time_s"] == 0.011  # the median round
    assert row["interleaved"] is True and row["paired_rounds"] == 3
    assert row["speedup"] == pytest.approx(1.02) and row["speedup_low"] <= 1.02
    assert row["paired_eager_step_s"] == pytest.approx(0.011 * 1.02)
    assert row["measured_s"] == 6.0 and row["fresh_process_s"] == 12.0  # every process
    assert "paired with the eager program in fresh processes" in row["message"]
    # An eager process that fails: the row is measured apart, and says why.
    monkeypatch.setattr(
        fresh_point,
        "measure_fresh",
        lambda point, *a: (
            {"status": "error", "message": "boom"}
            if point.variant == "eager"
            else {"status": "ok", "step_time_s": 0.01}
        ),
    )
    alone = fresh_point.in_users_state(_point("malloc_env"), _Group(), pytest.fail, None)
    assert alone["status"] == "ok" and alone["interleaved"] is False
    assert "no ok row to pair with (error: boom)" in alone["interleaved_reason"]


def _remedy_rows(malloc: dict) -> pd.DataFrame:
    """An eager row and a malloc_env row of one point (CPU, torch), the eager row with
    9 000 page faults a step at 1.3 µs each."""
    eager = {
        "case": "churn", "framework": "torch", "device": "cpu", "timing": "synced",
        "status": "ok", "variant": "eager", "step_time_s": 0.012,
        "step_page_faults": 9000.0, "rate_page_fault_s": 1.3e-6,
    }  # fmt: skip
    return pd.DataFrame(
        [eager, {**eager, "variant": "malloc_env", "step_page_faults": 50.0, **malloc}]
    )


def test_a_remedy_measured_apart_is_not_offered_and_says_why():
    # Issue 62 item 5: malloc_env 1.2x faster than the job's eager row, with no paired
    # interval: not offered, whatever its ratio, with the reason.
    reason = pairing.PROCESS_WIDE["malloc_env"]
    rows = _remedy_rows({"step_time_s": 0.010, "interleaved": False, "interleaved_reason": reason})
    table = remedy_table(rows)
    assert not table.loc["malloc_env", "offered"]
    assert table.loc["malloc_env", "apart_reason"] == f"{APART} ({reason})"
    with cases.kept():
        cases.use(_churn_config())
        sentence = remedy_sentence(rows.assign(batch=64, mb=32), "churn")
    assert "malloc_env 1.2× faster, but measured apart from eager, with no paired interval" in (
        sentence
    )
    assert "so not offered" in sentence and "torch malloc_env takes" not in sentence
    text = page_fault_text(rows.iloc[0], rows)
    assert text.endswith(f"but {APART}, so it is not offered as the remedy")
    # Paired in fresh processes with an interval above 1.1: offered, with its interval.
    paired = _remedy_rows(
        {
            "step_time_s": 0.006,
            "interleaved": True,
            "speedup": 2.0,
            "speedup_low": 1.8,
            "speedup_high": 2.2,
            "paired_eager_step_s": 0.012,
        }  # fmt: skip
    )
    assert remedy_table(paired).loc["malloc_env", "offered"]
    assert page_fault_text(paired.iloc[0], paired).endswith(
        "2.00× faster than eager (eager in fresh processes: 12 ms), 95 % CI 1.80–2.20"
    )
    # Paired, but no faster than eager in a fresh process: not offered, said so.
    same = _remedy_rows(
        {
            "step_time_s": 0.0118,
            "interleaved": True,
            "speedup": 1.01,
            "speedup_low": 0.97,
            "speedup_high": 1.05,
            "paired_eager_step_s": 0.0119,
        }  # fmt: skip
    )
    assert not remedy_table(same).loc["malloc_env", "offered"]
    assert "no different from eager within noise" in page_fault_text(same.iloc[0], same)


def test_the_allocator_variant_is_the_eager_program_on_the_cpu_only():
    for case in ("s001-mlp", "s002-iris"):
        for framework in ("torch", "tensorflow"):
            eager = programs.program_of(case, framework, "cpu", "eager")
            assert programs.program_of(case, framework, "cpu", "malloc_env") == eager
    row = fresh_point.in_users_state(_point("malloc_env", "cuda"), _Group(), pytest.fail, None)
    assert row["status"] == "not_applicable" and "glibc" in row["message"]


LOSSES = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import importlib.util
spec = importlib.util.spec_from_file_location("p", sys.argv[2])
p = importlib.util.module_from_spec(spec); spec.loader.exec_module(p)
torch.set_num_threads(1)
built = p.build(torch.device("cpu"), batch=64, mb=32)
print(json.dumps([float(built.step(*built.data)) for _ in range(5)]))
"""


def test_the_allocator_environment_changes_no_number_of_the_step():
    # The same program: started with the remedy's environment it computes bit for bit
    # the losses it computes without.
    def losses(env):
        out = subprocess.run(
            [sys.executable, "-c", LOSSES, str(REPO_ROOT / "src"), str(CHURN)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, **env},
        )
        return json.loads(out.stdout)

    plain, remedied = losses({}), losses(heap.REMEDY_ENV)
    assert plain == remedied and len(set(plain)) > 1


@glibc
def test_a_churning_step_is_timed_as_a_fresh_process_runs_it_and_the_answer_names_it(tmp_path):
    config = _churn_config()
    with cases.kept():
        cases.use(config)
        points = [
            PointSpec("churn", "torch", "cpu", v, {"batch": 64, "mb": 32})
            for v in ("eager", "malloc_env")
        ]
        group = GroupSpec("churn", "torch", "cpu", tuple(points), 1, FAST, "skip", "h")
        rows = run_group(group, tmp_path / "j.jsonl", tmp_path / "t.csv", log=lambda _: None)
        eager, remedy = rows
        assert eager["status"] == "ok" and remedy["status"] == "ok", (eager, remedy)
        # The screen: the 32 MB a step touches afresh after a trim (8 192 pages).
        assert eager["trimmed_page_faults"] > 6000
        # Timed in a fresh process, which maps at least 8 MB afresh a step (how much
        # depends on the process's history: 5 489 to 16 352 faults a step seen); the
        # job's own count is kept beside it, whatever it was.
        assert eager["step_state"] == "fresh_process"
        assert eager["step_page_faults"] > 2048 and eager["job_page_faults"] is not None
        # The remedy: the same program in a fresh process that keeps the memory.
        assert remedy["step_state"] == "fresh_process" and remedy["step_page_faults"] < 100
        assert remedy["program"] == eager["program"] == "plugin"
        assert "MALLOC_TRIM_THRESHOLD_=536870912" in remedy["malloc_env"]
        table = pd.read_csv(tmp_path / "t.csv")
        assert {"step_state", "job_page_faults", "trimmed_page_faults"} <= set(table.columns)
        text = page_fault_text(pd.Series(eager), pd.DataFrame(rows))
        assert "page faults a step" in text and "mapped afresh every step" in text
        assert "MALLOC_TRIM_THRESHOLD_=536870912" in text
        assert "measured (malloc_env, the same program)" in text
        # Paired with the eager program in fresh processes (issue 62 item 5), so its
        # speed-up has an interval whether or not it is offered.
        assert remedy["interleaved"] is True and remedy["paired_rounds"] == 3
        assert remedy["speedup_low"] <= remedy["speedup"] <= remedy["speedup_high"]
        assert "95 % CI" in text or "so it is not offered" in text
        assert page_fault_short(pd.Series(eager)).startswith("about ")


@glibc
def test_the_screen_stays_within_its_budget_and_off_the_devices():
    class Counted(_NumpyChurn):
        calls = 0

        def run(self, n):
            Counted.calls += 1
            super().run(n)

    class M:
        step_time_s = 2.0  # a Keras fit epoch of 2 s: not screened

    cpu = PointSpec("s001-mlp", "torch", "cpu", "eager", {"batch": 64, "hidden": 32})
    assert heap.heap_columns(cpu, Counted(1), M()) == {"trimmed_page_faults": None}
    assert Counted.calls == 0
    M.step_time_s = 0.2  # 0.5 s of budget: two calls
    assert heap.heap_columns(cpu, Counted(1), M())["trimmed_page_faults"] is not None
    assert Counted.calls == 2
    cuda = PointSpec("s001-mlp", "torch", "cuda", "eager", {"batch": 64, "hidden": 32})
    assert heap.heap_columns(cuda, Counted(1), M()) == {"trimmed_page_faults": None}
