"""The release-scale benchmark places each layer's memory peak only where the layers ran one
after another."""

from __future__ import annotations

import pytest
from benchmark_module import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_release_scale")


def _timeline():
    # (seconds, PSS KiB, anonymous KiB): 100 MiB while scanning, then 300, then 200
    return [(t, (100 if t < 10 else 300 if t < 20 else 200) << 10,
             (50 if t < 10 else 250 if t < 20 else 150) << 10) for t in range(31)]


def test_sequential_layers_get_their_own_peaks(bench):
    peaks = bench.stage_peaks(_timeline(), 30.0, 8.0, {"duplicates": 10.0, "provenance": 10.0})
    assert peaks["scan and start-up"] == {"pss_mib": 300.0, "anon_pss_mib": 250.0}  # t ≤ 10
    assert peaks["duplicates"] == {"pss_mib": 300.0, "anon_pss_mib": 250.0}
    assert peaks["provenance"] == {"pss_mib": 200.0, "anon_pss_mib": 150.0}


def test_layers_that_ran_beside_one_another_are_not_placed(bench):
    peaks = bench.stage_peaks(_timeline(), 30.0, 12.0, {"duplicates": 12.0, "provenance": 16.0})
    assert peaks == {"stages": "not separable: layers ran beside one another"}
