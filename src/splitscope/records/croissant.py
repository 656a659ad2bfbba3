"""A Croissant record of an audited release (MLCommons Croissant 1.0 JSON-LD, with RAI fields).

:func:`croissant_record` reads a finished audit folder (``audit.json``, ``lists/``,
``report.html``) and describes the release as audited, so that a maintainer can publish the
audited splits in the format dataset reviewers and loaders read:

- ``distribution``: a ``cr:FileSet`` per audited corpus and file format (``includes``
  relative to the corpus's release root, which ``audit.json`` records in ``manifest.roots``),
  a ``cr:FileObject`` per list input (named relative to that root, or by its name), and a
  ``cr:FileObject`` with its SHA-256 for ``audit.json``, ``report.html`` and every file under
  ``lists/`` (relative to this file). No path of the auditing machine is written
  (:mod:`splitscope.records.paths`);
- ``recordSet``: ``release`` (every manifest row: row, corpus, path, split, label, source,
  group and the file's SHA-256), ``deduplicated-<split>`` (the rows of each deduplicated split
  the audit kept), ``resplit`` and ``resplit-folds`` (the group-disjoint re-split),
  ``contaminated`` (every flagged query row with its predicate and counterpart);
- RAI: ``rai:dataCollection`` (what was audited), ``rai:dataBiases`` (shortcut and label
  findings) and ``rai:dataLimitations`` (contamination findings, what was not assessed, rows
  that could not be read), each line with its numerator and denominator, and
  ``rai:dataPreprocessingProtocol`` (label map, exclusions, predicate parameters, the rules of
  the deduplicated and re-split record sets).

Writing it needs nothing beyond the core install; ``mlcroissant`` validates and loads it in
the tests. Every list file is checked against the SHA-256 ``audit.json`` recorded before it is
named, so the record never vouches for a list changed after the audit.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd

from splitscope.errors import InputError
from splitscope.options import DEFAULT_MAX_FILE_BYTES
from splitscope.records import roles as R
from splitscope.records.format import percent
from splitscope.records.model import sha256_file
from splitscope.records.roles import Roles, has_role, is_transform_sensitivity
from splitscope.records.schema import SCHEMA_VERSION

__all__ = ["CONFORMS_TO", "CROISSANT_FILE", "croissant_record", "load_audit", "write_croissant"]

CROISSANT_FILE = "croissant.json"
CONFORMS_TO = "http://mlcommons.org/croissant/1.0"

#: the JSON-LD context of Croissant 1.0 (the specification's, with the RAI prefix)
_CONTEXT = {
    "@language": "en", "@vocab": "https://schema.org/", "citeAs": "cr:citeAs",
    "column": "cr:column", "conformsTo": "dct:conformsTo", "cr": "http://mlcommons.org/croissant/",
    "rai": "http://mlcommons.org/croissant/RAI/", "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"}, "dct": "http://purl.org/dc/terms/",
    "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"}, "extract": "cr:extract",
    "field": "cr:field", "fileProperty": "cr:fileProperty", "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet", "format": "cr:format", "includes": "cr:includes",
    "isLiveDataset": "cr:isLiveDataset", "jsonPath": "cr:jsonPath", "key": "cr:key",
    "md5": "cr:md5", "parentField": "cr:parentField", "path": "cr:path",
    "recordSet": "cr:recordSet", "references": "cr:references", "regex": "cr:regex",
    "repeated": "cr:repeated", "replace": "cr:replace", "samplingRate": "cr:samplingRate",
    "sc": "https://schema.org/", "separator": "cr:separator", "source": "cr:source",
    "subField": "cr:subField", "transform": "cr:transform",
}

_FORMATS = {".csv": "text/csv", ".parquet": "application/x-parquet",
            ".json": "application/json", ".html": "text/html", ".txt": "text/plain",
            ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
            ".tif": "image/tiff", ".tiff": "image/tiff", ".bmp": "image/bmp",
            ".gif": "image/gif", ".webp": "image/webp", ".dcm": "application/dicom",
            ".npz": "application/x-npz", ".npy": "application/x-npy",
            ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"}

#: layers whose findings are shortcuts or label problems (rai:dataBiases); the others'
#: findings are contamination and coverage (rai:dataLimitations)
_BIAS_LAYERS = {"provenance", "quality"}



def croissant_record(out_dir: str | Path, *, roles: Roles | None = None,
                     license: str | None = None, cite_as: str | None = None,
                     url: str | None = None) -> dict[str, Any]:
    """The Croissant JSON-LD document of a finished audit in ``out_dir``.

    ``roles``: what the layers declare their records to be (:mod:`splitscope.records.roles`;
    the audit passes :func:`splitscope.core.protocol.record_roles`): the deduplicated
    splits and the re-split become record sets and protocol lines, records that are no
    finding stay out of the RAI findings, label conflicts count as biases. ``license``,
    ``cite_as`` and ``url`` are the release's own (its licence URL or SPDX name, its citation,
    its home page): the audit cannot know them, so they are written only when given
    (Croissant recommends the first two; ``mlcroissant`` warns when they are absent).

    Raises
    ------
    InputError
        When ``out_dir`` holds no ``audit.json``, or a list it names is missing or differs
        from the SHA-256 the audit recorded.
    """
    from splitscope.records.exports import read_csv

    out = Path(out_dir)
    doc = load_audit(out)
    files = _checked_lists(out, doc)
    manifest = read_csv(out / "lists" / "manifest.csv", dtype="string",
                        keep_default_na=False, na_values=[""])
    objects = _file_objects(out, files)
    distribution = _released_files(doc, manifest) + objects
    record_sets = _record_sets(doc, files, roles)
    finished = str(doc["run"].get("finished") or doc["run"].get("started") or "")
    corpora = sorted(doc["manifest"].get("corpora", {}))
    name = "-".join(corpora) if corpora else "release"
    return {
        "@context": _CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": CONFORMS_TO,
        "name": f"{name}-audited",
        "description": (
            f"The release {', '.join(corpora) or name} as audited by splitscope "
            f"{doc['software'].get('splitscope', '')} for train/test contamination and "
            f"acquisition shortcuts: its {doc['manifest']['rows']} rows, the deduplicated and "
            f"group-disjoint re-split record sets, and the lists of contaminated files. "
            f"audit.json holds every finding with its numerator, denominator and parameters."),
        "datePublished": finished[:10] or None,
        "version": doc["software"].get("splitscope"),
        "license": license, "citeAs": cite_as, "url": url,
        "distribution": distribution,
        "recordSet": record_sets,
        "rai:dataCollection": _data_collection(doc),
        "rai:dataBiases": _findings(doc, roles, bias=True),
        "rai:dataLimitations": _findings(doc, roles, bias=False) + _coverage_lines(doc),
        "rai:dataPreprocessingProtocol": _preprocessing(doc, roles),
    }


def write_croissant(out_dir: str | Path, *, roles: Roles | None = None,
                    **metadata: str | None) -> Path:
    """Write ``out_dir/croissant.json`` (:func:`croissant_record`; ``roles`` and
    ``metadata``, its ``license``, ``cite_as``, ``url``, as there); returns its path."""
    from splitscope.records.exports import write_json

    out = Path(out_dir)
    record = croissant_record(out, roles=roles, **metadata)
    record = {k: v for k, v in record.items() if v is not None}
    return write_json(record, out / CROISSANT_FILE)


def load_audit(out: Path) -> dict[str, Any]:
    """The audit document in ``out`` (its ``audit.json``), refused unless it is a splitscope
    audit of the schema this splitscope reads.

    Raises
    ------
    InputError
        When ``out`` holds no readable ``audit.json``, or one of another kind or schema.
    """
    path = out / "audit.json"
    if not path.is_file():
        raise InputError(f"{out}: no audit.json (run `splitscope audit … --out {out}` first)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path} is not readable JSON ({exc}); run the audit again") from exc
    if doc.get("kind") != "splitscope-audit" or "artifacts" not in doc:
        raise InputError(f"{path} is not a splitscope audit document")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise InputError(f"{path} is an audit document of schema {doc.get('schema_version')}; "
                         f"this splitscope reads schema {SCHEMA_VERSION}: run the audit again")
    return doc


def _checked_lists(out: Path, doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every list the audit wrote (``artifacts`` of audit.json), by relative path, after
    checking that its bytes are still the ones recorded."""
    files: dict[str, dict[str, Any]] = {}
    changed = []
    for a in doc["artifacts"]:
        path = out / a["path"]
        if not path.is_file():
            raise InputError(f"{path} is missing: the audit folder is incomplete; run the "
                             f"audit again")
        if sha256_file(path) != a["sha256"]:
            changed.append(a["path"])
        files[a["path"]] = dict(a)
    if changed:
        raise InputError(f"{len(changed)} list(s) changed since the audit wrote them (first: "
                         f"{changed[0]}); run the audit again")
    if "lists/manifest.csv" not in files:
        raise InputError(f"{out}/lists/manifest.csv is not among the audit's outputs")
    return files


