"""One options object: built once, read by the layers as context.options, recorded whole in
audit.json; the CLI's defaults are the dataclasses' defaults."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from audit_helpers import tiny_release

from splitscope.core.commands import audit_command
from splitscope.core.options import AuditOptions
from splitscope.core.run import audit
from splitscope.errors import InputError


def _release(root: Path) -> Path:
    return tiny_release(root, seed=3, sizes=(("train", 6), ("test", 4)), side=24,
                        name="p{patient}_{split}_{i}.png",
                        copy=("train/a/p0_train_0.png", "test/a/p0_copy.png"))


def test_every_option_is_listed_and_json_ready():
    d = AuditOptions.from_flags(tau=0.9, seed=3, sheet="1", path_column="file").to_dict()
    assert list(d) == ["inputs", "features", "search", "provenance", "quality", "evaluation",
                       "run"]
    assert d["search"]["tau"] == 0.9 and d["run"]["seed"] == 3
    assert d["evaluation"]["sheet"] == 1  # a digit string is a sheet index
    assert d["inputs"]["path_column"] == "file"
    assert json.loads(json.dumps(d)) == d


def test_from_flags_parses_the_texts_of_the_command_line():
    o = AuditOptions.from_flags(layers="duplicates, groups", sep="tab", workers=2)
    assert o.run.layers == ("duplicates", "groups")
    assert o.evaluation.sep == "\t" and o.run.workers == 2
    assert o.inputs.list_options() == {}
    o = AuditOptions.from_flags(path_column="img", list_root="/r", constant_split="test")
    assert o.inputs.list_options() == {"columns": {"path": "img"}, "root": "/r",
                                       "split": "test"}


def test_layer_groups_are_attributes_and_replaceable():
    from splitscope.relations.options import SearchOptions

    o = AuditOptions().replace(search=SearchOptions(tau=0.9))
    assert o.search.tau == 0.9 and o.layer_options["search"] is o.search
    assert AuditOptions().search == SearchOptions()
    with pytest.raises(AttributeError, match="no options group 'nothing'"):
        _ = o.nothing
    with pytest.raises(InputError, match="unknown options group"):
        AuditOptions(layer_options={"nothing": SearchOptions()})
    with pytest.raises(InputError, match="must be a SearchOptions"):
        AuditOptions(layer_options={"search": object()})


def test_the_cli_defaults_are_the_options_defaults():
    defaults = {p.name: p.default for p in audit_command().params}
    o = AuditOptions()
    assert (defaults["tau"], defaults["radius"], defaults["transforms"]) \
        == (o.search.tau, o.search.radius, o.search.transforms)
    assert (defaults["thumb_size"], defaults["score_kind"]) == (o.features.thumb_size,
                                                                o.evaluation.score_kind)
    assert (defaults["seed"], defaults["resamples"], defaults["max_pairs"]) == (
        o.run.seed, o.run.resamples, o.run.max_pairs)
    # every flag but the audit's inputs and outputs is an option field, whatever its group
    inputs = {"inputs", "control", "external", "predictions", "attribution_maps",
              "attribution_masks", "out_dir", "fail_on", "as_json", "quiet"}
    flags = {p.name: p.default for p in audit_command().params if p.name not in inputs}
    assert AuditOptions.from_flags(**flags) == o


def test_bad_options_fail_before_any_work(tmp_path):
    with pytest.raises(InputError, match="tau"):
        AuditOptions.from_flags(tau=1.5)
    with pytest.raises(InputError, match="score_kind"):
        AuditOptions.from_flags(score_kind="odds")
    with pytest.raises(InputError, match="unknown option"):
        AuditOptions.from_flags(n_boot=10)
    with pytest.raises(InputError, match="must be an AuditOptions"):
        audit(tmp_path, {"tau": 0.9}, out_dir=tmp_path / "out")


def test_audit_takes_at_most_twelve_parameters():
    import inspect

    assert len(inspect.signature(audit).parameters) <= 12


def test_seed_and_resamples_reach_the_groups_layer_and_audit_json(tmp_path):
    release = _release(tmp_path / "release")
    options = AuditOptions.from_flags(seed=5, resamples=37, layers=["groups"],
                                      group_regex=r"^(?P<group>p\d+)_", progress=False)
    doc = audit(release, options, out_dir=tmp_path / "out").document
    assert doc["options"]["run"]["seed"] == 5 and doc["options"]["run"]["resamples"] == 37
    assert doc["options"]["inputs"]["group_regex"] == r"^(?P<group>p\d+)_"
    assert "params" not in doc and doc["schema_version"] == "2.0"
    overlap = [r for r in doc["records"] if r["id"].startswith("group.overlap[")
               and r["status"] == "completed"]
    assert overlap
    assert all("37 resamples" in r["uncertainty"]["kind"] for r in overlap)
    saved = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert saved["options"] == doc["options"] == options.replace(
        run=dataclasses.replace(options.run, workspace=str(tmp_path / "out" / "workspace"))
    ).to_dict()


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
