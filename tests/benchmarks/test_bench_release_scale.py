"""The release-scale benchmark places each stage's memory peak by the audit's own progress
lines: the scan, each layer from its start to its end, the document after the last layer."""

from __future__ import annotations

import pytest
from benchmark_module import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_release_scale")


def _timeline():
    # (seconds, PSS KiB, anonymous KiB): 100 MiB while scanning, then 300, then 200, then 400
    return [(t, (100 if t < 11 else 300 if t < 20 else 200 if t < 27 else 400) << 10,
             (50 if t < 11 else 250 if t < 20 else 150 if t < 27 else 350) << 10)
            for t in range(31)]


LINES = [
    "     0.9 splitscope audit [   0.0 s] scan: reading the release …",
    "    10.5 splitscope audit [  10.4 s] layer 1/8 duplicates: started on 9 rows",
    "    19.5 splitscope audit [  19.4 s] layer 1/8 duplicates: completed, 2 records in 9.0 s",
    "    19.5 splitscope audit [  19.4 s] layer 2/8 provenance: started on 9 rows",
    "    26.5 splitscope audit [  26.4 s] layer 2/8 provenance: completed, 7 records in 7.0 s",
    "    26.5 splitscope audit [  26.4 s] layer 3/8 attribution: started on 9 rows",
    "    26.6 splitscope audit [  26.5 s] layer 3/8 attribution: not applicable, 1 record",
    "    26.6 splitscope audit [  26.5 s] writing audit.json, report.html and the lists …",
]


def test_stages_are_placed_by_the_progress_lines(bench):
    windows = bench.stage_windows(LINES, 30.0)
    assert [w[0] for w in windows] == ["scan and start-up", "duplicates", "provenance",
                                       "attribution", "document"]
    peaks = bench.stage_peaks(_timeline(), windows)
    assert peaks["scan and start-up"] == {"pss_mib": 100.0, "anon_pss_mib": 50.0}  # t ≤ 10.5
    assert peaks["duplicates"] == {"pss_mib": 300.0, "anon_pss_mib": 250.0}
    assert peaks["provenance"] == {"pss_mib": 200.0, "anon_pss_mib": 150.0}  # t = 19.5 … 26.5
    assert peaks["attribution"] is None  # no sample between 26.5 and 26.6 s
    # what the audit holds while it writes its document is its own stage, not the last layer's
    assert peaks["document"] == {"pss_mib": 400.0, "anon_pss_mib": 350.0}


def test_without_layer_lines_the_whole_run_is_one_stage(bench):
    assert bench.stage_windows(LINES[:1], 30.0) == [("scan and start-up", 0.0, 30.0)]
