"""The GPU bundle: the wheels a GPU machine without network lacks, fetched beforehand.

The reference GPU machine (docs/GPU_REFERENCE_RUN.md) runs Python 3.12 with
torch built for CUDA and :data:`GPU_MACHINE_PACKAGES`, and reaches no package index.
What the measuring code imports beyond that is :data:`BUNDLE_PACKAGES`, pinned to
``requirements.lock``: ``make gpu-bundle`` downloads their wheels on a machine with PyPI
into ``.gpu-bundle/`` (ignored by git, carried beside the working tree, at most
:data:`BUNDLE_LIMIT_BYTES`), and the reference run installs them there with
``pip install --no-index --no-deps --target`` (:func:`install`) and refuses to start,
naming what is missing, when an import still fails (:func:`missing_modules`).

This module imports nothing outside the standard library at module level: it runs
before the bundle is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from crossover_study.core.paths import LOCK, REPO_ROOT, pins

BUNDLE_DIR = REPO_ROOT / ".gpu-bundle"
BUNDLE_RECORD = "bundle.json"
#: The issue's budget for what travels besides the working tree (64 MiB in all).
BUNDLE_LIMIT_BYTES = 40 * 1024 * 1024
#: Python of the GPU reference machine; the bundle also holds wheels for the Python
#: that builds it, so that the CPU rehearsal installs the same bundle.
GPU_PYTHON = "3.12"
#: What the GPU reference machine has (distribution names as in requirements.lock).
#: The rehearsal's throwaway environment holds exactly these, at the lock's versions.
GPU_MACHINE_PACKAGES: tuple[str, ...] = (
    "torch",
    "numpy",
    "pandas",
    "scipy",
    "matplotlib",
    "seaborn",
    "PyYAML",
    "psutil",
    "Jinja2",
    "nvidia-ml-py",
    "pytest",
)
#: What the measuring code needs and that machine lacks: jsonschema and its imports
#: (validation of the study config and of the tables), scikit-learn and its imports
#: (s002's Iris data ships inside scikit-learn; joblib imports cloudpickle). Each
#: wheel's Requires-Dist, less what the machine has, is listed here: the bundle is
#: installed with --no-deps.
BUNDLE_PACKAGES: tuple[str, ...] = (
    "jsonschema",
    "jsonschema-specifications",
    "referencing",
    "rpds-py",
    "attrs",
    "scikit-learn",
    "joblib",
    "cloudpickle",
    "threadpoolctl",
    "narwhals",
)
#: Modules the reference run imports, each with the distribution that provides it.
REQUIRED_MODULES: dict[str, str] = {
    "torch": "torch",
    "numpy": "numpy",
    "pandas": "pandas",
    "scipy": "scipy",
    "matplotlib": "matplotlib",
    "seaborn": "seaborn",
    "yaml": "PyYAML",
    "psutil": "psutil",
    "jsonschema": "jsonschema",
    "sklearn": "scikit-learn",
}
#: Linux x86-64 platform tags pip is asked for (the device tool's README lists these;
#: pip matches each manylinux_2_N tag exactly).
PLATFORMS: tuple[str, ...] = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


class BundleError(RuntimeError):
    """The bundle is missing, too large, or does not install; the message says which
    package and what to do."""


def requirements(names, lock: str | Path = LOCK) -> list[str]:
    """``name==version`` for each of ``names`` from the lock file. Raises BundleError for
    a name the lock does not pin (case-insensitive, ``-`` and ``_`` alike)."""
    locked = {k.lower().replace("_", "-"): (k, v) for k, v in pins(lock).items()}
    out = []
    for name in names:
        key = name.lower().replace("_", "-")
        if key not in locked:
            raise BundleError(f"{name} is not pinned in {lock}; add it there first")
        out.append(f"{locked[key][0]}=={locked[key][1]}")
    return out


def _normalise(name: str) -> str:
    """A distribution name as wheel file names spell it (PEP 427: lower case, ``_``)."""
    return name.lower().replace("-", "_").replace(".", "_")


def _wheel_pin(filename: str) -> tuple[str, str]:
    """(normalised name, version) of a wheel file name ``name-version-tags.whl``."""
    name, version = filename.split("-")[:2]
    return _normalise(name), version


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build(
    dest: str | Path = BUNDLE_DIR,
    python_versions: tuple[str, ...] | None = None,
    log=print,
) -> dict:
    """Download the wheels of :data:`BUNDLE_PACKAGES` (pinned to the lock) for Linux
    x86-64 and each of ``python_versions`` (default: :data:`GPU_PYTHON` and this
    interpreter's version) into ``<dest>/wheels/`` (wheels already there are not
    fetched again) and write ``<dest>/bundle.json``: the pins, the wheels with sha256
    and size, and the tree's git state (:func:`stamp`). Returns that record.

    Raises BundleError when pip cannot download a wheel (its output is in the
    message) or the wheels exceed :data:`BUNDLE_LIMIT_BYTES`.
    """
    dest = Path(dest)
    wheels = dest / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    versions = python_versions or tuple(dict.fromkeys((GPU_PYTHON, this_python())))
    wanted = requirements(BUNDLE_PACKAGES)
    for version in versions:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            version,
            "--implementation",
            "cp",
            *(arg for tag in PLATFORMS for arg in ("--platform", tag)),
            "--dest",
            str(wheels),
            *wanted,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join(
                line for line in proc.stderr.splitlines() if not line.startswith("WARNING:")
            )
            raise BundleError(f"pip download for Python {version} failed:\n{tail[-3000:]}")
    expected = {_normalise(r.split("==")[0]): r.split("==")[1] for r in wanted}
    files = sorted(p for p in wheels.glob("*.whl") if _wheel_pin(p.name) in expected.items())
    stale = sorted(set(wheels.glob("*.whl")) - set(files))
    for path in stale:  # wheels of versions no longer pinned
        path.unlink()
    total = sum(p.stat().st_size for p in files)
    if total > BUNDLE_LIMIT_BYTES:
        raise BundleError(
            f"the bundle's wheels take {total / 2**20:.1f} MiB, more than "
            f"{BUNDLE_LIMIT_BYTES / 2**20:.0f} MiB"
        )
    record = {
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "python_versions": list(versions),
        "platforms": list(PLATFORMS),
        "packages": wanted,
        "wheels": [
            {"file": p.name, "sha256": _sha256(p), "bytes": p.stat().st_size} for p in files
        ],
        "bytes": total,
        "built_with": {"python": platform.python_version(), "platform": platform.platform()},
    }
    (dest / BUNDLE_RECORD).write_text(json.dumps(record, indent=1) + "\n")
    record = stamp(dest)
    git = record["git"]
    log(
        f"gpu bundle: {len(files)} wheels for Python {', '.join(versions)}, "
        f"{total / 2**20:.1f} MiB in {dest}; stamped with commit {git['commit']}"
        f"{' (dirty: commit first, then make the bundle)' if git['dirty'] else ''}"
    )
    return record


def stamp(bundle: str | Path = BUNDLE_DIR) -> dict:
    """Record in ``bundle.json`` the git commit and dirty flag of the tree now (the GPU
    machine's copy has no ``.git``; the reference run records this commit as the one
    its code came from). ``make gpu-bundle`` and the rehearsal call it right before the
    tree travels. Returns the updated record; raises BundleError without a bundle."""
    from crossover_study.core.origin import git_state  # imports yaml: only where the bundle is made

    record = load_record(bundle)
    commit, dirty = git_state(REPO_ROOT)
    # Untracked files that git does not ignore travel with the tree too.
    untracked = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "ls-files", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
    ).stdout.split()
    record["git"] = {
        "commit": None if commit == "unknown" else commit,
        "dirty": dirty or bool(untracked),
        "untracked_files": len(untracked),
        "stamped_utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (Path(bundle) / BUNDLE_RECORD).write_text(json.dumps(record, indent=1) + "\n")
    return record


def load_record(bundle: str | Path = BUNDLE_DIR) -> dict:
    """The bundle's record (``bundle.json``). Raises BundleError when there is none."""
    path = Path(bundle) / BUNDLE_RECORD
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BundleError(
            f"no GPU bundle at {bundle} ({exc}); run `make gpu-bundle` on a machine with "
            "PyPI and carry the folder with the working tree"
        ) from exc


