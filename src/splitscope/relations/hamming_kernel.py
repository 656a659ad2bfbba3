"""Compiled loops of the exhaustive pHash/dHash search (METHODS §2.1).

Per query, one pass over the references keeps four running minima: d_p, d_d, max(d_p, d_d) and
d_p + d_d. Each is held as one integer key, ``distance << 32 | reference position``, so a plain
integer minimum gives the smallest distance and, among equal distances, the lowest position;
there is no argmin and no second pass. The loops are compiled by numba (the popcount becomes a
vector instruction where the CPU has one), release the GIL so query blocks run in threads, and
are checked against a numpy brute force in ``tests/relations/test_hashes.py``.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

SHIFT = 32
POSITION = (1 << SHIFT) - 1
#: Key of a query that met no reference yet: distance 255 (beyond any real one, and
#: ``hashes.NO_REFERENCE``) and position
#: :data:`POSITION`, read back as "no reference". References are therefore fewer than
#: :data:`POSITION`.
UNSET = (255 << SHIFT) | POSITION


def distances(keys: np.ndarray) -> np.ndarray:
    """The distances held by ``keys`` (255 where no reference was met)."""
    return keys >> SHIFT


def positions(keys: np.ndarray) -> np.ndarray:
    """The reference positions held by ``keys`` (-1 where no reference was met)."""
    return np.where(keys != UNSET, keys & POSITION, -1)


@intrinsic
def _popcount(typingctx, x):
    """LLVM's ``ctpop`` on a uint64 (numba has no popcount of its own)."""
    def codegen(context, builder, signature, args):
        fn = builder.module.declare_intrinsic("llvm.ctpop", [ir.IntType(64)])
        return builder.call(fn, args)
    return types.uint64(types.uint64), codegen


def _compiled(fn):
    """``fn`` compiled without the GIL, its machine code cached beside this module (or in the
    user's cache folder); where neither folder can be written, numba refuses to cache and the
    loops are compiled afresh in each process (about a second), the results the same."""
    try:
        return nb.njit(nogil=True, cache=True, boundscheck=False)(fn)
    except RuntimeError:  # "cannot cache function …: no locator available"
        return nb.njit(nogil=True, boundscheck=False)(fn)


@_compiled
def _fold(a, b, vp, vd, base, kp, kd, kj, ks):
    """Fold the references ``vp``/``vd`` (positions ``base`` …) into one query's four keys."""
    for r in range(vp.size):
        dp = np.int64(_popcount(a ^ vp[r]))
        dd = np.int64(_popcount(b ^ vd[r]))
        pos = base + r
        kp = min(kp, (dp << SHIFT) | pos)
        kd = min(kd, (dd << SHIFT) | pos)
        kj = min(kj, (max(dp, dd) << SHIFT) | pos)
        ks = min(ks, ((dp + dd) << SHIFT) | pos)
    return kp, kd, kj, ks


@_compiled
def fold_minima(qp, qd, rp, rd, exclude, keys, block):
    """Fold every reference into ``keys`` (one row of four keys per query).

    References are taken ``block`` at a time (a block stays in the L1 cache while every query
    passes over it); ``exclude[i]`` is a reference position query ``i`` never meets (-1: none).
    Rows of ``keys`` start at :data:`UNSET`.
    """
    for r0 in range(0, rp.size, block):
        bp = rp[r0:r0 + block]
        bd = rd[r0:r0 + block]
        for i in range(qp.size):
            a = qp[i]
            b = qd[i]
            kp, kd, kj, ks = keys[i, 0], keys[i, 1], keys[i, 2], keys[i, 3]
            e = exclude[i] - r0
            if 0 <= e < bp.size:
                kp, kd, kj, ks = _fold(a, b, bp[:e], bd[:e], r0, kp, kd, kj, ks)
                kp, kd, kj, ks = _fold(a, b, bp[e + 1:], bd[e + 1:], r0 + e + 1,
                                       kp, kd, kj, ks)
            else:
                kp, kd, kj, ks = _fold(a, b, bp, bd, r0, kp, kd, kj, ks)
            keys[i, 0], keys[i, 1], keys[i, 2], keys[i, 3] = kp, kd, kj, ks


@_compiled
def near_pairs(a, b, rp, rd, exclude, radius):
    """One query's references with ``max(d_p, d_d) <= radius`` or ``d_p == 0``, in position
    order, except position ``exclude``: (positions, d_p, d_d)."""
    n = 0
    for r in range(rp.size):
        dp = np.int64(_popcount(a ^ rp[r]))
        dd = np.int64(_popcount(b ^ rd[r]))
        n += (max(dp, dd) <= radius) | (dp == 0)
    pos = np.empty(n, np.int64)
    out_p = np.empty(n, np.int16)
    out_d = np.empty(n, np.int16)
    k = 0
    for r in range(rp.size):
        dp = np.int64(_popcount(a ^ rp[r]))
        dd = np.int64(_popcount(b ^ rd[r]))
        if (max(dp, dd) <= radius or dp == 0) and r != exclude:
            pos[k] = r
            out_p[k] = dp
            out_d[k] = dd
            k += 1
    return pos[:k], out_p[:k], out_d[:k]
