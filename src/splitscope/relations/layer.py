"""The audit layers of this package (:mod:`splitscope.core.protocol`): the duplicates layer
(identity and near duplicates on the release's boundaries, METHODS §1, §2) and the external
layer (cross-corpus containment, §2.9). The rules are in :mod:`splitscope.relations.duplicates`
and the modules it names; this module only reads the audit's options and hands them on."""

from __future__ import annotations

from typing import ClassVar

from splitscope.records import LayerResult
from splitscope.relations import predicates, reading
from splitscope.relations.duplicates import audit_duplicates, audit_external
from splitscope.relations.options import SearchOptions

__all__ = ["LAYERS", "DuplicatesLayer", "ExternalLayer"]


def _duplicates_options(context) -> dict:
    """What the layers hand :func:`audit_duplicates` besides their options group: the run's
    seed, workers and executor."""
    run = context.options.run
    return {"executor": context.executor, "seed": run.seed, "workers": run.workers}


def _with_tau(figures: dict, boundaries, tau: float) -> dict:
    """Each boundary's figure data, headed by the threshold τ its pairs were read at (the
    report's sweep and gallery bands)."""
    return {b.name: {"tau": tau, **figures.get(b.name, {})} for b in boundaries}


class DuplicatesLayer:
    """Identity and near duplicates on the release's boundaries (METHODS §1, §2), with the
    negative control when one is given; writes its lists into the audit's ``lists/``."""

    name = "duplicates"
    order = 10
    options = SearchOptions  # --tau, --radius, … (context.options.search)
    metrics = tuple(predicates.METRICS.values())  # --fail-on (splitscope.core.conditions)
    rules = reading.RULES  # "what this means" (splitscope.core.meaning)
    verdicts = reading.VERDICTS  # verdict lines (splitscope.core.verdicts)
    findings = reading.FINDINGS  # the verdicts' opening line (splitscope.core.verdicts)
    composition = reading.SEGMENTS  # the composition figure (splitscope.core.composition)
    scorecard = predicates.SCORECARD  # score-card details (splitscope.records.scorecard)
    roles = predicates.ROLES  # its records in the report and Croissant record

    def issue_columns(self, ids, tables, rows):
        """Its predicate flags and scores, the deduplicated split and label conflicts
        (:mod:`splitscope.relations.issue_columns`)."""
        from splitscope.relations.issue_columns import issue_columns

        return issue_columns(ids, tables, rows)

    def run(self, context) -> LayerResult:
        from splitscope.relations.rho_figures import boundary_figures

        result = audit_duplicates(context.scan, context.boundaries, context.options.search,
                                  control=context.scans.get("control"),
                                  out_dir=context.lists_dir, artifacts_manifest=False,
                                  **_duplicates_options(context))
        figures = boundary_figures(result.tables, context.boundaries,
                                   result.tables.get("control_query_flags"))
        result.figures = _with_tau(figures, context.boundaries, context.options.search.tau)
        return result


class ExternalLayer:
    """Cross-corpus containment (METHODS §2.9): the external corpus against the audited
    training rows; its lists go to ``lists/external/``."""

    name = "external"
    order = 60
    options = SearchOptions
    metrics = tuple(predicates.EXTERNAL_METRICS.values())
    verdicts = reading.EXTERNAL_VERDICTS
    scorecard = predicates.EXTERNAL_SCORECARD
    roles = predicates.ROLES
    needs: ClassVar[dict[str, str]] = {"external": "no external corpus given (--external ROOT)"}
    title = "cross-corpus containment"

    def run(self, context) -> LayerResult:
        from splitscope.relations.rho_figures import boundary_figures

        result, combined, boundary = audit_external(
            context.scan, context.scans["external"], context.paths["external"],
            context.lists_dir / "external", context.options.search, roots=context.roots,
            **_duplicates_options(context))
        result.boundaries = [(boundary, "cross-corpus")]
        result.rows = combined.rows()
        duplicates = context.outcomes.get("duplicates")
        control = duplicates.result.tables.get("control_query_flags") if duplicates else None
        tables = {k.removeprefix("external/"): v for k, v in result.tables.items()}
        result.figures = _with_tau(boundary_figures(tables, [boundary], control), [boundary],
                                   context.options.search.tau)
        return result


#: the layers of this package, in the method's order (see :mod:`splitscope.core.protocol`)
LAYERS = [DuplicatesLayer(), ExternalLayer()]
