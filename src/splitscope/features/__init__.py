"""The feature layer: one pass per unique file (bytes read once, decoded at most once) into a
cached feature table and a memory-mapped thumbnail array.

- :func:`scan` / :func:`load_scan` / :class:`Scan` — manifest + features through the workspace
  cache (:mod:`splitscope.features.scanning`, :mod:`splitscope.features.workspace`);
- :class:`FeatureParams` — the feature geometry and read caps
  (:mod:`splitscope.features.options`); :func:`extract_files` — per-file extraction
  (:mod:`splitscope.features.extract`);
- :func:`image_features`, :func:`to_gray8`, :func:`phash64`, :func:`dhash64`,
  :func:`thumbnail` — pixel features of one image (:mod:`splitscope.features.imaging`);
- :func:`header_fields` — header features without decoding pixels
  (:mod:`splitscope.features.header`);
- :func:`image_stats` — intensity statistics of one decoded image
  (:mod:`splitscope.features.stats`);
- :mod:`splitscope.features.sources` — the bytes or pixels of an image embedded in a table or
  an array archive (the manifest's ``<container>::<member>/<index>`` keys);
- executors (:mod:`splitscope.features.executor`) — where the per-file stage runs; on a Dask
  cluster with :class:`DaskExecutor` (:mod:`splitscope.features.dask_executor`, the
  ``[distributed]`` extra).

Every name is imported on first use, so a worker process that only extracts features never
loads pandas.
"""

from __future__ import annotations

from splitscope.lazy import lazy_names

_EXPORTS = {
    "scan": "splitscope.features.scanning",
    "load_scan": "splitscope.features.scanning",
    "Scan": "splitscope.features.scanning",
    "FeatureParams": "splitscope.features.options",
    "extract_files": "splitscope.features.extract",
    "image_features": "splitscope.features.imaging",
    "to_gray8": "splitscope.features.imaging",
    "phash64": "splitscope.features.imaging",
    "dhash64": "splitscope.features.imaging",
    "thumbnail": "splitscope.features.imaging",
    "header_fields": "splitscope.features.header",
    "image_stats": "splitscope.features.stats",
    "Executor": "splitscope.features.executors",
    "SerialExecutor": "splitscope.features.executor",
    "ProcessExecutor": "splitscope.features.executor",
    "DaskExecutor": "splitscope.features.dask_executor",
}

__all__ = [  # noqa: RUF022 - grouped by module, like _EXPORTS
    "scan", "load_scan", "Scan", "FeatureParams", "extract_files", "image_features",
    "to_gray8", "phash64", "dhash64", "thumbnail", "header_fields", "image_stats", "Executor",
    "SerialExecutor", "ProcessExecutor", "DaskExecutor",
]


__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
