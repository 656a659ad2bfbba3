"""The audit layers of this package (:mod:`splitscope.core.protocol`): the provenance layer
(METHODS §4: what a file says without its anatomy; the checks are in
:mod:`splitscope.provenance.checks`) and the image-quality layer (§4.6,
:mod:`splitscope.provenance.quality_records`)."""

from __future__ import annotations

from splitscope.provenance.checks import audit_provenance
from splitscope.provenance.options import ProvenanceOptions, QualityParams
from splitscope.provenance.predicates import METRICS as PROVENANCE_METRICS
from splitscope.provenance.predicates import QUALITY_METRICS
from splitscope.provenance.predicates import ROLES as PROVENANCE_ROLES
from splitscope.provenance.predicates import SCORECARD as PROVENANCE_SCORECARD
from splitscope.provenance.quality_records import audit_quality
from splitscope.provenance.reading import FINDINGS as PROVENANCE_FINDINGS
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
    options = QualityParams  # its thresholds (context.options.quality)
    metrics = tuple(QUALITY_METRICS.values())  # --fail-on (splitscope.core.conditions)
    title = "Image quality flags"

    def run(self, context) -> LayerResult:
        return audit_quality(context.scan, context.options.quality,
                             workers=context.options.run.workers)

    def issue_columns(self, ids, tables, rows):
        """``quality_<flag>`` and ``quality_<flag>_score`` for every image-quality flag
        (dark, light, low contrast, blurry, …; METHODS §4.6) of its ``quality`` table."""
        import pandas as pd

        from splitscope.provenance.quality import FLAGS

        quality = tables.get("quality")
        if quality is None or not len(quality):
            return None
        q = quality.drop_duplicates("row").set_index("row").reindex(ids)
        out = pd.DataFrame(index=ids)
        for f in FLAGS:
            if f.name in q:
                out[f"quality_{f.name}"] = q[f.name].astype("boolean")
                out[f"quality_{f.name}_score"] = q[f"{f.name}_score"].to_numpy()
        return out


class ProvenanceLayer:
    """Header-only probe, source–label association and partition classifier on the
    boundaries between two sides; the within-pool probe always (METHODS §4)."""

    name = "provenance"
    order = 30
    options = ProvenanceOptions  # --folds (context.options.provenance)
    metrics = tuple(PROVENANCE_METRICS.values())  # --fail-on (splitscope.core.conditions)
    rules = PROVENANCE_RULES  # "what this means" (splitscope.core.meaning)
    verdicts = PROVENANCE_VERDICTS  # verdict lines (splitscope.core.verdicts)
    findings = PROVENANCE_FINDINGS  # ranked with every layer's (splitscope.core.verdicts)
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
                                folds=context.options.provenance.folds, workers=run.workers)


#: the layers of this package (see :mod:`splitscope.core.protocol`)
LAYERS = [ProvenanceLayer(), QualityLayer()]
