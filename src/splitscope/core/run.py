"""The one-command audit: every registered layer on the released split, one audit document.

:func:`audit` builds the context (the audited scan, the control and external scans, the
fingerprints of every input), runs each registered layer through one guarded call
(:func:`splitscope.core.protocol.run_layer`), assembles the document, evaluates the
``--fail-on`` conditions, and writes into ``out_dir``:

- ``audit.json`` — the source of truth (schema: ``splitscope/records/audit.schema.json``);
- ``report.html`` — one self-contained page rendered from ``audit.json``;
- ``lists/`` — each layer's row-keyed tables (contaminated-file lists, deduplicated splits,
  group mappings, pair tables) as CSV and Parquet, plus the manifest;
- ``artifacts.json`` — every output file with its size and SHA-256 (Croissant-style
  ``distribution`` of ``FileObject`` entries), so a published audit can be verified.

The outputs are written in a staging folder inside ``out_dir`` and published at once by
:func:`splitscope.records.publish.publishing`: the files of the previous audit there are replaced
or removed (only those its ``artifacts.json`` lists with a matching SHA-256), anything else in
the folder is refused unless ``force`` (and then kept), and a kill at any moment leaves either
the previous audit or the new one (or a publish the next run finishes).

Exit codes (:mod:`splitscope.exit_codes`): 0 success; 1 a ``--fail-on`` condition held; 2
input error (raised as ``InputError`` before anything is written — a release of which no file
could be read is one, after its scan); 3 the audit was written but at least one layer failed
(see ``layers`` in audit.json); 5 a ``--fail-on`` metric was not measured (unless
``allow_unmeasured``). A held condition comes first, then a failed layer, then an unmeasured
gate (:func:`exit_code`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import os
import platform
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from splitscope.boundary import release_boundaries
from splitscope.core.conditions import evaluate_conditions, parse_condition
from splitscope.core.options import AuditOptions
from splitscope.core.progress import ProgressLines
from splitscope.core.protocol import (
    AuditContext,
    LayerOutcome,
    NotRun,
    declared,
    not_run,
    record_roles,
    registered_layers,
    run_layer,
    scorecard_measures,
)
from splitscope.core.readable import list_roots, nothing_read
from splitscope.core.verdicts import opening
from splitscope.errors import InputError
from splitscope.exit_codes import (
    EXIT_FAIL_ON,
    EXIT_LAYER_FAILED,
    EXIT_NOT_MEASURED,
    EXIT_OK,
)
from splitscope.features.failures import failures_table, write_failure_lists
from splitscope.features.workspace import release_pages
from splitscope.manifest.hub import fingerprint_hub, hub_corpus, is_hub_id, require_cached
from splitscope.memory import frozen_heap, trim_heap
from splitscope.records import publish, software_versions
from splitscope.records.exports import artifact, read_csv, write_csv, write_json, write_tables
from splitscope.records.inputs import fingerprint_input, fingerprint_path
from splitscope.records.metrics import Condition
from splitscope.records.paths import (
    corpus_roots,
    input_name,
    input_root,
    published_rows,
    resolved_rows,
)
from splitscope.records.publish import inside, publishing
from splitscope.records.schema import SCHEMA_VERSION, validation_errors
from splitscope.records.scorecard import score_card
from splitscope.report.gallery import gallery

__all__ = ["AuditResult", "audit", "exit_code"]

#: inputs a layer may name in its ``needs`` that are files or folders, not scans
_PATH_INPUTS = ("predictions", "attribution_maps", "attribution_masks", "external")


@dataclass
class AuditResult:
    """What :func:`audit` produced: the document (``audit.json``), where it was written, and
    the exit code the CLI returns."""

    document: dict[str, Any]
    out_dir: Path
    exit_code: int
    files: list[Path] = field(default_factory=list)

    @property
    def report(self) -> Path:
        return self.out_dir / "report.html"

    @property
    def audit_json(self) -> Path:
        return self.out_dir / "audit.json"

    @classmethod
    def load(cls, out_dir: str | Path) -> AuditResult:
        """A finished audit folder, reopened (``audit.json`` and its lists)."""
        out = Path(out_dir)
        if not (out / "audit.json").is_file():
            raise InputError(f"{out}: no audit.json (an audit folder is expected)")
        doc = json.loads((out / "audit.json").read_text())
        return cls(document=doc, out_dir=out, exit_code=int(doc["run"].get("exit_code") or 0))

    @property
    def issues(self) -> pd.DataFrame:
        """The per-row issue table (:mod:`splitscope.core.issues`), one row per manifest row,
        its ``file`` where the file is on this machine (the list names it relative to the
        release root ``audit.json`` records, :func:`splitscope.records.paths.resolved_rows`)."""
        lists = self.out_dir / "lists"
        if (lists / "issues.parquet").is_file():
            table = pd.read_parquet(lists / "issues.parquet")
        elif (lists / "issues.csv").is_file():
            table = read_csv(lists / "issues.csv")
        else:
            raise InputError(f"{lists}: no issues.parquet or issues.csv")
        return resolved_rows(table, (self.document.get("manifest") or {}).get("roots") or {})

    @property
    def records(self) -> pd.DataFrame:
        """One line per audit record: id, layer, boundary, title, numerator, denominator,
        unit, estimate, interval, status, reason, conclusion (every field is in
        ``document["records"]``)."""
        lines = []
        for r in self.document["records"]:
            unc = r.get("uncertainty") or {}
            lines.append({"id": r["id"], "layer": r.get("layer"),
                          "boundary": (r.get("boundary") or {}).get("name"),
                          "title": r.get("title"), "numerator": r.get("numerator"),
                          "denominator": r.get("denominator"), "unit": r.get("unit"),
                          "estimate": r.get("estimate"), "low": unc.get("low"),
                          "high": unc.get("high"), "interval": unc.get("kind"),
                          "status": r.get("status"), "reason": r.get("reason"),
                          "conclusion": r.get("conclusion")})
        return pd.DataFrame(lines)

    @property
    def summary(self) -> dict[str, list[str]]:
        """The opening as the report shows it: the verdict, at most five findings and three
        actions, the notes under the first figure, the detailed lines, the "what this
        means" lines and the run's notes (``lines``)."""
        return {k: list(v) for k, v in self.document["summary"].items()}

    def _repr_html_(self) -> str:
        from splitscope.report.notebook import audit_html

        return audit_html(self.document, self.out_dir)


