"""Label-conflicting twins (METHODS §2.10) and the pixel-identical union (§2.11).

A *label-conflicting twin* is a crossing pair that a pixel predicate finds (the same bytes, the
same decoded pixels, NCC ρ ≥ τ, or a hash rule with one reference) whose two rows carry
different labels: the same image under two labels. It is counted per predicate, in affected
query rows over all query rows of the boundary, and listed pair by pair.

Which pairs each predicate finds:

- ``sha256`` — every reference row with the query row's SHA-256;
- ``pixel_xxh128`` — every reference row with the query row's decoded-pixel digest (byte
  copies included: equal pixels are the same image whatever the encoding);
- ``ncc`` — every pair of the pair table with ρ ≥ τ (plain orientation);
- ``hash_joint``, ``hash_sum``, ``hash_exact_phash`` — every pair of the pair table that
  satisfies the rule (one reference with d_p ≤ k and d_d ≤ k; d_p + d_d ≤ k; d_p = 0).

Across corpora (an external corpus against the audited training rows) labels are compared only
where the two vocabularies overlap (METHODS §6.4, :func:`cross_corpus_vocabulary`): when they
barely do, the records are *not assessed* and no pair is listed; when they do, a pair with a
label the other corpus does not use is not counted (the record lists both vocabularies).

Byte and pixel twins are counted per digest group (its rows of each label on either side),
never by pairing rows, so one image copied thousands of times stays cheap; the table lists every
pair of a group with at most ``max_pairs_per_group`` conflicting pairs, and for a larger group
each conflicting row once, with its lowest counterpart under another label
(:func:`digest_conflicts`). The records' counts are exact either way and say what was left out.

Rows without a label are never in conflict. Each pair and record says how far its predicate
can be trusted (:func:`calibration`): byte and pixel identity always, NCC unless the negative
control marks it unreliable, a hash rule only when a control found it reliable; a verdict
counts only trusted conflicts. The pair table may be truncated on very duplicate-heavy
boundaries (the near-duplicate layer's notes say so); the hash and NCC counts are then lower
bounds and the record is ``partial``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.features.failures import identity_rows
from splitscope.manifest.labels import vocabulary_overlap
from splitscope.relations.identity import (
    NO_BYTES_REASON,
    count_of,
    group_codes,
    lowest_other,
    no_bytes,
    side,
)
from splitscope.relations.near_predicates import Conflict, NearPredicate, Settings, registered
from splitscope.relations.predicates import (
    IDENTITY,
    LABEL_CONFLICT_SHA256,
    LABEL_CONFLICT_WITHIN,
    LAYER,
    NEAR_DUPLICATE,
    PIXEL_IDENTICAL_UNION,
    SHA256,
)

__all__ = ["MAX_PAIRS_PER_GROUP", "conflict_predicates", "cross_corpus_vocabulary",
           "digest_conflicts", "label_conflicts", "pixel_identical_union",
           "within_conflict_record"]

#: the digest twins: predicate → (where its pairs come from, the digest column)
_DIGESTS = {
    "sha256": ("digest", "sha256"),
    "pixel_xxh128": ("digest", "pixel_xxh128"),
}


def _counted() -> dict[str, NearPredicate]:
    """The near-duplicate predicates with a label-conflict count, by that count's name: those
    counted without a control first, then the others (table order within each)."""
    counted = [p for p in registered() if p.conflict is not None]
    counted.sort(key=lambda p: not p.conflict.trusted_without_control)
    return {p.conflict.name: p for p in counted}


def conflict_predicates() -> dict[str, tuple[str, str]]:
    """Every conflict predicate, most trusted first: name → (where its pairs come from:
    ``digest`` or ``pairs``, the digest column or the pair-table rule tag). The digest twins
    come first; the pair-based ones are the near-duplicate table's predicates with a
    label-conflict count (:func:`_counted`)."""
    return {**_DIGESTS, **{name: ("pairs", p.pair_rule.tag) for name, p in _counted().items()}}

#: conflicting pairs of one digest group listed in full; a larger group lists each of its
#: conflicting rows once (:func:`digest_conflicts`)
MAX_PAIRS_PER_GROUP = 1_000

_COLUMNS = ["boundary", "predicate", "row", "path", "label", "counterpart_row",
            "counterpart_path", "counterpart_label", "rho", "calibration", "trusted"]




def _section(pred: str) -> str:
    """The section of a label-conflict record: identity for byte twins, else near duplicate."""
    return IDENTITY if pred == SHA256 else NEAR_DUPLICATE

def calibration(predicate: str, control_rates: dict | None) -> tuple[str, bool]:
    """How far a conflict predicate's pairs can be taken as the same image, and whether a
    verdict may count them: ``exact`` (equal bytes or decoded pixels: always), ``reliable``
    or ``unreliable`` (the negative control's verdict on the predicate), or ``uncalibrated``
    (no control). Without a control, NCC at τ is counted (its threshold is the method's
    near-twin rule) and the hash rules are not (they collide on images that share one global
    layout, e.g. radiographs)."""
    counted = _counted().get(predicate)
    if counted is None:
        return "exact", True
    # the negative-control rate of the census predicate that counts the conflict
    rate = (control_rates or {}).get(counted.name)
    if not rate or not rate.get("denominator"):  # no control, or no control row assessed
        return "uncalibrated", counted.conflict.trusted_without_control
    return ("unreliable", False) if rate.get("unreliable") else ("reliable", True)


class DigestConflicts:
    """The rows of one boundary that can be digest twins under two labels: every row with the
    digest ``key`` and a known label (across corpora, one of the shared vocabulary), with
    integer codes for its group (digest), its label, and the label's text (two labels
    conflict when their texts differ).

    ``query_conflicts`` holds, per query row, its counterparts under another label: the
    group's reference rows less those whose label reads the same (within a population the
    row itself reads the same, so it falls out)."""

    def __init__(self, q: pd.DataFrame, r: pd.DataFrame, key: str, within: bool,
                 shared: set | None = None):
        def usable(part: pd.DataFrame) -> pd.DataFrame:
            ok = part[key].notna() & part["label"].notna()
            if shared is not None:
                ok &= part["label"].isin(shared)
            return part.loc[ok.to_numpy(bool), ["row", key, "label"]]

        qe = usable(q)
        re = qe if within else usable(r)
        nq = len(qe)
        self.within = within
        self.q_rows = qe["row"].to_numpy(np.int64)
        self.r_rows = re["row"].to_numpy(np.int64)
        group = group_codes(qe[key], re[key])
        labels, self.labels = pd.factorize(pd.concat(
            [pd.Series(qe["label"].to_numpy(), dtype=object),
             pd.Series(re["label"].to_numpy(), dtype=object)], ignore_index=True))
        self.texts = pd.factorize(pd.Index([str(v) for v in self.labels], dtype=object))[0]
        text = self.texts[labels] if labels.size else labels
        self.qg, self.rg = group[:nq], group[nq:]
        self.qa, self.ra = labels[:nq].astype(np.int64), labels[nq:].astype(np.int64)
        self.qt, self.rt = text[:nq].astype(np.int64), text[nq:].astype(np.int64)
        self.n_groups = int(group.max()) + 1 if group.size else 0
        self.width = int(self.texts.max()) + 1 if self.texts.size else 1
        self.query_conflicts = self._conflicts(self.rg, self.rt, self.qg, self.qt)

    def _conflicts(self, groups, texts, at_groups, at_texts) -> np.ndarray:
        """Per element (``at_*``): the elements of its group whose label text differs."""
        every = np.bincount(groups, minlength=self.n_groups)[at_groups]
        return every - count_of(groups * self.width + texts, at_groups * self.width + at_texts)

    @property
    def pairs(self) -> int:
        """Conflicting (query row, reference row) pairs (within: both orders)."""
        return int(self.query_conflicts.sum())

    def affected_query_rows(self) -> np.ndarray:
        """Query rows with a counterpart under another label."""
        return self.q_rows[self.query_conflicts > 0]

    def label_pairs(self) -> pd.DataFrame:
        """``label, counterpart_label, n``: conflicting pairs per label pair, from the label
        counts of each group (sides as in :attr:`pairs`)."""
        qc = _label_counts(self.qg, self.qa)
        rc = _label_counts(self.rg, self.ra).rename(columns={"a": "b", "n": "m"})
        both = qc.merge(rc, on="g")
        texts = self.texts
        both = both[texts[both["a"].to_numpy()] != texts[both["b"].to_numpy()]]
        return self._named(both["a"], both["b"], both["n"] * both["m"])

    def ordered_label_pairs(self) -> pd.DataFrame:
        """Within a population: conflicting pairs counted once, the lower row first, per
        (its label, the higher row's label). Each row is met with the labels of its group,
        and the rows of each label below it are found by a sorted search."""
        ga = pd.factorize(self.qg * (int(self.qa.max()) + 1 if self.qa.size else 1)
                          + self.qa)[0].astype(np.int64)
        span = int(self.q_rows.max()) + 1 if self.q_rows.size else 1
        ordered = np.sort(ga * span + self.q_rows)
        blocks = pd.DataFrame({"g": self.qg, "a": self.qa, "ga": ga}).drop_duplicates()
        lines = pd.DataFrame({"g": self.qg, "b": self.qa, "row": self.q_rows}).merge(
            blocks, on="g")
        texts = self.texts
        lines = lines[texts[lines["a"].to_numpy()] != texts[lines["b"].to_numpy()]]
        start = lines["ga"].to_numpy(np.int64) * span
        below = (np.searchsorted(ordered, start + lines["row"].to_numpy(np.int64))
                 - np.searchsorted(ordered, start))
        keep = below > 0
        return self._named(lines["a"][keep], lines["b"][keep], pd.Series(below[keep]))

    def listed(self, max_pairs_per_group: int) -> pd.DataFrame:
        """The pairs to list: ``row, counterpart_row``, sorted.

        A group with at most ``max_pairs_per_group`` conflicting pairs lists them all (label
        blocks are joined first, so only conflicting pairs are ever formed); a larger group
        lists each conflicting query row with its lowest reference row under another label
        and, across a boundary, each conflicting reference row with its lowest such query
        row, so that every row in a conflict is listed at least once."""
        if max_pairs_per_group < 1:
            raise InputError(f"max_pairs_per_group must be at least 1; got "
                             f"{max_pairs_per_group}")
        per_group = np.bincount(self.qg, weights=self.query_conflicts,
                                minlength=self.n_groups).astype(np.int64)
        small_q = per_group[self.qg] <= max_pairs_per_group
        small_r = per_group[self.rg] <= max_pairs_per_group
        sel = small_q & (self.query_conflicts > 0)
        qd = pd.DataFrame({"row": self.q_rows[sel], "g": self.qg[sel], "t": self.qt[sel]})
        rd = pd.DataFrame({"counterpart_row": self.r_rows[small_r], "g": self.rg[small_r],
                           "u": self.rt[small_r]})
        blocks = qd[["g", "t"]].drop_duplicates().merge(rd[["g", "u"]].drop_duplicates(),
                                                        on="g")
        blocks = blocks[blocks["t"] != blocks["u"]]
        parts = [qd.merge(blocks, on=["g", "t"]).merge(rd, on=["g", "u"])[
            ["row", "counterpart_row"]]]
        big = ~small_q & (self.query_conflicts > 0)
        parts.append(pd.DataFrame({
            "row": self.q_rows[big],
            "counterpart_row": lowest_other(self.rg, self.rt, self.r_rows, self.qg[big],
                                            self.qt[big])}))
        if not self.within:
            r_conflicts = self._conflicts(self.qg, self.qt, self.rg, self.rt)
            big = ~small_r & (r_conflicts > 0)
            parts.append(pd.DataFrame({
                "row": lowest_other(self.qg, self.qt, self.q_rows, self.rg[big],
                                    self.rt[big]),
                "counterpart_row": self.r_rows[big]}))
        return (pd.concat(parts, ignore_index=True).astype(np.int64)
                .drop_duplicates().sort_values(["row", "counterpart_row"], kind="stable")
                .reset_index(drop=True))

    def _named(self, a, b, n) -> pd.DataFrame:
        labels = np.asarray(self.labels, dtype=object)
        return pd.DataFrame({"label": labels[np.asarray(a, np.int64)],
                             "counterpart_label": labels[np.asarray(b, np.int64)],
                             "n": np.asarray(n, np.int64)})


def _label_counts(groups: np.ndarray, labels: np.ndarray) -> pd.DataFrame:
    """``g, a, n``: rows per (group, label)."""
    return (pd.DataFrame({"g": groups, "a": labels}).value_counts(sort=False)
            .rename("n").reset_index())


def digest_conflicts(rows: pd.DataFrame, boundary, key: str,
                     vocab: dict | None = None) -> DigestConflicts:
    """The digest twins under two labels of ``boundary`` (see :class:`DigestConflicts`);
    ``vocab`` as :func:`cross_corpus_vocabulary` gives it (its shared labels only)."""
    q = side(rows, boundary.query)
    r = q if boundary.within else side(rows, boundary.reference)
    shared = None if vocab is None else set(vocab["shared"])
    return DigestConflicts(q, r, key, boundary.within, shared)


def _label_pair_counts(table: pd.DataFrame) -> dict:
    """``{"<label> / <counterpart label>": pairs}`` from ``label, counterpart_label, n``
    lines (summed; label pairs in sorted order, those left at zero dropped)."""
    if not len(table):
        return {}
    total = table.groupby(["label", "counterpart_label"])["n"].sum()
    return {f"{a} / {c}": int(n) for (a, c), n in total.items() if n > 0}


def _rule_pairs(pair_table: pd.DataFrame, tag: str) -> pd.DataFrame:
    if pair_table is None or not len(pair_table) or "rules" not in pair_table.columns:
        return pd.DataFrame(columns=["row", "counterpart_row", "rho"])
    rules = pair_table["rules"].fillna("").astype(str).str.split(";")
    hit = rules.map(lambda tags: tag in tags).to_numpy(bool)
    part = pair_table.loc[hit]
    return pd.DataFrame({"row": part["query_row"].to_numpy(np.int64),
                         "counterpart_row": part["reference_row"].to_numpy(np.int64),
                         "rho": part["rho"].to_numpy(np.float64)})


def cross_corpus_vocabulary(rows: pd.DataFrame, boundary) -> dict | None:
    """The two sides' label vocabularies (:func:`~splitscope.manifest.labels.vocabulary_overlap`)
    when ``boundary`` joins two corpora (no corpus on both sides), else None."""
    if boundary.within or "corpus" not in rows.columns:
        return None
    q, r = side(rows, boundary.query), side(rows, boundary.reference)
    qc, rc = (set(x["corpus"].dropna().astype(str)) for x in (q, r))
    if not qc or not rc or qc & rc:
        return None
    return vocabulary_overlap(q.get("label", []), r.get("label", []))


def _vocabulary_reason(vocab: dict) -> str:
    return (f"label vocabularies differ: the query side uses {', '.join(vocab['query_labels'])}"
            f"; the reference side {', '.join(vocab['reference_labels'])}; shared "
            f"{', '.join(vocab['shared']) or 'none'} ({vocab['rule']} is required). A label "
            "map (--label-map, or --external-label-map for the external corpus's spellings) "
            "aligns them")


def label_conflicts(rows: pd.DataFrame, boundary, pair_table: pd.DataFrame | None,
                    control_rates: dict | None = None, *,
                    max_pairs_per_group: int = MAX_PAIRS_PER_GROUP) -> pd.DataFrame:
    """Every label-conflicting twin pair of ``boundary``, one line per (predicate, query row,
    reference row): ``boundary, predicate, row, path, label, counterpart_row,
    counterpart_path, counterpart_label, rho`` (ρ where the pair table measured it), sorted
    by predicate, query row and reference row.

    ``pair_table`` is the near-duplicate layer's pair table of this boundary (columns
    ``query_row``, ``reference_row``, ``rho``, ``rules``); ``control_rates`` the negative
    control's rate per census predicate, which sets ``calibration`` and ``trusted``
    (:func:`calibration`). Byte and pixel twins are listed up to ``max_pairs_per_group``
    pairs per digest group (:meth:`DigestConflicts.listed`).

    The table's ``attrs["vocabulary"]`` holds the vocabularies compared
    (:func:`cross_corpus_vocabulary`; None within a corpus), so that :func:`conflict_records`
    reads them from the table instead of computing them again.
    """
    rows = identity_rows(rows)
    vocab = cross_corpus_vocabulary(rows, boundary)
    out = _conflict_table(rows, boundary, pair_table, control_rates, vocab,
                          max_pairs_per_group)
    out.attrs["vocabulary"] = vocab
    return out


def _conflict_table(rows, boundary, pair_table, control_rates, vocab,
                    max_pairs_per_group) -> pd.DataFrame:
    if vocab is not None and not vocab["comparable"]:
        return pd.DataFrame(columns=_COLUMNS)
    shared = None if vocab is None else set(vocab["shared"])
    q = side(rows, boundary.query)
    r = q if boundary.within else side(rows, boundary.reference)
    labels = rows.set_index("row")["label"]
    paths = rows.set_index("row")["path"]
    parts = []
    order = conflict_predicates()
    for pred, (kind, key) in order.items():
        if kind == "digest" and key not in q.columns:
            continue
        pairs = (DigestConflicts(q, r, key, boundary.within, shared).listed(
            max_pairs_per_group) if kind == "digest" else _rule_pairs(pair_table, key))
        if not len(pairs):
            continue
        ql = labels.reindex(pairs["row"].to_numpy(np.int64)).to_numpy(object)
        rl = labels.reindex(pairs["counterpart_row"].to_numpy(np.int64)).to_numpy(object)
        known = pd.notna(ql) & pd.notna(rl)
        differ = known & (ql.astype(str) != rl.astype(str))
        if shared is not None:  # across corpora: both labels in the shared vocabulary
            differ &= (pd.Series(ql, dtype=object).isin(shared).to_numpy()
                       & pd.Series(rl, dtype=object).isin(shared).to_numpy())
        if not differ.any():
            continue
        part = pairs.loc[differ].copy()
        part.insert(0, "predicate", pred)
        part["calibration"], part["trusted"] = calibration(pred, control_rates)
        part["label"] = ql[differ]
        part["counterpart_label"] = rl[differ]
        parts.append(part)
    if not parts:
        return pd.DataFrame(columns=_COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    if "rho" not in out.columns:
        out["rho"] = np.nan
    out["boundary"] = boundary.name
    out["path"] = paths.reindex(out["row"].to_numpy(np.int64)).to_numpy()
    out["counterpart_path"] = paths.reindex(out["counterpart_row"].to_numpy(np.int64)).to_numpy()
    out["_order"] = out["predicate"].map({p: i for i, p in enumerate(order)})
    out = (out.drop_duplicates(["predicate", "row", "counterpart_row"])
           .sort_values(["_order", "row", "counterpart_row"], kind="stable"))
    return out[_COLUMNS].reset_index(drop=True)


def pixel_identical_union(flags: pd.DataFrame) -> tuple[np.ndarray, int]:
    """Query rows with a byte-identical or a decoded-pixel-identical counterpart (the union
    of the ``sha256`` and ``pixel_xxh128`` flags), and how many rows neither flag could
    assess."""
    hit = np.zeros(len(flags), bool)
    assessed = np.zeros(len(flags), bool)
    for col in ("sha256", "pixel_xxh128"):
        if col in flags:
            hit |= flags[col].fillna(False).to_numpy(bool)
            assessed |= flags[col].notna().to_numpy(bool)
    return flags.loc[hit, "row"].to_numpy(np.int64), int((~assessed).sum())


_DIGEST_TITLES = {
    "sha256": "Byte-identical copies under another label",
    "pixel_xxh128": "Decoded-pixel twins under another label",
}


def _conflict(pred: str) -> Conflict | None:
    counted = _counted().get(pred)
    return counted.conflict if counted is not None else None


def _title(pred: str) -> str:
    found = _conflict(pred)
    return found.title if found is not None else _DIGEST_TITLES[pred]


def conflict_records(rel, rows: pd.DataFrame, conflicts: pd.DataFrame, *, tau: float,
                     radius: int, geometry: dict, slug: str,
                     control_rates: dict | None = None,
                     max_pairs_per_group: int = MAX_PAIRS_PER_GROUP) -> list:
    """One record per conflict predicate measured on ``rel``'s boundary (unit: affected query
    row; denominator: every query row), the conflicting pairs listed in the details;
    ``conflicts`` as :func:`label_conflicts` returns it (with the vocabularies it compared).
    Byte and pixel twins are counted per digest group (:func:`digest_conflicts`), so their
    counts hold whatever the table lists; ``pair_list`` in the details says what it left out
    (only where it left something out)."""
    from splitscope.records import AuditRecord

    rows = identity_rows(rows)
    b = rel.boundary
    q = side(rows, b.query)
    n_query = len(q)
    truncated = {k: v for k, v in (rel.near.notes or {}).items() if k in ("hash_pairs",
                                                                           "ncc_pairs")}
    out = []
    arrays = bool(n_query) and bool(no_bytes(q).all())
    vocab = (conflicts.attrs["vocabulary"] if "vocabulary" in conflicts.attrs
             else cross_corpus_vocabulary(rows, b))
    for pred, (kind, _) in conflict_predicates().items():
        if kind == "digest" and pred not in q.columns:
            continue
        if vocab is not None and not vocab["comparable"]:
            reason = _vocabulary_reason(vocab)
            out.append(AuditRecord(
                id=f"{_section(pred)}.label_conflict_{pred}.{slug}",
                layer=LAYER, section=_section(pred),
                title=_title(pred), boundary=b.to_dict(),
                predicate={"name": f"label_conflict_{pred}",
                           "params": {"label_relation": "disjoint"}},
                unit="affected query row", numerator=None, denominator=n_query,
                status="not assessed", reason=reason,
                conclusion=f"no label comparison across these corpora: {reason}",
                details={"vocabulary": vocab}))
            continue
        if pred == "sha256" and arrays:  # no bytes: byte identity does not apply
            out.append(AuditRecord(
                id=f"{IDENTITY}.label_conflict_sha256.{slug}", layer=LAYER, section=IDENTITY,
                title=_title(pred), boundary=b.to_dict(),
                predicate={"name": LABEL_CONFLICT_SHA256,
                           "params": {"label_relation": "disjoint"}},
                unit="affected query row", numerator=None, denominator=n_query,
                status="not applicable", reason=NO_BYTES_REASON,
                conclusion=f"byte identity does not apply: {NO_BYTES_REASON}"))
            continue
        mine = conflicts[conflicts["predicate"] == pred]
        listing = None
        if kind == "digest":
            found = digest_conflicts(rows, b, pred, vocab)
            n_hit, n_pairs = found.affected_query_rows().size, found.pairs
            label_pairs = _label_pair_counts(found.label_pairs())
            if n_pairs > len(mine):
                listing = _pair_list(max_pairs_per_group, len(mine), n_pairs)
        else:
            n_hit, n_pairs = np.unique(mine["row"].to_numpy(np.int64)).size, len(mine)
            label_pairs = {f"{a} / {c}": int(n) for (a, c), n in mine.groupby(
                ["label", "counterpart_label"]).size().items()}
        labelled = int(q["label"].notna().sum()) if "label" in q.columns else 0
        if "label" in q.columns and "sha256" in q.columns and not arrays:
            labelled = int((q["label"].notna() & q["sha256"].notna()).sum())  # files read
        params: dict = {"label_relation": "disjoint"}
        if _conflict(pred) is not None:
            params.update(_conflict(pred).params(Settings(tau, radius, geometry)))
        partial = kind == "pairs" and bool(truncated)
        calibrated, trusted = calibration(pred, control_rates)
        if n_query and not labelled:  # no labelled query row was read: nothing compared
            out.append(AuditRecord(
                id=f"{_section(pred)}.label_conflict_{pred}.{slug}", layer=LAYER,
                section=_section(pred), title=_title(pred), boundary=b.to_dict(),
                predicate={"name": f"label_conflict_{pred}", "params": params},
                unit="affected query row", numerator=None, denominator=n_query,
                coverage={"assessed": 0, "total": n_query}, status="not assessed",
                reason=UNREAD_REASON, conclusion=f"no label comparison: {UNREAD_REASON}",
                details={"calibration": calibrated, "trusted": trusted}))
            continue
        examples = mine.head(20)[["row", "path", "label", "counterpart_row",
                                  "counterpart_path", "counterpart_label"]]
        out.append(AuditRecord(
            id=f"{_section(pred)}.label_conflict_{pred}.{slug}",
            layer=LAYER, section=_section(pred),
            title=_title(pred),
            boundary=b.to_dict(),
            predicate={"name": f"label_conflict_{pred}", "params": params},
            unit="affected query row",
            numerator=int(n_hit),
            denominator=n_query,
            coverage={"assessed": labelled, "total": n_query},
            scope=(f"query rows of {b.query.name} with a twin in {b.reference.name} (under "
                   f"{pred}) that carries another label"),
            conclusion=_conflict_conclusion(pred, n_hit, n_query, n_pairs,
                                            calibrated, trusted),
            unresolved="which of the two labels is right is not settled by the images",
            status="partial" if partial else "completed",
            reason="; ".join(truncated.values()) if partial else None,
            outputs=["label_conflicts"],
            details={"pairs": n_pairs, "calibration": calibrated, "trusted": trusted,
                     **({"vocabulary": vocab} if vocab is not None else {}),
                     "label_pairs": label_pairs,
                     "examples": examples.to_dict("records"),
                     **({"pair_list": listing} if listing else {})},
        ))
    return out


#: why a conflict record compared nothing
UNREAD_REASON = "no query row with a label had its file read"


def _pair_list(cap: int, listed: int, total: int) -> dict:
    """What a conflict table left out of a record's pairs (:meth:`DigestConflicts.listed`)."""
    return {"max_pairs_per_group": int(cap), "pairs_listed": int(listed),
            "pairs_omitted": int(total - listed),
            "rule": "a digest group with more conflicting pairs than max_pairs_per_group lists "
                    "each of its conflicting rows once, with its lowest counterpart under "
                    "another label; the counts above are of every pair"}


