"""Source–label association against scipy's Cramér's V and hand counts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats.contingency import association

from splitscope.errors import InputError
from splitscope.provenance.association import cramers_v, source_label_association


def test_table_v_and_dominant_source():
    rows = pd.DataFrame({
        "source": ["A"] * 6 + ["B"] * 4 + [None],
        "label": ["x", "x", "x", "x", "y", "y", "y", "y", "y", "x", "x"],
    })
    a = source_label_association(rows)
    assert a.table.loc["A", "x"] == 4 and a.table.loc["B", "y"] == 3
    assert a.n == 10 and a.rows_missing == 1
    assert a.cramers_v == pytest.approx(association(a.table.to_numpy(), method="cramer"))
    d = a.dominant.set_index("label")
    assert d.loc["x", "dominant_source"] == "A" and d.loc["x", "dominant_share"] == pytest.approx(0.8)
    assert d.loc["y", "dominant_source"] == "B" and d.loc["y", "dominant_share"] == pytest.approx(0.6)


def test_perfect_and_no_association():
    assert cramers_v(np.array([[10, 0], [0, 7]]))[0] == pytest.approx(1.0)
    assert cramers_v(np.array([[10, 10], [5, 5]]))[0] == pytest.approx(0.0)
    assert np.isnan(cramers_v(np.array([[3, 4]]))[0])


def test_missing_column():
    with pytest.raises(InputError, match="source"):
        source_label_association(pd.DataFrame({"label": ["a"]}))


def test_the_association_does_not_depend_on_row_order():
    """A census over a table sorted by name (sources and labels), with ties in the dominant
    source broken by that order, not by the rows' order."""
    rng = np.random.default_rng(3)
    rows = pd.DataFrame({"source": rng.choice(["S1", "S2", "S3"], 200),
                         "label": rng.choice(["a", "b", "c", "d"], 200)})
    rows.loc[:9, ["source", "label"]] = [["S1", "tie"]] * 5 + [["S2", "tie"]] * 5
    a = source_label_association(rows)
    b = source_label_association(rows.iloc[rng.permutation(len(rows))])
    assert a.to_dict() == b.to_dict()
    assert a.dominant.set_index("label").loc["tie", "dominant_source"] == "S1"
