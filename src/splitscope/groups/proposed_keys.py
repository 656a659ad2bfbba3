"""Proposed group keys (METHODS §3.6): with no group key given, which identifier in the names
(or in the DICOM headers) could be one.

Every candidate of :data:`CANDIDATES` is tried once over the rows, in this order (which also
breaks ties):

- ``DICOM PatientID``: the digest of each file's PatientID that the features stage keeps
  (``dicom_PatientID_digest``, :data:`splitscope.features.header.DICOM_PATIENT_DIGEST`), where
  the table has it;
- ``file name``: a ``person``, ``patient``, ``subject``/``sub`` or ``case`` token followed by
  a number (``person12_virus_3.jpeg``, ``patient-0045_ap.png``, ``sub-07_t1.png``,
  ``case_0012.png``), then a leading number of three digits or more followed by ``_`` or ``-``
  (``0045_2.png``);
- ``folder``: the same tokens in a folder name (``train/patient0045/1.png``), then a folder
  named by a number of three digits or more (``train/0045/1.png``).

A name candidate is a regular expression with a named group ``group``, searched in the basename
(file name) or the path (folder) exactly as ``--group-regex`` is: the same translation to RE2
(:func:`splitscope.manifest.patterns.re2_syntax`), run vectorised by
``pyarrow.compute.extract_regex``, so that confirming the key with ``--group-regex`` finds the
same groups.

**Plausibility** (:func:`plausibility`): a candidate is plausible when it covers at least
:data:`MIN_COVERAGE` of the rows, at least :data:`MIN_REPEATED_SHARE` of the rows it covers
share their key with another row (not a number per file), its median group holds at most
:data:`MAX_MEDIAN_SHARE` of the covered rows and its largest group at most
:data:`MAX_LARGEST_SHARE` (not a few large groups: a class, a site or a batch). The proposal is
the plausible candidate that covers the most rows; there is none when no candidate is
plausible. Nothing here measures an overlap: the group layer measures it under the proposed
key with :func:`splitscope.groups.overlap.group_overlap`, and reports it as ``proposed``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from splitscope.records.format import percent

__all__ = [
    "CANDIDATES",
    "MAX_LARGEST_SHARE",
    "MAX_MEDIAN_SHARE",
    "MIN_COVERAGE",
    "MIN_REPEATED_SHARE",
    "Candidate",
    "ProposedKey",
    "candidate_keys",
    "confirm_hint",
    "key_given",
    "plausibility",
    "propose_group_key",
    "with_patient_digests",
]

#: share of the rows a candidate must cover
MIN_COVERAGE = 0.5
#: share of the covered rows that must share their key with another row
MIN_REPEATED_SHARE = 0.1
#: the median group may hold at most this share of the covered rows
MAX_MEDIAN_SHARE = 0.05
#: the largest group may hold at most this share of the covered rows
MAX_LARGEST_SHARE = 0.2

#: the features-table column holding the DICOM PatientID digest
PATIENT_DIGEST = "dicom_PatientID_digest"

FILE_NAME, FOLDER, DICOM = "file name", "folder", "DICOM PatientID"


@dataclass(frozen=True)
class Candidate:
    """One way a group key may be written: ``pattern`` (a regex with a named group ``group``)
    searched in the column ``on``; an identifier ``token`` (alternatives, e.g.
    ``(?:subject|sub)``) followed by an optional ``_``/``-`` and the number, then ``tail``;
    or, with neither, the column's value itself."""

    name: str  # what it is, e.g. "person number"
    source: str  # FILE_NAME, FOLDER or DICOM
    on: str  # basename, path or the PatientID digest column
    pattern: str | None = None
    token: str | None = None
    starts_word: bool = False  # the token must start a word (a short token may end another)
    tail: str = ""

    @property
    def search(self) -> str | None:
        """The regex searched: a token's text and separator are captured as ``token`` and
        ``sep``, so that the regex reported is the narrowest that finds the same key in every
        name (the token's text, case included, and the separator, where every match has the
        same)."""
        return _token_regex(self, capture=True) if self.token else self.pattern


def _token_regex(c: Candidate, token: str | None = None, sep: str | None = None, *,
                 capture: bool = False) -> str:
    """A token candidate's regex; with ``token`` (``sep``) the token (separator) as that
    literal text, case included, instead of any case (any of ``_``, ``-`` or none)."""
    tok = re.escape(token) if token is not None else c.token
    gap = sep if sep is not None else "[_-]?"  # "", "_" or "-": literal outside a class
    if capture:
        tok, gap = f"(?P<token>{tok})", f"(?P<sep>{gap})"
    start = "" if not c.starts_word else "(?:^|[^A-Za-z])" if token is not None \
        else "(?:^|[^a-z])"
    return rf"{'(?i)' if token is None else ''}{start}{tok}{gap}(?P<group>\d+){c.tail}"