def _conflict_conclusion(pred: str, rows: int, n_query: int, pairs: int, calibrated: str,
                         trusted: bool) -> str:
    if not rows:
        return f"no query row has a twin under {pred} with another label"
    found = (f"{rows} of {n_query} query rows have a twin under {pred} with another label "
             f"({pairs} pair(s))")
    if trusted:
        return f"{found}: the same image is released under two labels"
    return (f"{found}; {pred} is {calibrated} on this modality, so this is no evidence that "
            "the same image carries two labels")


def within_conflict_record(boundary, rows: pd.DataFrame, conflicts: pd.DataFrame, slug: str,
                           max_pairs_per_group: int = MAX_PAIRS_PER_GROUP):
    """Identical images under two labels inside one population (METHODS §1.6, §2.10): rows
    whose bytes or decoded pixels equal another row's of the same split that carries another
    label (unit: affected row, either row of a pair; denominator: every row of the split).

    Counted per digest group (:func:`within_conflicts`), so the counts hold whatever
    ``conflicts`` (the listed pairs) holds."""
    from splitscope.records import AuditRecord

    rows = identity_rows(rows)
    pop = boundary.query
    q = side(rows, pop)
    hit, n_pairs, label_pairs = within_conflicts(rows, boundary)
    assessed = q["label"].notna() & q["pixel_xxh128"].notna() if "pixel_xxh128" in q \
        else q["label"].notna()
    ends = conflicts[["row", "counterpart_row"]].to_numpy(np.int64)
    listed = len(np.unique(np.sort(ends, axis=1), axis=0)) if len(ends) else 0
    details = {"pairs": n_pairs, "label_pairs": label_pairs}
    if n_pairs > listed:
        details["pair_list"] = _pair_list(max_pairs_per_group, listed, n_pairs)
    unread = len(q) and "pixel_xxh128" in q and not assessed.any()
    return AuditRecord(
        id=f"{IDENTITY}.label_conflict_within.{slug}", layer=LAYER, section=IDENTITY,
        title=f"Identical images under two labels within {pop.name}",
        boundary=boundary.to_dict(),
        predicate={"name": LABEL_CONFLICT_WITHIN,
                   "params": {"label_relation": "disjoint",
                              "by": ["sha256", "pixel_xxh128"]}},
        unit="affected row", numerator=None if unread else int(hit.size), denominator=len(q),
        coverage={"assessed": int(assessed.sum()), "total": len(q)},
        status="not assessed" if unread else "completed",
        reason=UNREAD_REASON if unread else None,
        scope=f"rows of {pop.name} whose bytes or decoded pixels equal another {pop.name} "
              "row's under another label",
        conclusion=(f"{hit.size} of {len(q)} rows of {pop.name} are identical to another "
                    f"{pop.name} row under another label ({n_pairs} pair(s)): the same image "
                    "carries two labels inside one split") if hit.size else
        f"no identical images under two labels inside {pop.name}",
        unresolved="which of the two labels is right is not settled by the images",
        outputs=["label_conflicts"],
        details=details)


