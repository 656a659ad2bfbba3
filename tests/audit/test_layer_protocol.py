"""A layer added from outside the package (one object registering itself) runs in the audit
with its records and status, in its declared place, without any edit to the run loop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest
from audit_helpers import tiny_release

from splitscope.core.options import AuditOptions
from splitscope.core.protocol import NotRun, layer_names, register, unregister
from splitscope.core.run import audit
from splitscope.records import AuditRecord, LayerResult


def _release(root: Path) -> Path:
    return tiny_release(root, seed=0, sizes=(("train", 5), ("test", 3)), side=32,
                        copy=("train/a/train_0.png", "test/a/copy.png"))


class RowCountLayer:
    """Counts the query rows of each split boundary: a toy layer with records and a table."""

    name = "row_count"
    order = 35  # between provenance (30) and evaluation (40)
    title = "row count"

    def run(self, context) -> LayerResult:
        result = LayerResult()
        for b in context.split_boundaries:
            result.records.append(AuditRecord(
                id=f"row_count.{b.query.name}", layer="row_count", title=f"Rows of {b.name}",
                boundary=b.to_dict(), unit="row", numerator=b.query.size,
                denominator=b.query.size + b.reference.size))
        return result


class NeedsPredictions:
    name = "needs_predictions"
    needs: ClassVar[dict[str, str]] = {"predictions": "no predictions for the toy layer"}

    def run(self, context) -> LayerResult:  # pragma: no cover - never runs here
        raise AssertionError("must not run without predictions")


class AfterRowCount:
    name = "after_row_count"
    after: ClassVar[dict[str, str]] = {"row_count": "needs the row counts"}

    def applies(self, context):
        return None if context.split_boundaries else NotRun("no split")

    def run(self, context) -> LayerResult:
        done = context.outcomes["row_count"]
        return LayerResult([AuditRecord(id="after_row_count.n", layer="after_row_count",
                                        title="records of the row-count layer",
                                        numerator=len(done.result.records))])


@pytest.fixture
def toy_layers():
    layers = [RowCountLayer(), NeedsPredictions(), AfterRowCount()]
    for layer in layers:
        register(layer)
    yield layers
    for layer in layers:
        unregister(layer.name)


@pytest.mark.slow
def test_a_registered_layer_runs_in_the_audit(tmp_path, toy_layers):
    names = layer_names()
    assert names.index("provenance") < names.index("row_count") < names.index("evaluation")
    options = AuditOptions.from_flags(workers=1, progress=False, transforms=0, layers=[
        "duplicates", "row_count", "needs_predictions", "after_row_count"])
    res = audit(_release(tmp_path / "rel"), options, out_dir=tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "audit.json").read_text())
    layers = {l["layer"]: l for l in doc["layers"]}
    assert [l["layer"] for l in doc["layers"]] == list(names)
    assert layers["row_count"]["status"] == "completed" and layers["row_count"]["records"] == 1
    rec = next(r for r in doc["records"] if r["id"] == "row_count.test")
    assert (rec["numerator"], rec["denominator"]) == (7, 17)
    assert rec["inputs"] and rec["inputs"][0]["sha256"]  # the run names what was read
    assert layers["needs_predictions"]["status"] == "not applicable"
    assert layers["needs_predictions"]["reason"] == "no predictions for the toy layer"
    assert layers["after_row_count"]["status"] == "completed"
    assert next(r for r in doc["records"] if r["id"] == "after_row_count.n")["numerator"] == 1
    assert layers["groups"]["status"] == "not assessed"  # not requested
    assert res.exit_code == 0


def test_a_layer_whose_dependency_did_not_run_is_not_assessed(tmp_path, toy_layers):
    audit(_release(tmp_path / "rel"), out_dir=tmp_path / "out",
          options=AuditOptions.from_flags(workers=1, progress=False, layers=["after_row_count"],
                                          transforms=0))
    doc = json.loads((tmp_path / "out" / "audit.json").read_text())
    layers = {l["layer"]: l for l in doc["layers"]}
    assert layers["after_row_count"]["status"] == "not assessed"
    assert layers["after_row_count"]["reason"] == "needs the row counts"
    rec = next(r for r in doc["records"] if r["layer"] == "after_row_count")
    assert rec["status"] == "not assessed"


def test_register_refuses_a_second_layer_of_the_same_name(toy_layers):
    with pytest.raises(ValueError, match="already registered"):
        register(RowCountLayer())
    with pytest.raises(TypeError, match="needs a name"):
        register(object())


def test_splitscope_audit_is_the_audit_function(tmp_path):
    import splitscope
    import splitscope.core.protocol  # importing the package's modules does not rebind it

    assert splitscope.audit is audit
    res = splitscope.audit(_release(tmp_path / "rel"), out_dir=tmp_path / "out",
                           options=AuditOptions.from_flags(workers=1, progress=False,
                                                           layers=["duplicates"], transforms=0))
    assert res.audit_json.is_file()


def test_splitscope_audit_is_the_function_whatever_is_imported_first():
    """In a fresh process: ``import splitscope`` loads neither the run module nor pandas, and
    ``splitscope.audit`` is the function whether a module of the package was imported before
    it or not."""
    import subprocess
    import sys

    package_first = ("import sys\n"
                     "import splitscope\n"
                     "assert 'pandas' not in sys.modules\n"
                     "assert 'splitscope.core.run' not in sys.modules\n"
                     "import splitscope.core.options\n"
                     "from splitscope.core.run import audit\n"
                     "assert splitscope.audit is audit\n")
    module_first = ("import splitscope.core.options, splitscope\n"
                    "from splitscope.core.run import audit\n"
                    "assert splitscope.audit is audit\n")
    for code in (package_first, module_first):
        subprocess.run([sys.executable, "-c", code], check=True)


class _Beside:
    """A background layer that finishes only once a later layer has run: it can complete only
    when the audit runs it beside the layers that follow it."""

    name = "beside"
    order = 36
    background = True

    def __init__(self, event):
        self.event = event

    def run(self, context) -> LayerResult:
        ran = self.event.wait(timeout=20)
        return LayerResult([AuditRecord(id="beside.ran", layer="beside", title="ran beside",
                                        numerator=int(ran), denominator=1)])


class _SetsEvent:
    name = "sets_event"
    order = 37

    def __init__(self, event):
        self.event = event

    def run(self, context) -> LayerResult:
        self.event.set()
        return LayerResult([AuditRecord(id="sets_event.done", layer="sets_event",
                                        title="set", numerator=1, denominator=1)])


class _ReadsBeside:
    name = "reads_beside"
    order = 38
    after: ClassVar[dict[str, str]] = {"beside": "needs the background layer"}

    def run(self, context) -> LayerResult:
        done = context.outcomes["beside"].result.records[0].numerator
        return LayerResult([AuditRecord(id="reads_beside.n", layer="reads_beside",
                                        title="read", numerator=done, denominator=1)])


class _CrashesBeside:
    name = "crashes_beside"
    order = 39
    background = True

    def run(self, context) -> LayerResult:
        raise RuntimeError("boom in the background")


def _audit_with(tmp_path, layers, progress=False, workers=1) -> dict:
    """audit.json of an audit of the tiny release with only ``layers``, registered for it."""
    for layer in layers:
        register(layer)
    try:
        audit(_release(tmp_path / "rel"), AuditOptions.from_flags(
            workers=workers, progress=progress, layers=[layer.name for layer in layers],
            transforms=0), out_dir=tmp_path / "out")
    finally:
        for layer in layers:
            unregister(layer.name)
    return json.loads((tmp_path / "out" / "audit.json").read_text())


def test_a_background_layer_runs_beside_the_next_ones(tmp_path):
    import threading

    event = threading.Event()
    doc = _audit_with(tmp_path, [_Beside(event), _SetsEvent(event), _ReadsBeside(),
                                 _CrashesBeside()], progress=True, workers=None)
    names = [l["layer"] for l in doc["layers"]]
    assert names.index("beside") < names.index("sets_event") < names.index("reads_beside")
    records = {r["id"]: r for r in doc["records"]}
    assert records["beside.ran"]["numerator"] == 1  # the later layer ran while it waited
    assert records["reads_beside.n"]["numerator"] == 1  # waited for it, then read it
    crashed = next(l for l in doc["layers"] if l["layer"] == "crashes_beside")
    assert crashed["status"] == "not assessed"
    assert "boom in the background" in crashed["reason"]
    assert [r["layer"] for r in doc["records"]].index("beside") < \
        [r["layer"] for r in doc["records"]].index("sets_event")


class _WhereItRan:
    def __init__(self, name, order, background):
        self.name, self.order, self.background = name, order, background

    def run(self, context) -> LayerResult:
        import threading

        main = threading.current_thread() is threading.main_thread()
        return LayerResult([AuditRecord(id=f"{self.name}.main", layer=self.name,
                                        title="ran in the main thread", numerator=int(main),
                                        denominator=1)])


def test_background_may_be_decided_per_input(tmp_path):
    def fails(context):
        raise RuntimeError("cannot tell")

    layers = [_WhereItRan("asks_no", 36, lambda context: len(context.manifest) > 10**6),
              _WhereItRan("cannot_tell", 36, fails),
              _WhereItRan("asks_yes", 37, lambda context: len(context.manifest) > 0),
              _WhereItRan("plain", 38, False)]
    records = {r["id"]: r for r in _audit_with(tmp_path, layers, workers=None)["records"]}
    assert records["asks_no.main"]["numerator"] == 1
    assert records["cannot_tell.main"]["numerator"] == 1
    assert records["asks_yes.main"]["numerator"] == 0
    assert records["plain.main"]["numerator"] == 1


def test_a_run_with_workers_given_runs_every_layer_in_its_turn(tmp_path):
    """Two layers side by side would keep twice the run's workers busy."""
    layers = [_WhereItRan("asks_yes", 36, True), _WhereItRan("plain", 37, False)]
    records = {r["id"]: r for r in _audit_with(tmp_path, layers, workers=2)["records"]}
    assert records["asks_yes.main"]["numerator"] == 1
    assert records["plain.main"]["numerator"] == 1


def test_the_provenance_layer_runs_beside_the_others_only_up_to_its_row_limit(monkeypatch):
    from types import SimpleNamespace

    import splitscope.provenance.layer as provenance_layer

    context = SimpleNamespace(manifest=list(range(50)))
    assert provenance_layer.ProvenanceLayer().background(context)
    monkeypatch.setattr(provenance_layer, "BESIDE_MAX_ROWS", 49)
    assert not provenance_layer.ProvenanceLayer().background(context)
