"""Habits that keep the code easy to change (issue 52), checked so that they hold: no
private name imported from another module (``from crossover_study.x import _name``,
which ruff's SLF001 does not see), no module over :data:`MODULE_LINES` lines and no
function over :data:`FUNCTION_LINES` lines, each outside an allow-list of today's
offenders that may only shrink: an entry that no longer offends fails too, so that it
is taken off. Ruff's ``per-file-ignores`` in pyproject.toml (SLF001, PLR0915) are held
to the same rule. Read from the source with ``ast``: nothing is imported."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "crossover_study"
RUFF = Path(sys.executable).with_name("ruff")

#: Longest module, in lines.
MODULE_LINES = 500
#: Longest function (its decorators, signature, docstring and body), in lines.
FUNCTION_LINES = 80

#: Private names imported across modules that are allowed (``module: name``); none.
PRIVATE_IMPORTS: set[str] = set()
#: Modules over MODULE_LINES (paths below src/crossover_study/); may only shrink.
LONG_MODULES: set[str] = set()
#: Functions over FUNCTION_LINES (``path:qualified name``); may only shrink.
LONG_FUNCTIONS = {
    "analysis/compare_runs.py:compare_runs",
    "figures/browser.py:check_page",
    "figures/draw.py:replica_scaling",
    "figures/draw.py:speedup_heatmap",
    "figures/draw.py:variant_comparison",
    "figures/report.py:step_time_vs_size",
    "figures/scaling.py:scaling_table",
    "measure/agreement.py:agreement",
    "measure/attribution.py:attribute_point",
    "measure/fresh_point.py:in_users_state",
    "measure/harness.py:_measure",
    "measure/job.py:measure_job",
    "measure/point.py:_measure_point",
    "measure/supervisor.py:supervise",
    "provenance/manifest.py:build_manifest",
    "reference/rehearsal.py:rehearse",
    "stepmodel/columns.py:model_columns",
    "stepmodel/counts_tf.py:count_tf_step",
    "study/config.py:_check_cases",
    "workloads/tf_strategy_step.py:build_case",
}


def _modules(root: Path = PACKAGE) -> dict[str, ast.Module]:
    """Every module under ``root`` by its path relative to ``root``, parsed."""
    return {
        p.relative_to(root).as_posix(): ast.parse(p.read_text(), str(p))
        for p in sorted(root.rglob("*.py"))
    }


def private_imports(modules: dict[str, ast.Module], package: str = "crossover_study") -> set[str]:
    """``"module: name"`` for each private name (one leading underscore) a module imports
    from another module of ``package`` (absolute or relative imports, inside functions
    too)."""
    found = set()
    for path, tree in modules.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if not node.level and (node.module or "").split(".")[0] != package:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.add(f"{path}: {alias.name}")
    return found


def long_functions(modules: dict[str, ast.Module], limit: int = FUNCTION_LINES) -> dict[str, int]:
    """``{"path:qualified name": lines}`` of the functions and methods (nested ones too)
    longer than ``limit`` lines, decorators included."""
    found = {}

    def walk(node: ast.AST, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                lines = child.end_lineno - start + 1
                if lines > limit:
                    found[f"{path}:{prefix}{child.name}"] = lines
                walk(child, path, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, path, f"{prefix}{child.name}.")
            else:
                walk(child, path, prefix)

    for path, tree in modules.items():
        walk(tree, path, "")
    return found


def long_modules(root: Path = PACKAGE, limit: int = MODULE_LINES) -> dict[str, int]:
    """``{path: lines}`` of the modules under ``root`` longer than ``limit`` lines."""
    found = {}
    for p in sorted(root.rglob("*.py")):
        lines = len(p.read_text().splitlines())
        if lines > limit:
            found[p.relative_to(root).as_posix()] = lines
    return found


def _only_shrinks(found: set[str], allowed: set[str], what: str) -> list[str]:
    problems = [f"{name}: {what}, not on the allow-list" for name in sorted(found - allowed)]
    problems += [
        f"{name}: on the allow-list but no longer {what}: take it off the list"
        for name in sorted(allowed - found)
    ]
    return problems


def test_no_private_name_is_imported_from_another_module():
    """A name another module needs is an interface: give it a public name."""
    assert (
        _only_shrinks(private_imports(_modules()), PRIVATE_IMPORTS, "imports a private name") == []
    )


def test_no_module_grows_past_500_lines():
    found = long_modules()
    assert _only_shrinks(set(found), LONG_MODULES, f"over {MODULE_LINES} lines") == [], found


def test_no_function_grows_past_80_lines():
    """Split a long function by what it does (not by line count)."""
    found = long_functions(_modules())
    assert _only_shrinks(set(found), LONG_FUNCTIONS, f"over {FUNCTION_LINES} lines") == [], found


def test_the_checks_find_what_they_look_for(tmp_path):
    """The three checks on a small package: each finds its offender and nothing else."""
    pkg = tmp_path / "crossover_study"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "sub" / "a.py").write_text("def _hidden():\n    pass\n")
    (pkg / "sub" / "b.py").write_text(
        "from crossover_study.sub.a import _hidden\nfrom .a import __doc__\n"
        "def f():\n    from .a import _hidden as h\n" + "    x = 1\n" * 6
    )
    modules = _modules(pkg)
    assert private_imports(modules) == {"sub/b.py: _hidden"}
    assert long_functions(modules, limit=5) == {"sub/b.py:f": 8}
    assert long_modules(pkg, limit=8) == {"sub/b.py": 10}
    assert _only_shrinks({"x", "y"}, {"y", "z"}, "long") == [
        "x: long, not on the allow-list",
        "z: on the allow-list but no longer long: take it off the list",
    ]


def test_ruffs_per_file_ignores_only_shrink():
    """Each file ruff is told to ignore a rule in (pyproject.toml, ``per-file-ignores``)
    still breaks that rule: a file that no longer does is taken off the list."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    ignores = config["tool"]["ruff"]["lint"]["per-file-ignores"]
    assert ignores, "pyproject.toml lists no per-file-ignores"
    stale = []
    for path, rules in ignores.items():
        result = subprocess.run(
            [str(RUFF), "check", "--isolated", "--select", ",".join(rules), "--quiet", path],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        for rule in rules:
            if rule not in result.stdout:
                stale.append(f"{path}: {rule} is ignored but not broken")
    assert stale == []
