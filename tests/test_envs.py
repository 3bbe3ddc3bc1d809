"""Conda envs: pinned to requirements.lock, one per framework x role, and on every rule
that runs code (they cannot be built here, so this is a static check)."""

import ast
import importlib.metadata
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from crossover_study.core.paths import REPO_ROOT
from crossover_study.study.points import MEASURE_ENVS, measure_env
from crossover_study.study.spec import DEVICES, FRAMEWORKS

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


# ------------------------------------------------------- imports vs env dependencies
# Each rule with a conda: directive runs its script (or notebook) in that env with
# --sdm conda. The env must install every third-party distribution the job imports: the
# script's imports, and transitively those of the crossover_study modules it reaches
# (read with ast, imports inside functions included). Snakemake's script preamble
# appends the host's sys.path to the job's (snakemake.script: get_snakemake_searchpaths),
# so a package missing from the env would not fail the job: it would be imported from
# the host's environment, unrecorded. Hence this static check.

#: Top-level module -> distribution (the name an env file lists, see ENV_DISTRIBUTION).
#: A third-party module the jobs import that is not here fails the test (add it).
MODULE_DISTRIBUTION = {
    "IPython": "ipython",
    "PIL": "pillow",
    "jsonschema": "jsonschema",
    "keras": "keras",
    "matplotlib": "matplotlib",
    "numpy": "numpy",
    "pandas": "pandas",
    "psutil": "psutil",
    "pynvml": "nvidia-ml-py",
    "rocrate": "rocrate",
    "scipy": "scipy",
    "seaborn": "seaborn",
    "sklearn": "scikit-learn",
    "tensorflow": "tensorflow",
    "torch": "torch",
    "yaml": "pyyaml",
}
#: Submodules another distribution provides: TensorFlow >= 2.16 serves tensorflow.keras
#: from the keras package (Keras 3), which the TensorFlow envs pin themselves.
SUBMODULE_DISTRIBUTION = {"tensorflow.keras": "keras"}
#: Env file name (conda-forge or PyPI) -> distribution of MODULE_DISTRIBUTION, where
#: they differ: conda-forge's pytorch is torch; PyPI's tensorflow-cpu is tensorflow.
ENV_DISTRIBUTION = {"pytorch": "torch", "tensorflow-cpu": "tensorflow"}
#: Distributions an env gets as a declared dependency of a package it lists (checked
#: against the installed metadata by test_provided_by_holds_in_the_installed_metadata).
PROVIDED_BY = {
    "ipython": "ipykernel",  # the notebook's IPython.display; ipykernel runs the kernel
    "pillow": "matplotlib",  # figures.figure_sources reads PNG text chunks with PIL
}
#: Framework distributions: imported only inside functions that run for their framework
#: (frameworks.import_framework and the other per-framework branches of frameworks,
#: probe, precision, workloads/torch_* and workloads/tf_*). An env may lack the other
#: framework's (and the report env both), but only where every import of them that the
#: job reaches is inside a function (lazy): an import at module level would run.
FRAMEWORK_DISTRIBUTIONS = {"torch": {"torch"}, "tensorflow": {"tensorflow", "keras"}}
#: Optional imports an env may lack: distribution -> why. Allowed only where every
#: import of it the job reaches is guarded by ``try: ... except ImportError``.
OPTIONAL = {
    "nvidia-ml-py": "gpu_state imports pynvml inside try/except ImportError and then "
    "reads nvidia-smi instead; only the CUDA envs, where GPUs are, install it",
}
#: Tools a shell: command starts -> the distribution that installs them.
SHELL_TOOLS = {"jupyter nbconvert": "nbconvert"}
#: What Snakemake's notebook: directive runs a notebook with (papermill or
#: jupyter-nbconvert, and a Python kernel).
NOTEBOOK_DISTRIBUTIONS = {"nbconvert", "ipykernel"}
SRC = REPO_ROOT / "src"
RULES = REPO_ROOT / "workflow" / "rules"


def _dist(name: str) -> str:
    name = _norm(re.sub(r"\[.*\]$", "", name))
    return ENV_DISTRIBUTION.get(name, name)


