"""A point measured under contention says so (issue 38 item 4): the share of the job's
CPUs other work took, the wait for a quiet machine and the one re-measurement, the flag,
its exclusion from the crossover, verdicts and remedy rankings, the config keys and
the job fingerprint they stay out of. Host readings are faked (the sampler is replaced):
no real contention is needed."""

from __future__ import annotations

import dataclasses
import time

import pandas as pd
import pytest
from conftest import iris_row, s001_rows
from test_plugins import FAST

from crossover_study.analysis.crossover import crossover_table
from crossover_study.analysis.shifts import remedy_shift
from crossover_study.answers.remedies import remedy_sentence
from crossover_study.answers.sentences import answer_sentence
from crossover_study.core import host_load
from crossover_study.core.host_load import HostSample, contention_share, wait_until_quiet
from crossover_study.measure import harness
from crossover_study.measure import point as point_measure
from crossover_study.measure.runner import GroupSpec
from crossover_study.study import job_limits
from crossover_study.study import points as study_points
from crossover_study.study.config import validate_config
from crossover_study.study.job_limits import ContentionPolicy
from crossover_study.study.spec import PointSpec, contended_apart, seed_sizes
from crossover_study.study.study_file import ConfigError


# ----------------------------------------------------------------------------- the share
def test_share_counts_only_other_work_beyond_the_cpus_the_job_does_not_need():
    # 2 CPUs: a 1-thread job beside another 1-thread job (the study's own) is not contended.
    assert contention_share(1.0, threads=1, host_cpus=2) == 0.0
    # A 2-thread job beside a process holding one core: half its CPUs taken.
    assert contention_share(1.0, threads=2, host_cpus=2) == pytest.approx(0.5)
    assert contention_share(0.05, threads=2, host_cpus=2) == pytest.approx(0.025)
    assert contention_share(5.0, threads=2, host_cpus=4) == 1.0  # never above 1
    assert contention_share(None, threads=2) is None


class FakeHost:
    """Host readings with other work keeping ``rate(call)`` CPUs busy in the interval
    ending at the ``call``-th reading (1-based); this process's own CPU time is real."""

    def __init__(self, rate):
        self.rate, self.calls, self.busy, self.last = rate, 0, 0.0, time.perf_counter()

    def __call__(self) -> HostSample:
        self.calls += 1
        now = time.perf_counter()
        self.busy += (now - self.last) * self.rate(self.calls)
        self.last = now
        own = host_load.own_cpu_s()
        return HostSample(now, 0.5, self.busy + own, own, None)


def _fake_host(monkeypatch, rate) -> FakeHost:
    fake = FakeHost(rate)
    monkeypatch.setattr(harness, "host_sample", fake)
    monkeypatch.setattr(host_load, "host_sample", fake)
    monkeypatch.setattr(host_load.os, "cpu_count", lambda: 2)
    return fake


def test_wait_until_quiet_returns_once_a_window_reads_quiet(monkeypatch):
    fake = _fake_host(monkeypatch, lambda call: 2.0 if call <= 2 else 0.0)
    quiet, waited = wait_until_quiet(2, 0.25, 10.0, poll_s=0.1)
    assert quiet and 0.1 <= waited < 5.0
    assert fake.calls == 3  # busy window, then a quiet one


def test_wait_until_quiet_gives_up_at_its_bound(monkeypatch):
    _fake_host(monkeypatch, lambda call: 2.0)
    quiet, waited = wait_until_quiet(2, 0.25, 0.2, poll_s=0.1)
    assert not quiet and 0.1 <= waited <= 1.0  # stops at its bound (sleeps may overshoot)
    assert wait_until_quiet(2, 0.25, 0.0, poll_s=0.1)[0] is False


# ----------------------------------------------------------------------------- the point
POINT = PointSpec("s001-mlp", "torch", "cpu", "eager", seed_sizes("s001-mlp"))
#: Timed blocks long enough (>= 0.1 s in all) for host_cpus_others to be read.
TIMED = dataclasses.replace(FAST, min_block_s=0.1)
#: A tiny wait: the tests never sit out 20 s.
QUICK = ContentionPolicy(share=0.25, wait_s=1.0)


@pytest.fixture(autouse=True)
def _fresh_job_wait(monkeypatch):
    monkeypatch.setattr(point_measure._JobWait, "waited_s", 0.0)


