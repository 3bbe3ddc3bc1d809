"""``crossover-study check`` (issue 40): bad input refused in one line before any timing,
the variants and devices it derives, and end to end on both examples (quick timing):
progress lines, the answer, an absent device never timed, and an output folder that
audits OK and compares."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import psutil
import pytest

from crossover_study.analysis.compare_runs import main as compare_main
from crossover_study.audit.verify import audit
from crossover_study.core.paths import REPO_ROOT
from crossover_study.quickcheck import command as check
from crossover_study.quickcheck import inputs
from crossover_study.study.device_cards import DEFAULT_CARDS

CNN = "examples/digits_cnn.py"
KERAS = "examples/digits_keras_fit.py"


def _refused(capsys, tmp_path, *argv) -> str:
    """Run the check; assert exit 2, one line on stderr, nothing written; return it."""
    out = tmp_path / "out"
    assert check.main([*argv, "--out", str(out)], "crossover-study check") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert not out.exists()
    return err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["missing.py", "--size", "batch=3"], "missing.py: no such plug-in file"),
        ([CNN], "give the sizes"),
        ([CNN, "--size", "batch=32"], "requires 'channels'"),  # a parameter without a size
        ([CNN, "--size", "batch=32", "--size", "channels=16", "--size", "width=2"], "'width'"),
        ([CNN, "--size", "batch=0", "--size", "channels=16"], "--size batch=0"),
        (
            [CNN, "--size", "batch=32", "--size", "channels=16", "--variants", "eager,fast"],
            "'fast'",
        ),
        ([CNN, "--size", "batch=32", "--size", "channels=16", "--devices", "cpu,gpu"], "'gpu'"),
        ([CNN, "--size", "batch=32", "--size", "channels=16", "--framework", "jax"], "jax"),
        (["s001-mlp", "--size", "width=3"], "no axis 'width'"),
        # Issue 47 item 7: a file that is no plug-in is named as such, not framework-less.
        (["README.md", "--size", "batch=2"], "README.md: not a Python file"),
        (
            ["s001-mlp", "--predict", "t4,gtx-9090"],
            "--predict t4,gtx-9090: unknown device card 'gtx-9090'",
        ),
    ],
)
def test_bad_input_one_line_exit_2(capsys, tmp_path, argv, named):
    assert named in _refused(capsys, tmp_path, *argv)


@pytest.mark.parametrize(
    ("name", "text", "named"),
    [
        # Issue 47 item 7: parsed first, so the line names the real cause.
        (
            "broken.py",
            "import torch\n\n\ndef build(device, batch)\n    return None\n",
            "broken.py line 4: expected ':'",
        ),
        ("notes.txt", "def build(device, batch):\n    pass\n", "notes.txt: not a Python file"),
        ("latin.py", "# caf\xe9\nimport torch\n", "latin.py: not UTF-8 text"),
        ("plain.py", "import numpy\n\ndef build(device, batch):\n    pass\n", "give --framework"),
    ],
)
def test_a_file_that_does_not_parse_is_named_before_its_framework(
    capsys, tmp_path, monkeypatch, name, text, named
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_bytes(text.encode("latin-1"))
    err = _refused(capsys, tmp_path, name, "--size", "batch=4")
    assert named in err
    assert ("imports neither" in err) == (named == "give --framework")


def test_no_builder(capsys, tmp_path):
    plugin = tmp_path / "nobuild.py"
    plugin.write_text("import torch\n\ndef make(device, batch):\n    pass\n")
    err = _refused(capsys, tmp_path, str(plugin), "--size", "batch=4")
    assert "defines no function or class 'build'" in err and "it defines make" in err


def test_framework_not_installed(capsys, tmp_path, monkeypatch):
    real = inputs.importlib.util.find_spec
    monkeypatch.setattr(
        inputs.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tensorflow" else real(name, *a),
    )
    err = _refused(capsys, tmp_path, KERAS, "--size", "batch=16", "--size", "units=64")
    assert "framework tensorflow is not installed" in err


def test_devices_present_from_the_gpu_snapshot():
    none = inputs.present_devices({"gpus": [], "reason": "nvidia-smi: not on PATH"})
    assert none["cpu"] is None and "not on PATH" in none["cuda"] and none["cuda_multi"]
    one = inputs.present_devices({"gpus": [{"index": 0}], "reason": None})
    assert one["cuda"] is None and "2 needed" in one["cuda_multi"]


def test_default_variants_are_those_that_apply(tmp_path):
    from crossover_study.study import config as study_config

    raw = {
        "study": "t",
        "sweep": {"frameworks": ["torch"], "devices": ["cpu"]},
        "cases": {
            "digits-cnn": {
                "workload": CNN,
                "framework": "torch",
                "seed": {"batch": 32, "channels": 16},
            }
        },
    }
    study_config.validate_config(raw)
    on_cpu = inputs.default_variants("digits-cnn", "torch", ["cpu"])
    assert on_cpu[0] == "eager" and "compile" in on_cpu and "read_loss_every_1000" in on_cpu
    assert not {"cuda_graph", "tf32", "xla", "function"} & set(on_cpu)
    assert {"cuda_graph", "tf32"} <= set(
        inputs.default_variants("digits-cnn", "torch", ["cpu", "cuda"])
    )
    assert inputs.case_name(inputs.Path(KERAS)) == "digits-keras-fit"


def _check_run(capsys, tmp_path, argv, devices="cpu,cuda"):
    out = tmp_path / "check"
    assert check.main([*argv, "--quick", "--devices", devices, "--out", str(out)], "check") == 0
    printed = capsys.readouterr().out
    return out, printed, json.loads((out / "answer.json").read_text())


def _assert_recorded(out, printed, answer, case, points, cuda_asked=True):
    assert printed.count(f"/{points} ") == points  # one progress line per measured point
    assert "full sweep for a crossover" in printed
    timings = pd.read_csv(out / "timings.csv")
    cuda = timings[timings["device"] == "cuda"]
    if cuda_asked:  # absent here: said in one line, unavailable rows, never timed
        assert "cuda: absent on this machine" in printed
        assert len(cuda) and set(cuda["status"]) <= {"unavailable", "not_applicable"}
    else:
        assert cuda.empty
    # Every default device card predicts the step, one line each, labelled as predicted;
    # the predictions are a table of their own, never rows of timings.csv.
    assert set(answer["card_predictions"]) == set(DEFAULT_CARDS)
    assert "predicted from device cards (not measured" in printed
    for line in answer["card_predictions"].values():
        assert "(predicted from its card): " in line and f"  {line}" in printed
    # answer.json says which way each card goes, only where the band says so.
    assert set(answer["card_verdicts"]) == set(DEFAULT_CARDS)
    for verdict in answer["card_verdicts"].values():
        assert verdict["direction"] in ("faster", "slower", "undecided")
        assert verdict["low_s"] <= verdict["step_s"] <= verdict["high_s"]
        if verdict["direction"] == "faster":
            assert verdict["high_s"] < verdict["cpu_low_s"]
        elif verdict["direction"] == "slower":
            assert verdict["low_s"] > verdict["cpu_high_s"]
    predicted = pd.read_csv(out / "predicted.csv")
    assert set(predicted["card"]) == set(DEFAULT_CARDS) and set(predicted["kind"]) == {"prediction"}
    assert predicted["predicted_step_s"].notna().any()
    # The answer in about 12 lines: from its heading to the sweep command, no warning.
    lines = printed.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{case} ("))
    end = next(i for i, line in enumerate(lines) if line.startswith("full sweep for a crossover"))
    assert end - start + 1 <= 13, "\n".join(lines[start : end + 1])
    assert "Warning" not in printed
    assert answer["case"] == case and answer["devices"]["cpu"]["status"] == "ok"
    assert answer["devices"]["cpu"]["q1_s"] <= answer["devices"]["cpu"]["step_time_s"]
    assert (
        answer["sweep_command"].startswith("make study STUDY=") and (out / "sweep.yaml").is_file()
    )
    report = audit(out)
    assert report.ok, report.text()
    assert compare_main([str(out), str(out)]) == 0


@pytest.mark.slow
def test_check_torch_example_end_to_end(capsys, tmp_path):
    argv = [
        CNN,
        "--size",
        "batch=32",
        "--size",
        "channels=16",
        "--variants",
        "eager,read_loss_every_1000",
    ]
    out, printed, answer = _check_run(capsys, tmp_path, argv)
    _assert_recorded(out, printed, answer, "digits-cnn", 2)
    # the check profiles the step after timing it: the why is measured, the model beside
    assert answer["why"].startswith("why (measured, with the step-time model): with torch, on")
    assert [r["variant"] for r in answer["remedies"]["cpu"]] == ["read_loss_every_1000"]


@pytest.mark.slow
def test_check_keras_example_end_to_end(capsys, tmp_path):
    argv = [KERAS, "--size", "batch=16", "--size", "units=64", "--variants", "eager"]
    out, printed, answer = _check_run(capsys, tmp_path, argv, devices="cpu")
    _assert_recorded(out, printed, answer, "digits-keras-fit", 1, cuda_asked=False)
    assert answer["framework"] == "tensorflow" and answer["sizes"] == {"batch": 16, "units": 64}


@pytest.mark.slow
def test_a_plugin_that_raises_gives_its_error_row_and_the_check_goes_on(capsys, tmp_path):
    plugin = tmp_path / "flaky.py"
    plugin.write_text(
        textwrap.dedent(
            """
            import torch
            from crossover_study.plugin import TorchStep

            BUILDS = []

            def build(device, batch):
                BUILDS.append(batch)
                first = len(BUILDS) == 1
                w = torch.zeros(batch, requires_grad=True, device=device)

                def step():
                    if first:
                        raise RuntimeError("flaky step")
                    return (w * w).sum()

                return TorchStep(step)
            """
        )
    )
    argv = [str(plugin), "--size", "batch=4", "--variants", "eager,read_loss_every_1000"]
    out = tmp_path / "check"
    assert check.main([*argv, "--quick", "--devices", "cpu", "--out", str(out)], "check") == 0
    printed = capsys.readouterr().out
    timings = pd.read_csv(out / "timings.csv").set_index("variant")
    assert (
        timings.loc["eager", "status"] == "error"
        and "flaky step" in timings.loc["eager", "message"]
    )
    assert timings.loc["read_loss_every_1000", "status"] == "ok"
    assert "CPU: error" in printed


def test_a_framework_s_own_stderr_at_an_absent_device_goes_to_the_job_log(capfd, tmp_path):
    """What C++ code writes straight to descriptor 2 (TensorFlow's absl and oneDNN
    lines when the absent device's probe record imports it) lands in the job's log, not
    among the check's lines; the descriptor is restored after."""
    log = tmp_path / "logs" / "job.log"
    with check._fd_stderr_to(log):
        os.write(2, b"I0000 port.cc:153] oneDNN custom operations are on.\n")
    os.write(2, b"after\n")
    assert "oneDNN" in log.read_text()
    err = capfd.readouterr().err
    assert "oneDNN" not in err and "after" in err


def test_two_checks_in_the_same_second_get_two_folders(tmp_path, monkeypatch):
    """Issue 47 item 8: two checks of one case started in the same second (the same
    UTC stamp) each get a folder of their own, named as their study; an --out that
    exists is refused in one line before anything is timed."""
    monkeypatch.chdir(tmp_path)

    class Frozen(check.datetime):
        @classmethod
        def now(cls, tz=None):
            return check.datetime(2026, 12, 5, 7, 0, 0, tzinfo=tz)

    ran = []
    monkeypatch.setattr(check, "datetime", Frozen)
    monkeypatch.setattr(
        check,
        "run_check",
        lambda config, case, absent, out, workdir: (
            ran.append((config["study"], out)) or {"incomplete": None}
        ),
    )
    argv = [str(REPO_ROOT / CNN), "--size", "batch=32", "--size", "channels=16", "--quick"]
    assert check.main(argv, "check") == 0 and check.main(argv, "check") == 0
    first, second = ran
    assert first[1] == tmp_path / "results" / "check-digits-cnn-20261205T070000Z"
    assert second[1] == tmp_path / "results" / "check-digits-cnn-20261205T070000Z-2"
    assert [study for study, _ in ran] == [out.name for _, out in ran]
    with pytest.raises(inputs.CheckError, match="exists: a check never writes into a folder"):
        inputs.claim_folder(str(first[1]), "x")
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == [
        first[1].name,
        second[1].name,
    ]


def test_an_out_folder_that_exists_is_refused_in_one_line(capsys, tmp_path):
    used = tmp_path / "used"
    used.mkdir()
    (used / "timings.csv").write_text("kept\n")
    argv = [CNN, "--size", "batch=32", "--size", "channels=16", "--out", str(used)]
    assert check.main(argv, "crossover-study check") == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"crossover-study check: --out {used} exists: a check never writes into a folder "
        "used before; give a new one (or leave --out out: results/check-<case>-<UTC time>/)"
    )
    assert (used / "timings.csv").read_text() == "kept\n" and len(list(used.iterdir())) == 1