def env_distributions(path) -> set[str]:
    """Distributions an env file installs (conda and pip sections, PROVIDED_BY added)."""
    dists = {_dist(name) for name, _, _ in env_pins(path)}
    return dists | {d for d, parent in PROVIDED_BY.items() if parent in dists}


@dataclass(frozen=True)
class Import:
    """One import in a file: ``name`` a module, or ``dist:<name>`` for a distribution
    named in ``importlib.metadata.version("...")``."""

    name: str
    where: str  # module (or script) and line
    lazy: bool  # inside a function
    guarded: bool  # inside try: ... except ImportError (or ModuleNotFoundError)


def _module_file(name: str):
    path = SRC.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


class _Imports(ast.NodeVisitor):
    """Imports of one module: import statements, and the string arguments of
    importlib.import_module / importlib.resources.files (modules) and
    importlib.metadata.version (distributions). Imports under ``if TYPE_CHECKING:``
    do not run and are left out."""

    def __init__(self, module: str, package: str, label: str):
        self.module, self.package, self.label = module, package, label
        self.depth = self.guards = 0
        self.found: list[Import] = []

    def _add(self, name: str, node) -> None:
        where = f"{self.label}:{node.lineno}"
        self.found.append(Import(name, where, self.depth > 0, self.guards > 0))

    def visit_FunctionDef(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_If(self, node):
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.orelse:
                self.visit(stmt)
        else:
            self.generic_visit(node)

    def visit_Try(self, node):
        caught = set()
        for handler in node.handlers:
            kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            caught |= {k.id for k in kinds if isinstance(k, ast.Name)}
        guard = int(bool(caught & {"ImportError", "ModuleNotFoundError"}))
        self.guards += guard
        for stmt in node.body:
            self.visit(stmt)
        self.guards -= guard
        for stmt in [*node.handlers, *node.orelse, *node.finalbody]:
            self.visit(stmt)

    def visit_Import(self, node):
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node):
        if node.level:
            parts = self.package.split(".")
            base = parts[: len(parts) - node.level + 1]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module
        self._add(module, node)
        for alias in node.names:  # from package import submodule
            sub = f"{module}.{alias.name}"
            if _module_file(sub) is not None or sub in SUBMODULE_DISTRIBUTION:
                self._add(sub, node)

    def visit_Call(self, node):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        first = node.args[0] if node.args else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            if name in ("import_module", "files"):
                self._add(first.value, node)
            elif name == "version":
                self._add(f"dist:{first.value}", node)
        self.generic_visit(node)


def _parse_imports(source: str, module: str, package: str, label: str) -> list[Import]:
    visitor = _Imports(module, package, label)
    visitor.visit(ast.parse(source))
    return visitor.found


def job_imports(script) -> list[Import]:
    """Every import a job running ``script`` (a .py file or a notebook) can reach:
    the script's own (all of them run: its main() runs), then, for each crossover_study
    module reached, that module's imports, transitively. An import counts as lazy when
    every chain reaching it passes through an import inside a function."""
    script = Path(script)
    if script.suffix == ".ipynb":
        cells = json.loads(script.read_text())["cells"]
        source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    else:
        source = script.read_text()
    start = [
        Import(i.name, i.where, False, i.guarded)
        for i in _parse_imports(source, "__main__", "", script.name)
    ]
    found: list[Import] = []
    eager_seen: set[str] = set()
    lazy_seen: set[str] = set()
    todo = list(start)
    while todo:
        imp = todo.pop()
        found.append(imp)
        if imp.name.split(".")[0] != "crossover_study":
            continue
        parts = imp.name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a, a.b and a.b.c
            module = ".".join(parts[:i])
            path = _module_file(module)
            seen = lazy_seen if imp.lazy else eager_seen
            if path is None or module in seen or module in eager_seen:
                continue
            seen.add(module)
            package = module if path.name == "__init__.py" else module.rpartition(".")[0]
            label = path.relative_to(REPO_ROOT).as_posix()
            for sub in _parse_imports(path.read_text(), module, package, label):
                todo.append(Import(sub.name, sub.where, imp.lazy or sub.lazy, sub.guarded))
    return found


