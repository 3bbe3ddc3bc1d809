"""Hostile and odd archives for ``reference-import``: the run's folder name comes from
values inside the archive (the manifest's ``created_utc``, a probe record's CPU count
or GPU name) or from ``--name``; every one that would lead outside the reference folder
is refused whole, with one line naming the field, and nothing is written anywhere.

The archives are built from the committed CPU reference run (a study's results folder
with its manifest), made a reference run's by a ``runner`` record, with one probe
record recorded in the manifest: the untouched archive imports and audits OK, so each
refusal below is the field's doing, not a broken run's."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import COMMITTED_CPU_RUN

from crossover_study.audit.verify import audit
from crossover_study.core.paths import REPO_ROOT
from crossover_study.reference import archive_import as reference_import

STUDY = "results/x"
PROBE = "points/s001-mlp/torch/cpu.probe.json"


def _probe(cpus: object = 16, gpus_end: tuple = ()) -> bytes:
    record = {
        "gpus": [],
        "cpus": {"os_cpu_count": cpus},
        "gpu_state": {"end": {"gpus": [{"name": n} for n in gpus_end]}},
    }
    return json.dumps(record).encode()


def build_archive(path: Path, edit=None, probe: bytes | None = None, members=()) -> Path:
    """A reference run's archive of the committed CPU run at ``path``: its files under
    ``results/x/``, a manifest with a ``runner`` and the probe record ``probe`` (recorded
    with its sha256, so that the run audits OK); ``edit(manifest)`` changes the manifest
    first, ``members`` are more ``(TarInfo, bytes)``."""
    manifest = json.loads((COMMITTED_CPU_RUN / "manifest.json").read_text())
    manifest["runner"] = {"name": "crossover_study.reference.gpu_run (no Snakemake)"}
    probe = _probe() if probe is None else probe
    manifest["probes"] = [
        {
            "bytes": len(probe),
            "path": f"{manifest['results_dir']}/{PROBE}",
            "root": "workdir",
            "sha256": hashlib.sha256(probe).hexdigest(),
        }
    ]
    if edit is not None:
        edit(manifest)
    files = {
        p.relative_to(COMMITTED_CPU_RUN).as_posix(): p.read_bytes()
        for p in sorted(COMMITTED_CPU_RUN.rglob("*"))
        if p.is_file() and p.name not in ("manifest.json", "ro-crate-metadata.json", "README.md")
    }
    files["manifest.json"] = json.dumps(manifest).encode()
    files[PROBE] = probe
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{STUDY}/{name}")
            info.size = len(data)
            tar.addfile(info, _bytes(data))
        for info, data in members:
            tar.addfile(info, _bytes(data) if data is not None else None)
    return path


def _bytes(data: bytes) -> io.BytesIO:
    return io.BytesIO(data)


def tree(root: Path) -> set[str]:
    """Every path under ``root`` (files, folders, links), relative to it."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.fixture
def place(tmp_path):
    """A checkout's layout in ``tmp_path``: ``<tmp>/repo/results/reference`` (the
    reference folder, empty) and the archives beside ``repo``."""
    root = tmp_path / "repo" / "results" / "reference"
    root.mkdir(parents=True)
    return tmp_path, root


def run_cli(place, archive: Path, *extra: str) -> subprocess.CompletedProcess:
    tmp, root = place
    return subprocess.run(
        [sys.executable, "-m", "crossover_study", "reference-import", str(archive)]
        + ["--reference", str(root), *extra],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )


def assert_refused(place, archive: Path, *extra: str, field: str) -> str:
    """The command line refuses ``archive``: exit status 1, one line naming ``field``
    and ending "archive refused", no traceback, nothing written anywhere under the
    test's folder. Returns the line."""
    tmp, _ = place
    before = tree(tmp)
    result = run_cli(place, archive, *extra)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("reference import: ") and field in lines[0], lines[0]
    assert lines[0].endswith("archive refused"), lines[0]
    assert tree(tmp) == before
    return lines[0]


