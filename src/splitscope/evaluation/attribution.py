"""Attribution outside anatomy on supplied maps (METHODS §5.10).

A model that leans on a shortcut (a burned-in marker, a scanner border, a ruler) puts attribution
mass where the anatomy is not. For every row with a supplied attribution map ``a`` (Grad-CAM,
SHAP or any per-pixel attribution, computed by the user; no model is loaded here) and a
body/organ mask ``m`` (1 inside the anatomy), the **outside-mask share** is::

    share = Σ |a| · (1 − m) / Σ |a|

and the shares of exposed rows (leaked or flagged) are compared with those of clean rows:
difference of means exposed − clean with a percentile bootstrap interval over cases (or a
cluster bootstrap over groups), using the resample-count matrices of
:mod:`splitscope.evaluation.uncertainty`.

Rules chosen here (METHODS is silent on them):

- **Mask shape.** A mask whose shape differs from its map's is resized to the map's shape by
  nearest neighbour with pixel-centre alignment: target pixel ``i`` of ``H`` takes source pixel
  ``min(floor((i + 0.5) · h / H), h − 1)`` of ``h`` (the same per column). Integer upscaling
  repeats every mask pixel; downscaling by an integer factor ``k`` keeps the pixel at offset
  ``k // 2`` of each block. Masks must hold only 0/1 (or booleans).
- **Not assessed.** A row whose map or mask is missing, whose map holds a non-finite value,
  or whose total absolute attribution mass is zero gets a NaN share; it is listed and counted
  as not assessed, never dropped silently and never read as a share of 0.
- **Map files.** See :func:`load_maps`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.evaluation.predicates import ATTRIBUTION_LAYER, ATTRIBUTION_OUTSIDE
from splitscope.evaluation.uncertainty import (
    DEFAULT_BOOT,
    bootstrap_weights,
    cluster_weights,
    percentile_interval,
)
from splitscope.options import RunOptions
from splitscope.records import AuditRecord, Uncertainty
from splitscope.records.paths import input_name
from splitscope.threads import blas_within_workers

REASON_MAP_MISSING = "map missing"
REASON_MASK_MISSING = "mask missing"
REASON_NON_FINITE = "non-finite attribution"
REASON_ZERO_MASS = "zero attribution mass"


# --------------------------------------------------------------------------------------------
# loading


@dataclass
class MapSet:
    """Per-row 2-D arrays aligned to a list of row paths.

    ``arrays[i]`` is the array of ``paths[i]`` or ``None`` when the source holds none;
    ``missing`` lists those paths (in row order, once per row), ``unused`` the source entries
    that matched no row.
    """

    paths: list[str]
    arrays: list
    source: str
    missing: list[str] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.arrays)

    def stack(self) -> np.ndarray:
        """``(n, H, W)`` float array (NaN rows for missing entries); needs one shape."""
        shapes = {a.shape for a in self.arrays if a is not None}
        if len(shapes) > 1:
            raise InputError(f"{self.source}: arrays of {len(shapes)} shapes "
                             f"({', '.join(map(str, sorted(shapes)))}); they cannot be stacked")
        if not shapes:
            raise InputError(f"{self.source}: no array matches any row")
        shape = shapes.pop()
        out = np.full((len(self.arrays), *shape), np.nan)
        for i, a in enumerate(self.arrays):
            if a is not None:
                out[i] = a
        return out


def _row_paths(manifest_or_paths) -> list[str]:
    if isinstance(manifest_or_paths, pd.DataFrame):
        if "path" not in manifest_or_paths.columns:
            raise InputError(f"the manifest has no `path` column; found: "
                             f"{', '.join(map(str, manifest_or_paths.columns))}")
        values = manifest_or_paths["path"]
    else:
        values = pd.Series(list(manifest_or_paths), dtype="object")
    s = pd.Series(values, dtype="object").astype("string")
    if s.isna().any():
        raise InputError(f"{int(s.isna().sum())} row paths are missing; every row needs a path")
    return s.str.replace("\\", "/", regex=False).tolist()


def _as_2d(arr, name: str, where: str) -> np.ndarray:
    a = np.asarray(arr)
    if a.ndim == 3 and 1 in (a.shape[0], a.shape[-1]):
        a = a.reshape(a.shape[1:] if a.shape[0] == 1 else a.shape[:-1])
    if a.ndim != 2:
        raise InputError(f"{where}: entry {name!r} has shape {a.shape}; each map or mask must be "
                         f"2-D (H, W) — reduce channels first (e.g. sum or mean over them)")
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise InputError(f"{where}: entry {name!r} has dtype {a.dtype}; need numbers or booleans")
    return a


def _npz_entries(path: Path) -> dict[str, object]:
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable .npz file ({exc})") from exc
    if not hasattr(data, "files"):
        raise InputError(f"{path}: a single array, not an .npz archive keyed by released path")
    entries: dict[str, object] = {}
    for key in data.files:
        norm = key.replace("\\", "/")
        if norm in entries:
            raise InputError(f"{path}: keys {key!r} and another key both name the released "
                             f"path {norm!r} (backslashes read as slashes); keep one")
        entries[norm] = (data, key)
    return entries


def _folder_candidates(root: Path, rel: str) -> list[Path]:
    """``ROOT/<path>.npy`` and ``ROOT/<path with its extension replaced by .npy>``."""
    first = root / f"{rel}.npy"
    stem = Path(rel)
    second = root / stem.with_suffix(".npy") if stem.suffix and stem.suffix != ".npy" else None
    return [first] + ([second] if second is not None and second != first else [])


def load_maps(source, manifest_or_paths) -> MapSet:
    """Per-row maps (or masks) from an ``.npz`` archive or a folder of ``.npy`` files.

    Parameters
    ----------
    source : path
        - an ``.npz`` archive whose keys are the released paths (backslashes read as slashes),
          e.g. ``np.savez("maps.npz", **{"test/cat/img1.png": a})``; or
        - a folder holding, for the released path ``P``, the file ``FOLDER/P.npy`` (the
          released extension kept, ``.npy`` appended: ``test/cat/img1.png.npy``) or
          ``FOLDER/P`` with its extension replaced by ``.npy`` (``test/cat/img1.npy``). Both
          present for one path is an error (which one is meant is ambiguous).
    manifest_or_paths : DataFrame or sequence of str
        A manifest (its ``path`` column, in row order) or the row paths themselves. A path that
        appears on several rows gets the same array on each.

    Returns
    -------
    MapSet
        Arrays in row order (``None`` where missing), the missing paths and the unused entries.

    Raises
    ------
    InputError
        The source does not exist or is not readable, two entries name one path, or an entry is
        not a 2-D numeric array (a ``(1, H, W)`` or ``(H, W, 1)`` array is taken as ``(H, W)``).
    """
    paths = _row_paths(manifest_or_paths)
    src = Path(source)
    if not src.exists():
        raise InputError(f"map source not found: {src}")
    wanted = list(dict.fromkeys(paths))
    found: dict[str, np.ndarray] = {}
    unused: list[str] = []
    if src.is_dir():
        for rel in wanted:
            hits = [c for c in _folder_candidates(src, rel) if c.is_file()]
            if len(hits) > 1:
                raise InputError(f"{src}: both {hits[0].name} and {hits[1].name} exist for "
                                 f"{rel!r}; keep one")
            if hits:
                try:
                    arr = np.load(hits[0], allow_pickle=False)
                except (OSError, ValueError) as exc:
                    raise InputError(f"{hits[0]}: not a readable .npy file ({exc})") from exc
                found[rel] = _as_2d(arr, rel, str(src))
    elif src.suffix.lower() == ".npz":
        entries = _npz_entries(src)
        want = set(wanted)
        for rel in wanted:
            if rel in entries:
                data, key = entries[rel]
                found[rel] = _as_2d(data[key], rel, str(src))
        unused = sorted(k for k in entries if k not in want)
    else:
        raise InputError(f"map source {src} is neither a folder of .npy files nor an .npz "
                         f"archive")
    arrays = [found.get(p) for p in paths]
    missing = [p for p, a in zip(paths, arrays) if a is None]
    return MapSet(paths=paths, arrays=arrays, source=str(src), missing=missing, unused=unused)


# --------------------------------------------------------------------------------------------
# shares


def _rows(x, name: str) -> list:
    if isinstance(x, MapSet):
        return list(x.arrays)
    if isinstance(x, np.ndarray):
        if x.ndim != 3:
            raise InputError(f"{name} must be (n, H, W); got shape {x.shape}")
        return list(x)
    return [None if a is None else np.asarray(a) for a in x]


def resize_nearest(masks: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour resize of a ``(n, h, w)`` stack to ``(n, *shape)`` with pixel-centre
    alignment (see module docstring)."""
    h, w = masks.shape[-2:]
    rr = np.minimum(((np.arange(shape[0]) + 0.5) * h / shape[0]).astype(np.int64), h - 1)
    cc = np.minimum(((np.arange(shape[1]) + 0.5) * w / shape[1]).astype(np.int64), w - 1)
    return masks[:, rr[:, None], cc[None, :]]


