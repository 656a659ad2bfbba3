"""Identity layer (METHODS §1) on a hand-built row table with real files."""

from __future__ import annotations

import hashlib

import pandas as pd
import pytest

from splitscope.boundary import boundary
from splitscope.errors import InputError
from splitscope.relations.identity import (
    basename_matches,
    identity_census,
    pixel_identity,
    rate_breakdown,
    within_copies,
)


@pytest.fixture
def rows(tmp_path):
    """Rows: test 0..4, train 5..9. Bytes: X in rows 0 (a.png) and 5 (a.png) → plain copy;
    Y in row 1 (renamed.png, label A) and row 6 (orig.png, label B) → renamed, label-disjoint;
    row 2 shares only its basename with row 7; row 3 unreadable; rows 8, 9 copies inside train;
    row 4 a re-encode of row 9 (same pixels, other bytes)."""
    contents = {"X": b"xxxx", "Y": b"yyyy", "Z1": b"z1", "Z2": b"z2", "W": b"wwww", "R": b"rr"}
    specs = [  # row, split, path, label, source, content, pixel
        (0, "test", "test/A/a.png", "A", "s1", "X", "px"),
        (1, "test", "test/A/renamed.png", "A", "s2", "Y", "py"),
        (2, "test", "test/A/same_name.png", "A", "s1", "Z1", "pz1"),
        (3, "test", "test/B/broken.png", "B", "s2", None, None),
        (4, "test", "test/B/reenc.png", "B", "s1", "R", "pw"),
        (5, "train", "train/A/a.png", "A", "s1", "X", "px"),
        (6, "train", "train/B/orig.png", "B", "s1", "Y", "py"),
        (7, "train", "train/A/same_name.png", "A", "s1", "Z2", "pz2"),
        (8, "train", "train/B/w1.png", "B", "s1", "W", "pw"),
        (9, "train", "train/B/w2.png", "B", "s1", "W", "pw"),
    ]
    out = []
    for row, split, path, label, source, content, pixel in specs:
        f = tmp_path / path
        f.parent.mkdir(parents=True, exist_ok=True)
        if content is not None:
            f.write_bytes(contents[content])
        out.append({"row": row, "corpus": "c", "path": path, "split": split, "label": label,
                    "source": source, "file": str(f), "basename": path.rsplit("/", 1)[1],
                    "sha256": hashlib.sha256(contents[content]).hexdigest() if content else pd.NA,
                    "pixel_xxh128": pixel if pixel else pd.NA})
    table = pd.DataFrame(out)
    for c in ("corpus", "path", "split", "label", "source", "file", "basename", "sha256",
              "pixel_xxh128"):
        table[c] = table[c].astype("string")
    return table


def test_census_groups_renamed_label_relation(rows):
    b = boundary(rows, "test", "train")
    c = identity_census(rows, b)
    assert c.n_query == 5 and c.not_assessed == 1
    assert sorted(c.affected["row"]) == [0, 1] and c.rate == pytest.approx(2 / 5)
    assert len(c.groups) == 2
    rel = dict(zip(c.groups["query_rows"], c.groups["label_relation"]))
    assert rel == {"0": "intersecting", "1": "disjoint"}
    renamed = dict(zip(c.groups["query_rows"], c.groups["renamed"]))
    assert renamed == {"0": False, "1": True}
    assert c.confirmation["groups_checked"] == 2 and c.confirmation["groups_mismatched"] == 0
    aff = c.affected.set_index("row")
    assert aff.loc[1, "renamed"] and aff.loc[1, "label_differs"]
    assert aff.loc[0, "counterpart_row"] == 5


def test_byte_mismatch_is_counted_not_reported(rows, tmp_path):
    bad = rows.copy()
    (tmp_path / "other.png").write_bytes(b"different bytes")
    bad.loc[bad["row"] == 5, "file"] = str(tmp_path / "other.png")  # digest now lies
    c = identity_census(bad, boundary(bad, "test", "train"))
    assert c.confirmation["groups_mismatched"] == 1
    assert sorted(c.affected["row"]) == [1]
    assert (~c.groups["confirmed"].astype(bool)).sum() == 1


def test_breakdown_by_source_and_class(rows):
    b = boundary(rows, "test", "train")
    c = identity_census(rows, b)
    q = rows[rows["split"] == "test"]
    by_source = rate_breakdown(q, c.affected["row"], "source").set_index("source")
    assert by_source.loc["s1", "affected"] == 1 and by_source.loc["s1", "rows"] == 3
    assert by_source.loc["s2", "rate"] == pytest.approx(0.5)
    by_label = rate_breakdown(q, c.affected["row"], "label").set_index("label")
    assert by_label.loc["A", "affected"] == 2 and by_label.loc["B", "affected"] == 0
    with pytest.raises(InputError, match="break down"):
        rate_breakdown(q, [], "nope")


def test_basename_matches_beside_bytes(rows):
    m = basename_matches(rows, boundary(rows, "test", "train")).set_index("row")
    assert m.loc[0, "relation"] == "name and bytes"
    assert m.loc[1, "relation"] == "bytes only"
    assert m.loc[2, "relation"] == "name only"
    assert m.loc[3, "relation"] == "not assessed"
    assert m.loc[4, "relation"] == "neither"


def test_within_copies_and_within_boundary(rows):
    train = boundary(rows, "train", "train")
    copies = within_copies(rows, train.query)
    assert len(copies) == 1 and copies["rows"][0] == "8 9"
    assert copies["label_relation"][0] == "consistent"
    c = identity_census(rows, train)
    assert sorted(c.affected["row"]) == [8, 9]  # a row is never its own counterpart
    assert set(c.affected["counterpart_row"]) == {8, 9}


def test_pixel_identity_with_different_bytes(rows):
    p = pixel_identity(rows, boundary(rows, "test", "train"))
    assert p["row"].tolist() == [4]
    assert p["n_counterparts"][0] == 2 and not p["byte_match"][0]


def test_missing_column_is_an_input_error(rows):
    with pytest.raises(InputError, match="sha256"):
        identity_census(rows.drop(columns="sha256"), boundary(rows, "test", "train"))