def test_a_contended_point_waits_for_quiet_and_is_measured_again(monkeypatch):
    # Readings 1-2 bracket the first timed blocks (2 other CPUs busy); then quiet.
    fake = _fake_host(monkeypatch, lambda call: 2.0 if call <= 2 else 0.0)
    row = point_measure.measure_point(POINT, TIMED, 0.0, 0.0, 1, QUICK)
    assert row["status"] == "ok", row["message"]
    assert row["remeasured"] is True and row["contended"] is False
    assert 0 < row["contention_wait_s"] <= QUICK.wait_s
    assert row["host_cpus_others"] == pytest.approx(0.0, abs=0.05)  # the second measurement's
    assert row["message"] is None or "contention" not in row["message"]
    assert fake.calls >= 5  # two readings per measurement, at least one while waiting


def test_a_point_still_contended_is_kept_and_flagged(monkeypatch):
    _fake_host(monkeypatch, lambda call: 2.0)
    row = point_measure.measure_point(POINT, TIMED, 0.0, 0.0, 1, QUICK)
    assert row["status"] == "ok" and row["step_time_s"] > 0  # the measurement is kept
    assert row["contended"] is True and row["remeasured"] is False
    assert QUICK.wait_s / 2 <= row["contention_wait_s"] <= QUICK.wait_s + 1.5
    assert "measured under contention: other work took 100% of the job's 1 CPU" in row["message"]
    assert "timing.contention_share=0.25" in row["message"]


def test_a_job_stops_waiting_once_its_total_wait_is_spent(monkeypatch):
    _fake_host(monkeypatch, lambda call: 2.0)
    monkeypatch.setattr(point_measure._JobWait, "waited_s", QUICK.job_wait_s)
    row = point_measure.measure_point(POINT, TIMED, 0.0, 0.0, 1, QUICK)
    assert row["contended"] is True and row["contention_wait_s"] == 0.0
    assert "waited 0 s for a quiet machine in vain" in row["message"]


def test_a_quiet_point_and_an_unchecked_one(monkeypatch):
    _fake_host(monkeypatch, lambda call: 0.0)
    row = point_measure.measure_point(POINT, TIMED, 0.0, 0.0, 2, QUICK)
    assert (row["contended"], row["contention_wait_s"], row["remeasured"]) == (False, 0.0, False)
    _fake_host(monkeypatch, lambda call: 2.0)
    unchecked = point_measure.measure_point(POINT, TIMED, 0.0, 0.0, 1)
    assert (unchecked["contended"], unchecked["remeasured"]) == (None, None)


# ----------------------------------------------------------------------------- settings
def _config(**timing) -> dict:
    return {
        "study": "t",
        "sweep": {"frameworks": ["torch"], "devices": ["cpu"], "variants": ["eager"]},
        "cases": {"s001-mlp": {}},
        "timing": timing,
    }


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("contention_share", 0, r"timing.contention_share: 0 is less than or equal to the minimum"),
        ("contention_share", 1.5, r"timing.contention_share: 1.5 is greater than the maximum of 1"),
        ("contention_share", "a", r"timing.contention_share: 'a' is not of type 'number'"),
        ("contention_wait_s", -1, r"timing.contention_wait_s: -1 is less than the minimum of 0"),
    ],
)
def test_bad_contention_settings_name_the_key(key, value, expected):
    with pytest.raises(ConfigError, match=expected):
        validate_config(_config(**{key: value}))


def test_contention_settings_read_with_defaults_and_stay_out_of_the_fingerprint():
    plain = validate_config(_config())
    mine = validate_config(_config(contention_share=0.5, contention_wait_s=3))
    assert "contention_share" not in plain["timing"]  # no default filled in
    assert job_limits.contention_policy(plain) == ContentionPolicy(0.25, 20.0)
    assert job_limits.contention_policy(mine) == ContentionPolicy(0.5, 3)
    assert study_points.measurement_hash(plain) == study_points.measurement_hash(mine)
    assert study_points.measurement_timing(plain) == study_points.measurement_timing(mine)
    group = GroupSpec("s001-mlp", "torch", "cpu", (POINT,), 1, FAST, "skip", "h")
    for contention in (ContentionPolicy(), ContentionPolicy(0.9, 0.0)):
        assert dataclasses.replace(group, contention=contention).settings() == group.settings()
    fields = {f.name for f in dataclasses.fields(study_points.TimingPolicy)}
    assert not fields & {"contention_share", "contention_wait_s", "share", "wait_s"}


# ----------------------------------------------------------------------------- answers
def _iris(framework, variant, t, contended=False):
    return iris_row(framework, variant, t, contended=contended)


