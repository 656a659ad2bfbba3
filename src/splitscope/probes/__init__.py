"""Provenance layer (METHODS §4) and the audit entry points of the group and provenance layers.

- :mod:`splitscope.probes.header_probe` — header-only probe (§4.2): within pool and cross split,
  balanced accuracy with bootstrap intervals, permutation importances per header field.
- :mod:`splitscope.probes.association` — source × label table, Cramér's V, dominant source
  per class (§4.3).
- :mod:`splitscope.probes.partition` — partition classifier on thumbnail content or supplied
  embeddings, out-of-fold AUC with shuffled-partition and internal-split controls, proxy
  A-distance (§4.4).
- :mod:`splitscope.probes.stats` — vectorized percentile-bootstrap intervals (balanced
  accuracy, AUC).
- :mod:`splitscope.probes.audit` — ``audit_groups(manifest, boundaries, ...)`` (group layer,
  §3, from :mod:`splitscope.relations.groups`, ``recovery`` and ``resplit``) and
  ``audit_provenance(scan, boundaries, ...)``, each returning a
  :class:`splitscope.records.LayerResult`.

Submodules are imported on use, so that the command line stays quick to start.
"""