def third_party(imports) -> dict[str, list[Import]]:
    """``{distribution: its imports}`` of the imports outside the standard library and
    crossover_study. Raises AssertionError naming a module MODULE_DISTRIBUTION lacks."""
    from crossover_study.provenance.inputs import PACKAGE_DATA

    out: dict[str, list[Import]] = {}
    for imp in imports:
        if imp.name == "crossover_study.provenance.manifest":
            # Data files read from inside a distribution (manifest_inputs.data_files): wherever
            # the manifest module runs, its PACKAGE_DATA distributions must be there.
            for _case, _name, dist, _path in PACKAGE_DATA:
                found = Import(
                    f"dist:{dist}", "manifest_inputs.PACKAGE_DATA", imp.lazy, imp.guarded
                )
                out.setdefault(_dist(dist), []).append(found)
        if imp.name.startswith("dist:"):
            out.setdefault(_dist(imp.name[5:]), []).append(imp)
            continue
        if imp.name in SUBMODULE_DISTRIBUTION:
            out.setdefault(SUBMODULE_DISTRIBUTION[imp.name], []).append(imp)
            continue
        top = imp.name.split(".")[0]
        if top in sys.stdlib_module_names or top in ("__future__", "crossover_study"):
            continue
        assert top in MODULE_DISTRIBUTION, (
            f"{imp.where} imports {top}: add its distribution to MODULE_DISTRIBUTION"
        )
        out.setdefault(MODULE_DISTRIBUTION[top], []).append(imp)
    return out


def conda_rules():
    """(rule, env files, frameworks per env, what the rule runs) of every rule with a
    conda: directive. The measure rule's env is common.smk's get_env: every env
    config.measure_env gives a framework x device, each with the frameworks using it."""
    for name, rule, block in rule_blocks():
        m = re.search(r"^\s+conda:\s*\n\s+(\S+)", block, re.M)
        if not m:
            continue
        target = m.group(1).strip("\"'")
        if target == "get_env":
            common = (RULES / "common.smk").read_text()
            assert "study_points.measure_env(wildcards.framework, wildcards.device)" in common
            envs: dict[str, set[str]] = {}
            for framework, device in MEASURE_ENVS:
                envs.setdefault(measure_env(framework, device), set()).add(framework)
        else:
            assert target.endswith(".yaml"), f"{name}: rule {rule}: conda: {target}"
            env = (RULES / target).resolve().relative_to(REPO_ROOT).as_posix()
            envs = {env: set()}
        runs = {}
        for key in ("script", "notebook", "shell"):
            found = re.search(rf"^\s+{key}:\s*\n((?:\s+\".*\"\n?)+)", block, re.M)
            if found:
                runs[key] = "".join(re.findall(r"\"(.*)\"", found.group(1)))
        assert runs, f"{name}: rule {rule} has conda: but runs nothing this test reads"
        yield rule, envs, runs


CONDA_RULES = list(conda_rules())


def missing_distributions(env: str, frameworks: set[str], runs: dict[str, str]) -> list[str]:
    """What the env lacks for a job of the rule (one line per distribution, naming
    where it is imported); empty when nothing is missing."""
    have = env_distributions(REPO_ROOT / env)
    needed: dict[str, list[Import]] = {}
    for key in ("script", "notebook"):
        if key in runs:
            for dist, imps in third_party(job_imports(RULES / runs[key])).items():
                needed.setdefault(dist, []).extend(imps)
    if "notebook" in runs:
        for dist in NOTEBOOK_DISTRIBUTIONS:
            needed.setdefault(dist, []).append(Import(dist, "notebook: directive", False, False))
    for tool, dist in SHELL_TOOLS.items():
        if "shell" in runs and runs["shell"].startswith(tool):
            needed.setdefault(dist, []).append(Import(dist, f"shell: {tool}", False, False))
    if "shell" in runs:
        assert any(runs["shell"].startswith(t) for t in SHELL_TOOLS), runs["shell"]
    other = set().union(*(d for f, d in FRAMEWORK_DISTRIBUTIONS.items() if f not in frameworks))
    missing = []
    for dist, imps in sorted(needed.items()):
        if dist in have:
            continue
        if dist in other and all(i.lazy for i in imps):
            continue  # the other framework's, imported only inside functions
        if dist in OPTIONAL and all(i.guarded for i in imps):
            continue
        ordered = sorted(imps, key=lambda i: (i.lazy, i.where))  # module-level first
        where = ", ".join(list(dict.fromkeys(i.where for i in ordered))[:4])
        missing.append(f"{dist} (imported at {where})")
    return missing


