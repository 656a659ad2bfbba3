"""Planted releases for the image-quality and image-statistics tests: smooth grey images with
noise (like a radiograph's texture), and copies darkened, blurred, resized, padded or stored as
colour."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter, ImageOps

SIDE = 128


def base_image(rng: np.random.Generator, side: int = SIDE, height: int | None = None
               ) -> Image.Image:
    """A mode-L image (side × side, or side × height): a few Gaussian blobs on a mid-grey
    field, plus noise of sd 8."""
    height = side if height is None else height
    yy, xx = np.mgrid[0:height, 0:side]
    img = np.full((height, side), 110.0)
    for _ in range(6):
        cx, cy = rng.uniform(0, side), rng.uniform(0, height)
        r, a = rng.uniform(8, 30), rng.uniform(-60, 80)
        img += a * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r * r))
    img += rng.normal(0, 8, img.shape)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), mode="L")


def darkened(img: Image.Image) -> Image.Image:
    return Image.fromarray((np.asarray(img) * 0.2).astype(np.uint8), mode="L")


def blurred(img: Image.Image) -> Image.Image:
    return img.filter(ImageFilter.GaussianBlur(4))


def odd_size(img: Image.Image) -> Image.Image:
    return img.resize((40, 40), Image.Resampling.BICUBIC)


def odd_aspect(img: Image.Image) -> Image.Image:
    """A 160 × 100 image of the same kind (about the release's area, aspect 1.6), made at that
    size so that no resampling smooths it."""
    return base_image(np.random.default_rng(img.getpixel((0, 0))), 160, 100)


def bordered(img: Image.Image) -> Image.Image:
    """Padded with black on every side, then brought back to the release's size."""
    return ImageOps.expand(img, border=20, fill=0).resize((SIDE, SIDE), Image.Resampling.NEAREST)


def grey_as_rgb(img: Image.Image) -> Image.Image:
    return img.convert("RGB")


PLANTED = {"dark": darkened, "blurry": blurred, "odd_size": odd_size, "odd_aspect": odd_aspect,
           "large_border": bordered, "grey_as_colour": grey_as_rgb}


def planted_release(root: Path, n: int = 12, seed: int = 0) -> dict[str, str]:
    """train/test × A/B with ``n`` clean mode-L PNGs per cell, one genuinely coloured clean
    image, and one planted copy per flag in test/A; returns {relative path: planted flag or
    "clean"}."""
    rng = np.random.default_rng(seed)
    kinds: dict[str, str] = {}
    for split in ("train", "test"):
        for lab in ("A", "B"):
            d = Path(root) / split / lab
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                base_image(rng).save(d / f"{lab}{i}.png")
                kinds[f"{split}/{lab}/{lab}{i}.png"] = "clean"
    colour = np.stack([np.asarray(base_image(rng))] * 3, axis=-1).astype(np.int16)
    colour[..., 0] = np.clip(colour[..., 0] + 40, 0, 255)
    Image.fromarray(colour.astype(np.uint8), mode="RGB").save(Path(root) / "train/B/colour.png")
    kinds["train/B/colour.png"] = "clean"
    for flag, make in PLANTED.items():
        make(base_image(rng)).save(Path(root) / f"test/A/planted_{flag}.png")
        kinds[f"test/A/planted_{flag}.png"] = flag
    return kinds


def class_release(root: Path, n: int = 40, dark_class: str | None = None, seed: int = 0,
                  factor: float = 0.6) -> None:
    """train/test × A/B, ``n`` images per cell; with ``dark_class``, that class's images are
    multiplied by ``factor`` (systematically darker, same content otherwise)."""
    rng = np.random.default_rng(seed)
    for split in ("train", "test"):
        for lab in ("A", "B"):
            d = Path(root) / split / lab
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                img = base_image(rng)
                if lab == dark_class:
                    img = Image.fromarray((np.asarray(img) * factor).astype(np.uint8), mode="L")
                img.save(d / f"{lab}_{i}.png")
