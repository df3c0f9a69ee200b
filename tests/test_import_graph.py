"""No import cycle in the package: the graph of which module imports which (every ``import`` statement, at the
top of a module or inside a function, read with ``ast``) has no cycle. A package's ``__init__`` importing its own
modules is an edge like any other, so a module that imports a name from its package's ``__init__`` while that
``__init__`` imports it is a cycle too."""
import ast
from pathlib import Path

import pytest

from nldm_fixtures import ROOT

PACKAGE = ROOT / "spacy_nldm"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set, root: Path = ROOT) -> set:
    """The package's modules that ``path`` imports (``from . import x`` is module ``x`` where x is one, else the
    package's ``__init__``)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def import_graph(package: Path) -> dict:
    """{module: the package's modules it imports} for every module under ``package``."""
    root = package.parent
    paths = sorted(package.rglob("*.py"))
    modules = {module_name(p, root) for p in paths}
    return {module_name(p, root): imported_modules(p, modules, root) for p in paths}


def find_cycle(graph: dict):
    """One cycle of ``graph`` as a list of modules (first == last), or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(import_graph(PACKAGE))
    assert cycle is None, " -> ".join(cycle)


def test_the_check_finds_a_cycle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import a\n")
    (pkg / "sub" / "a.py").write_text("def f():\n    from ..b import g\n")
    (pkg / "b.py").write_text("from .sub.a import f\n")
    graph = import_graph(pkg)
    assert find_cycle(graph) in (["pkg.b", "pkg.sub.a", "pkg.b"], ["pkg.sub.a", "pkg.b", "pkg.sub.a"])