def audit(
    inputs: str | Path | Sequence[str | Path],
    options: AuditOptions | None = None,
    *,
    control: str | Path | None = None,
    external: str | Path | None = None,
    predictions: str | Path | None = None,
    attribution_maps: str | Path | None = None,
    attribution_masks: str | Path | None = None,
    out_dir: str | Path = "splitscope-audit",
    fail_on: Sequence[str | Condition] = (),
    executor: Any = None,
    command: str | None = None,
    reproduce: str | None = None,
) -> AuditResult:
    """Audit a release with every applicable layer and write the audit's outputs.

    Parameters
    ----------
    inputs : folder or list file (or several)
        The audited release; its released split gives the boundaries test → train and
        val → train.
    options : AuditOptions, optional
        Every option (:class:`splitscope.core.options.AuditOptions`; default: the method's
        defaults). ``AuditOptions.from_flags(tau=0.95, workers=2, layers=["duplicates"])``
        builds one from field names, as the command line does.
    control : folder or list file, optional
        A release known to be clean (a negative control): the same predicates run on its own
        test → train boundary, and its flag rate is reported beside the audited one.
    external : folder or list file, optional
        Another corpus: the boundary *external → audited training rows* (cross-corpus
        containment) is audited too.
    predictions : folder or file, optional
        Saved predictions for the evaluation layer; without it the evaluation layer is
        recorded ``not applicable``.
    attribution_maps, attribution_masks : path-like, optional
        Supplied attribution maps and body/organ masks (METHODS §5.10; formats of
        :func:`splitscope.evaluation.attribution.load_maps`), both or neither; without them
        the attribution layer is ``not applicable``.
    out_dir : path-like
        Where ``audit.json``, ``report.html``, ``lists/`` and ``artifacts.json`` go. The
        folder must be absent, empty or hold only what an earlier run listed in its
        ``artifacts.json`` (:mod:`splitscope.records.publish`): anything else is an
        ``InputError`` naming it, before any work (unless ``options.run.force``).
    fail_on : sequence of str
        Conditions ``metric op value`` (:mod:`splitscope.core.conditions`); any that holds
        gives exit code 1; one whose metric the run did not measure gives exit code 5, unless
        ``options.run.allow_unmeasured`` (:func:`exit_code`).
    executor : Executor, optional
        Where the scans' per-file stage runs (:mod:`splitscope.features.executor`; the caller
        closes it); default: the one ``options.run.engine`` names (a process pool, or a Dask
        cluster this call starts and closes). With a Dask executor the duplicates layer's NCC
        search is partitioned over its cluster too, with the same result.
    command, reproduce : str, optional
        The command line that ran the audit, and one that reproduces its inputs, recorded in
        ``audit.json``'s ``run``.

    Returns
    -------
    AuditResult

    Raises
    ------
    InputError
        For unusable inputs, before anything is written; and when no file of the release
        could be read (after its scan): the message counts them and names the likely cause.
    """
    options = AuditOptions() if options is None else options
    if not isinstance(options, AuditOptions):
        raise InputError(f"options must be an AuditOptions, not {type(options).__name__}")
    conditions = [c if isinstance(c, Condition) else parse_condition(c) for c in fail_on]
    from splitscope.manifest.build import input_list

    inputs_list = input_list(inputs)
    if (attribution_maps is None) != (attribution_masks is None):
        raise InputError("attribution maps and masks go together: give both or neither")
    given = {"control": control, "external": external, "predictions": predictions,
             "attribution_maps": attribution_maps, "attribution_masks": attribution_masks}
    for item in inputs_list + [p for p in given.values() if p is not None]:
        if is_hub_id(item):
            require_cached(item)
        elif isinstance(item, (str, os.PathLike)) and not Path(item).exists():
            raise InputError(f"input not found: {item}")
    registry = registered_layers()
    names = [layer.name for layer in registry]
    wanted = set(options.run.layers) if options.run.layers is not None else None
    if wanted is not None and wanted - set(names):
        raise InputError(f"unknown layer(s) {sorted(wanted - set(names))}; choose from "
                         f"{', '.join(names)}")
    from splitscope.manifest.roots import refuse_inside_release, release_roots

    out_dir = Path(out_dir)
    roots = release_roots(inputs_list, **options.inputs.list_options()) + release_roots(
        [p for p in (control, external) if p is not None])
    refuse_inside_release(out_dir, roots)  # before anything is created
    if options.run.workspace is None:
        options = options.replace(run=dataclasses.replace(
            options.run, workspace=str(out_dir / "workspace")))
    writes = OWN_FILES + (("croissant.json",) if options.run.croissant else ()) + (
        ("dataset-card.md",) if options.run.card else ()) + (
        ("reforms.json", "reforms.md") if options.run.reforms else ())
    with contextlib.ExitStack() as stack:
        if executor is None:
            from splitscope.features.executor import executor_for

            executor = executor_for(options.run.engine, options.run.workers,
                                    options.run.scheduler)
            if executor is not None:
                stack.callback(executor.close)
        folder = stack.enter_context(publishing(
            out_dir, force=options.run.force, keep=caches(out_dir, options.run.workspace),
            writes=writes))
        stack.enter_context(frozen_heap())  # the stages' collections walk the run's objects
        doc = _audit_into(folder.path, inputs_list, given, options, executor, registry,
                          wanted, conditions, command, reproduce)
    return AuditResult(document=doc, out_dir=out_dir, exit_code=doc["run"]["exit_code"],
                       files=folder.published)


