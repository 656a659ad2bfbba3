"""Backbone embeddings per released path (METHODS §2.4), in the format
:func:`splitscope.features.embeddings.load_embeddings` and ``duplicates --embeddings`` read:
a Parquet table with ``path`` and numeric columns ``e0 … e{d-1}``, one line per path.

The same loader and frozen-feature cache as training: an embedding is the backbone's pooled
feature vector of the S×S grey input, computed once per (backbone, weights, size, scan).
``--weights`` takes any local state dict, a run's ``selected.pt`` included (a fine-tuned
backbone's embeddings).

By default each dimension is standardised on the training rows (minus their mean, over their
SD): pooled ReLU features all lie in the positive orthant, where the cosine of any two images
is near 1 and a cosine threshold flags every row; after centring the cosine compares what
differs between images. ``standardize=False`` writes the raw features.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.experiments.backbones import require_torch, resolve_backbone
from splitscope.experiments.protocol import Protocol


def embed_release(release, out: str | Path, *, backbone: str = "small-cnn", weights=None,
                  init_seed: int = 0, image_size: int = 64, workspace=None,
                  device: str = "auto", group_regex: str | None = None,
                  workers: int | None = None, progress: bool | None = None,
                  standardize: bool = True) -> dict:
    """Write ``out`` (Parquet) and return what was written, the cache used, the
    standardisation and the rows without an embedding (no decoded image), counted."""
    from splitscope.experiments.retraining import feature_cache, pick_device, torch_threads
    from splitscope.experiments.training import classifier
    from splitscope.features.scanning import scan

    spec = resolve_backbone(backbone, weights, init_seed)
    torch = require_torch()
    device = pick_device(device)
    protocol = Protocol(image_size=image_size)
    s = scan(release, workspace, thumb_size=image_size, workers=workers, progress=progress,
             group_regex=group_regex)
    model, _ = classifier(spec, 2, 0)
    with torch_threads(torch, workers):  # the run's workers, as in training
        feats, cache = feature_cache(model, s, spec, protocol, device)
    rows = s.rows().drop_duplicates("path")
    ok = rows["thumb_index"].to_numpy() >= 0
    vec = np.asarray(feats)[rows["thumb_index"].to_numpy()[ok]].astype(np.float64)
    scaling = "none: raw pooled features"
    if standardize and len(vec):
        train = (rows["split"].astype("string") == "train").fillna(False).to_numpy(bool)[ok]
        ref = vec[train] if train.sum() >= 2 else vec
        vec = (vec - ref.mean(axis=0)) / (ref.std(axis=0) + 1e-6)
        scaling = (f"per dimension, minus the mean over the SD of "
                   f"{'the training rows' if train.sum() >= 2 else 'every row'} "
                   f"({len(ref)}), + 1e-6")
    vec = vec.astype(np.float32)
    table = pd.DataFrame(vec, columns=[f"e{i}" for i in range(vec.shape[1])])
    table.insert(0, "path", rows["path"].to_numpy()[ok])
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.to_parquet(out, index=False)
    return {"out": str(out), "paths": int(ok.sum()), "dimension": int(vec.shape[1]),
            "no_decoded_image": rows.loc[~ok, "path"].tolist(), "cache": cache,
            "backbone": spec.to_dict(), "image_size": image_size, "device": device,
            "standardised": scaling}
