"""The near-duplicate predicate table (relations.near_predicates): each built-in predicate's rule
on the planted release, the searches shared by a boundary's predicates, and a predicate
registered from outside that an audit runs and reports like a built-in one."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from benchmark_module import load_benchmark

from splitscope.boundary import Boundary, Population
from splitscope.errors import InputError
from splitscope.relations import near_context
from splitscope.relations import predicates as names
from splitscope.relations.boundary_relations import resolve_boundaries
from splitscope.relations.near_context import THUMBNAIL, BoundaryContext, unassessed
from splitscope.relations.near_duplicate import near_duplicates_rows
from splitscope.relations.near_predicates import (
    PREDICATES,
    NearPredicate,
    Outcome,
    register_predicate,
    registered,
    unregister_predicate,
)
from splitscope.relations.options import SearchOptions

GEOMETRY = {"thumb_size": 96, "interpolation": "bicubic", "mode": "exact"}
#: query → counterpart of the planted copies every built-in rule finds on test → train
COPIES = {"test/A/a00.png": "train/A/a00.png", "test/A/bright.png": "train/A/a05.png",
          "test/A/reencode.png": "train/A/a03.png", "test/A/renamed.png": "train/A/a01.png",
          "test/B/conflict.png": "train/A/a02.png"}
#: the resized copy: within radius and τ, but its pHash differs (no exact-pHash candidate)
RESIZED = {"test/A/resized.png": "train/A/a04.png"}
#: flipped and rotated copies, found by the dihedral variants only
TURNED = {"test/A/flip.png": "train/A/a08.png", "test/A/rot90.png": "train/A/a09.png"}
#: flags and counterparts of each built-in predicate on test → train, as measured before the
#: predicates became objects
EXPECTED = {
    names.HASH_SCREEN: {**COPIES, **RESIZED},
    names.HASH_JOINT: {**COPIES, **RESIZED},
    names.HASH_SUM: {**COPIES, **RESIZED},
    names.HASH_EXACT_PHASH: COPIES,
    names.NCC_NEAREST: {**COPIES, **RESIZED},
    names.NCC_FIRST_CANDIDATE: COPIES,
    names.NCC_ANY_CANDIDATE: COPIES,
}
#: query rows not assessed: the undecodable file everywhere, the flat image under NCC nearest
NOT_ASSESSED = {p: ["test/B/broken.png"] for p in EXPECTED} | {
    names.NCC_NEAREST: ["test/B/broken.png", "test/B/flat.png"]}
#: the copy inside train, found both ways on train against itself
WITHIN = {"train/B/b10.png": "train/B/b10_copy.png", "train/B/b10_copy.png": "train/B/b10.png"}


def _found(flags: pd.Series, counterpart: np.ndarray, paths: pd.Series,
           query_paths) -> tuple[dict, list]:
    """(flagged query path → counterpart path, sorted paths not assessed)."""
    hit = flags.fillna(False).to_numpy(bool)
    found = {q: paths[c] for q, c, h in zip(query_paths, counterpart, hit) if h}
    return found, sorted(np.asarray(query_paths)[flags.isna().to_numpy()].tolist())


@pytest.fixture(scope="module")
def planted(planted_scan):
    rows = planted_scan.rows()
    b = resolve_boundaries(planted_scan.manifest, ["test->train"])[0]
    return rows, b, rows.set_index("row")["path"]


def _context(rows, scan, b) -> BoundaryContext:
    return BoundaryContext(rows, scan.thumbs, b, tau=0.98, radius=6, geometry=GEOMETRY)


@pytest.mark.parametrize("pred", PREDICATES, ids=lambda p: p.name)
def test_each_built_in_rule_gives_the_flags_measured_before(planted, planted_scan, pred):
    rows, b, paths = planted
    ctx = _context(rows, planted_scan, b)
    out = pred.rule(ctx, pred.name)
    found, missing = _found(pd.Series(out.columns[pred.name]),
                            out.columns[f"{pred.name}_counterpart"], paths, ctx.q["path"])
    assert found == EXPECTED[pred.name]
    assert missing == NOT_ASSESSED[pred.name]


@pytest.mark.parametrize("pred", PREDICATES, ids=lambda p: p.name)
def test_each_built_in_rule_finds_the_copy_inside_a_split(planted, planted_scan, pred):
    rows, _, paths = planted
    train = np.sort(rows.loc[rows["split"] == "train", "row"].to_numpy(np.int64))
    pop = Population("train", train)
    ctx = _context(rows, planted_scan, Boundary(pop, pop))
    out = pred.rule(ctx, pred.name)
    found, missing = _found(pd.Series(out.columns[pred.name]),
                            out.columns[f"{pred.name}_counterpart"], paths, ctx.q["path"])
    assert found == WITHIN  # never a row's own counterpart
    assert missing == []


@pytest.mark.slow
def test_the_dihedral_variants_give_the_flags_measured_before(planted, planted_scan):
    rows, b, paths = planted
    nd = near_duplicates_rows(rows, planted_scan.thumbs, b, SearchOptions(dihedral=True),
                              geometry=GEOMETRY)
    with_variant = [p for p in PREDICATES if p.dihedral is not None]
    assert [p.name for p in with_variant] == [*names.HASH_PREDICATES, names.NCC_NEAREST]
    for p in with_variant:
        name = p.dihedral_name
        found, missing = _found(nd.flags[name], nd.flags[f"{name}_counterpart"].to_numpy(),
                                paths, nd.flags["path"])
        assert found == TURNED, name
        assert missing == ["test/B/broken.png"], name
        assert set(nd.flags.loc[nd.flags[name].fillna(False).astype(bool),
                                f"{name}_variant"]) == {"flip_lr", "rot90"}
    assert nd.predicates() == [*EXPECTED, *names.DIHEDRAL_PREDICATES]


def test_each_search_runs_once_per_boundary(planted, planted_scan, monkeypatch):
    rows, b, _ = planted
    calls = {"hash": 0, "ncc": 0}

    def counted(kind, fn):
        def run(*args, **kwargs):
            calls[kind] += 1
            return fn(*args, **kwargs)
        return run

    monkeypatch.setattr(near_context, "hash_search",
                        counted("hash", near_context.hash_search))
    monkeypatch.setattr(near_context, "ncc_search", counted("ncc", near_context.ncc_search))
    nd = near_duplicates_rows(rows, planted_scan.thumbs, b, geometry=GEOMETRY)
    assert calls == {"hash": 1, "ncc": 1}
    assert nd.predicates() == list(EXPECTED)


def test_the_table_names_the_predicates_of_the_names_table():
    builtin = [p.name for p in PREDICATES]
    assert builtin == [*names.HASH_PREDICATES, *names.NCC_PREDICATES]
    assert [p.dihedral_name for p in PREDICATES if p.dihedral is not None] == list(
        names.DIHEDRAL_PREDICATES)
    counted = {p.conflict.name for p in PREDICATES if p.conflict is not None}
    assert {f"{names.LABEL_CONFLICT_PREFIX}{c}" for c in counted} <= set(
        names.LABEL_CONFLICT_PREDICATES)
    assert all(p.title and p.needs for p in PREDICATES)


def test_registration_checks_the_name():
    rule = PREDICATES[0].rule
    with pytest.raises(InputError, match="already taken"):
        register_predicate(NearPredicate(names.NCC_NEAREST, "t", (THUMBNAIL,), rule, dict))
    with pytest.raises(InputError, match="must match"):
        register_predicate(NearPredicate("Bad Name", "t", (THUMBNAIL,), rule, dict))
    with pytest.raises(InputError, match="built-in"):
        unregister_predicate(names.HASH_SCREEN)
    with pytest.raises(InputError, match="no registered predicate"):
        unregister_predicate("never_registered")
    assert registered() == PREDICATES


# ---- a predicate from outside: mean thumbnail brightness ---------------------------------------
TOY = "mean_brightness"
TOLERANCE = 0.5


def brightness(ctx: BoundaryContext, name: str) -> Outcome:
    """Flag a query row whose thumbnail's mean grey level is within :data:`TOLERANCE` of a
    reference row's (never the row itself)."""
    n = len(ctx)
    flag, cp, gap = unassessed(n), np.full(n, -1, np.int64), np.full(n, np.nan)
    qthumbs, rthumbs = ctx.thumbnails
    if qthumbs is not None and rthumbs is not None:
        qt_rows, rt_rows = ctx.thumb_rows
        qm = qthumbs[:].reshape(len(qthumbs), -1).mean(axis=1)
        rm = rthumbs[:].reshape(len(rthumbs), -1).mean(axis=1)
        d = np.abs(qm[:, None] - rm[None, :])
        own = ctx.exclude(qt_rows, rt_rows)
        if own is not None:
            d[np.flatnonzero(own >= 0), own[own >= 0]] = np.inf
        best = d.argmin(axis=1)
        close = d.min(axis=1) <= TOLERANCE
        qt = ctx.has((THUMBNAIL,))[0]
        flag[qt] = close
        cp[qt] = np.where(close, rt_rows[best], -1)
        gap[qt] = d.min(axis=1)
    return Outcome({name: flag, f"{name}_counterpart": cp, f"{name}_gap": gap})


