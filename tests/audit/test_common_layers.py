"""Invariants every registered audit layer keeps, checked layer by layer (in the spirit of
scikit-learn's common estimator tests): a new layer is tested here by registering it.

Each test is parametrized over :func:`registered_layers` and reads audits of one small release
that makes every layer applicable but one: the demo (planted leakage, groups in the file names)
given as a list file, with simulated predictions and attribution maps, and a second demo as the
external corpus and the negative control. The experiments layer needs an experiment folder
(``experiment.json`` and ``runs.csv`` of a torch training run) and is recorded not applicable;
its record is checked like any other.

A layer's records are the slice of ``records`` that its entry of ``layers`` counts (the
document lists them layer by layer, in the layers' order), so a record that names another
layer is caught rather than attributed to it."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
from benchmark_module import load_benchmark

from splitscope.core.options import AuditOptions
from splitscope.core.protocol import registered_layers
from splitscope.core.run import audit
from splitscope.datasets import DEMO_GROUP_REGEX, make_demo
from splitscope.datasets.simulated_model import simulate_model_outputs
from splitscope.records.exports import read_csv
from splitscope.records.schema import record_schema
from splitscope.records.scorecard import score_card

pytestmark = pytest.mark.slow  # every test reads audits of the demo (about 15 s each)

NOT_REQUESTED = "not requested (layers= option)"
#: audit.json without the run's times and the output folder's path
_normalised = load_benchmark("compare_audits")._normalised

def _layer_params(test: str) -> list:
    """Every registered layer, named by its name (``test`` names the invariant checked)."""
    return [pytest.param(layer, id=layer.name) for layer in registered_layers()]


# -- the release and its audits -------------------------------------------------------------

@dataclass(frozen=True)
class Release:
    """The demo as a list file in the original row order and in a seeded permutation, its
    simulated model outputs, and the second demo (external corpus and control)."""

    base: Path
    root: Path
    other: Path
    model: dict
    listed: Path
    shuffled: Path


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Release:
    base = tmp_path_factory.mktemp("common-layers")
    root = make_demo(base / "demo", seed=0, n_train=70, n_test=45)
    other = make_demo(base / "other", seed=1, n_train=70, n_test=45)
    model = simulate_model_outputs(root, base / "model", seed=0)
    files = sorted(p.relative_to(root).as_posix() for split in ("train", "test")
                   for p in (root / split).rglob("*") if p.is_file())
    table = pd.DataFrame({"path": files, "split": [f.split("/")[0] for f in files],
                          "label": [f.split("/")[1] for f in files]})
    permuted = table.iloc[np.random.default_rng(0).permutation(len(table))]
    assert not permuted["path"].equals(table["path"])
    lists = {}
    for name, rows in (("listed", table), ("shuffled", permuted)):
        # the same file name: a list's corpus is named after its stem
        lists[name] = base / name / "release.csv"
        lists[name].parent.mkdir()
        rows.to_csv(lists[name], index=False)
    return Release(base, root, other, model, lists["listed"], lists["shuffled"])


def run_audit(release: Release, out: str, *, listing: Path | None = None, workers: int = 1,
              layers: list[str] | None = None, workspace: Path | None = None):
    options = AuditOptions.from_flags(
        path_column="path", split_column="split", label_column="label",
        list_root=str(release.root), group_regex=DEMO_GROUP_REGEX, dihedral=True,
        score_kind="probability", resamples=50, transforms=10, workers=workers,
        progress=False, layers=layers, workspace=None if workspace is None else str(workspace))
    return audit(listing or release.listed, options, out_dir=release.base / out,
                 control=release.other, external=release.other,
                 predictions=release.model["predictions"],
                 attribution_maps=release.model["attribution_maps"],
                 attribution_masks=release.model["attribution_masks"])


@pytest.fixture(scope="module")
def full(release):
    """Every layer, one worker."""
    return run_audit(release, "full-w1")


@pytest.fixture(scope="module")
def full_two_workers(release):
    return run_audit(release, "full-w2", workers=2)


@pytest.fixture(scope="module")
def shuffled(release):
    """Every layer on the permuted list."""
    return run_audit(release, "shuffled-w1", listing=release.shuffled)


@pytest.fixture(scope="module")
def alone(release):
    """``alone(name)``: an audit of that layer alone (the feature caches shared)."""
    done: dict = {}

    def get(name: str):
        if name not in done:
            done[name] = run_audit(release, f"alone-{name}", layers=[name],
                                   workspace=release.base / "alone-workspace")
        return done[name]

    return get


# -- reading an audit ---------------------------------------------------------------------

def outcome(doc: dict, name: str) -> dict:
    return next(entry for entry in doc["layers"] if entry["layer"] == name)


def own_records(doc: dict, name: str) -> list[dict]:
    """The records the layer ``name`` returned: its slice of ``records``."""
    start = 0
    for entry in doc["layers"]:
        if entry["layer"] == name:
            return doc["records"][start:start + entry["records"]]
        start += entry["records"]
    raise KeyError(name)


def comparable(result, name: str, listing: Path) -> list[dict]:
    """The layer's records without what differs between two runs of the same inputs: the
    output folder's path and the timings (benchmarks/compare_audits.py's normalisation).
    Beyond that, two things legitimately follow the list's row order, and are rewritten:

    - a row id is the row's place in the list: every ``row`` and ``*_row`` integer is
      replaced by the row's path;
    - the audited list file's path and SHA-256 (in ``inputs``): the permuted list is another
      file with the same rows.
    """
    doc = _normalised(result.out_dir, [result.out_dir])
    manifest = read_csv(result.out_dir / "lists" / "manifest.csv")
    path_of = dict(zip(manifest["row"].astype(int), manifest["path"].astype(str)))

    def rewrite(value, key=None):
        if isinstance(value, dict):
            return {k: rewrite(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [rewrite(v, key) for v in value]
        if (isinstance(key, str) and (key == "row" or key.endswith("_row"))
                and isinstance(value, int) and not isinstance(value, bool)):
            return path_of.get(value, value)
        return value

    records = rewrite(own_records(doc, name))
    for record in records:  # a record names an input by its name (records.paths.input_name)
        record["inputs"] = [{"path": "<audited list>"} if i.get("path") == listing.name else i
                            for i in record.get("inputs") or []]
    return records


def differences(a, b, where: str = "", rel: float = 0.0) -> list[str]:
    """Where two JSON values differ; floats within ``rel`` relative tolerance are equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}/{k}: only in one" for k in sorted(set(a) ^ set(b), key=str)]
        for k in sorted(set(a) & set(b), key=str):
            out += differences(a[k], b[k], f"{where}/{k}", rel)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]",
                                                                              rel)]
    if (isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool)
            and math.isclose(a, b, rel_tol=rel, abs_tol=rel * 1e-3)):
        return []
    return [] if a == b else [f"{where}: {str(a)[:80]!r} vs {str(b)[:80]!r}"]