def test_a_contended_variant_is_never_ranked():
    df = pd.DataFrame(
        [
            _iris("tensorflow", "eager", 20e-3),
            _iris("tensorflow", "custom_step", 0.8e-3, contended=True),
            _iris("tensorflow", "train_on_batch", 1.7e-3),
        ]
    )
    # paired with eager (a remedy measured apart is never offered: issue 62)
    df = df.assign(interleaved=True, speedup=df["step_time_s"].rdiv(20e-3))
    df = df.assign(speedup_low=0.95 * df["speedup"], speedup_high=1.05 * df["speedup"])
    text = remedy_sentence(df, "s002-iris")
    assert "train_on_batch takes 1.7 ms per step" in text
    assert "custom_step left out: measured under contention" in text
    quiet = remedy_sentence(df.assign(contended=False), "s002-iris")
    assert "custom_step takes 800 µs per step" in quiet
    # Without the column (a table written before it): the same answer as a quiet one.
    assert remedy_sentence(df.drop(columns="contended"), "s002-iris") == quiet


def test_no_remedy_is_ranked_against_a_contended_eager():
    df = pd.DataFrame(
        [
            _iris("torch", "eager", 64e-3, contended=True),
            _iris("torch", "compile", 4e-3),
        ]
    )
    text = remedy_sentence(df, "s002-iris")
    assert "no torch remedy is ranked: eager was measured under contention" in text
    assert "faster than eager" not in text


def _curves(contended_cuda_hidden=()):
    hidden = (32, 128, 512, 2048)
    rows = s001_rows("cpu", hidden, [1e-5 * h for h in hidden])
    rows += s001_rows("cuda", hidden, [2.56e-3] * 4)
    for row in rows:
        row["contended"] = row["device"] == "cuda" and row["hidden"] in contended_cuda_hidden
    return pd.DataFrame(rows)


def test_the_crossover_leaves_contended_rows_out():
    quiet = crossover_table(_curves(), n_boot=50)
    hidden = quiet[quiet["axis"] == "hidden"].iloc[0]
    assert hidden["n_sizes"] == 4 and hidden["outcome"] == "crossover"
    apart = crossover_table(_curves(contended_cuda_hidden=(128, 512)), n_boot=50)
    row = apart[apart["axis"] == "hidden"].iloc[0]
    assert row["n_sizes"] == 2  # the two contended accelerator points left out
    assert pd.isna(row["speedup_at_seed"])  # the seed size (128) was contended
    assert remedy_shift(apart).empty  # eager only: nothing to shift, nothing from them


def test_the_answer_draws_no_verdict_from_contended_rows():
    quiet = answer_sentence(_curves(), crossover_table(_curves(), n_boot=50), "s001-mlp")
    assert "CUDA" in quiet and "contention" not in quiet
    every = _curves(contended_cuda_hidden=(32, 128, 512, 2048))
    text = answer_sentence(every, crossover_table(every, n_boot=50), "s001-mlp")
    assert "every CUDA point was measured under contention" in text
    assert "faster" not in text and "slower" not in text


def test_contended_apart_leaves_a_table_without_the_column_as_it_is():
    df = _curves()
    assert contended_apart(df.drop(columns="contended")) is not None
    assert (contended_apart(df)["status"] == "ok").all()
    apart = contended_apart(_curves(contended_cuda_hidden=(32,)))
    assert list(apart["status"]).count("contended") == 1


# ----------------------------------------------------------------------------- figure
def test_variant_figure_marks_flags_and_labels_times_in_ms_and_us():
    import matplotlib

    matplotlib.use("Agg")
    from crossover_study.figures.draw import variant_comparison

    df = pd.DataFrame(
        [
            {**_iris("torch", "eager", 1.0e-3), "step_time_iqr_s": 1e-5},
            {**_iris("torch", "compile", 1.01e-3, contended=True), "retraced": True},
            {**_iris("torch", "loop", 0.99e-3), "same_program": False},
        ]
    )
    ax = variant_comparison(df, "s002-iris")
    gids = {a.get_gid() for a in ax.collections}
    assert {"contended", "retraced", "not_same_program"} <= gids
    low, high = ax.get_xlim()
    assert high / low >= 10 * 0.999  # 1 % apart never fills the axis
    ax.figure.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert labels and all(t.endswith(("µs", "ms", " s")) for t in labels), labels
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "contended (kept out of verdicts)" in legend and "retraced while timed" in legend
