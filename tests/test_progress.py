"""The progress lines a person watches: one per measuring job, one per point, the same
formatter in the job's log, on Snakemake's terminal and in crossover-study check."""

import re

import pytest

from crossover_study.core import progress
from crossover_study.measure import runner
from crossover_study.measure.runner import GroupSpec, run_group
from crossover_study.study.points import TimingPolicy
from crossover_study.study.spec import PointSpec

SEED = {"batch": 64, "d_in": 1024, "hidden": 128}
POINT = PointSpec("s001-mlp", "torch", "cpu", "eager", SEED)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (1.2149e-3, "1.21 ms"),
        (8.3e-4, "830 µs"),
        (45.67e-6, "45.7 µs"),
        (0.01234, "12.3 ms"),
        (3.2, "3.2 s"),
        (1250.0, "1,250 s"),
        (0.9997, "1 s"),  # rounded first: never "1e+03 ms"
        (9.9996e-4, "1 ms"),
    ],
)
def test_durations_read_with_a_unit(seconds, text):
    assert progress.format_seconds(seconds) == text


def test_an_ok_row_without_a_step_time_says_so():
    assert progress.outcome({"status": "ok", "step_time_s": float("nan")}) == "ok (no step time)"


def test_an_ok_point_says_its_job_sizes_step_time_spread_and_count():
    row = {"status": "ok", "step_time_s": 1.21e-3, "step_time_iqr_s": 2.42e-5, "message": None}
    line = progress.point_line(POINT, row, 3, 37)
    assert line == (
        "[s001-mlp torch cpu · 3/37] eager synced batch=64 d_in=1024 hidden=128: "
        "ok 1.21 ms/step (IQR 2%)"
    )
    match = progress.POINT_LINE.match(line)
    assert match["job"] == "s001-mlp torch cpu" and match["what"] == "ok"
    assert (match["done"], match["total"]) == ("3", "37")
    assert progress.for_terminal(line)


def test_a_failed_point_says_its_status_and_its_message_on_one_short_line():
    message = "RuntimeError: mat1 and mat2 shapes cannot be multiplied\n" + "x" * 400
    line = progress.point_line(POINT, {"status": "error", "message": message}, 1, 2)
    assert "\n" not in line and len(line) < 250
    assert line.endswith("…")
    assert ": error RuntimeError: mat1 and mat2 shapes cannot be multiplied x" in line
    assert progress.POINT_LINE.match(line)["what"] == "error"
    na = progress.point_line(
        POINT, {"status": "not_applicable", "message": "needs CUDA"}, 2, 2, kept_from="abc"
    )
    assert na.endswith("hidden=128: kept from run abc: not_applicable needs CUDA")
    assert progress.POINT_LINE.match(na)["what"] == "kept"


def test_replicated_and_repeated_points_say_so():
    point = PointSpec("s001-mlp", "torch", "cpu", "ddp", SEED, replicas=2, scaling="weak", repeat=1)
    line = progress.point_line(point, {"status": "oom", "message": "out of memory"}, 1, 1)
    assert " ddp synced batch=64 d_in=1024 hidden=128 replicas=2 weak run 2: oom " in line


def test_only_progress_lines_and_alerts_go_to_the_terminal():
    start = progress.job_line("s001-mlp", "torch", "cpu", 37, 2)
    assert start == "[s001-mlp torch cpu] 37 points, 2 threads"
    batch = progress.job_line("s004-lstm", "tensorflow", "cpu", 1, 1, batch=1, batches=3)
    assert batch == "[s004-lstm tensorflow cpu] batch 2 of 3: 1 point, 1 thread"
    for line in (start, batch, "job failed: DeviceLostError: gone", "warning: 2 threads"):
        assert progress.for_terminal(line), line
    for line in (
        "2 CPU(s) in this process's affinity for 2 thread(s)",
        "rates: {...} (3.10 s)",
        "probe: {...}",
        "  s001-mlp|torch|cpu|eager|batch=64: measured again (started 1 time(s) before)",
    ):
        assert not progress.for_terminal(line), line


def _group(hidden=(128, 256)):
    points = tuple(
        PointSpec("s001-mlp", "torch", "cpu", "eager", {**SEED, "hidden": h}) for h in hidden
    )
    policy = TimingPolicy(min_block_s=0.01, n_blocks=3, max_warmup_s=0.1, max_point_s=1)
    return GroupSpec("s001-mlp", "torch", "cpu", points, 1, policy, "skip", "testhash")


def test_the_runner_logs_one_counted_line_per_point_measured_or_kept(tmp_path, monkeypatch):
    """The job's log gets each point's line with the job's count; a rerun's kept points
    count too (no framework work: the point's measurement is stood in for)."""

    def fake(point, policy, import_s, device_init_s, threads, contention=None, pairing=None):
        step = point.sizes["hidden"] * 1e-5
        return {
            "status": "ok",
            "step_time_s": step,
            "step_time_iqr_s": step / 20,
            "import_s": import_s,
            "device_init_s": device_init_s,
            "measured_s": 0.5,
        }

    monkeypatch.setattr(runner, "measure_point", fake)
    journal, out = tmp_path / "j.jsonl", tmp_path / "out.csv"
    said = []
    run_group(_group((128,)), journal, out, log=said.append)
    run_group(_group(), journal, out, log=said.append)
    lines = [line for line in said if progress.POINT_LINE.match(line)]
    assert lines[0] == (
        "[s001-mlp torch cpu · 1/1] eager synced batch=64 d_in=1024 hidden=128: "
        "ok 1.28 ms/step (IQR 5%)"
    )
    assert re.fullmatch(
        r"\[s001-mlp torch cpu · 1/2\] eager synced batch=64 d_in=1024 hidden=128: "
        r"kept from run [0-9a-f]{12}: ok 1\.28 ms/step \(IQR 5%\)",
        lines[1],
    )
    assert lines[2] == (
        "[s001-mlp torch cpu · 2/2] eager synced batch=64 d_in=1024 hidden=256: "
        "ok 2.56 ms/step (IQR 5%)"
    )
    assert len(lines) == 3