#: A plug-in whose first build (the check's first point) leaves a child process and a
#: non-daemon thread running, and whose second build sleeps ``{sleep}`` s (issue 47
#: items 2 and 9): ``{marker}`` names the child's unique argument and the file the first
#: build leaves.
LINGERS = """
import pathlib
import subprocess
import threading
import time

import torch

from crossover_study.plugin import TorchStep

MARKER = pathlib.Path({marker!r})


def build(device, batch):
    subprocess.Popen(["sleep", MARKER.name])
    threading.Thread(target=time.sleep, args=(600,)).start()
    if MARKER.exists():
        time.sleep({sleep})
    MARKER.touch()
    w = torch.ones(batch, requires_grad=True, device=device)

    def step():
        return (w * w).sum()

    return TorchStep(step)
"""


def _lingering(tmp_path, sleep: float, *extra: str):
    """The check of :data:`LINGERS` (2 points) as a process of its own session (as a
    terminal runs a command), its output folder and its child's marker."""
    marker = tmp_path / f"599.{os.getpid()}{len(extra)}{int(sleep)}"
    (tmp_path / "lingers.py").write_text(LINGERS.format(marker=str(marker), sleep=sleep))
    cmd = [sys.executable, "-m", "crossover_study", "check", "lingers.py", "--size", "batch=4"]
    cmd += ["--quick", "--devices", "cpu", "--variants", "eager,read_loss_every_1000"]
    cmd += ["--out", "check", *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=_as_a_terminal_starts_it,
    )  # fmt: skip
    return proc, tmp_path / "check", marker.name