#: files every audit writes (``lists/manifest.csv`` puts ``lists/`` on the way), checked
#: against what the output folder holds before the audit starts
OWN_FILES = ("audit.json", "report.html", "lists/manifest.csv")


def caches(out_dir: str | Path, workspace: str | Path | None = None) -> list[str]:
    """The feature caches inside an audit folder (relative paths), which its publish leaves
    alone: the default ``workspace`` (with its ``-control`` and ``-external`` siblings), which
    an earlier audit may have filled, and ``workspace`` when it lies there."""
    tails = ("", "-control", "-external")
    found = [Path(out_dir) / f"workspace{tail}" for tail in tails]
    if workspace is not None:
        found += [Path(f"{workspace}{tail}") for tail in tails]
    return sorted(set(inside(out_dir, found)))


def _audit_into(folder: Path, inputs_list, given, options: AuditOptions, executor, registry,
                wanted, conditions, command, reproduce) -> dict[str, Any]:
    """Scan, run the layers and write every output under ``folder`` (the staging folder of
    the publish into the output folder); returns the audit document."""
    started_wall, started = _now(), time.perf_counter()
    show = ProgressLines(options.run.progress, "splitscope audit")
    context, scan_seconds, input_fps = _context(inputs_list, given, folder / "lists", options,
                                                executor, show)
    if not options.run.paths_only:
        _refuse_nothing_read(context.scan)
    release_stage_memory(context)

    _run_layers(registry, wanted, context, show)
    outcomes = list(context.outcomes.values())
    show("writing audit.json, report.html and the lists …")

    max_pairs = options.run.max_pairs
    ran = [layer for layer in registry if layer.name in context.outcomes
           and context.outcomes[layer.name].status in ("completed", "partial")]
    doc, export_problems = _document(context, outcomes, max_pairs, folder,
                                     _methods(ran, "issue_columns"))
    doc["run"].update({"started": started_wall, "command": command, "reproduce": reproduce,
                       "scan_seconds": round(scan_seconds, 3)})
    doc["inputs"] = input_fps
    doc["options"] = options.to_dict()
    doc = _ordered(doc)
    doc["fail_on"] = evaluate_conditions(conditions, doc["records"], doc["layers"],
                                         [b["name"] for b in doc["boundaries"]])
    code = exit_code(doc["fail_on"], doc["layers"],
                     allow_unmeasured=options.run.allow_unmeasured)
    doc["summary"] = opening(doc, export_problems)
    doc["run"]["finished"] = _now()
    doc["run"]["duration_s"] = round(time.perf_counter() - started, 3)
    doc["run"]["exit_code"] = code
    _write(doc, folder, max_pairs)
    return doc


