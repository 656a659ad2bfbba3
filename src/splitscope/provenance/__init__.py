"""Provenance layer (METHODS §4): what a file says without its anatomy.

- :mod:`splitscope.provenance.header_probe` — header-only probe (§4.2): within pool and cross split,
  balanced accuracy with bootstrap intervals, permutation importances per header field.
- :mod:`splitscope.provenance.association` — source × label table, Cramér's V, dominant source
  per class (§4.3).
- :mod:`splitscope.provenance.partition` — partition classifier on thumbnail content or supplied
  embeddings, out-of-fold AUC with shuffled-partition and internal-split controls, proxy
  A-distance (§4.4).
- :mod:`splitscope.provenance.image_stats_probe` — the header probe's protocol on intensity
  statistics of the decoded image (§4.5).
- :mod:`splitscope.provenance.quality` — image-quality flags per row, rates per split × class,
  each flag's association with the label (§4.6); ``quality_flags(scan)`` is the per-row table.
- :mod:`splitscope.provenance.stats` — vectorized percentile-bootstrap intervals (balanced
  accuracy, AUC).
- :mod:`splitscope.provenance.layer` — ``audit_provenance(scan, boundaries, ...)``,
  ``audit_quality(scan)`` and the audit's provenance and quality layers, returning
  :class:`splitscope.records.LayerResult` objects.

Submodules are imported on use, so that the command line stays quick to start.
"""