def test_the_untouched_archive_imports_under_its_probe_name(place):
    tmp, root = place
    archive = build_archive(tmp / "good.tar.gz")
    dest = reference_import.import_archive(archive, root, log=lambda _: None)
    assert dest == root / "cpu-16core-2026-11-30"
    assert audit(dest).ok
    assert {p.parts[0] for p in map(Path, tree(root))} == {"cpu-16core-2026-11-30"}


@pytest.mark.parametrize(
    "value, field",
    [
        ("../../../x", "manifest.created_utc '../../../x' is not an ISO date"),
        ("2026-13-45T00:00:00", "manifest.created_utc"),
        ("2026-11-30\n", "manifest.created_utc"),
        (20261130, "manifest.created_utc 20261130 is not an ISO date"),
    ],
)
def test_a_created_utc_that_is_no_date_is_refused(place, value, field):
    def edit(manifest):
        manifest["created_utc"] = value

    archive = build_archive(place[0] / "date.tar.gz", edit)
    assert_refused(place, archive, field=field)


@pytest.mark.parametrize(
    "cpus",
    ["/../../../../x", "16/../../../x", 0, -2, 1.5, True, 10**70],
)
def test_a_cpu_count_that_is_no_positive_integer_is_refused(place, cpus):
    archive = build_archive(place[0] / "cpus.tar.gz", probe=_probe(cpus))
    assert_refused(place, archive, field="cpus.os_cpu_count")


def test_a_gpu_name_becomes_a_folder_name_or_is_refused(place):
    tmp, root = place
    # Any characters become '-': the name stays inside the folder.
    archive = build_archive(tmp / "gpu.tar.gz", probe=_probe(gpus_end=("NVIDIA ../../H200",)))
    work = tmp / "unpacked"
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    assert reference_import.run_name(work / STUDY) == "h200-2026-11-30"
    # A name too long for a folder is refused, naming the probe record.
    long = build_archive(tmp / "long.tar.gz", probe=_probe(gpus_end=("G" * 300,)))
    assert_refused(place, long, field="GPU name")


@pytest.mark.parametrize(
    "name",
    ["../../x", "../x", "x/../../y", "/tmp/x", ".hidden", "UPPER", "a\n", "", "a" * 65, ".."],
)
def test_a_name_that_is_no_folder_name_is_refused_before_the_archive_is_read(place, name):
    tmp, _ = place
    archive = tmp / "never-read.tar.gz"  # does not exist: the name is checked first
    line = assert_refused(place, archive, f"--name={name}", field="--name")
    assert "no such archive" not in line


def test_a_name_whose_folder_is_a_link_elsewhere_is_refused(place):
    tmp, root = place
    (tmp / "elsewhere").mkdir()
    (root / "linked").symlink_to(tmp / "elsewhere")
    archive = build_archive(tmp / "good.tar.gz")
    assert_refused(place, archive, "--name=linked", field="--name 'linked' leads outside")
    assert list((tmp / "elsewhere").iterdir()) == []


def test_a_runner_without_a_name_is_one_line(place):
    def edit(manifest):
        manifest["runner"] = {"jobs": []}

    archive = build_archive(place[0] / "runner.tar.gz", edit)
    assert_refused(place, archive, field="manifest.runner has no name")


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda m: m.update(runner="a string"), "no manifest.runner"),
        (lambda m: m.update(kind="paper"), "manifest.kind"),
        (lambda m: m["runner"].update(incomplete_jobs="x"), "manifest.runner.incomplete_jobs"),
        (lambda m: m.pop("code"), "not a study manifest (KeyError: 'code')"),
    ],
)
def test_a_manifest_of_another_layout_is_one_line(place, edit, field):
    archive = build_archive(place[0] / "layout.tar.gz", edit)
    assert_refused(place, archive, field=field)