#: identifier tokens: name, the token, and whether it must start a word (a short token could
#: end another word: "showcase3")
_TOKENS = (("person number", "person", False), ("patient number", "patient", False),
           ("subject number", "(?:subject|sub)", True), ("case number", "case", True))

#: every candidate, in the order tried (ties go to the earlier one)
CANDIDATES: tuple[Candidate, ...] = (
    Candidate("PatientID", DICOM, PATIENT_DIGEST),
    *(Candidate(name, FILE_NAME, "basename", token=token, starts_word=starts)
      for name, token, starts in _TOKENS),
    Candidate("leading number", FILE_NAME, "basename", r"^(?P<group>\d{3,})[_-]"),
    *(Candidate(f"{name} in a folder", FOLDER, "path", token=token, starts_word=starts,
                tail="[^/]*/")
      for name, token, starts in _TOKENS),
    Candidate("numbered folder", FOLDER, "path", r"(?:^|/)(?P<group>\d{3,})/"),
)


@dataclass
class ProposedKey:
    """The proposal: its candidate, the regex that gives it (the narrowest that finds the
    same key in every name; ``None`` for a header field), each row's key (``<NA>`` where it
    gives none, index of the table searched), its :func:`plausibility` and what every
    candidate tried gave."""

    candidate: Candidate
    regex: str | None
    keys: pd.Series
    summary: dict[str, Any]
    tried: list[dict[str, Any]] = field(default_factory=list)

    @property
    def confirm(self) -> str:
        """How to give the key so that it is measured (:func:`confirm_hint`)."""
        return confirm_hint(self.candidate, self.regex)


def key_given(manifest: pd.DataFrame) -> bool:
    """Whether the release or the user gave a group key: a row with a group, a group regex or
    mapping applied (``attrs["group_key"]``), or a list's group column (even an empty one)."""
    if manifest.attrs.get("group_key"):
        return True
    if "group" in manifest.columns and manifest["group"].notna().any():
        return True
    return any((i.get("columns") or {}).get("group")
               for i in manifest.attrs.get("inputs") or [] if isinstance(i, dict))


def confirm_hint(candidate: Candidate, regex: str | None) -> str:
    """How a user gives the candidate as a group key (then it is measured, not proposed)."""
    if candidate.source == FILE_NAME:
        return f"--group-regex {shlex.quote(regex or '')}"
    if candidate.source == FOLDER:
        return (f"a group column in a list file (--group-column), or in Python "
                f"apply_group_regex(manifest, {regex!r}, on='path'); --group-regex reads "
                "the file name only")
    return "a group column holding each file's PatientID in a list file (--group-column)"


def _arrow_strings(values: pd.Series):
    """``values`` as a pyarrow string array (a name that is not valid UTF-8 is read with its
    undecodable bytes replaced)."""
    import pyarrow as pa

    try:
        return pa.array(values.astype("string"), type=pa.string(), from_pandas=True)
    except (UnicodeEncodeError, pa.ArrowInvalid):
        fixed = [v.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
                 if isinstance(v, str) else None for v in values.to_numpy(dtype=object)]
        return pa.array(fixed, type=pa.string())


def _field(found, name: str):
    import pyarrow.compute as pc

    return pc.struct_field(found, [found.type.get_field_index(name)])


def _only(values) -> str | None:
    """The one text every matched name has in a captured group (None: several)."""
    import pyarrow.compute as pc

    distinct = pc.unique(values.drop_null())
    return distinct[0].as_py() if len(distinct) == 1 else None


def _extract(table: pd.DataFrame, c: Candidate,
             arrays: dict[str, Any]) -> tuple[pd.Series, str | None]:
    """Each row's key under ``c`` and the regex that gives it: one vectorised pass over the
    column, searched as ``--group-regex`` searches (the same RE2 translation)."""
    import pyarrow.compute as pc

    from splitscope.manifest.patterns import re2_syntax

    none = pd.Series(pd.NA, index=table.index, dtype="string")
    if c.search is None:
        keys = table[c.on].astype("string").str.strip()
        return keys.mask(keys == ""), None
    if c.on not in arrays:
        arrays[c.on] = _arrow_strings(table[c.on])
    found = pc.extract_regex(arrays[c.on], re2_syntax(c.search))
    group = _field(found, "group")
    if group.null_count == len(group):
        return none, c.pattern or _token_regex(c)
    keys = pd.Series(pd.array(group.to_numpy(zero_copy_only=False), dtype="string"),
                     index=table.index)
    if not c.token:
        return keys, c.pattern
    # the narrowest regex with the same first match in every name: the token and the
    # separator as the one text every match has, where they have one
    return keys, _token_regex(c, _only(_field(found, "token")), _only(_field(found, "sep")))


