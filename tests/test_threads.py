"""The run's ``workers`` as a bound on the BLAS/OpenMP pools (:mod:`splitscope.threads`)."""

from __future__ import annotations

import numpy as np  # noqa: F401 - loads the BLAS pool the checks read
import pytest
from threadpoolctl import threadpool_info

from splitscope.errors import InputError
from splitscope.threads import blas_threads, blas_within_workers, check_workers


def _pool_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info()]


@pytest.fixture(autouse=True)
def _pools_loaded():
    """The pools that :func:`blas_threads` loads, loaded before a test reads ``before``."""
    with blas_threads(1):
        pass


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


def test_pools_the_layers_load_later_are_bounded_too():
    """A fresh interpreter with only numpy loaded: scipy's OpenBLAS and scikit-learn's OpenMP,
    which layers load during a run, are inside the bound as well."""
    import ast
    import subprocess
    import sys

    code = ("import numpy\nfrom threadpoolctl import threadpool_info\n"
            "from splitscope.threads import blas_threads\n"
            "with blas_threads(1):\n"
            "    print(sorted({(p['internal_api'], p['num_threads']) for p in threadpool_info()}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    pools = ast.literal_eval(out)
    assert ("openmp", 1) in pools and ("openblas", 1) in pools
    assert all(n == 1 for _, n in pools)
