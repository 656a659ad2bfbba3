"""The shape of the code, checked so that it stays true: imports run one way (records at the
bottom, layers above it, the audit above the layers, the report rendering a finished document),
with no import cycle."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import splitscope

PACKAGE = Path(splitscope.__file__).parent
#: packages that hold a layer of the method, or what the layers are built on
LAYER_PACKAGES = ("manifest", "features", "relations", "groups", "provenance", "evaluation",
                  "experiments", "records", "datasets")


def _module_name(path: Path) -> str:
    parts = ("splitscope",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, *, top_level_only: bool) -> set[str]:
    """splitscope modules imported by ``path`` (inside functions too, unless top_level_only).
    ``from package import submodule`` imports the submodule (a package is always initialised
    before its submodules, so that is no edge of its own)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else ast.walk(tree)
    modules = set(_MODULES)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("splitscope"):
                subs = {f"{node.module}.{a.name}" for a in node.names} & modules
                found.update(subs)
                if len(subs) < len(node.names):
                    found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("splitscope"))
    return found


_MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _modules() -> dict[str, Path]:
    return _MODULES


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


@pytest.mark.slow
def test_no_layer_package_imports_the_audit_or_the_report():
    offending = []
    for name, path in _modules().items():
        if _package(name) not in LAYER_PACKAGES:
            continue
        for target in _imports(path, top_level_only=False):
            if _package(target) in ("core", "report", "workflows"):
                offending.append(f"{name} imports {target}")
    assert not offending, offending


#: packages that hold a layer (an entry module ``layer.py`` listing ``LAYERS``)
AUDIT_LAYERS = tuple(sorted(p.parent.name for p in PACKAGE.glob("*/layer.py")))


def test_the_core_imports_no_layer_package_at_any_level():
    """The core (the layer protocol, the options, the run, the verdicts, the issue table)
    reaches the layers only through the registry, never by an import, function-level ones
    counted; nor does it import the verbs above it (workflows)."""
    assert set(AUDIT_LAYERS) >= {"relations", "groups", "provenance", "evaluation",
                                 "experiments"}
    offending = [f"{name} imports {target}"
                 for name, path in _modules().items() if _package(name) == "core"
                 for target in _imports(path, top_level_only=False)
                 if _package(target) in (*AUDIT_LAYERS, "workflows")]
    assert not offending, offending


def test_the_core_import_check_finds_a_function_level_import(tmp_path, monkeypatch):
    module = tmp_path / "probe.py"
    module.write_text("def f():\n    from splitscope.relations.reading import RULES\n")
    assert "splitscope.relations.reading" in _imports(module, top_level_only=False)
    assert "splitscope.relations.reading" not in _imports(module, top_level_only=True)


def test_the_report_imports_no_layer_package():
    allowed = {"report", "records", "errors", ""}
    offending = [f"{name} imports {target}"
                 for name, path in _modules().items() if _package(name) == "report"
                 for target in _imports(path, top_level_only=False)
                 if _package(target) not in allowed]
    assert not offending, offending


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (a list of nodes) or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle_between_modules():
    graph = _module_graph(top_level_only=True)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def _module_graph(*, top_level_only: bool) -> dict[str, set[str]]:
    modules = _modules()
    return {name: {t for t in _imports(path, top_level_only=top_level_only)
                   if t in modules and t != name}
            for name, path in modules.items()}


def test_no_import_cycle_between_modules_even_inside_functions():
    """An import inside a function is still a dependency: two modules that import each other
    that way cannot be read, tested or moved one without the other. Shared code moves down
    into a module both import (``manifest/rows.py``, ``relations/ncc_core.py``,
    ``features/executors.py``)."""
    graph = _module_graph(top_level_only=False)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_a_function_level_import_cycle_is_found(tmp_path, monkeypatch):
    """The walk sees an import inside a function: two modules that import each other only
    there form a cycle."""
    (tmp_path / "a.py").write_text("def f():\n    from splitscope.b import g\n    return g\n")
    (tmp_path / "b.py").write_text("import os\n\n\ndef g():\n    import splitscope.a\n")
    monkeypatch.setattr(sys.modules[__name__], "_MODULES",
                        {"splitscope.a": tmp_path / "a.py", "splitscope.b": tmp_path / "b.py"})
    assert _cycle(_module_graph(top_level_only=True)) is None
    assert _cycle(_module_graph(top_level_only=False)) == ["splitscope.a", "splitscope.b",
                                                           "splitscope.a"]


def test_no_import_cycle_between_packages_even_inside_functions():
    graph: dict[str, set[str]] = {}
    for name, path in _modules().items():
        pkg = _package(name)
        targets = {_package(t) for t in _imports(path, top_level_only=False)}
        graph.setdefault(pkg, set()).update(t for t in targets if t and t != pkg)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_every_layer_package_has_one_entry_module_and_its_verbs():
    for pkg in ("relations", "groups", "provenance", "evaluation", "experiments"):
        assert (PACKAGE / pkg / "layer.py").is_file(), pkg
        assert (PACKAGE / pkg / "commands.py").is_file(), pkg
