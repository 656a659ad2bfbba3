"""SSIM on selected pairs (METHODS §2.3).

The same value as scikit-image's ``structural_similarity(a, b, data_range=255)`` with its
defaults (7×7 uniform window, sample covariance, K1 = 0.01, K2 = 0.03, mean over the image
cropped by the half window), computed for many pairs at once on the thumbnail geometry
(8-bit grayscale, S×S): the local means and (co)variances are uniform filters over a stack of
pairs, so no Python loop runs over pairs.

Reference: Wang, Bovik, Sheikh, Simoncelli (2004), "Image quality assessment: from error
visibility to structural similarity", IEEE TIP 13(4):600-612.
"""

from __future__ import annotations

import numpy as np
from scipy.ndimage import uniform_filter

from splitscope.errors import InputError

WIN_SIZE = 7
DATA_RANGE = 255.0
K1, K2 = 0.01, 0.03


def ssim_pairs(a, b, *, chunk: int = 64) -> np.ndarray:
    """SSIM of ``a[i]`` with ``b[i]`` for every i.

    Parameters
    ----------
    a, b : ndarray (n, S, S) uint8
        Grayscale thumbnails, S >= 7.
    chunk : int
        Pairs filtered at once (bounds memory at about ``chunk × S² × 8 × 8`` bytes).

    Returns
    -------
    ndarray (n,) float64

    Examples
    --------
    >>> import numpy as np
    >>> x = np.arange(64, dtype=np.uint8).reshape(1, 8, 8)
    >>> float(ssim_pairs(x, x)[0])
    1.0
    """
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape or a.ndim != 3:
        raise InputError(f"SSIM needs two stacks of equal shape (n, S, S); got {a.shape} "
                         f"and {b.shape}")
    if min(a.shape[1:]) < WIN_SIZE:
        raise InputError(f"SSIM needs images of at least {WIN_SIZE}×{WIN_SIZE}")
    out = np.empty(a.shape[0], np.float64)
    np_ = WIN_SIZE * WIN_SIZE
    cov_norm = np_ / (np_ - 1)
    c1 = (K1 * DATA_RANGE) ** 2
    c2 = (K2 * DATA_RANGE) ** 2
    pad = (WIN_SIZE - 1) // 2
    size = (1, WIN_SIZE, WIN_SIZE)
    for s in range(0, a.shape[0], chunk):
        x = a[s:s + chunk].astype(np.float64)
        y = b[s:s + chunk].astype(np.float64)
        ux = uniform_filter(x, size=size)
        uy = uniform_filter(y, size=size)
        uxx = uniform_filter(x * x, size=size)
        uyy = uniform_filter(y * y, size=size)
        uxy = uniform_filter(x * y, size=size)
        vx = cov_norm * (uxx - ux * ux)
        vy = cov_norm * (uyy - uy * uy)
        vxy = cov_norm * (uxy - ux * uy)
        a1 = 2 * ux * uy + c1
        a2 = 2 * vxy + c2
        b1 = ux ** 2 + uy ** 2 + c1
        b2 = vx + vy + c2
        smap = (a1 * a2) / (b1 * b2)
        out[s:s + chunk] = smap[:, pad:-pad, pad:-pad].mean(axis=(1, 2), dtype=np.float64)
    return out


def ssim_for_pairs(query_thumbs, reference_thumbs, query_index, reference_index,
                   *, chunk: int = 64) -> np.ndarray:
    """SSIM for selected pairs given by positions into two thumbnail stacks."""
    qi = np.asarray(query_index, dtype=np.int64)
    ri = np.asarray(reference_index, dtype=np.int64)
    out = np.empty(qi.size, np.float64)
    for s in range(0, qi.size, chunk):
        out[s:s + chunk] = ssim_pairs(np.asarray(query_thumbs[qi[s:s + chunk]]),
                                      np.asarray(reference_thumbs[ri[s:s + chunk]]), chunk=chunk)
    return out
