"""Label mapping (METHODS §6.4): released labels → audited labels, applied once, to the
manifest, and recorded.

A benchmark's headline question is often coarser than its folders (tumour vs no tumour over
glioma / meningioma / pituitary / no_tumor). A map given as ``glioma=tumor,meningioma=tumor``
or as a two-column CSV file (released label, audited label; a header row is optional) is
applied to the manifest's ``label`` column before any layer runs; the released label stays in
``label_released``. Labels the map does not name keep their value and are listed. The map, the
rows it changed and the labels it did not name are kept in ``manifest.attrs["label_map"]`` so
that every record built from the manifest can say which labels it counted.

Every corpus of an audit (the audited release, an external corpus, a negative control) has its
own vocabulary. One map applies to each corpus whose labels it names, and is refused only when
it names a label of none (:func:`apply_label_maps`); a corpus may also have a map of its own,
applied first. Labels are compared across corpora only where the two vocabularies overlap
(:func:`vocabulary_overlap`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from splitscope.errors import InputError

__all__ = ["apply_label_map", "apply_label_maps", "parse_label_map", "vocabulary_overlap"]


def parse_label_map(spec: str | Path | Mapping[str, str]) -> dict[str, str]:
    """The map from ``released=audited`` pairs separated by commas, a two-column CSV file, or
    a mapping. A released label named twice with two targets is an error."""
    if isinstance(spec, Mapping):
        pairs = [(str(k), str(v)) for k, v in spec.items()]
        where = "the label map"
    elif Path(str(spec)).is_file():
        where = str(spec)
        text = Path(spec).read_text(encoding="utf-8-sig")
        rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
        if rows and len(rows[0]) >= 2 and rows[0][0].strip().lower() in (
                "released", "label", "from", "source_label"):
            rows = rows[1:]  # a header row
        bad = [i + 1 for i, r in enumerate(rows) if len(r) != 2 or not all(c.strip() for c in r)]
        if bad:
            raise InputError(f"label map {where}: rows {bad[:5]} do not have exactly two "
                             "non-empty columns (released label, audited label)")
        pairs = [(r[0].strip(), r[1].strip()) for r in rows]
    else:
        where = "--label-map"
        pairs = []
        for item in str(spec).split(","):
            if not item.strip():
                continue
            if item.count("=") != 1:
                raise InputError(f"{where} {spec!r}: {item.strip()!r} is not 'released=audited' "
                                 "(e.g. 'glioma=tumor,meningioma=tumor'), and no such file "
                                 "exists")
            left, right = (x.strip() for x in item.split("="))
            if not left or not right:
                raise InputError(f"{where} {spec!r}: {item.strip()!r} has an empty side")
            pairs.append((left, right))
    out: dict[str, str] = {}
    for left, right in pairs:
        if left in out and out[left] != right:
            raise InputError(f"{where}: label {left!r} is mapped to both {out[left]!r} and "
                             f"{right!r}")
        out[left] = right
    if not out:
        raise InputError(f"{where}: the label map is empty")
    return out


def apply_label_map(manifest: pd.DataFrame, spec: str | Path | Mapping[str, str], *,
                    strict: bool = True) -> pd.DataFrame:
    """``manifest`` with ``label`` mapped and ``label_released`` kept.

    Raises
    ------
    InputError
        When ``strict`` and no label of the manifest is named by the map (a map for another
        release); without ``strict`` such a manifest is returned unchanged.
    """
    mapping = parse_label_map(spec)
    released = manifest["label"].astype("string")
    present = set(released.dropna().unique())
    named = sorted(present & set(mapping))
    if not named and not strict:
        return manifest
    if not named:
        raise InputError(f"the label map names none of the release's labels "
                         f"({', '.join(sorted(present)) or 'none'}); it maps "
                         f"{', '.join(sorted(mapping))}")
    out = manifest.copy()
    out.attrs = dict(manifest.attrs)
    out["label_released"] = released
    mapped = released.map(lambda v: mapping.get(v, v) if pd.notna(v) else v)
    out["label"] = pd.array(mapped, dtype="string")
    changed = int((released.fillna("\0") != out["label"].fillna("\0")).sum())
    summary: dict[str, Any] = {
        "map": dict(sorted(mapping.items())),
        "rows_changed": changed,
        "labels_unmapped": sorted(present - set(mapping)),
        "labels_not_in_release": sorted(set(mapping) - present),
        "audited_labels": sorted(set(out["label"].dropna().unique())),
    }
    out.attrs["label_map"] = summary
    return out


def apply_label_maps(manifests: Mapping[str, pd.DataFrame],
                     common: str | Path | Mapping[str, str] | None = None,
                     own: Mapping[str, str | Path | Mapping[str, str] | None] | None = None
                     ) -> dict[str, pd.DataFrame]:
    """Each corpus's manifest with its own map (``own[name]``, strict: it must name one of
    that corpus's labels) and then the common map applied.

    The common map applies to every corpus whose labels it names (after its own map) and is
    refused only when it names a label of none of them, since one audit may hold corpora
    spelled differently (``glioma`` in one, ``glioma_tumor`` in another).
    """
    out = {}
    for name, manifest in manifests.items():
        spec = (own or {}).get(name)
        if spec is not None:
            try:
                manifest = apply_label_map(manifest, spec)
            except InputError as exc:
                raise InputError(f"the {name} corpus's label map: {exc}") from None
            manifest.attrs["label_map_own"] = manifest.attrs.pop("label_map")
        out[name] = manifest
    if common is None:
        return out
    mapped = {name: apply_label_map(m, common, strict=False) for name, m in out.items()}
    if not any("label_map" in m.attrs for m in mapped.values()):
        vocab = sorted({str(v) for m in out.values() for v in m["label"].dropna().unique()})
        raise InputError(f"the label map names none of the labels of any corpus "
                         f"({', '.join(vocab) or 'none'}); it maps "
                         f"{', '.join(sorted(parse_label_map(common)))}")
    return mapped


def vocabulary_overlap(query_labels, reference_labels) -> dict[str, Any]:
    """How far two corpora's label vocabularies overlap, and whether their labels may be
    compared (a label conflict across corpora needs a shared vocabulary): ``comparable`` when
    at least half of each side's distinct labels occur on the other side."""
    q = {str(v) for v in pd.Series(query_labels, dtype="string").dropna().unique()}
    r = {str(v) for v in pd.Series(reference_labels, dtype="string").dropna().unique()}
    shared = q & r
    comparable = bool(q) and bool(r) and 2 * len(shared) >= len(q) and 2 * len(shared) >= len(r)
    return {"query_labels": sorted(q), "reference_labels": sorted(r), "shared": sorted(shared),
            "comparable": comparable,
            "rule": "at least half of each side's distinct labels occur on the other side"}
