"""Transform sensitivity (METHODS §2.7).

A seeded sample of real images is transformed by each listed transform — centre crops (90%,
80%), rotations (2°, 5°, 10°, black fill), JPEG re-encodes (quality 90/70/50) and resize round
trips (longer side 128 and 384 px, back to the original size) — and every predicate is asked
whether the transformed image still matches its original (a reference set of one). The result
is each predicate's pass rate per transform: a description of the tested transforms, not a
recall estimate. Transformed images are featurized exactly like the scan
(:func:`splitscope.features.imaging.image_features`).
"""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
import pandas as pd
from PIL import Image

from splitscope.errors import InputError
from splitscope.features.options import FeatureParams
from splitscope.options import RunOptions
from splitscope.relations.hashes import DEFAULT_RADIUS
from splitscope.relations.ncc import DEFAULT_TAU, pair_rho
from splitscope.relations.options import SearchOptions
from splitscope.relations.predicates import (
    HASH_EXACT_PHASH,
    HASH_JOINT,
    HASH_SCREEN,
    HASH_SUM,
    NCC_NEAREST,
)
from splitscope.relations.ssim import ssim_pairs


def _center_crop(frac: float) -> Callable[[Image.Image], Image.Image]:
    def run(img: Image.Image) -> Image.Image:
        w, h = img.size
        cw, ch = max(1, round(w * frac)), max(1, round(h * frac))
        left, top = (w - cw) // 2, (h - ch) // 2
        return img.crop((left, top, left + cw, top + ch))
    return run


def _rotate(deg: float) -> Callable[[Image.Image], Image.Image]:
    def run(img: Image.Image) -> Image.Image:
        fill = 0 if img.mode in ("L", "I", "F", "1", "P", "I;16") else (0,) * len(img.getbands())
        return img.rotate(deg, resample=Image.Resampling.BICUBIC, expand=False, fillcolor=fill)
    return run


def _jpeg(quality: int) -> Callable[[Image.Image], Image.Image]:
    def run(img: Image.Image) -> Image.Image:
        src = img if img.mode in ("L", "RGB") else img.convert("RGB")
        buf = io.BytesIO()
        src.save(buf, format="JPEG", quality=quality)
        buf.seek(0)
        out = Image.open(buf)
        out.load()
        return out
    return run


def _resize_round_trip(side: int) -> Callable[[Image.Image], Image.Image]:
    def run(img: Image.Image) -> Image.Image:
        w, h = img.size
        scale = side / max(w, h)
        small = img.resize((max(1, round(w * scale)), max(1, round(h * scale))),
                           Image.Resampling.BICUBIC)
        return small.resize((w, h), Image.Resampling.BICUBIC)
    return run


#: The listed transforms, in report order.
TRANSFORMS: dict[str, Callable[[Image.Image], Image.Image]] = {
    "center_crop_90": _center_crop(0.90),
    "center_crop_80": _center_crop(0.80),
    "rotate_2": _rotate(2),
    "rotate_5": _rotate(5),
    "rotate_10": _rotate(10),
    "jpeg_90": _jpeg(90),
    "jpeg_70": _jpeg(70),
    "jpeg_50": _jpeg(50),
    "resize_128": _resize_round_trip(128),
    "resize_384": _resize_round_trip(384),
}
PREDICATES = (HASH_SCREEN, HASH_JOINT, HASH_SUM, HASH_EXACT_PHASH, NCC_NEAREST)


def transform_sensitivity(files, *, n: int = SearchOptions.transforms, seed: int = RunOptions.seed, tau: float = DEFAULT_TAU,
                          radius: int = DEFAULT_RADIUS,
                          thumb_size: int = FeatureParams.thumb_size,
                          interpolation: str = FeatureParams.interpolation, transforms=None
                          ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pass rate of every predicate per transform on a seeded sample of images.

    Parameters
    ----------
    files : sequence of str
        Candidate image files (e.g. the reference side's ``file`` column); sorted and
        de-duplicated before sampling, so the sample depends only on the set and the seed.
    n : int
        Sample size (all files when fewer).
    seed : int
        ``numpy.random.default_rng(seed)`` draws the sample.
    tau, radius, thumb_size, interpolation
        The predicates' parameters (geometry as in the scan).
    transforms : mapping name → callable, optional
        Default :data:`TRANSFORMS`.

    Returns
    -------
    summary : DataFrame
        One row per transform × predicate: ``transform, predicate, passed, assessed,
        pass_rate``; files that cannot be decoded are left out of ``assessed`` and counted in
        ``summary.attrs["skipped"]``.
    pairs : DataFrame
        One row per image × transform: ``file, transform, d_p, d_d, rho, ssim`` and one bool
        column per predicate.
    """
    from splitscope.features.imaging import image_features
    from splitscope.features.sources import open_image

    transforms = dict(transforms or TRANSFORMS)
    pool = sorted({str(f) for f in files if isinstance(f, str)})
    if not pool:
        raise InputError("transform sensitivity needs at least one image file")
    rng = np.random.default_rng(seed)
    take = min(int(n), len(pool))
    sample = [pool[i] for i in np.sort(rng.choice(len(pool), size=take, replace=False))]
    rows = []
    originals, variants = [], []
    skipped: list[dict] = []
    for f in sample:
        try:
            with open_image(f) as img:
                img.load()
                base = image_features(img, thumb_size=thumb_size, interpolation=interpolation)
                outs = {name: image_features(fn(img), thumb_size=thumb_size,
                                             interpolation=interpolation)
                        for name, fn in transforms.items()}
        except Exception as exc:  # noqa: BLE001 - counted, never raised mid-run
            skipped.append({"file": f, "reason": f"{type(exc).__name__}: {exc}"})
            continue
        for name, feats in outs.items():
            d_p = (int(base["phash"]) ^ int(feats["phash"])).bit_count()
            d_d = (int(base["dhash"]) ^ int(feats["dhash"])).bit_count()
            rows.append({"file": f, "transform": name, "d_p": d_p, "d_d": d_d})
            originals.append(base["thumb"])
            variants.append(feats["thumb"])
    pairs = pd.DataFrame(rows, columns=["file", "transform", "d_p", "d_d"])
    if len(pairs):
        a, b = np.stack(originals), np.stack(variants)
        idx = np.arange(len(pairs))
        pairs["rho"] = pair_rho(a, b, idx, idx)
        pairs["ssim"] = ssim_pairs(a, b)
    else:
        pairs["rho"] = pd.Series(dtype=np.float32)
        pairs["ssim"] = pd.Series(dtype=float)
    dp, dd = pairs["d_p"].to_numpy(), pairs["d_d"].to_numpy()
    pairs[HASH_SCREEN] = (dp <= radius) & (dd <= radius)  # one reference: screen = joint
    pairs[HASH_JOINT] = (dp <= radius) & (dd <= radius)
    pairs[HASH_SUM] = dp + dd <= radius
    pairs[HASH_EXACT_PHASH] = dp == 0
    pairs[NCC_NEAREST] = np.nan_to_num(pairs["rho"].to_numpy(np.float64), nan=-1) >= tau
    summary = []
    for name in transforms:
        part = pairs[pairs["transform"] == name]
        for pred in PREDICATES:
            passed = int(part[pred].sum())
            summary.append({"transform": name, "predicate": pred, "passed": passed,
                            "assessed": len(part),
                            "pass_rate": passed / len(part) if len(part) else np.nan})
    out = pd.DataFrame(summary)
    out.attrs["skipped"] = skipped
    out.attrs["sample"] = {"n": take, "seed": seed, "pool": len(pool)}
    return out, pairs