def exit_code(fail_on: Sequence[dict[str, Any]], layers: Sequence[dict[str, Any]], *,
              allow_unmeasured: bool = False) -> int:
    """The exit code of a written audit from its ``fail_on`` outcomes and ``layers``: 1 when a
    condition held; else 3 when a layer failed (an error inside it); else 5 when a condition's
    metric was not measured (a gate never passes on nothing), unless ``allow_unmeasured``;
    else 0 (:data:`splitscope.exit_codes.PRECEDENCE`)."""
    if any(c["held"] for c in fail_on):
        return EXIT_FAIL_ON
    if any(str(l.get("reason") or "").startswith("layer error") for l in layers):
        return EXIT_LAYER_FAILED
    if not allow_unmeasured and any(c.get("value") is None for c in fail_on):
        return EXIT_NOT_MEASURED
    return EXIT_OK


def _refuse_nothing_read(scan) -> None:
    """An input error (exit 2, nothing written) when no file of the audited release could be
    read: every rate would be a zero over nothing. The message is the sentence that would
    open the audit (:func:`splitscope.core.readable.nothing_read`)."""
    rows = scan.rows()
    section = {"rows": len(rows), "scan": _scan_summary(scan),
               "failures": _failures(failures_table(scan, rows)),
               "lists": list_roots(scan.manifest.attrs.get("inputs", []))}
    message = nothing_read(section)
    if message is not None:
        raise InputError(message)


def _run_layers(registry, wanted: set[str] | None, context: AuditContext,
                show=lambda text: None) -> None:
    """Every registered layer in order through the one guarded call (a layer left out by
    ``layers=`` is recorded ``not assessed``), each outcome kept in ``context.outcomes`` in
    the registry's order; ``show(text)`` writes a progress line as each layer starts (on how
    many manifest rows) and ends (its status, records and seconds).

    A layer whose ``background`` holds (its work is mostly in worker processes of its own)
    and that reads no other layer starts first, in a thread, so that the layers before it in the
    method's order run in this process while its workers compute; a layer that reads it
    waits for it. A run that bounds its ``workers`` runs every layer in its turn: each layer
    keeps at most that many threads or processes busy, and two side by side would keep
    twice as many. Each layer's records do not depend on which layers ran beside it."""
    steps = {layer.name: f"layer {i}/{len(registry)} {layer.name}"
             for i, layer in enumerate(registry, 1)}
    rows = f"{len(context.manifest):,} rows"
    started: dict[str, _Background] = {}

    def finish(name: str, outcome) -> None:
        context.outcomes[name] = outcome
        release_stage_memory(context)
        n = len(outcome.result.records)
        show(f"{steps[name]}: {outcome.status}, {n} record{'s' * (n != 1)} in "
             f"{outcome.duration_s:.1f} s")

    def join(names) -> None:
        for name in names:
            if name in started:
                finish(name, started.pop(name).result())

    for layer in registry:
        if (wanted is None or layer.name in wanted) and not _reads(layer) \
                and context.options.run.workers is None and _background(layer, context):
            show(f"{steps[layer.name]}: started on {rows} (beside the next layers)")
            started[layer.name] = _Background(layer, context)
    for layer in registry:
        if layer.name in started:
            continue
        if wanted is not None and layer.name not in wanted:
            context.outcomes[layer.name] = not_run(
                layer, context, NotRun("not requested (layers= option)",
                                       status="not assessed"))
            continue
        join(_reads(layer))
        show(f"{steps[layer.name]}: started on {rows}")
        finish(layer.name, run_layer(layer, context))
    # an interrupt above is not held up by a background layer: its thread is a daemon, and
    # its workers end with this process
    join(list(started))
    ordered = [(layer.name, context.outcomes[layer.name]) for layer in registry]
    context.outcomes.clear()
    context.outcomes.update(ordered)