def _as_a_terminal_starts_it() -> None:
    """SIGINT's default action in the check's process, as a shell gives a command it
    runs in the foreground. The test run itself may have SIGINT ignored (a CI started
    in the background by a shell without job control: POSIX has such a shell's
    asynchronous commands ignore SIGINT), and an ignored SIGINT is inherited: Python
    then installs no KeyboardInterrupt handler, and the check would never see Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _left_running(marker: str) -> list[int]:
    return [
        p.pid
        for p in psutil.process_iter(["cmdline", "status"])
        if marker in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE
    ]


@pytest.mark.slow
def test_a_plugin_that_leaves_a_thread_and_a_child_process_does_not_hang_the_check(tmp_path):
    """Issue 47 item 2: both points measured, then the check returns (it hung), its
    folder complete, and the processes the plug-in left are gone."""
    proc, out, marker = _lingering(tmp_path, 0)
    stdout, stderr = proc.communicate(timeout=400)
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert set(pd.read_csv(out / "timings.csv")["status"]) == {"ok"}
    assert json.loads((out / "manifest.json").read_text()).get("incomplete") is None
    assert _left_running(marker) == []


@pytest.mark.slow
def test_ctrl_c_in_a_check_keeps_what_was_measured_marked_incomplete(tmp_path):
    """Issue 47 item 9: Ctrl-C (SIGINT to the check's process group, as a terminal
    sends it) while the second point builds: one line, no traceback, the folder holds
    the first point and says it is incomplete, and its audit says so."""
    proc, out, marker = _lingering(tmp_path, 600)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "[1/2 " in line:  # the first point's progress line
            break
    time.sleep(3)  # into the second point's build
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    printed = "".join(lines) + stdout + stderr
    assert proc.returncode == 130, printed[-4000:]
    assert "Traceback" not in printed and "KeyboardInterrupt" not in printed
    assert stderr.strip().splitlines()[-1] == (
        f"crossover-study check: interrupted after 1 of 2 points; {out} holds what was "
        "measured, marked incomplete"
    )
    timings = pd.read_csv(out / "timings.csv").set_index("variant")
    assert timings.loc["eager", "status"] == "ok"
    assert timings.loc["read_loss_every_1000", "status"] == "unavailable"
    assert "the job was interrupted (SIGINT)" in timings.loc["read_loss_every_1000", "message"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["incomplete"] == {
        "reason": "interrupted (Ctrl-C)",
        "points_measured": 1,
        "points": 2,
    }
    report = audit(out)
    assert report.ok, report.text()
    assert "note incomplete run" in report.text()
    assert "1 of 2 points measured; interrupted (Ctrl-C)" in report.text()
    assert _left_running(marker) == []


@pytest.mark.slow
def test_a_check_past_its_job_deadline_ends_with_one_line(tmp_path):
    """Issue 47 item 2's deadline through the check: the second point's build sleeps
    past --job-deadline; the job ends with its line naming the deadline, the check
    collects the first point, marks its folder incomplete and says so in one line."""
    proc, out, marker = _lingering(tmp_path, 600, "--job-deadline", "25")
    stdout, stderr = proc.communicate(timeout=400)
    assert proc.returncode == 1, stdout[-3000:] + stderr[-3000:]
    assert "ended at its deadline (timing.job_deadline_s=25 s)" in stdout
    assert stderr.strip().splitlines()[-1] == (
        f"crossover-study check: incomplete: 1 of 2 points measured; {out} holds what was "
        "measured, marked incomplete"
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert "timing.job_deadline_s=25 s" in manifest["incomplete"]["reason"]
    assert audit(out).ok
    assert _left_running(marker) == []
