"""A disk that takes no more writes (issue 47 item 10): full or read-only, each part of the
study says so in one line naming the cause and the path, before any work where it can
know, and nothing measured is lost: a workflow job (the rule's one line on Snakemake's
terminal, not only in its log), a measuring job (its journal keeps every point measured
before), ``crossover-study check`` (refused before anything is timed on a read-only
folder) and ``crossover-study study``.

Real full and read-only file systems are mounted in a user and mount namespace of their
own (``unshare -rm``); where the machine allows none, those tests are skipped and the
others provoke the same errors with the operating system's own ``/dev/full``."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from crossover_study import cli
from crossover_study.core import errors
from crossover_study.core.files import write_csv_atomic
from crossover_study.core.paths import REPO_ROOT
from crossover_study.measure import journal as journal_module
from crossover_study.measure.job import measure_job
from crossover_study.quickcheck import command as check

ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
CNN = str(REPO_ROOT / "examples/digits_cnn.py")


def _namespaces() -> bool:
    """Whether this machine lets a process mount a file system of its own."""
    if shutil.which("unshare") is None:
        return False
    probe = "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d && umount $d && rmdir $d"
    return (
        subprocess.run(["unshare", "-rm", "sh", "-c", probe], capture_output=True).returncode == 0
    )


needs_mounts = pytest.mark.skipif(
    not _namespaces(), reason="no user and mount namespaces here (unshare -rm)"
)


def _in_mount(folder: Path, options: str, *command: str) -> subprocess.CompletedProcess:
    """``command`` run with a tmpfs mounted at ``folder`` (``options``: ``ro``,
    ``size=64k``) in a mount namespace of its own; ``$1`` in it is ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    script = f'mount -t tmpfs -o {options} tmpfs "$1" && shift && exec "$@"'
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", str(folder), *command],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )


def _full(tmp: Path, name: str) -> Path:
    """A path whose temporary file (as the atomic writers name it) is ``/dev/full``:
    every write to it fails with the kernel's own ENOSPC."""
    target = tmp / name
    (tmp / f".{name}.{os.getpid()}.tmp").symlink_to("/dev/full")
    return target


def test_a_full_disk_names_the_file_and_leaves_no_temporary_file(tmp_path):
    target = _full(tmp_path, "timings.csv")
    with pytest.raises(OSError) as full:
        write_csv_atomic([{"a": 1}] * 10_000, ["a"], target)
    assert full.value.errno == errno.ENOSPC and full.value.filename == str(target)
    assert errors.describe_os_error(full.value) == f"no space left on device: {target}"
    assert list(tmp_path.iterdir()) == []  # the temporary file (here the link) is gone


def test_a_workflow_job_on_a_full_disk_says_so_in_one_line(tmp_path, capfd):
    """What every workflow script runs in (workflow/scripts/*.py): the rule's one line
    on the job's standard output (Snakemake's terminal) and in its log, exit status 1,
    instead of a traceback in the log only."""
    target = _full(tmp_path, "manifest.json")
    log = tmp_path / "manifest.log"
    with (
        pytest.raises(SystemExit) as stopped,
        errors.disk_errors_in_one_line("rule manifest", log, errors.STUDY_KEPT),
    ):
        write_csv_atomic([{"a": 1}] * 10_000, ["a"], target)
    assert stopped.value.code == 1
    line = (
        f"rule manifest: cannot write: no space left on device: {target}; nothing measured is "
        "lost (the per-job tables and journals under results/<study>/ stay); free space or "
        "make the folder writable, then run the study again"
    )
    assert capfd.readouterr().out == line + "\n"
    assert log.read_text() == line + "\n"


def test_every_workflow_script_says_a_full_disk_in_one_line():
    for script in sorted((REPO_ROOT / "workflow/scripts").glob("*.py")):
        text = script.read_text()
        assert "with disk_errors_in_one_line(" in text, script.name


@needs_mounts
def test_a_workflow_job_on_a_really_full_disk(tmp_path):
    """The same on a tmpfs of 64 KiB, a manifest of a few MB written to it."""
    code = textwrap.dedent(
        """
        import sys
        from crossover_study.core.errors import STUDY_KEPT, disk_errors_in_one_line
        from crossover_study.provenance.manifest import write_json

        with disk_errors_in_one_line("rule manifest", None, STUDY_KEPT):
            write_json({"x": "y" * 4_000_000}, sys.argv[1] + "/manifest.json")
        """
    )
    mount = tmp_path / "small"
    done = _in_mount(mount, "size=64k", sys.executable, "-c", code, str(mount))
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stdout.startswith(
        f"rule manifest: cannot write: no space left on device: {mount}/manifest.json; "
        "nothing measured is lost"
    )
    assert "Traceback" not in done.stdout + done.stderr