def release_stage_memory(context: AuditContext) -> None:
    """Between stages: drop the thumbnail stores' mapped pages from the resident set (they
    stay in the page cache) and return freed heap pages to the operating system, so that a
    stage starts from what is still referenced, not from the earlier stages' high-water mark
    (:func:`splitscope.memory.trim_heap`). Nothing referenced changes, so no record does."""
    for scan in (context.scan, *context.scans.values()):
        thumbs = getattr(scan, "thumbnails", None)
        if thumbs is not None:
            release_pages(thumbs)
    trim_heap()


def _background(layer, context: AuditContext) -> bool:
    """Whether ``layer`` asks to run beside the others; a question that fails is a no (the
    layer then runs in its turn, where run_layer records any error)."""
    beside = getattr(layer, "background", False)
    try:
        return bool(beside(context) if callable(beside) else beside)
    except Exception:  # noqa: BLE001 - deciding where to run must not take the audit down
        return False


def _reads(layer) -> list[str]:
    return [*(getattr(layer, "after", None) or {}), *(getattr(layer, "uses", None) or {})]


class _Background:
    """One layer run through :func:`run_layer` in a thread; :meth:`result` waits for it."""

    def __init__(self, layer, context: AuditContext):
        import threading

        self._outcome = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(layer, context),
                                        name=f"splitscope-layer-{layer.name}", daemon=True)
        self._thread.start()

    def _run(self, layer, context) -> None:
        try:
            self._outcome = run_layer(layer, context)
        except BaseException as exc:  # noqa: BLE001 - raised again where it is awaited
            self._error = exc

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._outcome


def _context(inputs_list, given, lists_dir: Path, options: AuditOptions, executor: Any,
             show=lambda text: None) -> tuple[AuditContext, float, list[dict]]:
    """Scan the audited release (and the control and external corpora) and fingerprint every
    input; ``show(text)`` writes a progress line as each scan starts and ends."""
    from splitscope.features.scanning import scan as run_scan

    workspace = Path(options.run.workspace)
    scan_opts = {**options.scan_options(), "executor": executor}
    label_map = options.inputs.label_map
    t = time.perf_counter()
    own_maps = {"control": options.inputs.control_label_map,
                "external": options.inputs.external_label_map}
    several = any(given[role] is not None for role in own_maps)
    show("scan: reading the release …")
    audited = run_scan(inputs_list, workspace, group_regex=options.inputs.group_regex,
                       label_map=None if several else label_map,
                       **options.inputs.list_options(), **scan_opts)
    scan_seconds = time.perf_counter() - t
    show(_scanned("scan", audited, scan_seconds))
    manifest = audited.manifest
    boundaries = release_boundaries(manifest)
    input_fps = [_fingerprint(p, "audited", manifest if len(inputs_list) == 1 else
                              manifest[manifest["corpus"] == _corpus_of(p)])
                 for p in inputs_list]
    scans = {}
    for role in ("control", "external"):
        if given[role] is not None:
            began = time.perf_counter()
            show(f"scan of the {role} corpus …")
            scans[role] = run_scan(given[role], Path(f"{workspace}-{role}"), **scan_opts)
            show(_scanned(f"scan of the {role} corpus", scans[role],
                          time.perf_counter() - began))
            input_fps.append(_fingerprint(given[role], role, scans[role].manifest))
    if several:  # every corpus has its own vocabulary (METHODS §6.4)
        from splitscope.manifest.labels import apply_label_maps

        corpora = {"audited": audited, **scans}
        mapped = apply_label_maps({k: v.manifest for k, v in corpora.items()}, label_map,
                                  own_maps)
        for name, corpus in corpora.items():
            corpus.manifest = mapped[name]
    for role in ("predictions", "attribution_maps", "attribution_masks"):
        if given[role] is not None:
            input_fps.append(fingerprint_path(role.replace("_", " "), given[role]))
    # records name an input by its name; the input as given is in audit.json's inputs
    record_inputs = [{"path": input_name(i["path"]), "sha256": i["sha256"]} for i in input_fps]
    lists_dir.mkdir(parents=True, exist_ok=True)  # in the staging folder: empty
    paths = {role: Path(given[role]) for role in _PATH_INPUTS if given[role] is not None}
    list_root = options.inputs.list_root
    candidates = [input_root(p, list_root) for p in inputs_list] + [
        input_root(given[role]) for role in scans]
    # the corpora of the other scans by role, as their rows are named where they are
    # published (external:<name>), so that two corpora of one name keep their own roots
    roots = corpus_roots(audited.manifest, candidates)
    for role, scanned in scans.items():
        roots.update({f"{role}:{c}": r for c, r in
                      corpus_roots(scanned.manifest, candidates).items()
                      if f"{role}:{c}" not in roots})
    context = AuditContext(scan=audited, boundaries=boundaries, options=options,
                           record_inputs=record_inputs, lists_dir=lists_dir, scans=scans,
                           paths=paths, executor=executor, roots=roots)
    return context, scan_seconds, input_fps