def candidate_keys(table: pd.DataFrame, candidate: Candidate) -> pd.Series:
    """Each row's key under ``candidate`` (``string``, ``<NA>`` where it gives none).

    Examples
    --------
    >>> import pandas as pd
    >>> m = pd.DataFrame({"basename": ["person12_virus_1.jpeg", "IM-0001.jpeg"]})
    >>> candidate_keys(m, CANDIDATES[1]).tolist()
    ['12', <NA>]
    """
    if candidate.on not in table.columns:
        return pd.Series(pd.NA, index=table.index, dtype="string")
    return _extract(table, candidate, {})[0]


def plausibility(keys: pd.Series) -> dict[str, Any]:
    """Whether ``keys`` (one per row, ``<NA>`` where none) look like a group key, by the
    module's rule, with the numbers it reads and why not."""
    n = len(keys)
    sizes = keys.dropna().value_counts().to_numpy(dtype=np.int64)
    covered = int(sizes.sum())
    out: dict[str, Any] = {
        "rows": n, "rows_covered": covered, "coverage": covered / n if n else 0.0,
        "groups": int(sizes.size),
        "median_rows_per_group": float(np.median(sizes)) if sizes.size else None,
        "largest_group_rows": int(sizes.max()) if sizes.size else None,
        "repeated_share": float(sizes[sizes >= 2].sum() / covered) if covered else 0.0,
    }
    why = []
    if not covered:
        why.append("matches no row")
    else:
        if out["coverage"] < MIN_COVERAGE:
            why.append(f"covers {covered} of {n} rows, under {percent(MIN_COVERAGE)}")
        if out["repeated_share"] < MIN_REPEATED_SHARE:
            why.append(f"{percent(out['repeated_share'])} of the covered rows share their key "
                       f"with another row, under {percent(MIN_REPEATED_SHARE)}: a number per "
                       "file")
        if out["median_rows_per_group"] > MAX_MEDIAN_SHARE * covered:
            why.append(f"median group of {out['median_rows_per_group']:g} rows, over "
                       f"{percent(MAX_MEDIAN_SHARE)} of the {covered} covered rows: a few "
                       "large groups")
        if out["largest_group_rows"] > MAX_LARGEST_SHARE * covered:
            why.append(f"largest group of {out['largest_group_rows']} rows, over "
                       f"{percent(MAX_LARGEST_SHARE)} of the {covered} covered rows")
    out["plausible"] = not why
    out["why_not"] = "; ".join(why) or None
    return out


def propose_group_key(table: pd.DataFrame,
                      candidates: tuple[Candidate, ...] = CANDIDATES) -> ProposedKey | None:
    """The plausible candidate that covers the most rows of ``table`` (ties: the earlier
    candidate), or ``None`` when no candidate is plausible.

    Parameters
    ----------
    table : DataFrame
        Manifest rows with ``basename`` and ``path`` (and ``dicom_PatientID_digest`` where
        the features have it, :func:`with_patient_digests`); a caller that was given a group
        key (:func:`key_given`) does not ask.
    candidates : tuple of Candidate
        Tried once each, in order; default :data:`CANDIDATES`.

    Returns
    -------
    ProposedKey or None
        ``tried`` lists every candidate whose column the table has, with its
        :func:`plausibility`.
    """
    arrays: dict[str, Any] = {}
    best: ProposedKey | None = None
    tried = []
    for c in candidates:
        if c.on not in table.columns:
            continue
        keys, regex = _extract(table, c, arrays)
        summary = plausibility(keys)
        tried.append({"candidate": c.name, "source": c.source, "on": c.on, "regex": regex,
                      **summary})
        if summary["plausible"] and (best is None or summary["rows_covered"]
                                     > best.summary["rows_covered"]):
            best = ProposedKey(c, regex, keys, summary)
    if best is not None:
        best.tried = tried
    return best


def with_patient_digests(manifest: pd.DataFrame, scan) -> pd.DataFrame:
    """``manifest`` with each row's DICOM PatientID digest (``dicom_PatientID_digest``) where
    the ``scan``'s features hold one; ``manifest`` itself when none does."""
    features = getattr(scan, "features", None)
    if features is None or PATIENT_DIGEST not in features.columns \
            or not features[PATIENT_DIGEST].notna().any() or "file" not in manifest.columns:
        return manifest
    by_file = features.dropna(subset=[PATIENT_DIGEST]).drop_duplicates("file") \
        .set_index("file")[PATIENT_DIGEST]
    out = manifest.copy()
    out.attrs = dict(manifest.attrs)
    out[PATIENT_DIGEST] = manifest["file"].map(by_file).astype("string")
    return out
