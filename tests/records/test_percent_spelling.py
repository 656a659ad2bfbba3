"""One spelling of a share in every table a verb prints: records.format.percent (three
significant digits, so a nonzero count never reads 0.0%)."""

from __future__ import annotations

import pytest

from splitscope.cli_common import fmt
from splitscope.records.croissant import _rate
from splitscope.records.format import percent
from splitscope.relations.commands import _fmt_rate


@pytest.mark.parametrize("share", [1 / 3875, 0.138, 11 / 80, 0.5, 1.0, 0.0, 2 / 394])
def test_the_verbs_tables_spell_a_share_as_percent(share):
    assert fmt(share, pct=True) == percent(share) == _fmt_rate(share)


def test_a_nonzero_count_never_reads_zero():
    assert fmt(1 / 3875, pct=True) == "0.0258%"
    assert fmt(0.0, pct=True) == "0%"
    assert fmt(None, pct=True) == _fmt_rate(None) == "—"
    assert fmt(0.12345) == "0.123"  # plain values keep their digits
    assert _rate({"numerator": 1, "denominator": 3875, "unit": "row"}) == \
        "1 of 3875 rows (0.0258%)"
