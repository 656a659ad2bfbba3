"""Predicate names come from one table per package (``<package>/predicates.py``): a module
that names a record's predicate imports the name rather than spelling it. Tests may spell
them. ``sha256``, ``basename`` and ``pixel_xxh128`` are also the names of the feature columns
those predicates read, so they are left out of the check."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import splitscope

PACKAGE = Path(splitscope.__file__).parent
TABLES = ("relations", "groups", "provenance", "evaluation", "experiments")
#: names that are also feature columns (the file digest, the file name, the pixel digest)
COLUMNS = {"sha256", "basename", "pixel_xxh128"}


def _names() -> dict[str, str]:
    """Every predicate name of the tables, with the package whose table holds it."""
    out = {}
    for pkg in TABLES:
        table = importlib.import_module(f"splitscope.{pkg}.predicates")
        layers = {getattr(table, k) for k in dir(table) if k.endswith("LAYER")}
        for key, value in vars(table).items():
            if (key.isupper() and isinstance(value, str) and value not in layers
                    and not key.endswith(("PREFIX", "SUFFIX")) and value not in COLUMNS
                    and key not in ("IDENTITY", "NEAR_DUPLICATE", "WITHIN_POOL",
                                    "CROSS_SPLIT")):
                out[value] = pkg
    return out


def _spelled(path: Path, names: dict[str, str]) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exported = {id(c) for node in tree.body if isinstance(node, ast.Assign)
                and any(getattr(t, "id", None) == "__all__" for t in node.targets)
                for c in ast.walk(node.value)}  # names of functions, not of predicates
    return sorted({n.value for n in ast.walk(tree)
                   if isinstance(n, ast.Constant) and isinstance(n.value, str)
                   and n.value in names and id(n) not in exported})


def offenders(names: dict[str, str]) -> dict[str, list[str]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if path.name == "predicates.py":
            continue
        spelled = _spelled(path, names)
        if spelled:
            found[rel] = spelled
    return found


def test_the_tables_name_predicates():
    names = _names()
    assert {"ncc_nearest", "group overlap", "partition classifier", "balanced accuracy",
            "controlled re-training"} <= set(names)


def test_no_module_spells_a_predicate_name_outside_its_table():
    found = offenders(_names())
    assert not found, f"predicate names spelled outside <package>/predicates.py: {found}"


def test_the_check_finds_a_spelled_predicate(tmp_path):
    module = tmp_path / "rule.py"
    module.write_text('def flagged(r):\n    return r["predicate"]["name"] == "ncc_nearest"\n')
    assert _spelled(module, _names()) == ["ncc_nearest"]