def toy_predicate() -> NearPredicate:
    return NearPredicate(TOY, "Mean thumbnail brightness within 0.5 grey levels", (THUMBNAIL,),
                         brightness, lambda s: {"tolerance": TOLERANCE, **s.geometry},
                         measure=f"{TOY}_gap", scores={f"{TOY}_gap": "min"})


def _audit(root, out, workspace):
    from splitscope.core.options import AuditOptions
    from splitscope.core.run import audit

    return audit(root, AuditOptions.from_flags(workspace=workspace, layers=["duplicates"],
                                               transforms=0, workers=1, progress=False),
                 out_dir=out)


@pytest.fixture(scope="module")
def three_audits(tmp_path_factory):
    """The same small demo audited before, with and after the toy predicate registered."""
    from splitscope.datasets import make_demo

    tmp = tmp_path_factory.mktemp("predicate-table")
    root = make_demo(tmp / "data", n_train=70, n_test=45)
    ws = tmp / "workspace"
    before = _audit(root, tmp / "before" / "audit", ws)
    register_predicate(toy_predicate())
    try:
        with_toy = _audit(root, tmp / "with" / "audit", ws)
    finally:
        unregister_predicate(TOY)
    after = _audit(root, tmp / "after" / "audit", ws)
    return before, with_toy, after


