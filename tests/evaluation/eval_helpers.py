"""Small synthetic truth lists and prediction files made in code (shared by the tests)."""

from __future__ import annotations

import numpy as np
import pandas as pd

CLASSES = ["Alpha", "Beta", "Gamma Ray"]


def make_truth(n: int = 60, seed: int = 0) -> pd.DataFrame:
    """A one-hot truth workbook table: image_path (backslashes), Dataset, class columns."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % len(CLASSES)
    rng.shuffle(y)
    src = np.where(np.arange(n) % 3 == 0, "S1", "S2")
    table = pd.DataFrame({"image_path": [f"val\\{CLASSES[c]}\\{s}\\img{i:03d}.jpg"
                                         for i, (c, s) in enumerate(zip(y, src))],
                          "Dataset": src})
    for k, c in enumerate(CLASSES):
        table[c] = (y == k).astype(int)
    return table


def make_predictions(truth: pd.DataFrame, quality: float = 0.5, seed: int = 1) -> pd.DataFrame:
    """Probabilities whose argmax is right more often as ``quality`` grows."""
    rng = np.random.default_rng(seed)
    y = truth[CLASSES].to_numpy().argmax(axis=1)
    s = rng.random((len(truth), len(CLASSES)))
    s[np.arange(len(truth)), y] += quality
    p = s / s.sum(axis=1, keepdims=True)
    out = pd.DataFrame({"image_path": truth["image_path"], "Dataset": truth["Dataset"]})
    for k, c in enumerate(CLASSES):
        out[c] = p[:, k]
    return out
