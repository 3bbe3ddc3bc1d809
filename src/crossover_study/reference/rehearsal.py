"""Rehearse the GPU reference run on a CPU machine before any GPU time is spent.

``make reference-gpu REHEARSE=1`` (``crossover-study rehearse``):

1. makes the GPU bundle when it is missing or stale (:mod:`gpu_bundle`);
2. creates a throwaway virtual environment holding only what the GPU reference
   machine has (:data:`gpu_bundle.GPU_MACHINE_PACKAGES` at the lock's versions, torch
   as the CPU build), no Snakemake, TensorFlow, papermill, jsonschema or rocrate;
3. copies what travels to the GPU machine (tracked files and untracked files git does
   not ignore, without ``.git``, plus the bundle) into a throwaway folder and runs the
   same ``make reference-gpu`` there, with that environment's Python and a short study
   (``config/studies/reference-gpu-rehearsal.yaml``), with nothing of this project's
   own environment on ``PATH``;
4. checks the archive: at most 16 MiB, it imports (:mod:`reference_import`: crate,
   audit) into a throwaway copy of the repository, ``snakemake paper`` there draws it
   as a labelled reference run, and the paper's audit passes.

Its last line is ``rehearsal ok: <rows> rows, bundle <MiB> MiB, <s> s``; any failure
stops it with the step that failed. This catches a missing wheel or a Snakemake-only
import before the GPU machine does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from crossover_study.core import paths
from crossover_study.reference import gpu_bundle
from crossover_study.reference.gpu_finish import ARCHIVE_LIMIT_BYTES

REPO_ROOT = paths.REPO_ROOT
#: make's variables that an inner make would inherit (REHEARSE=1 would recurse).
MAKE_VARIABLES = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "REHEARSE")
STUDY = "config/studies/reference-gpu-rehearsal.yaml"


class RehearsalError(RuntimeError):
    """A step of the rehearsal failed; the message names it and shows its output."""


def _run(cmd: list[str], step: str, log, **kwargs) -> str:
    """Run ``cmd``, passing each line of its output to ``log`` as it comes (pip's
    warnings about this machine's local package folders left out); raise
    RehearsalError naming ``step`` with the output's tail when it fails. Returns the
    output."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs
    )
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        if line.startswith("WARNING: Location"):
            continue
        lines.append(line)
        log(f"    {line}")
    code = proc.wait()
    if code != 0:
        tail = "\n".join(lines[-40:])
        raise RehearsalError(f"{step} failed (exit {code}):\n{tail}")
    return "\n".join(lines)


def travelling_files(repo: Path = REPO_ROOT) -> list[str]:
    """What the device tool copies to the GPU machine: tracked files and untracked files
    that git does not ignore (paths relative to ``repo``). Raises RehearsalError outside
    a git checkout."""
    try:
        out = subprocess.run(
            [
                "git",
                "-C",
                str(repo),
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
            ],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise RehearsalError(f"cannot list the working tree with git: {exc}") from exc
    return sorted({p for p in out.decode().split("\0") if p and (repo / p).is_file()})


def copy_tree(files: list[str], src: Path, dest: Path) -> None:
    """Copy ``files`` (relative paths) from ``src`` to ``dest``, keeping modes."""
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, target)


def clean_env(extra: dict | None = None) -> dict:
    """This process's environment without this project's virtual environment and
    without make's variables (an inner ``make`` must not inherit ``REHEARSE=1``)."""
    venv = str(Path(sys.prefix).resolve())
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "VIRTUAL_ENV",
            "PYTHONPATH",
            "PYTHONHOME",
            "MAKEFLAGS",
            "MFLAGS",
            "MAKELEVEL",
            "REHEARSE",
        )
    }
    env["PATH"] = os.pathsep.join(
        p
        for p in env.get("PATH", "").split(os.pathsep)
        if p and not str(Path(p).resolve()).startswith(venv)
    )
    env["PYTHONNOUSERSITE"] = "1"
    env.update(extra or {})
    return env