@pytest.mark.slow
def test_a_registered_predicate_is_run_and_reported(three_audits):
    _, result, _ = three_audits
    lists = result.out_dir / "lists"
    flags = pd.read_csv(lists / "query_flags.csv")
    assert {TOY, f"{TOY}_counterpart", f"{TOY}_gap"} <= set(flags.columns)
    issues = pd.read_csv(lists / "issues.csv")
    assert {TOY, f"{TOY}_gap"} <= set(issues.columns)
    doc = json.loads((result.out_dir / "audit.json").read_text())
    records = [r for r in doc["records"] if (r.get("predicate") or {}).get("name") == TOY]
    assert records
    for rec in records:
        assert rec["title"] == "Mean thumbnail brightness within 0.5 grey levels"
        assert rec["predicate"]["params"]["tolerance"] == TOLERANCE
        query = rec["boundary"]["query"]["name"]
        mine = issues[issues["split"] == query]
        assert rec["denominator"] == len(mine)
        assert rec["numerator"] == int(mine[TOY].fillna(False).astype(bool).sum())
        on_b = flags[flags["boundary"] == rec["boundary"]["name"]]
        assert rec["numerator"] == int(on_b[TOY].fillna(False).astype(bool).sum())
    assert any(rec["numerator"] for rec in records)


@pytest.mark.slow
def test_unregistering_leaves_the_audit_as_before(three_audits):
    before, with_toy, after = three_audits
    compare = load_benchmark("compare_audits")
    roots = [before.out_dir.parent, after.out_dir.parent, with_toy.out_dir.parent]
    old, new = (compare._normalised(r.out_dir, roots) for r in (before, after))
    # the first audit scanned the files, the later ones read them from the workspace
    differences = [d for d in compare._differences(old, new)
                   if not d.startswith("~ /manifest/scan/")]
    assert differences == []
    assert compare._lists(before.out_dir) == compare._lists(after.out_dir)
    assert TOY not in pd.read_csv(after.out_dir / "lists" / "query_flags.csv").columns
    assert registered() == PREDICATES
