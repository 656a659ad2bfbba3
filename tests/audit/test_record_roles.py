"""The report and the Croissant record place records by the roles their layers declare
(``splitscope.records.roles``), never by words in a record's id, title or predicate: a layer
that declares a role has its records shown there without any edit to ``report/`` or
``records/``."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import ClassVar

import pytest
from audit_helpers import tiny_release
from toy_layer import PREDICATE, LargeFilesLayer

import splitscope
from splitscope.core.options import AuditOptions
from splitscope.core.protocol import record_roles, register, unregister
from splitscope.core.run import audit
from splitscope.records import roles as R

PACKAGE = Path(splitscope.__file__).parent
#: what a record is looked up by when code reads its text
_RECORD_TEXT = ("id", "title", "predicate", "name", "_text")


class DeclaredLargeFiles(LargeFilesLayer):
    """The toy layer, declaring that its records belong in the report's partition tables and
    are no finding of the Croissant record."""

    roles: ClassVar[dict] = {R.PARTITION: (PREDICATE,), R.NOT_FINDING: (PREDICATE,)}


@pytest.fixture(params=[LargeFilesLayer, DeclaredLargeFiles], ids=["plain", "declared"])
def toy(request):
    layer = register(request.param())
    yield layer
    unregister(layer.name)


def _table(html: str, section: str) -> str:
    return "".join(re.findall(rf'<table class="records" data-section="{section}">(.*?)</table>',
                              html, flags=re.DOTALL))


def test_a_layer_places_its_records_by_declaring_roles(tmp_path, toy):
    release = tiny_release(tmp_path / "release", seed=1, sizes=(("train", 6), ("test", 4)),
                           side=None)
    result = audit(release, out_dir=tmp_path / "out",
                   options=AuditOptions.from_flags(layers=["large_files"], croissant=True,
                                                   progress=False))
    record = next(r for r in result.document["records"] if r["layer"] == "large_files"
                  and r["status"] == "completed")
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    croissant = json.loads((tmp_path / "out" / "croissant.json").read_text(encoding="utf-8"))
    cited = f"(audit record {record['id']})"
    findings = croissant["rai:dataBiases"] + croissant["rai:dataLimitations"]
    in_partition = f'title="{record["id"]}"' in _table(html, "partition")
    in_other = f'title="{record["id"]}"' in _table(html, "other")
    declared = isinstance(toy, DeclaredLargeFiles)
    assert record_roles().get("large_files", {}) == (
        {R.PARTITION: (PREDICATE,), R.NOT_FINDING: (PREDICATE,)} if declared else {})
    assert in_partition is declared and in_other is not declared
    assert any(cited in line for line in findings) is not declared


def test_an_unknown_role_is_refused():
    class Misspelt(LargeFilesLayer):
        roles: ClassVar[dict] = {"partitoin": (PREDICATE,)}

    with pytest.raises(ValueError, match="unknown record roles"):
        register(Misspelt())


def _reads_record_text(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id in _RECORD_TEXT
               or isinstance(n, ast.Constant) and n.value in _RECORD_TEXT
               or isinstance(n, ast.Attribute) and n.attr in _RECORD_TEXT
               for n in ast.walk(node))


def word_lookups(source: str) -> list[str]:
    """Places where code tests a record's id, title or predicate name against a spelled
    string: ``"word" in <record text>``, ``<record text> == "word"`` or
    ``<record text>.startswith("prefix")``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right = node.left, node.comparators[0]
            if isinstance(node.ops[0], (ast.In, ast.NotIn)):
                if (isinstance(left, ast.Constant) and isinstance(left.value, str)
                        and _reads_record_text(right)):
                    found.append(ast.unparse(node))
            elif isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
                for a, b in ((left, right), (right, left)):
                    if (isinstance(a, ast.Constant) and isinstance(a.value, str)
                            and _reads_record_text(b) and not isinstance(b, ast.Constant)):
                        found.append(ast.unparse(node))
                        break
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith")
              and _reads_record_text(node.func.value)):
            found.append(ast.unparse(node))
    return found


def test_the_report_and_the_records_look_up_no_record_by_words():
    offending = {}
    for folder in ("report", "records"):
        for path in sorted((PACKAGE / folder).glob("*.py")):
            hits = word_lookups(path.read_text(encoding="utf-8"))
            if hits:
                offending[f"{folder}/{path.name}"] = hits
    assert not offending, offending


@pytest.mark.parametrize("line", [
    'header = [r for r in prov if "header" in _text(r)]',
    'found = [r for r in records if str(r.get("id", "")).startswith("near_duplicate.x.")]',
    'rec = next(r for r in doc["records"] if r["id"] == "group.resplit")',
    'bias = "label_conflict" in r["id"]',
    'x = (record.get("predicate") or {}).get("name") == "dedup_split"',
])
def test_the_check_finds_a_word_lookup(line):
    assert len(word_lookups(line)) == 1