def rehearse(study: str = STUDY, keep: bool = False, log=print) -> dict:
    """Run the rehearsal (module docstring). Returns ``{"rows", "bundle_mib",
    "seconds", "archive", "reference"}``. Raises RehearsalError naming the step that
    failed; the throwaway folder is removed unless ``keep``."""
    started = time.time()
    bundle = REPO_ROOT / ".gpu-bundle"
    log("1/4 gpu bundle")
    if not gpu_bundle.is_current(bundle):
        gpu_bundle.build(bundle, log=lambda text: log(f"    {text}"))
    record = gpu_bundle.stamp(bundle)
    bundle_mib = record["bytes"] / 2**20
    log(
        f"    {len(record['wheels'])} wheels, {bundle_mib:.1f} MiB: {', '.join(record['packages'])}"
    )
    tmp = Path(tempfile.mkdtemp(prefix="crossover-rehearsal-"))
    try:
        log("2/4 throwaway environment with only what the GPU machine has")
        venv = tmp / "venv"
        _run([sys.executable, "-m", "venv", str(venv)], "creating the throwaway venv", log)
        python = venv / "bin" / "python"
        wanted = gpu_bundle.requirements(gpu_bundle.GPU_MACHINE_PACKAGES)
        log(f"    pip install {' '.join(wanted)}")
        _run(
            [str(python), "-m", "pip", "install", "--quiet", "--no-compile", *wanted],
            "installing the GPU machine's packages into the throwaway venv",
            log,
            env=clean_env(),
        )
        forbidden = _run(
            [
                str(python),
                "-c",
                "import importlib.util as u; print([m for m in "
                "('snakemake', 'tensorflow', 'papermill', 'jsonschema', 'rocrate', 'sklearn') "
                "if u.find_spec(m)])",
            ],
            "listing the throwaway venv",
            lambda _: None,
            env=clean_env(),
        ).strip()
        if forbidden != "[]":
            raise RehearsalError(
                f"the throwaway venv holds {forbidden}, which the GPU machine lacks"
            )

        log("3/4 make reference-gpu in a copy of what travels (no .git), throwaway Python")
        device = tmp / "device"
        files = travelling_files()
        copy_tree(files, REPO_ROOT, device)
        shutil.copytree(bundle, device / ".gpu-bundle")
        out = tmp / "out"
        _run(
            [
                "make",
                "-C",
                str(device),
                "reference-gpu",
                "REHEARSE=",
                f"PYTHON={python}",
                f"GPU_STUDY={study}",
                f"OUT={out}",
            ],
            "make reference-gpu with the throwaway environment",
            log,
            env=clean_env({"TMPDIR": str(tmp)}),
        )
        archives = sorted(out.glob("*.tar.gz"))
        if len(archives) != 1:
            raise RehearsalError(
                f"expected one archive in {out}, found {[a.name for a in archives]}"
            )
        archive = archives[0]
        size = archive.stat().st_size
        if size > ARCHIVE_LIMIT_BYTES:
            raise RehearsalError(f"{archive.name} is {size / 2**20:.1f} MiB, over 16 MiB")
        with tarfile.open(archive) as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith("/timings.csv"))
            rows = len(tar.extractfile(member).read().decode().splitlines()) - 1

        log("4/4 import into a copy of the repository, audit, snakemake paper")
        repo = tmp / "repo"
        copy_tree(files, REPO_ROOT, repo)
        name = f"rehearsal-{datetime.now(UTC).date().isoformat()}"
        env = {**os.environ, "PYTHONPATH": str(repo / "src")}
        for k in MAKE_VARIABLES:
            env.pop(k, None)
        _run(
            [
                sys.executable,
                "-m",
                "crossover_study",
                "reference-import",
                str(archive),
                "--name",
                name,
            ],
            "make reference-import",
            log,
            cwd=repo,
            env=env,
        )
        snakemake = Path(sys.executable).with_name("snakemake")
        _run([str(snakemake), "--cores", "2", "paper"], "snakemake paper", log, cwd=repo, env=env)
        paper = json.loads((repo / "reports" / "paper" / "manifest.json").read_text())
        drawn = [r["name"] for r in paper["reference_runs"]]
        if name not in drawn:
            raise RehearsalError(f"snakemake paper drew {drawn}, not the imported {name}")
        _run(
            [
                sys.executable,
                "-m",
                "crossover_study",
                "audit",
                "reports/paper",
                f"results/reference/{name}",
            ],
            "the audit of the paper figures and the imported run",
            log,
            cwd=repo,
            env=env,
        )
    finally:
        if keep:
            log(f"    kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    seconds = time.time() - started
    log(f"rehearsal ok: {rows} rows, bundle {bundle_mib:.1f} MiB, {seconds:.0f} s")
    return {
        "rows": rows,
        "bundle_mib": bundle_mib,
        "seconds": seconds,
        "archive": archive.name,
        "reference": name,
    }


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Command line of :func:`rehearse`."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", default=STUDY, help="the short study the rehearsal measures")
    parser.add_argument("--keep", action="store_true", help="keep the throwaway folder")
    args = parser.parse_args(argv)

    def say(text: str) -> None:
        print(text, flush=True)

    try:
        rehearse(args.study, args.keep, log=say)
    except (RehearsalError, gpu_bundle.BundleError) as exc:
        print(f"rehearsal failed: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0