def _scanned(what: str, scan, seconds: float) -> str:
    """A scan's progress line: its rows and files, how many files were read now and how many
    came from the feature cache, and its seconds."""
    meta = getattr(scan, "meta", None) or {}
    files = int(scan.manifest["file"].dropna().nunique())
    read, cached = int(meta.get("extracted", 0)), int(meta.get("reused", 0))
    return (f"{what}: {len(scan.manifest):,} rows, {files:,} files ({read:,} read, {cached:,} "
            f"from the cache) in {seconds:.1f} s")


def _methods(layers, member: str) -> list:
    """The ``member`` methods the layers declare (in the method's order)."""
    return [getattr(layer, member) for layer in layers if callable(getattr(layer, member, None))]


def _document(context: AuditContext, outcomes: list[LayerOutcome], max_pairs: int,
              out_dir: Path, issue_columns: Sequence = ()) -> tuple[dict[str, Any], list[str]]:
    """The audit document from the layers' outcomes: boundaries, records (each naming what
    it read), tables written to ``lists/``, figure data and the gallery."""
    manifest = context.manifest
    extra = [(b, kind) for o in outcomes for b, kind in o.result.boundaries]
    all_boundaries = list(context.boundaries) + [b for b, _ in extra]
    kinds = {b.name: kind for b, kind in extra}
    records = [r for o in outcomes for r in o.result.records]
    hex64 = re.compile(r"^[0-9a-f]{64}$")
    label_map = manifest.attrs.get("label_map")
    for r in records:  # every record names what was read, by SHA-256, and the labels counted
        if label_map:
            r.details = {**r.details, "label_map": label_map}
        named = list(r.inputs or [])
        if not named or not all(hex64.match(str(i.get("sha256", ""))) for i in named):
            if named:
                r.details = {**r.details, "inputs_as_given": named}
            r.inputs = list(context.record_inputs)
    tables: dict[str, Any] = {}
    for o in outcomes:
        for name, table in o.result.tables.items():
            tables[name if name not in tables else f"{o.layer}_{name}"] = table

    figures: dict[str, Any] = {}
    for b in all_boundaries:
        figures[b.name] = {}
        for o in outcomes:
            figures[b.name].update(o.result.figures.get(b.name, {}))
    audited_rows = context.scan.rows()
    rows = audited_rows
    more = [o.result.rows for o in outcomes if o.result.rows is not None]
    if more:
        rows = pd.concat([rows] + [m[~m["row"].isin(rows["row"])] for m in more],
                         ignore_index=True)
    # what is published names files relative to their release root (records.paths); the
    # roots are recorded once, in manifest.roots
    roots = dict(context.roots)
    roots.update({c: r for c, r in corpus_roots(rows, context.roots.values()).items()
                  if c not in roots})
    shown = {n: t for n, t in tables.items() if "control" not in n}
    gallery_items = []
    published = published_rows(rows, roots)
    for b in all_boundaries:
        tau = figures[b.name].get("tau")  # the threshold the layer's pairs were read at
        items, summary = gallery(shown, b, published, max_pairs,
                                 **({} if tau is None else {"tau": tau}))
        gallery_items.extend(items)
        figures[b.name]["gallery"] = summary

    from splitscope.core.composition import composition
    from splitscope.core.issues import issue_table

    segments = declared("composition")
    for b in context.boundaries:  # what each evaluated split is made of (the first figure)
        made_of = composition(tables, b.name, segments, context.options.layer_options)
        if made_of is not None:
            figures[b.name]["composition"] = made_of
    tables["issues"] = published_rows(issue_table(audited_rows, tables, issue_columns), roots)
    lists_dir = context.lists_dir
    export_problems: list[str] = []
    written = write_tables(tables, lists_dir, problems=export_problems, keep_existing=True)
    written.append(write_csv(published_rows(manifest, roots), lists_dir / "manifest.csv"))
    failed = failures_table(context.scan, audited_rows)
    written.extend(write_failure_lists(context.scan, lists_dir, failed))  # failed rows by name
    written.extend(p for p in lists_dir.rglob("*") if p.is_file() and p not in written)

    record_dicts = [r.to_dict() for r in records]
    doc: dict[str, Any] = {
        "run": {"finished": None, "duration_s": 0.0, "exit_code": None,
                "host": {"platform": platform.platform(), "python": sys.version.split()[0],
                         "cpus": os.cpu_count()}},
        "software": dict(software_versions()),
        "manifest": {"rows": len(manifest), "splits": _counts(manifest["split"]),
                     "labels": _counts(manifest["label"]),
                     "corpora": _counts(manifest["corpus"]),
                     "excluded": len(manifest.attrs.get("excluded", []) or []),
                     "scan": _scan_summary(context.scan),
                     "failures": _failures(failed), "roots": roots,
                     "lists": list_roots(manifest.attrs.get("inputs", [])),
                     **_tables_summary(audited_rows), **_label_maps(context)},
        "boundaries": [{**b.to_dict(), "kind": kinds.get(b.name, "released split")}
                       for b in all_boundaries],
        "layers": [o.summary() for o in outcomes],
        "records": record_dicts,
        "scorecard": score_card(record_dicts, scorecard_measures()),
        "figures": figures,
        "gallery": gallery_items,
        "fail_on": [],
        "artifacts": [artifact(p, out_dir) for p in sorted(set(written))],
    }
    return doc, export_problems


