"""The package's floors (crossover_study.LAYERS): no import goes up a floor or across to a
sibling package on the same floor, no import cycle (between packages or inside one,
counting imports inside functions), every module lies in a package (or is a top-level
module) of LAYERS, and no library module has a ``__main__`` block. The docstring of
``crossover_study`` and docs/ARCHITECTURE.md name the packages floor by floor; both are
checked against LAYERS. Read from the source with ``ast``: nothing is imported, so a
framework need not be installed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import crossover_study
from crossover_study import LAYERS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "crossover_study"


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


def unit(module: str) -> str:
    """The package (or top-level module) ``module`` lies in: its first dotted name."""
    return module.split(".")[0]


def upward_imports(graph, layers) -> list[str]:
    """Lines naming each import of a package on a higher floor or of a sibling on the same
    floor, and each module outside every package of ``layers`` (the package's own
    ``__init__``, ``""``, imports nothing and lies in none)."""
    problems = [f"{m}: in no package of LAYERS" for m in graph if m and unit(m) not in layers]
    problems += [f"(package): imports {t}" for t, _ in graph.get("", ())]
    for module, edges in graph.items():
        if not module or unit(module) not in layers:
            continue
        here = unit(module)
        for target, line in edges:
            there = unit(target)
            if there == here or there not in layers:
                continue
            if layers[there] > layers[here]:
                problems.append(
                    f"{module}:{line} imports {target} ({there}, floor {layers[there]}) from "
                    f"floor {layers[here]}"
                )
            elif layers[there] == layers[here]:
                problems.append(
                    f"{module}:{line} imports {target} of {there}, a sibling on floor "
                    f"{layers[here]}"
                )
    return problems


def main_blocks(root: Path) -> list[str]:
    """Modules under ``root`` (the package folder) with a top-level ``__main__`` block,
    ``__main__.py`` itself left out."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name != "__main__.py" and any(
            _is_main_block(n) for n in ast.parse(path.read_text()).body
        ):
            found.append(_module_name(path, root))
    return found


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


def test_no_import_goes_up_or_across_a_floor_and_every_module_is_in_a_package():
    graph = package_imports(PACKAGE, "crossover_study")
    assert any(t == "measure.harness" for t, _ in graph["measure.point"])  # it sees imports
    assert upward_imports(graph, LAYERS) == []
    units = {unit(m) for m in graph if m}
    assert sorted(set(LAYERS) - units) == [], "LAYERS names packages that do not exist"


def test_the_package_has_no_import_cycle():
    assert import_cycles(package_imports(PACKAGE, "crossover_study")) == []


def test_no_library_module_has_a_main_block():
    assert main_blocks(PACKAGE) == []  # every command is a crossover-study subcommand


def test_the_checks_find_an_upward_import_a_cycle_and_a_module_without_a_package(tmp_path):
    # Packages low (floor 0), high and side (floor 1): low imports high inside a function
    # (up a floor, and a cycle with high), high imports side (a sibling), top.py lies in
    # no package, and a main block is found; main-block imports are not counted.
    pkg = tmp_path / "demo"
    for sub in ("low", "high", "side"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    from demo.high import b\n")
    (pkg / "high" / "b.py").write_text("from demo.low.a import f\nfrom ..side import c\n")
    (pkg / "side" / "c.py").write_text("from . import d\n")
    (pkg / "side" / "d.py").write_text("from .c import x\n")
    (pkg / "top.py").write_text(
        "import demo.high.b\nif __name__ == '__main__':\n    from demo.low import a\n"
    )
    graph = package_imports(pkg, "demo")
    assert [t for t, _ in graph["low.a"]] == ["high.b"]
    assert [t for t, _ in graph["high.b"]] == ["low.a", "side.c"]
    assert [t for t, _ in graph["top"]] == ["high.b"]  # the __main__ block is left out
    layers = {"low": 0, "high": 1, "side": 1}
    problems = upward_imports(graph, layers)
    assert "low.a:2 imports high.b (high, floor 1) from floor 0" in problems
    assert "high.b:2 imports side.c of side, a sibling on floor 1" in problems
    assert "top: in no package of LAYERS" in problems
    assert len(problems) == 3
    assert sorted(import_cycles(graph)) == [["high.b", "low.a"], ["side.c", "side.d"]]
    assert main_blocks(pkg) == ["top"]


def _floors_named(text: str) -> list[list[str]]:
    """The packages named on each numbered line ``N. ``name``: ...`` (and the lines that
    continue it) of ``text``, in order."""
    floors: list[list[str]] = []
    for match in re.finditer(r"^(\d+)\. (.*(?:\n {3}.*)*)", text, re.M):
        names = re.findall(r"``(\w+)``: |``(\w+)`` and ``(\w+)``", match.group(2))
        floors.append([n for group in names for n in group if n])
    return floors


def _floors_of(layers: dict[str, int]) -> list[list[str]]:
    return [
        sorted(u for u, f in layers.items() if f == floor) for floor in sorted(set(layers.values()))
    ]


def test_the_docstring_names_the_packages_floor_by_floor():
    named = [sorted(f) for f in _floors_named(crossover_study.__doc__)]
    assert named == _floors_of(LAYERS)


def test_architecture_md_lists_the_packages_floor_by_floor():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", text, re.M)
    named = [sorted(re.findall(r"`(\w+)`", names)) for _, names in rows]
    assert [int(n) for n, _ in rows] == sorted(set(LAYERS.values()))
    assert named == _floors_of(LAYERS)
