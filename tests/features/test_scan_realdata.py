"""Real data: the Kermany chest X-ray release (official split, 5,840 rows) and the CV2024 index
(a list whose image files are absent)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splitscope.features.scanning import load_scan, scan

pytestmark = [pytest.mark.realdata, pytest.mark.slow]

KERMANY_REGEX = r"person(?P<group>\d+)_"


@pytest.fixture(scope="session")
def kermany_scan(shared_data, tmp_path_factory):
    """The Kermany scan, run once per session (all cores), then rerun once on the same
    workspace; returns ``(first, second, root)``."""
    root = shared_data / "kermany-chest-xray-224"
    if not root.is_dir():
        pytest.skip("kermany-chest-xray-224 not present")
    ws = tmp_path_factory.mktemp("kermany-ws")
    first = scan(root, ws, group_regex=KERMANY_REGEX, progress=False)
    second = scan(root, ws, group_regex=KERMANY_REGEX, progress=False)
    return first, second, root


def test_kermany_rows_splits_and_classes(kermany_scan):
    first, _, _ = kermany_scan
    summary = first.summary()
    assert summary["rows"] == 5840 and summary["unique_files"] == 5840
    assert summary["counts"] == {
        "test": {"NORMAL": 234, "PNEUMONIA": 390},
        "train": {"NORMAL": 1341, "PNEUMONIA": 3875},
    }
    assert set(first.manifest["split_released"]) == {"train", "test"}
    assert summary["failures"]["files"]["total"] == 0
    assert summary["features_ok"] == 5840
    assert first.thumbnails.shape == (5840, 96, 96)
    assert isinstance(first.thumbnails, np.memmap)
    assert first.features["file"].is_monotonic_increasing


def test_kermany_patient_ids_where_names_carry_them(kermany_scan):
    first, _, _ = kermany_scan
    m = first.manifest
    carries = m["basename"].str.contains(r"person\d+_", regex=True).to_numpy(dtype=bool)
    assert carries.sum() > 3000  # the pneumonia files are named personN_...
    assert np.array_equal(m["group"].notna().to_numpy(dtype=bool), carries)
    sample = m[carries].iloc[0]
    assert sample["basename"].startswith(f"person{sample['group']}_")
    assert first.summary()["groups"]["rows_with_group"] == int(carries.sum())


def test_kermany_second_run_reads_nothing(kermany_scan):
    first, second, _ = kermany_scan
    assert first.meta["extracted"] == 5840 and first.meta["reused"] == 0
    assert second.meta["extracted"] == 0 and second.meta["reused"] == 5840
    pd.testing.assert_frame_equal(first.features, second.features)
    assert np.array_equal(first.thumbnails, second.thumbnails)
    reopened = load_scan(second.workspace)
    pd.testing.assert_frame_equal(reopened.features, second.features)


def test_kermany_thumbnails_match_the_single_image_rule(kermany_scan):
    from PIL import Image

    from splitscope.features.imaging import image_features

    first, _, _ = kermany_scan
    rows = np.random.default_rng(0).choice(len(first.manifest), 5, replace=False)
    for row in rows:
        with Image.open(first.manifest.loc[row, "file"]) as img:
            expect = image_features(img, thumb_size=96)
        assert np.array_equal(first.thumbs([row])[0], expect["thumb"])
        feats = first.rows().loc[row]
        assert int(feats["phash"]) == expect["phash"] and int(feats["dhash"]) == expect["dhash"]


def test_cv2024_index_without_images_lists_every_file_missing(shared_data, tmp_path):
    index = shared_data / "cv2024" / "capsule_vision_2024_train_val_index.csv"
    if not index.is_file():
        pytest.skip("cv2024 index not present")
    s = scan(index, tmp_path / "ws", progress=False)
    summary = s.summary()
    assert summary["rows"] == 53739
    assert summary["features_ok"] == 0
    assert summary["failures"]["rows"]["by_reason"] == {"missing": 53739}
    assert summary["failures"]["files"]["by_reason"] == {"missing": summary["unique_files"]}
    assert s.thumbnails.shape[0] == 0