def same_records(a: list[dict], b: list[dict], rel: float = 0.0) -> list[str]:
    ids_a, ids_b = [r["id"] for r in a], [r["id"] for r in b]
    if ids_a != ids_b:
        return [f"record ids {ids_a} vs {ids_b}"]
    return [d for x, y in zip(a, b) for d in differences(x, y, x["id"], rel)]


# -- the invariants -----------------------------------------------------------------------

def test_the_release_makes_the_layers_applicable(full):
    """The invariants below are only as strong as the release: every layer but the
    experiments layer (no experiment folder) measures something on it."""
    ran = {e["layer"]: e["status"] for e in full.document["layers"]}
    idle = {name: status for name, status in ran.items()
            if status not in ("completed", "partial") and name != "experiments"}
    assert not idle, f"layers that measured nothing on the test release: {idle}"
    assert ran["experiments"] == "not applicable"


@pytest.mark.parametrize("layer", _layer_params("valid"))
def test_records_validate_and_name_their_layer(layer, full):
    """Each record matches ``$defs/record`` of the published schema and names the layer that
    wrote it; a layer that did not apply says why in every record."""
    records = own_records(full.document, layer.name)
    assert records, f"{layer.name} left no record"
    validator = jsonschema.Draft202012Validator(record_schema())
    errors = {r.get("id"): [e.message for e in validator.iter_errors(r)][:3] for r in records}
    assert not {k: v for k, v in errors.items() if v}
    assert {r["layer"] for r in records} == {layer.name}
    if outcome(full.document, layer.name)["status"] == "not applicable":
        assert all(r["status"] == "not applicable" and r["reason"] for r in records)


def declared_by(layer, record: dict) -> bool:
    """Whether a reader finds the record's predicate through the layer's declarations: a
    --fail-on metric naming it, a role naming it, or a score-card detail measured by it."""
    name = (record.get("predicate") or {}).get("name")
    metrics = {p for m in getattr(layer, "metrics", None) or () for p in m.predicates}
    roles = {p for names in (getattr(layer, "roles", None) or {}).values() for p in names}
    if name in metrics | roles:
        return True
    card = score_card([record], {layer.name: dict(getattr(layer, "scorecard", None) or {})})
    return any(detail["status"] == "measured" for detail in card)


