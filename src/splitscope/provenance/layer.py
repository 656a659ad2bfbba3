"""The audit layers of this package (:mod:`splitscope.audit.protocol`): the provenance layer
(METHODS §4: what a file says without its anatomy; the checks are in
:mod:`splitscope.provenance.checks`) and the image-quality layer (§4.6,
:mod:`splitscope.provenance.quality_records`)."""

from __future__ import annotations

from splitscope.provenance.checks import audit_provenance
from splitscope.provenance.predicates import METRICS as PROVENANCE_METRICS
from splitscope.provenance.predicates import QUALITY_METRICS
from splitscope.provenance.predicates import ROLES as PROVENANCE_ROLES
from splitscope.provenance.predicates import SCORECARD as PROVENANCE_SCORECARD
from splitscope.provenance.quality_records import audit_quality
from splitscope.provenance.reading import RULES as PROVENANCE_RULES
from splitscope.provenance.reading import VERDICTS as PROVENANCE_VERDICTS
from splitscope.records import LayerResult

#: rows up to which the provenance layer runs beside the layers before it: the peaks of memory
#: then add up (a generated 100,000-file release: 2.8 GiB PSS in the duplicates layer and 4.5
#: GiB in this one; at 1M files 9.8 and 14.5 GiB), so above it they run one after another
BESIDE_MAX_ROWS = 100_000

__all__ = ["LAYERS", "ProvenanceLayer", "QualityLayer"]


class QualityLayer:
    """Image-quality flags per split × class, and their association with the label
    (METHODS §4.6)."""

    name = "quality"
    order = 35
    metrics = tuple(QUALITY_METRICS.values())  # --fail-on (splitscope.audit.conditions)
    title = "Image quality flags"

    def run(self, context) -> LayerResult:
        return audit_quality(context.scan, context.options.quality)


class ProvenanceLayer:
    """Header-only probe, source–label association and partition classifier on the
    boundaries between two sides; the within-pool probe always (METHODS §4)."""

    name = "provenance"
    order = 30
    metrics = tuple(PROVENANCE_METRICS.values())  # --fail-on (splitscope.audit.conditions)
    rules = PROVENANCE_RULES  # "what this means" (splitscope.audit.meaning)
    verdicts = PROVENANCE_VERDICTS  # verdict lines (splitscope.audit.verdicts)
    scorecard = PROVENANCE_SCORECARD  # score-card details (splitscope.records.scorecard)
    roles = PROVENANCE_ROLES  # its records in the report (splitscope.records.roles)

    def background(self, context) -> bool:
        """Beside the layers before it (its fits run in worker processes) up to
        :data:`BESIDE_MAX_ROWS` rows."""
        return len(context.manifest) <= BESIDE_MAX_ROWS

    def run(self, context) -> LayerResult:
        run = context.options.run
        return audit_provenance(context.scan, context.split_boundaries, seed=run.seed,
                                n_resamples=run.resamples,
                                folds=context.options.provenance.folds)


#: the layers of this package (see :mod:`splitscope.audit.protocol`)
LAYERS = [ProvenanceLayer(), QualityLayer()]
