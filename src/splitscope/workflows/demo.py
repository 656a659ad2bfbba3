"""``splitscope demo``: make the demo benchmark, audit it, and score the audit against what was
planted.

The demo (:func:`splitscope.datasets.make_demo`) lists every planted relation in
``planted.csv`` with the predicates that should flag it (``expected``) and those that should
not (``missed_by``). :func:`check_demo` reads the audit's exported tables and says, per planted
relation, whether each expected predicate flagged it, and lists every flagged query row that
was not planted for that predicate (an unplanted finding would be a false alarm).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click
import pandas as pd

from splitscope.core.commands import FAIL_ON_HELP, QUIET_HELP, finish
from splitscope.errors import InputError
from splitscope.evaluation.predicates import (
    ATTRIBUTION_LAYER,
    ATTRIBUTION_OUTSIDE,
    BALANCED_ACCURACY,
)
from splitscope.evaluation.predicates import LAYER as EVALUATION_LAYER
from splitscope.records.exports import read_csv
from splitscope.relations.predicates import (
    HASH_EXACT_PHASH,
    HASH_JOINT,
    HASH_SCREEN,
    HASH_SUM,
    NCC_NEAREST,
    NCC_NEAREST_DIHEDRAL,
)

#: Demo predicate name → column of the near-duplicate layer's ``query_flags`` table.
FLAG_COLUMNS = {
    "sha256": "sha256",
    "basename": "basename",
    "pixel_reencode": "pixel_xxh128",
    "ncc": NCC_NEAREST,
    HASH_SCREEN: HASH_SCREEN,
    HASH_JOINT: HASH_JOINT,
    HASH_SUM: HASH_SUM,
    HASH_EXACT_PHASH: HASH_EXACT_PHASH,
    "dihedral_ncc": NCC_NEAREST_DIHEDRAL,
    "dihedral_hash": "hash_joint_dihedral",
}
#: Boundary every row-level demo predicate is checked on.
BOUNDARY = "test → train"


def _read(lists: Path, name: str) -> pd.DataFrame | None:
    for suffix, reader in ((".parquet", pd.read_parquet),
                           (".csv", lambda p: read_csv(p, dtype=str, keep_default_na=False))):
        path = lists / f"{name}{suffix}"
        if path.is_file():
            return reader(path)
    return None


def _true(values: pd.Series) -> pd.Series:
    return values.astype(str).str.lower().isin(["true", "1"])


def _split_paths(value: str) -> list[str]:
    """Paths of a joined cell (``a | b`` or ``a;b``)."""
    return [p.strip() for p in value.replace("|", ";").split(";") if p.strip()]


def header_probe_found(audit_doc: dict) -> bool | None:
    """Whether the header-only probe beats chance within the pool (the lower end of its
    interval above chance); ``None`` when no such completed record exists."""
    for r in audit_doc.get("records", []):
        text = f"{r.get('id')} {(r.get('predicate') or {}).get('name')}".lower()
        if "header" not in text or "within" not in text or r.get("status") != "completed":
            continue
        unc = r.get("uncertainty") or {}
        chance = (r.get("details") or {}).get("chance")
        if unc.get("low") is None or not isinstance(chance, (int, float)):
            return None
        return bool(unc["low"] > chance)
    return None


def flagged_paths(lists: Path) -> dict[str, set[str]]:
    """Query paths flagged on test → train per demo predicate, from the exported tables
    (``query_flags``, ``identity_groups``, ``within_copies``, ``group_overlap_*``). A
    predicate whose table is absent (its layer did not run) is missing from the result."""
    found: dict[str, set[str]] = {}
    flags = _read(lists, "query_flags")
    if flags is not None:
        flags = flags[flags["boundary"].astype(str) == BOUNDARY] if "boundary" in flags else flags
        for demo_name, col in FLAG_COLUMNS.items():
            if col in flags.columns:
                found[demo_name] = set(flags.loc[_true(flags[col]), "path"].astype(str))
    groups = _read(lists, "identity_groups")
    if groups is not None and "label_relation" in groups.columns:
        conflict = groups[groups["label_relation"].astype(str).isin(["disjoint", "conflicting"])]
        paths: set[str] = set()
        for col in ("query_paths", "paths", "query_path"):
            if col in conflict.columns:
                for value in conflict[col].astype(str):
                    paths.update(_split_paths(value))
        if "boundary" in conflict.columns or paths:
            found["label_conflict"] = {p for p in paths if p.startswith("test/")}
    conflicts = _read(lists, "label_conflicts")
    if conflicts is not None and "predicate" in conflicts.columns:
        near = conflicts[(conflicts["boundary"].astype(str) == BOUNDARY)
                         & conflicts["predicate"].astype(str).isin(
                             ["ncc", HASH_JOINT, HASH_SUM, HASH_EXACT_PHASH])]
        found["near_label_conflict"] = set(near["path"].astype(str))
    within = _read(lists, "within_copies")
    if within is not None:
        paths = set()
        for col in ("paths", "path"):
            if col in within.columns:
                for value in within[col].astype(str):
                    paths.update(_split_paths(value))
        found["within_split"] = paths
    overlap_name = next((p.stem for p in sorted(lists.glob("group_overlap_*.csv"))
                         if "test" in p.stem.split("group_overlap_", 1)[1].split("_")[0]), None)
    if overlap_name is not None:
        table = _read(lists, overlap_name)
        if table is not None and "affected" in table.columns:
            found["group_overlap"] = set(table.loc[_true(table["affected"]), "path"].astype(str))
    return found


def check_demo(root: str | Path, out_dir: str | Path, audit_doc: dict | None = None
               ) -> dict[str, Any]:
    """Score an audit of the demo against ``planted.csv``.

    Returns
    -------
    dict
        ``by_kind``: per planted kind, rows planted, expected predicates, and how many of the
        expected (row, predicate) flags were found; ``missed``: expected flags not found;
        ``unplanted``: flagged query rows that are in no planted relation at all (false
        alarms: must be empty); ``beyond_expected``: planted query rows flagged by a predicate
        ``planted.csv`` did not expect for them (e.g. an exact-pHash match after a mild
        re-encode: a planted leak found by one more predicate, not a false alarm);
        ``not_checked``: predicates whose layer wrote no table; ``lines``: the same in
        words, for the printed summary; ``ok``: nothing missed and nothing unplanted.
    """
    root, lists = Path(root), Path(out_dir) / "lists"
    planted_path = root / "planted.csv"
    if not planted_path.is_file():
        raise InputError(f"{planted_path} not found: not a demo made by splitscope.datasets")
    planted = read_csv(planted_path, dtype=str, keep_default_na=False)
    found = flagged_paths(lists)
    if audit_doc is None and (Path(out_dir) / "audit.json").is_file():
        import json

        audit_doc = json.loads((Path(out_dir) / "audit.json").read_text(encoding="utf-8"))
    probe = header_probe_found(audit_doc or {})
    if probe is not None:
        found["header_probe"] = {""} if probe else set()
    expected_by_pred: dict[str, set[str]] = {}
    missed, by_kind = [], {}
    for kind, part in planted.groupby("kind", sort=False):
        exp = sorted({p for v in part["expected"] for p in v.split(";") if p})
        hits = total = 0
        for _, row in part.iterrows():
            for pred in (p for p in row["expected"].split(";") if p):
                path = row["query_path"]
                expected_by_pred.setdefault(pred, set()).add(path)
                if pred not in found:
                    continue
                total += 1
                if path in found[pred] or (pred == "within_split"
                                           and row["reference_path"] in found[pred]):
                    hits += 1
                else:
                    missed.append({"kind": kind, "predicate": pred, "query_path": path,
                                   "reference_path": row["reference_path"]})
        by_kind[str(kind)] = {"planted": len(part), "expected": exp,
                              "checked_flags": total, "found_flags": hits}
    planted_paths = set(planted["query_path"]) | set(
        planted.loc[planted["kind"] == "within_split", "reference_path"])
    unplanted, beyond = [], []
    for pred, paths in found.items():
        allowed = expected_by_pred.get(pred, set())
        if pred == "within_split":
            allowed = allowed | set(planted.loc[planted["kind"] == "within_split",
                                                "reference_path"])
        for path in sorted(paths - allowed):
            entry = {"predicate": pred, "query_path": path}
            (beyond if path in planted_paths else unplanted).append(entry)
    not_checked = sorted(set(expected_by_pred) - set(found))
    lines = ["Planted in the demo (planted.csv) and found by the audit:"]
    for kind, info in by_kind.items():
        if info["expected"]:
            lines.append(f"  {kind:<15} {info['planted']:>2} planted; expected "
                         f"{', '.join(info['expected'])}: found {info['found_flags']} of "
                         f"{info['checked_flags']} flags")
        else:
            lines.append(f"  {kind:<15} {info['planted']:>2} planted; no predicate is expected "
                         "to flag it (a hard case)")
    lines.append(f"  missed: {len(missed)}; clean rows flagged (false alarms): {len(unplanted)}; "
                 f"planted rows also flagged by a predicate not expected for them: "
                 f"{len(beyond)}"
                 + (f" ({', '.join(sorted({b['predicate'] for b in beyond}))})" if beyond else "")
                 + (f"; not checked (layer did not run): {', '.join(not_checked)}"
                    if not_checked else ""))
    model = simulated_model_findings(audit_doc or {})
    lines.extend(model.pop("lines"))
    return {"by_kind": by_kind, "missed": missed, "unplanted": unplanted,
            "beyond_expected": beyond,
            "not_checked": not_checked, "model": model, "lines": lines,
            "ok": not missed and not unplanted}


def simulated_model_findings(audit_doc: dict) -> dict[str, Any]:
    """What the evaluation and attribution layers measured on the simulated model outputs:
    balanced accuracy on the official and deduplicated views, and the attribution contrast
    (``None`` where the record is missing or not assessed), with lines in words."""
    def find(layer: str, predicate: str, view: str | None = None) -> dict | None:
        """The first measured record of ``predicate`` by ``layer`` (on the evaluation view
        named ``view``, when given)."""
        def on_view(r: dict) -> bool:
            params = (r.get("predicate") or {}).get("params") or {}
            return view is None or (params.get("view") or {}).get("name") == view

        return next((r for r in audit_doc.get("records", [])
                     if r.get("layer") == layer
                     and (r.get("predicate") or {}).get("name") == predicate and on_view(r)
                     and r.get("estimate") is not None), None)

    def say(rec: dict | None) -> str:
        if rec is None:
            return "not measured"
        unc = rec.get("uncertainty") or {}
        iv = (f" [{unc['low']:.3f}, {unc['high']:.3f}]"
              if unc.get("low") is not None and unc.get("high") is not None else "")
        return f"{rec['estimate']:.3f}{iv}"

    official = find(EVALUATION_LAYER, BALANCED_ACCURACY, "official")
    dedup = find(EVALUATION_LAYER, BALANCED_ACCURACY, "deduplicated")
    attribution = find(ATTRIBUTION_LAYER, ATTRIBUTION_OUTSIDE)
    trained = any(layer.get("layer") == "experiments" and layer.get("status") == "completed"
                  for layer in audit_doc.get("layers", []))
    lines = ["Trained small-cnn (model-trained/experiment.json):" if trained else
             "Simulated model outputs (no model was trained; model/simulated.json):",
             (f"  balanced accuracy, official test split {say(official)}, deduplicated test "
              f"split {say(dedup)} (95% bootstrap intervals)"),
             (f"  share of attribution mass outside the head, leaked minus clean rows "
              f"{say(attribution)}")]
    return {"official_ba": None if official is None else official["estimate"],
            "deduplicated_ba": None if dedup is None else dedup["estimate"],
            "attribution_difference": None if attribution is None else attribution["estimate"],
            "lines": lines}


#: audit() keyword → the ``splitscope audit`` option that sets it (the demo's options)
_AUDIT_FLAGS = {"group_regex": "--group-regex", "dihedral": "--dihedral", "out_dir": "--out",
                "workspace": "--workspace", "predictions": "--predictions",
                "score_kind": "--score-kind", "attribution_maps": "--attribution-maps",
                "attribution_masks": "--attribution-masks"}


def audit_argv(root, options) -> list[str]:
    """The ``splitscope audit`` command line that runs the audit ``audit(root, **options)``
    runs (recorded in the demo's ``audit.json`` as ``run.reproduce``)."""
    argv = ["splitscope", "audit", str(root)]
    for key, value in options.items():
        if value is True:
            argv.append(_AUDIT_FLAGS[key])
        elif value is not None and value is not False:
            argv += [_AUDIT_FLAGS[key], str(value)]
    return argv


def run_demo(directory: str | Path = "splitscope-demo", *, seed: int = 0,
             workers: int | None = None, fail_on=(), progress: bool | None = None,
             n_train: int | None = None, n_test: int | None = None,
             trained_model: bool = False):
    """Make the demo in ``DIRECTORY/data`` (replacing an earlier demo there) with the
    simulated model outputs of :mod:`splitscope.datasets.simulated_model` in
    ``DIRECTORY/model`` (with ``trained_model``: a small-cnn fine-tuned on the demo in
    ``DIRECTORY/model-trained``, its logits and Grad-CAM maps), audit it into ``DIRECTORY/audit`` (workspace
    ``DIRECTORY/workspace``) with the demo's group regex, the dihedral option, the saved
    predictions and the attribution maps, and check the audit against ``planted.csv``.
    ``progress`` is that of :class:`~splitscope.core.progress.ProgressLines` (a line per
    stage on stderr unless ``False``).

    Returns
    -------
    (AuditResult, dict)
        The audit and :func:`check_demo`'s result.
    """
    from splitscope.core.options import AuditOptions
    from splitscope.core.progress import ProgressLines
    from splitscope.core.run import audit
    from splitscope.datasets import DEMO_GROUP_REGEX, make_demo
    from splitscope.datasets.simulated_model import simulate_model_outputs

    show = ProgressLines(progress, "splitscope demo")
    directory = Path(directory)
    data = directory / "data"
    sizes = {k: v for k, v in (("n_train", n_train), ("n_test", n_test)) if v is not None}
    show(f"making the demo benchmark in {data} …")
    root = make_demo(data, seed=seed, overwrite=(data / "planted.json").is_file(), **sizes)
    show(f"demo benchmark made: {_files(root)} images")
    if trained_model:  # a real small-cnn ([torch] extra) instead of the simulated outputs
        from splitscope.workflows.experiment import trained_model_outputs

        show(f"training a small-cnn on the demo into {directory / 'model-trained'} …")
        model = trained_model_outputs(root, directory / "model-trained", seed=seed,
                                      group_regex=DEMO_GROUP_REGEX, workers=workers)
    else:
        model = simulate_model_outputs(root, directory / "model", seed=seed)
        show(f"simulated model outputs written to {directory / 'model'}")
    given = {"group_regex": DEMO_GROUP_REGEX, "dihedral": True,
             "out_dir": directory / "audit", "workspace": directory / "workspace",
             "predictions": model["predictions"],
             "score_kind": model.get("score_kind", "probability"),
             "attribution_maps": model["attribution_maps"],
             "attribution_masks": model["attribution_masks"]}
    inputs = ("out_dir", "predictions", "attribution_maps", "attribution_masks")
    options = AuditOptions.from_flags(workers=workers, progress=progress, **{
        k: v for k, v in given.items() if k not in inputs})
    result = audit(root, options, fail_on=fail_on, command=f"splitscope demo {directory}",
                   reproduce=shlex.join(audit_argv(root, given)),
                   **{k: given[k] for k in inputs})
    return result, check_demo(root, result.out_dir, result.document)


def _files(root: Path) -> int:
    return sum(1 for p in root.rglob("*") if p.is_file() and p.suffix in (".png", ".jpg"))


@click.command("demo")
@click.argument("directory", required=False, default="splitscope-demo",
                type=click.Path(file_okay=False))
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the demo data.")
@click.option("--workers", default=None, type=click.IntRange(min=1),
              help="Workers of every stage (default: all cores).")
@click.option("--fail-on", "fail_on", multiple=True, metavar="CONDITION", help=FAIL_ON_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@click.option("--quiet", "-q", "quiet", is_flag=True, help=QUIET_HELP)
@click.option("--trained-model", is_flag=True,
              help="Train a real small-cnn on the demo ([torch] extra; a few minutes on a CPU) "
                   "instead of the simulated model outputs.")
def demo_command(directory, seed, workers, fail_on, as_json, quiet, trained_model) -> None:
    """Make the demo benchmark in DIRECTORY (planted leaks listed in planted.csv) and audit it.

    Prints what was planted and what the audit found; the report is DIRECTORY/audit/report.html.
    """
    from splitscope.core.conditions import parse_condition

    conditions = [parse_condition(c) for c in fail_on]
    result, check = run_demo(Path(directory), seed=seed, workers=workers, fail_on=conditions,
                             progress=False if quiet else None,
                             trained_model=trained_model)
    finish(result, as_json, extra={"demo": check}, extra_lines=check.get("lines"))


COMMANDS: list = [demo_command]