@pytest.mark.parametrize("layer", _layer_params("declared"))
def test_record_predicates_are_declared(layer, full):
    """A completed record's predicate is one the layer declares, so ``--fail-on``, the report
    or the score card can find it by name."""
    done = [r for r in own_records(full.document, layer.name) if r["status"] == "completed"]
    missing = sorted({str((r.get("predicate") or {}).get("name")) for r in done
                      if not declared_by(layer, r)})
    assert not missing, (f"{layer.name}: predicates without a metric, role or score-card "
                         f"entry: {missing}")


@pytest.mark.parametrize("layer", _layer_params("metrics"))
def test_declared_metrics_read_the_layers_records(layer, full):
    """Each ``--fail-on`` metric of a layer that wrote a completed record of its predicates
    with a value in the field it reads (on an audited boundary, or pool-wide; transform
    sensitivity aside) has a value: it reads what it names."""
    from splitscope.core.conditions import evaluate_conditions, parse_condition
    from splitscope.records.metrics import contrast_on

    doc = full.document
    boundaries = [b["name"] for b in doc["boundaries"]]
    written = [r for r in own_records(doc, layer.name)
               if r["status"] == "completed" and "pass_rates" not in (r.get("details") or {})
               and ((r.get("boundary") or {}).get("name") in boundaries
                    or contrast_on(r) in boundaries or r.get("boundary") is None)]
    metrics = [m for m in getattr(layer, "metrics", None) or ()
               if any((r.get("predicate") or {}).get("name") in m.predicates
                      and r.get(m.field) is not None for r in written)]
    assert metrics or not getattr(layer, "metrics", None), \
        f"{layer.name}: none of its metrics has a record to read on the test release"
    outcomes = evaluate_conditions([parse_condition(f"{m.name}>=0") for m in metrics],
                                   doc["records"], doc["layers"], boundaries)
    unread = [o["metric"] for o in outcomes if o["value"] is None]
    assert not unread, f"{layer.name}: metrics that read none of its records: {unread}"


@pytest.mark.parametrize("layer", _layer_params("alone"))
def test_layer_runs_alone(layer, alone, full):
    """``layers=[name]`` runs the layer by itself: it completes or says why it does not apply
    (as it does beside the others), and never crashes; a layer that reads an earlier one
    (``after``) is not assessed with the reason it declares. Every other layer is recorded
    not requested."""
    doc = alone(layer.name).document
    mine = outcome(doc, layer.name)
    after = getattr(layer, "after", None) or {}
    if after:
        assert (mine["status"], mine["reason"]) == ("not assessed", next(iter(after.values())))
    else:
        assert mine["status"] in ("completed", "partial", "not applicable"), mine
        if mine["status"] == "not applicable":
            assert mine["reason"] == outcome(full.document, layer.name)["reason"]
    assert not any("traceback" in (r.get("details") or {})
                   for r in own_records(doc, layer.name))
    others = {(e["status"], e["reason"]) for e in doc["layers"] if e["layer"] != layer.name}
    assert others <= {("not assessed", NOT_REQUESTED)}


@pytest.mark.parametrize("layer", _layer_params("workers"))
def test_records_do_not_depend_on_workers(layer, release, full, full_two_workers):
    """One worker or two: the same records, to the bit."""
    found = same_records(comparable(full, layer.name, release.listed),
                         comparable(full_two_workers, layer.name, release.listed))
    assert not found, "\n".join(found[:20])


@pytest.mark.parametrize("layer", _layer_params("row_order"))
def test_records_do_not_depend_on_row_order(layer, release, full, shuffled):
    """The same rows listed in another order give the same records. Row ids and the list
    file's checksum are rewritten (see :func:`comparable`); floats are compared to 1e-9
    relative, since a sum over rows in another order may differ in its last bits."""
    found = same_records(comparable(full, layer.name, release.listed),
                         comparable(shuffled, layer.name, release.shuffled), rel=1e-9)
    assert not found, "\n".join(found[:20])


def test_the_comparison_sees_a_changed_record(release, full):
    """The normalisation keeps what matters: a changed estimate is a difference."""
    name = next(e["layer"] for e in full.document["layers"] if e["status"] == "completed")
    records = comparable(full, name, release.listed)
    changed = json.loads(json.dumps(records))
    target = next(r for r in changed if isinstance(r.get("estimate"), float))
    target["estimate"] = target["estimate"] * 1.001 + 1e-3
    assert same_records(records, changed, rel=1e-9)
    assert not same_records(records, json.loads(json.dumps(records)))
