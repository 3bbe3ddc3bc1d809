"""The package's layer order (crossover_study.LAYERS): no import goes up a layer, no
import cycle, counting imports inside functions; every module has a layer. Read from
the source with ``ast``: nothing is imported, so a framework need not be installed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from crossover_study import LAYERS

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "crossover_study"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_main_block(node: ast.AST) -> bool:
    """``if __name__ == "__main__":`` (its body runs only when the module is the program)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    return (
        isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def _walk_outside_main(tree: ast.Module):
    """Every node of ``tree`` except those inside a top-level ``__main__`` block."""
    stack = [n for n in tree.body if not _is_main_block(n)]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(ast.iter_child_nodes(node))


def package_imports(root: Path, package: str) -> dict[str, list[tuple[str, int]]]:
    """``{module: [(imported module, line), ...]}`` for every module under ``root`` (the
    folder of the package named ``package``), module names relative to the package
    (``""`` for the package itself). Only imports of the package's own modules count:
    ``from .x import y`` names module ``x.y`` when there is one, else ``x``. Imports in a
    top-level ``if __name__ == "__main__":`` block are left out."""
    paths = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, list[tuple[str, int]]] = {}
    for name, path in paths.items():
        here = name.split(".") if name else []
        current = here if path.name == "__init__.py" else here[:-1]
        edges = set()
        for node in _walk_outside_main(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = current[: len(current) - (node.level - 1)]
                    parts = [*parts, *(node.module.split(".") if node.module else [])]
                elif node.module and node.module.split(".")[0] == package:
                    parts = node.module.split(".")[1:]
                else:
                    continue
                for alias in node.names:
                    submodule = ".".join([*parts, alias.name])
                    edges.add((submodule if submodule in paths else ".".join(parts), node.lineno))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] == package:
                        edges.add((".".join(parts[1:]), node.lineno))
        graph[name] = sorted(
            ((t, line) for t, line in edges if t in paths and t != name), key=lambda e: e[1]
        )
    return graph


def upward_imports(graph, layers) -> list[str]:
    """Lines naming each import of a higher layer's module, and each module without a
    layer."""
    problems = [f"{m or '(package)'}: no layer in LAYERS" for m in graph if m not in layers]
    for module, edges in graph.items():
        for target, line in edges:
            if module in layers and target in layers and layers[target] > layers[module]:
                problems.append(
                    f"{module}:{line} imports {target} (layer {layers[target]}) from layer "
                    f"{layers[module]}"
                )
    return problems


def import_cycles(graph) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target, _ in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return cycles


def test_no_import_goes_up_a_layer_and_every_module_has_one():
    graph = package_imports(PACKAGE, "crossover_study")
    assert any(t == "measure.harness" for t, _ in graph["measure.point"])  # it sees imports at all
    assert upward_imports(graph, LAYERS) == []
    stale = sorted(set(LAYERS) - set(graph) - {"cli", "__main__"})
    assert stale == [], f"LAYERS names modules that do not exist: {stale}"


def test_the_package_has_no_import_cycle():
    assert import_cycles(package_imports(PACKAGE, "crossover_study")) == []


def test_the_checks_find_an_upward_import_a_cycle_and_a_module_without_a_layer(tmp_path):
    # A package of four modules: low imports high inside a function (up a layer, and a
    # cycle with high), top has no layer; main-block imports are not counted.
    pkg = tmp_path / "demo"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    from . import high\n")
    (pkg / "high.py").write_text("from .low import f\nfrom .sub import leaf\n")
    (pkg / "sub" / "leaf.py").write_text("from ..low import f\n")
    (pkg / "top.py").write_text(
        "import demo.high\nif __name__ == '__main__':\n    from demo import low\n"
    )
    graph = package_imports(pkg, "demo")
    assert [t for t, _ in graph["low"]] == ["high"]
    assert [t for t, _ in graph["high"]] == ["low", "sub.leaf"]
    assert [t for t, _ in graph["sub.leaf"]] == ["low"]
    assert [t for t, _ in graph["top"]] == ["high"]  # the __main__ block is left out
    layers = {"": 0, "sub": 0, "low": 0, "sub.leaf": 1, "high": 1}
    problems = upward_imports(graph, layers)
    assert "low:2 imports high (layer 1) from layer 0" in problems
    assert "top: no layer in LAYERS" in problems
    assert import_cycles(graph) == [["high", "low", "sub.leaf"]]


@pytest.mark.parametrize("module", sorted(m for m in LAYERS if m not in ("cli", "__main__")))
def test_every_module_in_layers_exists(module):
    path = PACKAGE.joinpath(*module.split(".")) if module else PACKAGE
    assert path.with_suffix(".py").exists() or (path / "__init__.py").exists(), module