@pytest.mark.parametrize(
    "rule, env, frameworks, runs",
    [(r, e, f, runs) for r, envs, runs in CONDA_RULES for e, f in envs.items()],
    ids=[f"{r}-{Path(e).stem}" for r, envs, _ in CONDA_RULES for e in envs],
)
def test_every_env_installs_what_its_jobs_import(rule, env, frameworks, runs):
    missing = missing_distributions(env, frameworks, runs)
    assert not missing, f"rule {rule} runs in {env}, which lacks: " + "; ".join(missing)


def test_every_rule_with_an_env_is_checked_and_every_env_is_reached():
    rules = {r for r, _, _ in CONDA_RULES}
    assert {"measure", "collect", "crossover", "manifest", "ro_crate", "paper"} <= rules
    assert {"report_notebook", "report_html"} <= rules
    envs = {e for _, es, _ in CONDA_RULES for e in es}
    assert envs == {f"envs/{p.name}" for p in ENV_FILES}


def test_the_manifest_job_reads_scikit_learns_iris_in_its_env():
    """The manifest rule records scikit-learn's bundled iris.csv (manifest_inputs.data_files):
    without scikit-learn in envs/report.yaml it would drop out of the manifest under
    --sdm conda. The need is found through manifest_inputs.PACKAGE_DATA."""
    (runs,) = [runs for r, _, runs in CONDA_RULES if r == "manifest"]
    needed = third_party(job_imports(RULES / runs["script"]))
    assert any(i.where == "manifest_inputs.PACKAGE_DATA" for i in needed["scikit-learn"])
    assert "scikit-learn" in env_distributions(ENVS / "report.yaml")


def test_exemptions_hold_only_for_lazy_framework_and_guarded_optional_imports(tmp_path):
    """The other framework may be missing only where every import of it the job
    reaches is inside a function; an optional package only where every import of it is
    guarded by try/except ImportError. Scripts written here stand in for a rule's."""
    needed = third_party(job_imports(RULES / "../scripts/collect.py"))
    assert needed["torch"] and all(i.lazy for i in needed["torch"])
    assert needed["nvidia-ml-py"] and all(i.guarded for i in needed["nvidia-ml-py"])

    def missing(source: str) -> list[str]:
        script = tmp_path / "job.py"
        script.write_text(source)
        return missing_distributions("envs/report.yaml", set(), {"script": str(script)})

    assert missing("try:\n    import pynvml\nexcept ImportError:\n    pass\n") == []
    assert missing("import pynvml\n") == ["nvidia-ml-py (imported at job.py:1)"]
    assert missing("import torch\n") == ["torch (imported at job.py:1)"]
    # A script's own imports all run (its main() does), inside a function or not.
    assert missing("def main():\n    import torch\n") == ["torch (imported at job.py:2)"]
    assert missing("from tensorflow import keras\n") == [
        "keras (imported at job.py:1)",
        "tensorflow (imported at job.py:1)",
    ]
    # What the crossover_study modules import counts as the script's, transitively.
    assert missing("from crossover_study import crate\ncrate.write_crate\n") == []
    with pytest.raises(AssertionError, match="add its distribution to MODULE_DISTRIBUTION"):
        missing("import requests\n")


def test_module_distribution_agrees_with_the_installed_metadata():
    installed = importlib.metadata.packages_distributions()
    for module, dist in MODULE_DISTRIBUTION.items():
        names = {_dist(d) for d in installed.get(module, [])}
        assert dist in names, f"{module}: installed by {sorted(names)}, not {dist}"


def test_provided_by_holds_in_the_installed_metadata():
    for dist, parent in PROVIDED_BY.items():
        requires = importlib.metadata.requires(parent) or []
        names = {_dist(re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0]) for r in requires}
        assert dist in names, f"{parent} does not require {dist}"