@needs_mounts
def test_a_check_into_a_read_only_folder_is_refused_before_anything_is_timed(tmp_path):
    mount = tmp_path / "ro"
    cmd = [sys.executable, "-m", "crossover_study", "check", CNN, "--size", "batch=32"]
    cmd += ["--size", "channels=16", "--quick", "--out", str(mount / "out")]
    done = _in_mount(mount, "ro", *cmd)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.strip() == (
        f"crossover-study check: --out {mount / 'out'}: cannot make the folder: read-only "
        f"file system: {mount / 'out'}"
    )
    assert done.stdout == ""  # nothing started, nothing timed


def test_a_check_into_a_folder_it_cannot_make_is_refused_in_one_line(capsys, tmp_path, monkeypatch):
    """Without a mount: the default folder under a results/ that is a file (ENOTDIR),
    and one under a folder the OS refuses (EROFS, as a read-only file system does)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").write_text("not a folder")
    argv = [CNN, "--size", "batch=32", "--size", "channels=16", "--quick"]
    assert check.main(argv, "crossover-study check") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot make results/check-digits-cnn-" in err
    assert err.endswith("not a directory: " + err.split(": ")[-1])
    real_mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):
        if str(self).startswith(str(tmp_path / "ro")):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    assert check.main([*argv, "--out", str(tmp_path / "ro/out")], "crossover-study check") == 2
    assert capsys.readouterr().err.strip() == (
        f"crossover-study check: --out {tmp_path / 'ro/out'}: cannot make the folder: "
        f"read-only file system: {tmp_path / 'ro/out'}"
    )


def test_a_check_whose_disk_fills_says_so_and_keeps_its_folder(capsys, tmp_path, monkeypatch):
    out = tmp_path / "check"

    def fills(config, case, absent, folder, workdir):
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "timings.csv"))

    monkeypatch.setattr(check, "run_check", fills)
    argv = [CNN, "--size", "batch=32", "--size", "channels=16", "--quick", "--out", str(out)]
    assert check.main(argv, "crossover-study check") == 1
    assert capsys.readouterr().err.strip() == (
        f"crossover-study check: cannot write: no space left on device: {out / 'timings.csv'}; "
        f"{out} keeps what was measured (its journals hold every point measured)"
    )
    assert out.is_dir()


def test_a_study_in_a_folder_it_cannot_write_is_refused_in_one_line(capsys, tmp_path, monkeypatch):
    import tempfile

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path))

    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    with pytest.raises(SystemExit) as refused:
        cli.main(["study", "--directory", str(tmp_path), "--", "-n"])
    assert refused.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        f"crossover-study study: error: --directory {tmp_path}: cannot write there: "
        f"read-only file system: {tmp_path}"
    )


def test_a_measuring_job_whose_disk_fills_keeps_the_points_journaled(tmp_path, monkeypatch):
    """The journal cannot take the second point's row: the job fails with one line
    naming the cause and the journal, and the first point's row is in the journal."""
    study = yaml.safe_load((REPO_ROOT / "config/studies/smoke.yaml").read_text())
    study["sweep"] = {"frameworks": ["torch"], "devices": ["cpu"], "variants": ["eager"]}
    study["cases"] = {"s001-mlp": {"axes": {"hidden": [128, 256]}}}
    study["timing"].update(max_point_s=0.5, max_warmup_s=0.1, sync_check_s=0)
    files = {k: tmp_path / f"job.{k}" for k in ("csv", "probe", "journal", "log")}
    real = journal_module.Journal.finish
    finished = []

    def fills(self, key, row, point_deadline_s=None):
        if finished:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        finished.append(key)
        return real(self, key, row, point_deadline_s)

    monkeypatch.setattr(journal_module.Journal, "finish", fills)
    said = []
    with pytest.raises(OSError):
        measure_job(study, "s001-mlp", "torch", "cpu", 0, 1, *files.values(), echo=said.append)
    assert [line for line in said if line.startswith("job failed")] == [
        f"job failed: cannot write: no space left on device: {files['journal']}; the points "
        "measured before are kept in its journal; a rerun measures the rest"
    ]
    done = [
        json.loads(line) for line in files["journal"].read_text().splitlines() if '"done"' in line
    ]
    assert [entry["key"] for entry in done] == finished and done[0]["row"]["status"] == "ok"