#: the document's keys, in the order audit.json has always written them
_KEYS = ("schema_version", "kind", "run", "inputs", "options", "software", "manifest",
         "boundaries", "layers", "records", "scorecard", "figures", "gallery", "fail_on",
         "artifacts")
_RUN_KEYS = ("started", "finished", "duration_s", "command", "reproduce", "exit_code", "host",
             "scan_seconds")


def _label_maps(context: AuditContext) -> dict[str, Any]:
    """The label map applied to the manifest (what it mapped, rows changed, labels it did not
    name) and, with control or external corpora, the maps that reached each corpus
    (METHODS §6.4); empty without a map."""
    out: dict[str, Any] = {}
    if context.manifest.attrs.get("label_map"):
        out["label_map"] = context.manifest.attrs["label_map"]
    if context.scans:
        out["corpus_label_maps"] = {
            role: {"own": s.manifest.attrs.get("label_map_own"),
                   "common": s.manifest.attrs.get("label_map")}
            for role, s in {"audited": context.scan, **context.scans}.items()}
    return out


def _tables_summary(rows: pd.DataFrame) -> dict[str, Any]:
    """For rows whose images are bytes inside a table: their formats, and how many carry a
    stored name whose extension says another format (a table of re-encoded images, whose
    bytes are not the released files); empty for a release of files."""
    if "content" not in rows or "format" not in rows:
        return {}
    table = rows[rows["content"].astype("string").eq("embedded").fillna(False).to_numpy(bool)]
    if not len(table):
        return {}
    mismatch = table["extension_mismatch"].astype("boolean").fillna(False) \
        if "extension_mismatch" in table else pd.Series(False, index=table.index)
    pairs = (table.loc[mismatch.to_numpy(bool), ["extension", "format"]].astype("string")
             .fillna("?").value_counts().head(3)) if "extension" in table else pd.Series()
    return {"table_images": {
        "rows": len(table), "formats": _counts(table["format"]),
        "name_format_mismatch": int(mismatch.sum()),
        "examples": [f"{fmt} bytes named .{str(ext).lstrip('.')}"
                     for (ext, fmt), _ in pairs.items()]}}