def _file_objects(out: Path, files: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """audit.json, report.html and every list, each a FileObject with its SHA-256."""
    entries = []
    for extra in ("audit.json", "report.html"):
        if (out / extra).is_file():
            entries.append(_file_object(extra, sha256_file(out / extra),
                                        (out / extra).stat().st_size,
                                        _FORMATS[Path(extra).suffix],
                                        "the audit document (every finding with its numerator, "
                                        "denominator and parameters)" if extra == "audit.json"
                                        else "the audit's report"))
    for rel in sorted(files):
        a = files[rel]
        entries.append(_file_object(rel, a["sha256"], a["bytes"], a["encodingFormat"],
                                    a.get("description") or _list_description(rel)))
    return entries


def _file_object(rel: str, sha256: str, size: int, fmt: str, description: str | None
                 ) -> dict[str, Any]:
    entry = {"@type": "cr:FileObject", "@id": rel, "name": rel, "contentUrl": rel,
             "contentSize": f"{int(size)} B", "encodingFormat": fmt, "sha256": sha256}
    if description:
        entry["description"] = description
    return entry


def _list_description(rel: str) -> str | None:
    p = PurePosixPath(rel)
    if p.parts[:2] == ("lists", "contaminated") and "__" in p.stem:
        predicate, boundary = p.stem.split("__", 1)
        return f"query rows flagged by {predicate} on boundary {boundary.replace('_', ' → ', 1)}"
    if p.parts[:2] == ("lists", "dedup"):
        split, _, kind = p.stem.rpartition("_")
        return f"rows of {split} the deduplication {kind}"
    return None


def _released_files(doc: Mapping[str, Any], manifest: pd.DataFrame) -> list[dict[str, Any]]:
    """A FileSet per (audited corpus, file format), ``includes`` relative to the corpus's
    release root; a FileObject per list input (its SHA-256 is of its bytes), named relative to
    that root when it lies there, else by its name."""
    roots = (doc.get("manifest") or {}).get("roots") or {}
    entries: list[dict[str, Any]] = []
    for inp in doc.get("inputs") or []:
        path = Path(str(inp["path"]))
        if inp.get("role") != "audited" or not path.is_file():
            continue
        digest = sha256_file(path)  # a list, table or array file: the digest of its bytes
        if str(inp.get("sha256_of", "")).endswith("file's bytes") and digest != inp["sha256"]:
            raise InputError(f"{path} changed since the audit read it; run the audit again")
        rel = _input_url(path, roots.values())
        entry = _file_object(rel, digest, path.stat().st_size,
                             _FORMATS.get(path.suffix.lower(), "application/octet-stream"),
                             f"released {inp.get('kind')} file of the audited corpus "
                             f"({inp.get('rows')} rows)")
        entry["@id"] = f"input:{rel}"
        entries.append(entry)
    if not {"corpus", "file"} <= set(manifest.columns):
        return entries
    files = manifest["file"].astype("string")
    # files under their root: not a URL, not an image inside a table, not outside the root
    local = (files.notna() & ~files.str.contains("://", regex=False)
             & ~files.str.contains("::", regex=False) & ~files.str.startswith("../")
             & ~files.str.startswith("/")).fillna(False).to_numpy(bool)
    suffixes = files[local].str.extract(r"(\.[^./]+)$", expand=False).str.lower()
    table = pd.DataFrame({"corpus": manifest["corpus"].astype("string")[local].fillna(""),
                          "suffix": suffixes.fillna("")})
    for (corpus, suffix), part in table.groupby(["corpus", "suffix"], sort=True):
        pattern = f"*{suffix}" if suffix else "*"
        fmt = _FORMATS.get(suffix, "application/octet-stream")
        entries.append({
            "@type": "cr:FileSet", "@id": f"released-files:{corpus}:{pattern}",
            "name": f"released files {pattern} of {corpus}",
            "description": (f"{len(part)} released rows with a {suffix or 'suffix-less'} file "
                            f"under the release root of {corpus} (includes is relative to "
                            f"that root; audit.json's manifest.roots records where it was "
                            f"audited); record set 'release' gives each row's path relative "
                            f"to that root and the file's SHA-256"),
            "encodingFormat": fmt, "includes": f"**/{pattern}"})
    return entries


def _input_url(path: Path, roots) -> str:
    """A released list file as the record names it: relative to the release root that holds
    it, else by its name (:mod:`splitscope.records.paths`)."""
    from splitscope.records.paths import input_name, release_relative

    full = os.path.abspath(path)
    for root in sorted(roots, key=len, reverse=True):
        rel = release_relative(full, root)
        if not rel.startswith("../") and not os.path.isabs(rel):
            return rel
    return input_name(path)


def _field(record_set: str, name: str, file_id: str, column: str, data_type: str,
           description: str | None = None) -> dict[str, Any]:
    entry = {"@type": "cr:Field", "@id": f"{record_set}/{name}", "name": name,
             "dataType": data_type,
             "source": {"fileObject": {"@id": file_id}, "extract": {"column": column}}}
    if description:
        entry["description"] = description
    return entry


def _record_set(name: str, description: str, file_id: str,
                columns: list[tuple[str, str, str, str | None]], key: str | None = "row"
                ) -> dict[str, Any]:
    entry = {"@type": "cr:RecordSet", "@id": name, "name": name, "description": description,
             "field": [_field(name, n, file_id, col, t, d) for n, col, t, d in columns]}
    if key:
        entry["key"] = {"@id": f"{name}/{key}"}
    return entry


_TEXT, _INT, _BOOL, _FLOAT = "sc:Text", "sc:Integer", "sc:Boolean", "sc:Float"


def _record_sets(doc: Mapping[str, Any], files: Mapping[str, Any],
                 roles: Roles | None) -> list[dict[str, Any]]:
    """The record sets of the lists the audit wrote (Parquet where there is one, so text
    such as group ids keeps its leading zeros)."""
    sets: list[dict[str, Any]] = []
    rows = doc["manifest"]["rows"]
    issues = _table(files, "lists/issues")
    if issues is not None:
        sets.append(_record_set(
            "release", f"every row of the release as audited ({rows} rows, order and "
                       f"multiplicity kept), with the SHA-256 of its file", issues, [
                ("row", "row", _INT, "row number in the manifest (release order)"),
                ("corpus", "corpus", _TEXT, None),
                ("path", "path", _TEXT, "path as released, relative to the release root"),
                ("split", "split", _TEXT, "split as released"),
                ("label", "label", _TEXT, "label as audited (after the label map, if any)"),
                ("source", "source", _TEXT, None),
                ("group", "group", _TEXT, "patient, video or other group key"),
                ("sha256", "byte_group", _TEXT, ("SHA-256 of the file's bytes (empty when "
                                                 "the file could not be read)"))]))
    for r in doc["records"]:
        if not has_role(r, R.DEDUPLICATED_SPLIT, roles) or r["status"] != "completed":
            continue
        split = (r.get("boundary") or {}).get("query", {}).get("name")
        rel = _dedup_list(files, split)
        if rel is None:
            continue
        removed_by = (r.get("predicate") or {}).get("params", {}).get("removed_by", [])
        sets.append(_record_set(
            f"deduplicated-{_slug(split)}",
            f"{r['numerator']} of {r['denominator']} rows of {split} kept after removing rows "
            f"flagged on {r['boundary']['name']} by {', '.join(removed_by)} (audit record "
            f"{r['id']})", rel, [
                ("row", "row", _INT, None), ("path", "path", _TEXT, None),
                ("split", "split", _TEXT, None), ("label", "label", _TEXT, None)]))
    resplit = _table(files, "lists/resplit")
    rec = next((r for r in doc["records"] if has_role(r, R.RESPLIT, roles)), None)
    if resplit is not None and rec is not None:
        params = (rec.get("predicate") or {}).get("params", {})
        sets.append(_record_set(
            "resplit", f"group-disjoint stratified re-split (fractions "
                       f"{params.get('fractions')}, seed {params.get('seed')}): no group in "
                       f"two parts (audit record {rec['id']})", resplit, [
                ("row", "row", _INT, None), ("path", "path", _TEXT, None),
                ("group", "group", _TEXT, None), ("label", "label", _TEXT, None),
                ("part", "part", _TEXT, "train, val or test of the re-split")]))
        folds = _table(files, "lists/resplit_folds")
        if folds is not None:
            sets.append(_record_set(
                "resplit-folds", f"{params.get('k_folds')} group-disjoint stratified folds "
                                 f"(seed {params.get('seed')})", folds, [
                    ("row", "row", _INT, None), ("path", "path", _TEXT, None),
                    ("group", "group", _TEXT, None), ("label", "label", _TEXT, None),
                    ("fold", "fold", _INT, None)]))
    contaminated = _table(files, "lists/contaminated")
    if contaminated is not None:
        sets.append(_record_set(
            "contaminated", "every query row a copy or near-twin predicate flags (bytes, "
                            "pixels, NCC ≥ τ), one line per "
                            "boundary × predicate × row, with its counterpart (the "
                            "per-predicate lists are lists/contaminated/<predicate>__"
                            "<boundary>.csv; uncalibrated screens are in lists/screened)",
            contaminated, [
                ("boundary", "boundary", _TEXT, None), ("predicate", "predicate", _TEXT, None),
                ("row", "row", _INT, None), ("path", "path", _TEXT, None),
                ("split", "split", _TEXT, None), ("label", "label", _TEXT, None),
                ("counterpart_row", "counterpart_row", _INT, None),
                ("counterpart_path", "counterpart_path", _TEXT, None)], key=None))
    return sets


def _table(files: Mapping[str, Any], stem: str) -> str | None:
    for suffix in (".parquet", ".csv"):
        if stem + suffix in files:
            return stem + suffix
    return None


def _dedup_list(files: Mapping[str, Any], split: str | None) -> str | None:
    if split is None:
        return None
    for rel in files:
        p = PurePosixPath(rel)
        if p.parts[:2] == ("lists", "dedup") and p.name == f"{_stem(split)}_kept.csv":
            return rel
    return None


def _stem(name: str) -> str:
    from splitscope.records.exports import file_stem

    return file_stem(str(name), subfolders=False)


def _slug(name: str | None) -> str:
    return _stem(str(name)).replace("_", "-").lower()


def _units(unit: str | None) -> str:
    """The plural of a counting unit: ``affected query rows``, ``rows (case)``."""
    head, sep, tail = (unit or "row").partition(" (")
    return f"{head}s{sep}{tail}"


def _rate(r: Mapping[str, Any]) -> str:
    num, den = r.get("numerator"), r.get("denominator")
    share = f" ({percent(num / den)})" if isinstance(num, (int, float)) and den else ""
    return f"{num} of {den} {_units(r.get('unit'))}{share}"


def _findings(doc: Mapping[str, Any], roles: Roles | None, *, bias: bool) -> list[str]:
    """One line per measured finding: title, boundary, numerator of denominator, estimate and
    interval where there is one, and the record id."""
    lines = []
    for r in doc["records"]:
        if (r["status"] not in ("completed", "partial") or has_role(r, R.NOT_FINDING, roles)
                or is_transform_sensitivity(r)):
            continue
        is_bias = r.get("layer") in _BIAS_LAYERS or has_role(r, R.LABEL_CONFLICT, roles)
        if is_bias != bias or r.get("layer") in ("evaluation", "attribution", "experiments"):
            continue
        if r.get("denominator") is None:
            continue
        boundary = (r.get("boundary") or {}).get("name")
        where = f" [{boundary}]" if boundary else ""
        text = f"{r.get('title')}{where}: "
        if r.get("numerator") is not None:
            text += _rate(r)
        else:
            est = r.get("estimate")
            text += f"estimate {est:.3g}" if isinstance(est, (int, float)) else "measured"
            text += f" over {r['denominator']} {_units(r.get('unit'))}"
        unc = r.get("uncertainty") or {}
        if unc.get("low") is not None and unc.get("high") is not None:
            text += f", {unc.get('kind')} [{unc['low']:.3g}, {unc['high']:.3g}]"
        lines.append(f"{text} (audit record {r['id']})")
    return lines


def _coverage_lines(doc: Mapping[str, Any]) -> list[str]:
    """What the audit could not assess, and rows it could not read."""
    lines = [f"layer {layer['layer']} {layer['status']}: {layer.get('reason')}"
             for layer in doc["layers"] if layer["status"] in ("not assessed",)]
    m = doc["manifest"]
    failed = (m.get("failures") or {}).get("rows") or 0
    lines.append(f"{failed} of {m['rows']} rows could not be read (lists/failures.csv); they "
                 f"stay in every denominator they belong to")
    if m.get("excluded"):
        lines.append(f"{m['excluded']} files outside the release's layout were not rows of "
                     f"the audit (lists/excluded.csv)")
    return lines


def _data_collection(doc: Mapping[str, Any]) -> str:
    from splitscope.records.paths import input_name

    m = doc["manifest"]
    splits = ", ".join(f"{k} {v}" for k, v in m.get("splits", {}).items())
    labels = ", ".join(f"{k} {v}" for k, v in m.get("labels", {}).items())
    inputs = "; ".join(f"{i.get('role')} {i.get('kind')} {input_name(i.get('path'))} "
                       f"(SHA-256 of {i.get('sha256_of')}: {i.get('sha256')})"
                       for i in doc.get("inputs") or [])
    return (f"The files and lists as released, read by splitscope "
            f"{doc['software'].get('splitscope', '')} on {doc['run'].get('started')}: "
            f"{m['rows']} rows (splits: {splits}; labels: {labels}). Inputs: {inputs}. "
            f"Rows keep the release's order, multiplicity and relative paths.")


def _sweep(doc: Mapping[str, Any]) -> list | None:
    """The thresholds of the first NCC sweep a record reports."""
    for r in doc.get("records") or []:
        sweep = (r.get("details") or {}).get("sweep")
        if isinstance(sweep, list) and sweep and isinstance(sweep[0], dict) \
                and r.get("section") == "near_duplicate":
            return [s.get("tau") for s in sweep]
    return None


def _list_options(given: Mapping[str, Any]) -> dict[str, Any]:
    """How the list file was read (the columns by role, root (by its name), split, image
    column)."""
    from splitscope.records.paths import input_name

    columns = {role: given.get(f"{role}_column") for role in (
        "path", "label", "split", "source", "group") if given.get(f"{role}_column")}
    out = {"columns": columns} if columns else {}
    for key, name in (("list_root", "root"), ("constant_split", "split"),
                      ("image_column", "image_column")):
        if given.get(key):
            out[name] = input_name(given[key]) if key == "list_root" else given[key]
    return out


def _preprocessing(doc: Mapping[str, Any], roles: Roles | None) -> list[str]:
    lines = []
    lm = (doc.get("manifest") or {}).get("label_map")
    if lm:
        pairs = ", ".join(f"{k} → {v}" for k, v in (lm.get("map") or {}).items())
        lines.append(f"label map applied once to the manifest: {pairs} ({lm.get('rows_changed')}"
                     f" rows changed; labels not named: "
                     f"{', '.join(lm.get('labels_unmapped') or []) or 'none'})")
    else:
        lines.append("no label map: labels as released")
    options = doc.get("options") or {}
    f, given = options.get("features") or {}, options.get("inputs") or {}
    search = options.get("search") or {}
    if search:
        dihedral = "matched" if search.get("dihedral") else "not matched"
        lines.append(f"pixel predicates on {f.get('thumb_size')}×{f.get('thumb_size')} "
                     f"grayscale thumbnails ({f.get('interpolation')}, mode {f.get('mode')}); "
                     f"NCC threshold τ = {search.get('tau')} (sweep {_sweep(doc)}); hash "
                     f"radius k = {search.get('radius')}; dihedral variants {dihedral}")
    if given.get("group_regex"):
        lines.append(f"groups from the file name with the regex {given['group_regex']}")
    for r in doc["records"]:
        if has_role(r, R.DEDUPLICATED_SPLIT, roles) and r["status"] == "completed":
            removed_by = (r.get("predicate") or {}).get("params", {}).get("removed_by", [])
            lines.append(f"deduplicated {r['boundary']['query']['name']}: rows flagged on "
                         f"{r['boundary']['name']} by {', '.join(removed_by)} removed "
                         f"({r['numerator']} of {r['denominator']} rows kept)")
        if has_role(r, R.RESPLIT, roles) and r["status"] == "completed":
            params = (r.get("predicate") or {}).get("params", {})
            lines.append(f"re-split: {params.get('parts_method')}, fractions "
                         f"{params.get('fractions')}, {params.get('k_folds')} folds, seed "
                         f"{params.get('seed')}")
    opts = {k: given.get(k) for k in ("allow_outside_root", "allow_urls", "follow_links")
            if given.get(k)}
    if f.get("max_file_bytes") not in (None, DEFAULT_MAX_FILE_BYTES):
        opts["max_file_bytes"] = f["max_file_bytes"]
    if _list_options(given):
        opts["list_options"] = _list_options(given)
    if opts:
        lines.append(f"reading options: {json.dumps(opts, default=str, sort_keys=True)}")
    return lines
