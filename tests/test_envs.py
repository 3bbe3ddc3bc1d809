"""Conda envs: pinned to requirements.lock, one per framework x role, and on every rule
that runs code (they cannot be built here, so this is a static check)."""

import re

import pytest
import yaml

from crossover_study.config import MEASURE_ENVS, measure_env
from crossover_study.provenance import REPO_ROOT
from crossover_study.spec import DEVICES, FRAMEWORKS

ENVS = REPO_ROOT / "envs"
#: conda-forge or PyPI name -> name in requirements.lock, where they differ. The CUDA
#: and TPU envs install the TensorFlow release the tests run as tensorflow-cpu.
LOCK_NAMES = {"pytorch": "torch", "tensorflow": "tensorflow-cpu"}
#: Pins checked elsewhere or not Python packages of the lock.
NOT_IN_LOCK = {"python", "pip"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_versions() -> dict[str, str]:
    pins = {}
    for line in (REPO_ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[_norm(name)] = version
    return pins


def env_pins(path) -> list[tuple[str, str | None, str]]:
    """(name, version or None, raw spec) of every dependency of a conda env file."""
    env = yaml.safe_load(path.read_text())
    pins = []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            for spec in dep["pip"]:
                m = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^\]]+\])?==([^=\s]+)", spec)
                pins.append((m.group(1), m.group(3), spec) if m else (spec, None, spec))
        else:
            m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:=([^=\s]+)(?:=\S+)?)?", dep)
            pins.append((m.group(1), m.group(2), dep))
    return pins


ENV_FILES = sorted(ENVS.glob("*.yaml"))


@pytest.mark.parametrize("path", ENV_FILES, ids=[p.name for p in ENV_FILES])
def test_env_pins_agree_with_requirements_lock(path):
    env = yaml.safe_load(path.read_text())
    assert env["channels"] == ["conda-forge", "nodefaults"], path.name
    lock = lock_versions()
    for name, version, spec in env_pins(path):
        if name in NOT_IN_LOCK:
            continue
        assert version is not None, f"{path.name}: {spec!r} is not pinned to one version"
        locked = lock.get(_norm(LOCK_NAMES.get(name, name)))
        assert locked is not None, f"{path.name}: {name} is not in requirements.lock"
        assert version.rstrip("*") == locked, f"{path.name}: {spec} but the lock has {locked}"


def test_python_pin_matches_the_project():
    for path in ENV_FILES:
        python = [v for n, v, _ in env_pins(path) if n == "python"]
        assert python == ["3.11"], path.name


def test_every_framework_and_device_has_an_env_and_every_env_is_used():
    assert set(MEASURE_ENVS) == {(f, d) for f in FRAMEWORKS for d in DEVICES}
    used = {measure_env(f, d) for f, d in MEASURE_ENVS} | {"envs/report.yaml"}
    assert used == {f"envs/{p.name}" for p in ENV_FILES}
    # One env per framework and role: CPU and CUDA builds apart, TensorFlow's TPU apart.
    assert measure_env("torch", "cuda") != measure_env("torch", "cpu")
    assert measure_env("tensorflow", "cuda") != measure_env("tensorflow", "cpu")
    assert measure_env("tensorflow", "tpu") not in (
        measure_env("tensorflow", "cpu"),
        measure_env("tensorflow", "cuda"),
    )


def rule_blocks():
    """(file, rule name, text of the rule) of every rule of the workflow."""
    files = [REPO_ROOT / "Snakefile", *sorted((REPO_ROOT / "workflow/rules").glob("*.smk"))]
    for path in files:
        text = path.read_text()
        starts = [m for m in re.finditer(r"^(?:rule|checkpoint) (\w+):", text, re.M)]
        for i, m in enumerate(starts):
            end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
            yield path.name, m.group(1), text[m.start() : end]


def test_every_rule_that_runs_code_has_a_conda_env():
    runs_code = 0
    for name, rule, block in rule_blocks():
        assert not re.search(r"^\s+run:", block, re.M), f"{name}: rule {rule} uses run:"
        if re.search(r"^\s+(script|notebook|shell|wrapper):", block, re.M):
            runs_code += 1
            m = re.search(r"^\s+conda:\s*\n\s+(\S+)", block, re.M)
            assert m, f"{name}: rule {rule} runs code but has no conda:"
            target = m.group(1).strip("\"'")
            if target.endswith(".yaml"):
                assert (REPO_ROOT / "workflow/rules" / target).resolve().is_file(), target
    assert runs_code >= 5  # measure, collect, crossover, report_notebook, report_html