def _ordered(doc: dict[str, Any]) -> dict[str, Any]:
    doc = {"schema_version": SCHEMA_VERSION, "kind": "splitscope-audit", **doc}
    doc["run"] = {k: doc["run"].get(k) for k in _RUN_KEYS
                  if k != "reproduce" or doc["run"].get(k) is not None}
    return {k: doc[k] for k in _KEYS}


def _write(doc: dict[str, Any], out_dir: Path, max_pairs: int) -> None:
    """Validate, write audit.json, render report.html (and croissant.json, dataset-card.md when
    asked) into ``out_dir``, the staging folder of the publish, which lists every output in
    artifacts.json."""
    errors = validation_errors(doc)
    if errors:  # the document is still written; the problem is visible, never silent
        doc["summary"]["lines"].append(
            f"audit.json does not fully match its schema ({len(errors)} problem(s)), first: "
            f"{errors[0]}")
        print("warning: audit.json schema problems:\n  " + "\n  ".join(errors[:10]),
              file=sys.stderr)

    from splitscope.features.sources import open_image
    from splitscope.report.html import render_report

    write_json(doc, out_dir / "audit.json")
    publish.checkpoint("audit.json written")  # the kill soak may stop here
    roles = record_roles()
    render_report(doc, out_dir / "report.html", roles=roles, max_pairs=max_pairs,
                  opener=open_image)
    if doc["options"]["run"].get("croissant"):
        from splitscope.records.croissant import write_croissant

        write_croissant(out_dir, roles=roles)
    if doc["options"]["run"].get("card"):
        from splitscope.core.conditions import all_metrics
        from splitscope.records.card import write_card

        write_card(out_dir, doc, declared("findings"), all_metrics(), roles=roles)
    if doc["options"]["run"].get("reforms"):
        from splitscope.core.conditions import all_metrics
        from splitscope.records.reforms import write_reforms

        write_reforms(doc, out_dir, all_metrics(), scorecard_measures())


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _counts(series: pd.Series) -> dict[str, int]:
    return {str(k): int(v) for k, v in series.astype("string").fillna("<NA>")
            .value_counts(sort=False).sort_index().items()}


def _fingerprint(item, role: str, manifest: pd.DataFrame) -> dict[str, Any]:
    """An input's fingerprint: a Hub id's over its cache files, any other's
    (:func:`splitscope.records.inputs.fingerprint_input`)."""
    if is_hub_id(item):
        return fingerprint_hub(item, role, manifest)
    return fingerprint_input(item, role, manifest)


def _corpus_of(path) -> str:
    if is_hub_id(path):
        return hub_corpus(path)
    if not isinstance(path, (str, os.PathLike)):  # in-memory arrays or a datasets object
        return getattr(path, "name", None) or ("arrays" if type(path).__name__ == "Arrays"
                                               else "dataset")
    return Path(path).name if Path(path).is_dir() else Path(path).stem


#: failed rows named in audit.json and the report (all of them are in lists/failures.csv)
FAILURES_LISTED = 50


def _failures(table: pd.DataFrame) -> dict[str, Any]:
    """Rows that could not be read (:func:`~splitscope.features.failures.failures_table`), by
    reason and split, and the first ones by name."""
    by = table.groupby(["reason", "split"], dropna=False).size()
    return {"rows": len(table),
            "by_reason_and_split": [{"reason": str(r), "split": None if pd.isna(sp) else str(sp),
                                     "rows": int(n)} for (r, sp), n in by.items()],
            "listed": json.loads(table.head(FAILURES_LISTED).to_json(orient="records")),
            "list": "lists/failures.csv"}


def _scan_summary(scan) -> dict[str, Any]:
    try:
        s = scan.summary()
    except Exception as exc:  # noqa: BLE001 - the summary is informative only
        return {"error": f"{type(exc).__name__}: {exc}"}
    keep = ("rows", "unique_files", "rows_without_file", "features_ok", "thumbnails",
            "flat_thumbnails", "failures", "extracted", "reused", "seconds", "excluded",
            "excluded_by_reason", "outside_root", "invalid_paths", "repairs")
    return json.loads(json.dumps({k: s.get(k) for k in keep}, default=str))
