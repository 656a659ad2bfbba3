"""Group layer (METHODS §3): patients, videos and lesions shared across a boundary.

- :mod:`splitscope.groups.overlap` — group overlap with its traceability coverage, frame-index
  gaps, the group-resampling sensitivity of the census rate (§3.2–3.3);
- :mod:`splitscope.groups.recovery` — identity recovery from an upstream corpus (§3.4);
- :mod:`splitscope.groups.resplit` — stratified group-disjoint re-splits and folds (§3.5);
- :mod:`splitscope.groups.proposed_keys` — with no group key given, a key proposed from the
  names or the DICOM PatientID (§3.6);
- :mod:`splitscope.groups.layer` — ``audit_groups(manifest, boundaries, ...)`` and the audit's
  group layer.

Submodules are imported on use, so that the command line stays quick to start.
"""
