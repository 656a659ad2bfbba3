"""No file a user is handed can make splitscope run code: the source holds no unpickling load,
no ``eval``/``exec`` and no shell. Checked on the syntax tree, so ``model.eval()`` (a method)
is not a finding and a call written over several lines still is."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import splitscope

SRC = Path(splitscope.__file__).parent

#: keyword=value pairs that let a reader unpickle or a call reach a shell.
UNSAFE_KEYWORDS = {("weights_only", False), ("allow_pickle", True), ("shell", True)}
#: module.function calls that unpickle or evaluate whatever the file holds.
UNSAFE_CALLS = {("pickle", "load"), ("pickle", "loads"), ("pickle", "Unpickler"),
                ("cPickle", "load"), ("dill", "load"), ("dill", "loads"),
                ("joblib", "load"), ("marshal", "load"), ("marshal", "loads"),
                ("shelve", "open"), ("yaml", "unsafe_load"), ("yaml", "full_load")}
SAFE_YAML_LOADERS = {"SafeLoader", "CSafeLoader", "BaseLoader", "CBaseLoader"}


def _dotted(node: ast.AST) -> tuple[str, ...]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return tuple(reversed(parts))


def unsafe_calls(source: str) -> list[str]:
    """Every call in ``source`` that could run code held in a file, as 'line: what'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        where = f"{node.lineno}: {'.'.join(name) or '<call>'}"
        if name in (("eval",), ("exec",)):
            found.append(f"{where} (evaluates a string)")
        if name[-2:] in UNSAFE_CALLS:
            found.append(f"{where} (unpickles)")
        if name[-2:] == ("yaml", "load"):
            loader = [k.value for k in node.keywords if k.arg == "Loader"] + node.args[1:2]
            if not loader or _dotted(loader[0])[-1:] not in {(n,) for n in SAFE_YAML_LOADERS}:
                found.append(f"{where} (yaml.load without a safe loader)")
        for k in node.keywords:
            if (isinstance(k.value, ast.Constant)
                    and (k.arg, k.value.value) in UNSAFE_KEYWORDS):
                found.append(f"{where} ({k.arg}={k.value.value})")
    return found


@pytest.mark.parametrize("snippet, hit", [
    ("torch.load(p, map_location='cpu',\n           weights_only=False)", "weights_only=False"),
    ("np.load(p, allow_pickle=True)", "allow_pickle=True"),
    ("import pickle\npickle.load(fh)", "unpickles"),
    ("yaml.load(text)", "yaml.load"),
    ("yaml.load(text, Loader=yaml.Loader)", "yaml.load"),
    ("eval(expr)", "evaluates"),
    ("subprocess.run(cmd, shell=True)", "shell=True"),
])
def test_the_check_finds_each_unsafe_form(snippet, hit):
    assert any(hit in f for f in unsafe_calls(snippet)), unsafe_calls(snippet)


@pytest.mark.parametrize("snippet", [
    "model.eval()", "torch.load(p, weights_only=True)", "np.load(p, allow_pickle=False)",
    "yaml.load(text, Loader=yaml.SafeLoader)", "yaml.safe_load(text)",
    "subprocess.run(['git', 'log'], check=False)",
])
def test_the_check_passes_safe_forms(snippet):
    assert unsafe_calls(snippet) == []


def test_no_source_file_loads_code_from_disk():
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 50, f"found only {len(files)} source files under {SRC}"
    findings = [f"{path.relative_to(SRC)}:{hit}" for path in files
                for hit in unsafe_calls(path.read_text(encoding="utf-8"))]
    assert findings == [], "calls that could run code held in a file:\n" + "\n".join(findings)