def _stack_shares(a: np.ndarray, m: np.ndarray, rows) -> tuple[np.ndarray, np.ndarray]:
    """Shares and reason codes (0 ok, 1 non-finite, 2 zero mass) of one stack of maps
    ``(k, H, W)`` and masks ``(k, h, w)``."""
    if m.dtype != bool:
        bad_cells = ~np.isin(m, (0, 1))
        if bad_cells.any():
            bad = np.unique(m[bad_cells])[:5]
            rows_bad = np.asarray(rows)[bad_cells.any(axis=(1, 2))][:5].tolist()
            raise InputError(f"masks must hold only 0/1 or booleans; found values such as "
                             f"{', '.join(map(str, bad))} (rows {rows_bad} …)")
        m = m.astype(bool)
    if m.shape[1:] != a.shape[1:]:
        m = resize_nearest(m, a.shape[1:])
    a = np.abs(a.astype(np.float64))
    total = a.sum(axis=(1, 2))
    outside = np.where(m, 0.0, a).sum(axis=(1, 2))
    finite = np.isfinite(total)
    ok = finite & (total > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(ok, outside / np.where(ok, total, 1.0), np.nan)
    return share, np.where(ok, 0, np.where(finite, 2, 1))


_REASON_CODES = np.array([None, REASON_NON_FINITE, REASON_ZERO_MASS], dtype=object)


def outside_share_and_reasons(maps, masks) -> tuple[np.ndarray, list]:
    """:func:`outside_mask_share` plus, per row, why it is not assessed (``None`` if it is).

    Stacked ``(n, H, W)`` inputs are computed in one batch; per-row lists (a :class:`MapSet`,
    maps of several shapes) are batched by (map shape, mask shape).
    """
    if isinstance(maps, np.ndarray) and isinstance(masks, np.ndarray):
        if maps.ndim != 3 or masks.ndim != 3:
            raise InputError(f"maps and masks must be (n, H, W); got shapes {maps.shape} and "
                             f"{masks.shape}")
        if maps.shape[0] != masks.shape[0]:
            raise InputError(f"{maps.shape[0]} maps but {masks.shape[0]} masks; need one mask "
                             f"per map")
        if not np.issubdtype(maps.dtype, np.number):
            raise InputError(f"maps have dtype {maps.dtype}; need numbers")
        share, code = _stack_shares(maps, masks, np.arange(maps.shape[0]))
        return share, _REASON_CODES[code].tolist()
    mp, mk = _rows(maps, "maps"), _rows(masks, "masks")
    if len(mp) != len(mk):
        raise InputError(f"{len(mp)} maps but {len(mk)} masks; need one mask per map")
    n = len(mp)
    share = np.full(n, np.nan)
    reasons = np.full(n, None, dtype=object)
    by_shape: dict[tuple, list[int]] = {}
    for i, (a, m) in enumerate(zip(mp, mk)):
        if a is None:
            reasons[i] = REASON_MAP_MISSING
        elif m is None:
            reasons[i] = REASON_MASK_MISSING
        else:
            mp[i], mk[i] = _as_2d(a, f"row {i}", "maps"), _as_2d(m, f"row {i}", "masks")
            by_shape.setdefault((mp[i].shape, mk[i].shape), []).append(i)
    for idx in by_shape.values():
        s, code = _stack_shares(np.stack([mp[i] for i in idx]), np.stack([mk[i] for i in idx]),
                                idx)
        share[idx] = s
        reasons[idx] = _REASON_CODES[code]
    return share, reasons.tolist()


def outside_mask_share(maps, masks) -> np.ndarray:
    """Per row, the share of absolute attribution mass outside the body/organ mask.

    ``share = Σ |a| · (1 − m) / Σ |a|`` over the pixels of the row's map ``a`` and mask ``m``.

    Parameters
    ----------
    maps : array (n, H, W), MapSet or sequence of 2-D arrays (``None`` for a missing map)
        Attribution maps of any sign (the absolute value is taken).
    masks : array (n, h, w), MapSet or sequence of 2-D arrays (``None`` for a missing mask)
        Body/organ masks, boolean or 0/1, 1 inside the anatomy. A mask of a different shape
        than its map is resized to the map's shape by nearest neighbour (pixel-centre
        alignment; see the module docstring).

    Returns
    -------
    ndarray (n,)
        Shares in [0, 1]; NaN (not assessed) where a map or mask is missing, the map holds a
        non-finite value, or the attribution mass is zero.

    Examples
    --------
    >>> outside_mask_share(np.array([[[1.0, -3.0], [0.0, 4.0]]]),
    ...                    np.array([[[1, 0], [1, 1]]])).tolist()
    [0.375]
    """
    return outside_share_and_reasons(maps, masks)[0]


# --------------------------------------------------------------------------------------------
# contrast


def _summary(v: np.ndarray) -> dict:
    return {"assessed": int(v.size), "mean": float(v.mean()) if v.size else float("nan"),
            "median": float(np.median(v)) if v.size else float("nan")}


def attribution_contrast(share, exposed, *, groups=None, n_boot: int = DEFAULT_BOOT,
                         seed: int = RunOptions.seed, level: float = 0.95) -> dict:
    """Outside-mask share of exposed versus clean rows, with a bootstrap interval.

    Parameters
    ----------
    share : array (n,)
        Per-row shares (:func:`outside_mask_share`); NaN rows are not assessed and are left out
        of means, medians and resamples (and counted).
    exposed : array (n,) of bool
        True for exposed rows (e.g. leaked or flagged), False for clean rows.
    groups : array (n,), optional
        Group (patient, video) of every row; when given, a percentile cluster bootstrap over the
        groups of the assessed rows instead of over cases.
    n_boot, seed, level
        Resamples (0: no interval), generator seed, interval level.

    Returns
    -------
    dict
        ``rows``, ``assessed``, ``not_assessed``, ``exposed`` and ``clean`` (``rows``,
        ``assessed``, ``mean``, ``median``), ``difference`` (mean exposed − mean clean),
        ``median_difference`` (point estimate only), ``interval`` (``low``, ``high``, ``level``,
        ``kind``, ``n_boot``, ``seed``, ``undefined_resamples``: resamples missing one side) and
        ``reason`` (why the difference is undefined, else ``None``).
    """
    s = np.asarray(share, dtype=np.float64)
    e = np.asarray(exposed)
    if s.ndim != 1 or e.shape != s.shape:
        raise InputError(f"share and exposed must be 1-D of one length; got {s.shape} and "
                         f"{e.shape}")
    if e.dtype != bool:
        if not np.isin(e, (0, 1)).all():
            raise InputError("exposed must be booleans (or 0/1)")
        e = e.astype(bool)
    if n_boot < 0:
        raise InputError(f"n_boot must be ≥ 0; got {n_boot}")
    ok = np.isfinite(s)
    se, sc = s[ok & e], s[ok & ~e]
    out: dict = {"rows": int(s.size), "assessed": int(ok.sum()),
                 "not_assessed": int((~ok).sum()),
                 "exposed": {"rows": int(e.sum()), **_summary(se)},
                 "clean": {"rows": int((~e).sum()), **_summary(sc)}}
    out["difference"] = out["exposed"]["mean"] - out["clean"]["mean"]
    out["median_difference"] = out["exposed"]["median"] - out["clean"]["median"]
    reason = None
    if se.size == 0 or sc.size == 0:
        reason = (f"no assessed {'exposed' if se.size == 0 else 'clean'} row "
                  f"({se.size} exposed, {sc.size} clean rows assessed)")
    out["reason"] = reason
    g = None
    if groups is not None:
        g = np.asarray(groups, dtype=object)
        if g.shape != s.shape:
            raise InputError(f"groups has {g.size} entries for {s.size} rows")
        missing = pd.isna(pd.Series(g[ok], dtype="object"))
        if missing.any():
            raise InputError(f"{int(missing.sum())} assessed rows have no group; a cluster "
                             f"bootstrap needs a group for every row (drop --group-* for a "
                             f"bootstrap over cases)")
        out["groups"] = int(np.unique(g[ok].astype(str)).size)
    kind = (f"percentile cluster bootstrap over groups, {n_boot} resamples, seed {seed}"
            if g is not None else
            f"percentile bootstrap over cases, {n_boot} resamples, seed {seed}")
    iv = {"low": float("nan"), "high": float("nan"), "level": level, "kind": kind,
          "n_boot": int(n_boot), "seed": int(seed), "undefined_resamples": None}
    if reason is None and n_boot:
        v, ev = s[ok], e[ok].astype(np.float64)
        gen = (cluster_weights(g[ok], n_boot, seed) if g is not None
               else bootstrap_weights(v.size, n_boot, seed))
        reps = []
        for w in gen:
            w = w.astype(np.float64)
            n_e, n_c = w @ ev, w @ (1.0 - ev)
            s_e, s_c = w @ (v * ev), w @ (v * (1.0 - ev))
            with np.errstate(invalid="ignore", divide="ignore"):
                reps.append(np.where((n_e > 0) & (n_c > 0), s_e / n_e - s_c / n_c, np.nan))
        r = np.concatenate(reps)
        iv["low"], iv["high"] = percentile_interval(r, level)
        iv["undefined_resamples"] = int((~np.isfinite(r)).sum())
    out["interval"] = iv
    return out


# --------------------------------------------------------------------------------------------
# record


def attribution_record(
    contrast: dict,
    *,
    exposed_name: str = "flagged",
    not_assessed: list | None = None,
    scope: str | None = None,
    inputs: list | None = None,
    params: dict | None = None,
    record_id: str = "evaluation.attribution_outside_mask",
) -> AuditRecord:
    """The audit record of an attribution contrast (:func:`attribution_contrast`).

    Parameters
    ----------
    contrast : dict
        The result of :func:`attribution_contrast`.
    exposed_name : str
        What the exposed rows are (``flagged``, ``leaked``, a predicate's name).
    not_assessed : list, optional
        ``[{"row", "path", "reason"}, ...]`` of the rows without a share, kept in the details.
    scope, inputs, params
        Selection scope in words, input fingerprints, and extra predicate parameters.

    Returns
    -------
    AuditRecord
        Layer ``attribution`` (not ``evaluation``: the contrast is not a headline score and
        fills no score-card detail), unit ``row``; estimate = mean share exposed − mean share clean;
        denominator = assessed rows (coverage gives assessed of total); status ``partial`` when
        some rows were not assessed, ``not assessed`` when one side has no assessed row.
    """
    c = contrast
    iv = c["interval"]
    d = c["difference"]
    defined = c["reason"] is None and np.isfinite(d)
    unc = None
    if defined and np.isfinite(iv["low"]):
        unc = Uncertainty(kind=iv["kind"], level=iv["level"], low=iv["low"], high=iv["high"],
                          detail={"undefined_resamples": iv["undefined_resamples"]})
    if not defined:
        status, reason = "not assessed", c["reason"] or "difference undefined"
    elif c["not_assessed"]:
        status = "partial"
        reason = (f"{c['not_assessed']} of {c['rows']} rows not assessed (missing map or mask, "
                  f"non-finite or zero attribution mass)")
    else:
        status, reason = "completed", None
    conclusion = None
    if defined:
        ex, cl = c["exposed"], c["clean"]
        where = ("more" if d > 0 else "less") if d != 0 else "as much"
        conclusion = (f"{exposed_name} rows put {ex['mean']:.3f} of their absolute attribution "
                      f"mass outside the mask on average ({ex['assessed']} rows), clean rows "
                      f"{cl['mean']:.3f} ({cl['assessed']} rows): difference {d:+.3f}")
        if unc is not None:
            excl = unc.low > 0 or unc.high < 0
            conclusion += (f", {int(iv['level'] * 100)}% interval [{unc.low:+.3f}, "
                           f"{unc.high:+.3f}]; "
                           + (f"{exposed_name} rows put {where} attribution outside anatomy"
                              if excl else "the interval covers 0: no difference shown"))
    return AuditRecord(
        id=record_id, layer=ATTRIBUTION_LAYER,
        title=f"Attribution outside anatomy: {exposed_name} versus clean rows",
        boundary={"name": f"{exposed_name} versus clean rows",
                  "query": {"name": exposed_name, "rows": c["exposed"]["rows"]},
                  "reference": {"name": "clean", "rows": c["clean"]["rows"]}},
        predicate={"name": ATTRIBUTION_OUTSIDE, "params": {
            "share": "sum(|a| * (1 - mask)) / sum(|a|) per row",
            "contrast": "mean share exposed - mean share clean",
            "mask_resize": "nearest neighbour to the map's shape, pixel-centre alignment",
            "not_assessed": "missing map or mask, non-finite values, zero attribution mass",
            **(params or {})}},
        unit="row", denominator=c["assessed"],
        coverage={"assessed": c["assessed"], "total": c["rows"],
                  "not_assessed": c["not_assessed"]},
        estimate=float(d) if defined else None, uncertainty=unc,
        scope=scope or f"{c['rows']} rows with supplied attribution maps",
        conclusion=conclusion,
        unresolved="whether the attribution method is faithful to the model, and whether the "
                   "mask covers all anatomy that is clinically relevant",
        status=status, reason=reason, inputs=list(inputs or []),
        details={"exposed": c["exposed"], "clean": c["clean"],
                 "median_difference": c["median_difference"], "interval": iv,
                 **({"groups": c["groups"]} if "groups" in c else {}),
                 "not_assessed_rows": list(not_assessed or [])})


__all__ = [
    "MapSet",
    "attribution_contrast",
    "attribution_record",
    "load_maps",
    "outside_mask_share",
    "outside_share_and_reasons",
    "resize_nearest",
]


@blas_within_workers
def audit_attribution(
    manifest: pd.DataFrame,
    maps_src,
    masks_src,
    exposed_rows,
    *,
    rows="*",
    group_column: str | None = None,
    exposed_name: str = "flagged",
    n_boot: int = DEFAULT_BOOT,
    seed: int = RunOptions.seed,
    inputs: list | None = None,
    params: dict | None = None,
    workers: int | None = None,
) -> tuple:
    """Attribution outside anatomy for the manifest rows selected by ``rows``: exposed rows
    (``exposed_rows``, manifest row ids) versus the other selected rows.

    Parameters
    ----------
    manifest : DataFrame
        The manifest (``row``, ``path``, and ``group_column`` when given).
    maps_src, masks_src
        Attribution maps and body/organ masks (see :func:`load_maps`).
    exposed_rows : array-like of int
        Manifest row ids of the exposed rows (leaked, flagged).
    rows : str or array-like of int
        The compared rows: a selector (:func:`splitscope.boundary.select`, e.g. ``test``) or
        manifest row ids.
    group_column : str, optional
        Manifest column of groups: cluster bootstrap over its values.
    exposed_name, n_boot, seed, inputs, params
        As in :func:`attribution_contrast` and :func:`attribution_record`.
    workers : int, optional
        BLAS/OpenMP threads at most for the bootstrap's matrix products (the run's
        ``workers``; default: the pools as they are).

    Returns
    -------
    (LayerResult, dict)
        The record and the per-row table ``attribution_rows`` (``row, path, exposed,
        outside_share, not_assessed_reason``), and a summary: the contrast, missing and
        unused map/mask counts, rows not assessed by reason.
    """
    from splitscope.boundary import select
    from splitscope.records import LayerResult

    if group_column and group_column not in manifest.columns:
        raise InputError(f"group column {group_column!r} not in the manifest; found: "
                         f"{', '.join(map(str, manifest.columns))}")
    if isinstance(rows, str):
        chosen, scope = select(manifest, rows).rows, f"selected by {rows!r}"
    else:
        chosen, scope = np.asarray(rows, dtype=np.int64), "given by row id"
    sub = manifest[manifest["row"].isin(chosen)].reset_index(drop=True)
    if sub.empty:
        raise InputError(f"rows {scope}: no manifest row")
    exposed = sub["row"].isin(np.asarray(exposed_rows, dtype=np.int64)).to_numpy()
    maps = load_maps(maps_src, sub)
    masks = load_maps(masks_src, sub)
    share, reasons = outside_share_and_reasons(maps, masks)
    groups = None
    if group_column:
        groups = sub[group_column].astype("string").to_numpy(dtype=object, na_value=None)
    contrast = attribution_contrast(share, exposed, groups=groups, n_boot=n_boot, seed=seed)
    table = pd.DataFrame({"row": sub["row"].to_numpy(), "path": sub["path"].to_numpy(),
                          "exposed": exposed, "outside_share": share,
                          "not_assessed_reason": pd.array(reasons, dtype="string")})
    skipped = table[table["not_assessed_reason"].notna()]
    rec = attribution_record(
        contrast, exposed_name=exposed_name,
        not_assessed=skipped[["row", "path", "not_assessed_reason"]]
        .rename(columns={"not_assessed_reason": "reason"}).to_dict(orient="records"),
        scope=f"{len(sub)} manifest rows {scope}", inputs=inputs,
        params={"rows": rows if isinstance(rows, str) else f"{len(chosen)} row ids",
                "group_column": group_column, "maps": input_name(maps_src),
                "masks": input_name(masks_src), **(params or {})})
    summary = {"contrast": contrast,
               "maps_missing": len(maps.missing), "masks_missing": len(masks.missing),
               "maps_unused": len(maps.unused), "masks_unused": len(masks.unused),
               "not_assessed_by_reason": {str(k): int(v) for k, v in
                                          skipped["not_assessed_reason"].value_counts()
                                          .sort_index().items()}}
    return LayerResult([rec], {"attribution_rows": table}), summary