def within_conflicts(rows: pd.DataFrame, boundary) -> tuple[np.ndarray, int, dict]:
    """Rows of a population identical (equal bytes or equal decoded pixels) to another of its
    rows under another label: ``(rows, pairs, label pairs)``, a pair counted once (lower row
    first) whether its rows share bytes, pixels or both.

    Per digest group, by inclusion and exclusion: the pairs sharing bytes, plus those
    sharing pixels, less those sharing both (rows with both digests, grouped by the two)."""
    q = side(rows, boundary.query)
    keys = [k for k in ("sha256", "pixel_xxh128") if k in q.columns]
    parts = [(digest_conflicts(rows, boundary, k), 1) for k in keys]
    if len(keys) == 2:
        both = q["sha256"].astype("string") + "\0" + q["pixel_xxh128"].astype("string")
        parts.append((DigestConflicts(q.assign(_both=both), None, "_both", True), -1))
    hit = np.unique(np.concatenate([f.affected_query_rows() for f, _ in parts]
                                   or [np.zeros(0, np.int64)]))
    n_pairs = sum(sign * f.pairs for f, sign in parts) // 2
    lines = [f.ordered_label_pairs().assign(n=lambda t, s=sign: t["n"] * s)
             for f, sign in parts]
    return hit, int(n_pairs), _label_pair_counts(pd.concat(lines, ignore_index=True)
                                                  if lines else pd.DataFrame())