def this_python() -> str:
    """This interpreter's ``major.minor`` version, e.g. ``"3.12"``."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _fits(wheel: str, version: str) -> bool:
    """True when the wheel file name's Python tag installs on CPython ``version``
    (``py3`` wheels, or ``cp312`` for 3.12)."""
    python_tag = wheel[: -len(".whl")].split("-")[-3]
    return any(t == "py3" or t == f"cp{version.replace('.', '')}" for t in python_tag.split("."))


def problems(bundle: str | Path = BUNDLE_DIR, for_python: str | None = None) -> list[str]:
    """What keeps ``bundle`` from serving the GPU machine (Python :data:`GPU_PYTHON`)
    and, when given, the Python ``for_python`` too: no record, pins that differ from the
    lock, a package without a wheel for one of those Pythons, a listed wheel missing or
    changed (sha256). Empty when the bundle is usable."""
    try:
        record = load_record(bundle)
    except BundleError as exc:
        return [str(exc)]
    found = []
    wanted = requirements(BUNDLE_PACKAGES)
    if record.get("packages") != wanted:
        stale = sorted(set(record.get("packages", [])) ^ set(wanted))
        found.append(f"its pins differ from requirements.lock: {', '.join(stale)}")
    wheels = Path(bundle) / "wheels"
    listed = []
    for entry in record.get("wheels", []):
        path = wheels / entry["file"]
        if not path.is_file():
            found.append(f"wheel {entry['file']} is missing")
        elif _sha256(path) != entry["sha256"]:
            found.append(f"wheel {entry['file']} changed since the bundle was made (sha256)")
        else:
            listed.append(entry["file"])
    for version in dict.fromkeys(filter(None, (GPU_PYTHON, for_python))):
        for pin in wanted:
            name, number = pin.split("==")
            if not any(
                _wheel_pin(w) == (_normalise(name), number) and _fits(w, version) for w in listed
            ):
                found.append(f"no wheel of {pin} for Python {version}")
    return found


def is_current(bundle: str | Path = BUNDLE_DIR) -> bool:
    """True when ``bundle`` has no :func:`problems` for the GPU machine and this Python."""
    return not problems(bundle, for_python=this_python())


def install(bundle: str | Path, target: str | Path, log=print) -> list[str]:
    """Install the bundle's wheels that fit this interpreter into ``target`` with
    ``pip install --no-index --no-deps --target`` (nothing is fetched), put ``target``
    first on ``sys.path`` and on ``PYTHONPATH`` (for child processes), and return the
    requirements installed. Raises BundleError naming the package pip could not
    install (for example a wheel for another Python only)."""
    record = load_record(bundle)
    wheels = Path(bundle) / "wheels"
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--no-cache-dir",
        "--upgrade",
        "--find-links",
        str(wheels),
        "--target",
        str(target),
        *record["packages"],
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BundleError(
            f"installing the GPU bundle with Python {platform.python_version()} failed "
            f"(bundle for Python {', '.join(record['python_versions'])}):\n" + proc.stderr[-3000:]
        )
    if str(target) not in sys.path:
        sys.path.insert(0, str(target))
    paths = [str(target), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    importlib.invalidate_caches()
    log(f"gpu bundle: installed {', '.join(record['packages'])} into {target}")
    return list(record["packages"])


def missing_modules(modules: dict[str, str] | None = None) -> list[str]:
    """``"module (pip: dist==version): error"`` for each of ``modules`` (default
    :data:`REQUIRED_MODULES`) that this interpreter cannot import; empty when all
    import."""
    locked = {k.lower(): v for k, v in pins().items()}
    out = []
    for module, dist in (modules or REQUIRED_MODULES).items():
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - any failure to import counts
            pin = locked.get(dist.lower())
            wanted = f"{dist}=={pin}" if pin else dist
            out.append(f"{module} (pip: {wanted}): {type(exc).__name__}: {exc}")
    return out


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Command line: ``build`` the bundle, or ``check`` that it is current."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="download the wheels into the bundle folder")
    b.add_argument("--dest", default=str(BUNDLE_DIR))
    b.add_argument(
        "--python", action="append", help=f"Python version(s) (default: {GPU_PYTHON} and this one)"
    )
    c = sub.add_parser("check", help="exit 0 when the bundle is current")
    c.add_argument("--dest", default=str(BUNDLE_DIR))
    args = parser.parse_args(argv)
    if args.command == "check":
        found = problems(args.dest, for_python=this_python())
        if not found:
            print(f"gpu bundle at {args.dest}: current (Python {GPU_PYTHON} and {this_python()})")
            return 0
        print(f"gpu bundle at {args.dest} cannot be used:")
        for line in found:
            print(f"  {line}")
        print("run `make gpu-bundle` to make it again")
        return 1
    try:
        build(args.dest, tuple(args.python) if args.python else None)
    except BundleError as exc:
        print(f"gpu bundle: {exc}", file=sys.stderr)
        return 1
    return 0