def _member(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tuple:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, b"" if kind == tarfile.REGTYPE else None


@pytest.mark.parametrize(
    "member, field",
    [
        (_member("results/x/../../../escaped.txt"), "leaves its folder"),
        (_member("/tmp/escaped.txt"), "leaves its folder"),
        (_member("results/x/points/a.csv", tarfile.SYMTYPE, "/etc/passwd"), "holds links"),
        (_member("results/x/points/b.csv", tarfile.LNKTYPE, "results/x/timings.csv"), "links"),
        (_member("results/x/fifo", tarfile.FIFOTYPE), "is not a file or folder"),
        (_member("results/x/dev", tarfile.CHRTYPE), "is not a file or folder"),
    ],
)
def test_an_archive_member_that_leaves_its_folder_refuses_the_archive(place, member, field):
    archive = build_archive(place[0] / "member.tar.gz", members=[member])
    assert_refused(place, archive, field=field)


def test_make_passes_reference_name_as_one_argument(tmp_path):
    """``make reference-import REFERENCE_NAME=...``: a quote in the name cannot add
    arguments (``--reference`` pointing elsewhere); the whole value is the --name that
    is refused."""
    import shutil

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    evil = tmp_path / "evil"
    result = subprocess.run(
        [
            "make",
            "-s",
            "-o",
            ".venv/.installed",
            "reference-import",
            f"ARCHIVE={tmp_path / 'none.tar.gz'}",
            f'REFERENCE_NAME=x" --reference="{evil}',
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert f"--name 'x\" --reference=\"{evil}' is not a folder name" in result.stderr
    assert not evil.exists()


class _Zeros(io.RawIOBase):
    """``size`` zero bytes read in chunks: a gzip bomb's member built without holding it
    in memory."""

    def __init__(self, size: int):
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def _bomb(path: Path, member_bytes: int, before: int = 2) -> Path:
    """A gzip archive of ``before`` small files (1 KiB each) then one member of
    ``member_bytes`` zeros (streamed into the archive, never in memory)."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for i in range(before):
            info = tarfile.TarInfo(f"{STUDY}/small-{i}.csv")
            info.size = 1024
            tar.addfile(info, _bytes(b"x" * 1024))
        info = tarfile.TarInfo(f"{STUDY}/points/bomb.csv")
        info.size = member_bytes
        tar.addfile(info, _Zeros(member_bytes))
    return path


def _written(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def test_a_gzip_bomb_is_refused_at_its_member_before_it_is_written(tmp_path):
    """Issue 47 item 4: a small archive holding a member far larger than the limit (64
    MiB of zeros in about 64 KiB, against a 1 MiB limit) is refused while streaming, at
    that member and naming it; what was unpacked before it stays under the limit, and
    the big member itself is never written."""
    archive = _bomb(tmp_path / "bomb.tar.gz", 64 * 2**20)
    assert archive.stat().st_size < 2**20  # the bomb is small on disk
    dest = tmp_path / "unpacked"
    dest.mkdir()
    with pytest.raises(reference_import.ArchiveError) as refused:
        reference_import._extract(archive, dest, max_bytes=2**20)
    assert "member 'results/x/points/bomb.csv' (67108864 bytes)" in str(refused.value)
    assert "past the limit of 1048576 bytes" in str(refused.value)
    assert _written(dest) == 2 * 1024 <= 2**20
    assert not (dest / STUDY / "points" / "bomb.csv").exists()


def test_a_gzip_bomb_is_refused_by_the_import_and_nothing_is_kept(place, monkeypatch):
    """The import refuses the bomb in one line naming its member, before anything under
    the reference folder; its temporary folder never held more than the limit."""
    tmp, root = place
    archive = _bomb(tmp / "bomb.tar.gz", 16 * 2**20)
    peak = []
    real = reference_import._extract

    def measured(archive, dest, max_bytes, max_members):
        try:
            return real(archive, dest, max_bytes, max_members)
        finally:
            peak.append(_written(dest))

    monkeypatch.setattr(reference_import, "_extract", measured)
    with pytest.raises(reference_import.ArchiveError, match="bomb.csv"):
        reference_import.import_archive(archive, root, max_bytes=2**20)
    assert peak == [2 * 1024] and tree(root) == set()


def test_an_archive_past_the_member_count_is_refused_at_that_member(tmp_path):
    archive = _bomb(tmp_path / "many.tar.gz", 0, before=30)
    dest = tmp_path / "unpacked"
    dest.mkdir()
    with pytest.raises(reference_import.ArchiveError) as refused:
        reference_import._extract(archive, dest, max_members=20)
    assert "member 'results/x/small-20.csv' is past the limit of 20 members" in str(refused.value)
    assert len([p for p in dest.rglob("*") if p.is_file()]) == 20