def union_record(rel, rows: pd.DataFrame, slug: str):
    """The pixel-identical union (METHODS §2.11): query rows with a byte-identical or a
    decoded-pixel-identical counterpart, beside its two parts."""
    from splitscope.records import AuditRecord

    b = rel.boundary
    n_query = len(side(rows, b.query))
    hit_rows, not_assessed = pixel_identical_union(rel.flags)
    arrays = bool(n_query) and bool(no_bytes(side(rows, b.query)).all())
    parts = {p: int(rel.flags[p].fillna(False).sum()) for p in ("sha256", "pixel_xxh128")
             if p in rel.flags and not (arrays and p == "sha256")}
    details: dict = {"parts": parts}
    if arrays:  # byte identity does not apply: the union is the decoded-pixel part alone
        details["not_applicable"] = {"sha256": "pixel arrays without file bytes"}
        not_assessed = int(rel.flags["pixel_xxh128"].isna().sum()) \
            if "pixel_xxh128" in rel.flags else n_query
    return AuditRecord(
        id=f"{IDENTITY}.pixel_identical_union.{slug}",
        layer=LAYER, section=IDENTITY,
        title="Pixel-identical copies (pixel arrays: equal decoded pixels)" if arrays else
        "Pixel-identical regardless of bytes (byte copies and re-encodes)",
        boundary=b.to_dict(),
        predicate={"name": PIXEL_IDENTICAL_UNION,
                   "params": {"union_of": list(parts)}},
        unit="affected query row",
        numerator=int(hit_rows.size),
        denominator=n_query,
        coverage={"assessed": n_query - not_assessed, "total": n_query},
        scope=f"query rows of {b.query.name} whose decoded pixels occur in {b.reference.name}",
        conclusion=(f"{hit_rows.size} of {n_query} query rows are pixel-identical to a "
                    f"reference row ({', '.join(f'{k}: {v}' for k, v in parts.items())}; a row "
                    "can be in both parts)"),
        status="completed" if not_assessed == 0 else
        ("not assessed" if not_assessed >= n_query else "partial"),
        reason=None if not_assessed == 0 else f"{not_assessed} query row(s) not assessed",
        details=details,
    )
