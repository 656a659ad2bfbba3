"""The run's ``workers`` as a bound on the BLAS/OpenMP pools (:mod:`splitscope.threads`)."""

from __future__ import annotations

import numpy as np  # noqa: F401 - loads the BLAS pool the checks read
import pytest
from threadpoolctl import threadpool_info

from splitscope.errors import InputError
from splitscope.threads import blas_threads, blas_within_workers, check_workers


def _pool_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info()]


def test_check_workers_takes_none_or_a_positive_count():
    assert check_workers(None) is None
    assert check_workers(3) == 3 and check_workers("2") == 2
    with pytest.raises(InputError, match="at least 1"):
        check_workers(0)


def test_blas_threads_bounds_every_pool_inside_and_restores_them_after():
    before = _pool_threads()
    with blas_threads(1):
        assert set(_pool_threads()) == {1}
    assert _pool_threads() == before
    with blas_threads(None):
        assert _pool_threads() == before


def test_a_function_bounded_by_its_workers_argument():
    @blas_within_workers
    def pools(data, *, workers=None):
        return _pool_threads()

    before = _pool_threads()
    assert set(pools(0, workers=1)) == {1}
    assert pools(0) == before  # no workers given: the pools as they are
    assert pools.__name__ == "pools"
    assert _pool_threads() == before
