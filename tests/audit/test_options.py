"""One options object: built once, read by the layers as context.options, recorded whole in
audit.json; the CLI's defaults are the dataclasses' defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from audit_helpers import tiny_release

from splitscope.audit.commands import audit_command
from splitscope.audit.options import AuditOptions
from splitscope.audit.run import audit
from splitscope.errors import InputError


def _release(root: Path) -> Path:
    return tiny_release(root, seed=3, sizes=(("train", 6), ("test", 4)), side=24,
                        name="p{patient}_{split}_{i}.png",
                        copy=("train/a/p0_train_0.png", "test/a/p0_copy.png"))


def test_every_option_is_listed_and_json_ready():
    d = AuditOptions.build(tau=0.9, seed=3, prediction_reading={"sheet": "1"},
                           list_options={"columns": {"path": "file"}}).to_dict()
    assert set(d) == {"inputs", "features", "search", "provenance", "quality", "evaluation",
                      "run"}
    assert d["search"]["tau"] == 0.9 and d["run"]["seed"] == 3
    assert d["evaluation"]["reading"]["sheet"] == 1  # a digit string is a sheet index
    assert d["inputs"]["list_options"] == {"columns": {"path": "file"}}
    assert json.loads(json.dumps(d)) == d


def test_the_cli_defaults_are_the_options_defaults():
    defaults = {p.name: p.default for p in audit_command.params}
    o = AuditOptions()
    assert (defaults["tau"], defaults["radius"], defaults["transforms"]) \
        == (o.search.tau, o.search.radius, o.search.transforms)
    assert (defaults["thumb_size"], defaults["score_kind"]) == (o.features.thumb_size,
                                                                o.evaluation.score_kind)
    assert (defaults["seed"], defaults["resamples"], defaults["max_pairs"]) == (
        o.run.seed, o.run.resamples, o.run.max_pairs)


def test_bad_options_fail_before_any_work(tmp_path):
    with pytest.raises(InputError, match="tau"):
        AuditOptions.build(tau=1.5)
    with pytest.raises(InputError, match="score_kind"):
        AuditOptions.build(score_kind="odds")
    with pytest.raises(InputError, match="not both"):
        audit(tmp_path, out_dir=tmp_path / "out", options=AuditOptions(), tau=0.9)


def test_seed_and_resamples_reach_the_groups_layer_and_audit_json(tmp_path):
    release = _release(tmp_path / "release")
    options = AuditOptions.build(seed=5, resamples=37, layers=["groups"],
                                 group_regex=r"^(?P<group>p\d+)_", progress=False)
    doc = audit(release, out_dir=tmp_path / "out", options=options).document
    assert doc["options"]["run"]["seed"] == 5 and doc["options"]["run"]["resamples"] == 37
    assert doc["options"]["inputs"]["group_regex"] == r"^(?P<group>p\d+)_"
    overlap = [r for r in doc["records"] if r["id"].startswith("group.overlap[")
               and r["status"] == "completed"]
    assert overlap
    assert all("37 resamples" in r["uncertainty"]["kind"] for r in overlap)
    saved = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert saved["options"] == doc["options"]


@pytest.mark.slow
def test_resample_defaults_come_from_the_options():
    """A function's ``n_resamples``/``n_boot``/``resamples`` default names RunOptions.resamples
    (defined once) instead of spelling 2000; the provenance probes' ``seed`` and ``folds``
    name RunOptions.seed and ProvenanceOptions.folds."""
    import ast

    import splitscope

    package = Path(splitscope.__file__).parent
    spelled = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args
            pairs = list(zip(args.args[len(args.args) - len(args.defaults):], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d]
            for arg, default in pairs:
                named = ("n_resamples", "n_boot", "resamples") + (
                    ("seed", "folds") if rel.startswith("provenance/") else ())
                if arg.arg in named and isinstance(default, ast.Constant):
                    spelled.setdefault(rel, []).append(f"{node.name}({arg.arg})")
    assert not spelled, spelled
