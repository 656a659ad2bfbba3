"""Croissant record of a finished audit: the ``croissant`` verb, and the step ``audit
--croissant`` runs after writing its folder.

:func:`add_croissant` records the choice in ``audit.json`` (``params.croissant``), renders
``report.html`` again so that it links the record, writes ``croissant.json``
(:func:`splitscope.records.croissant.write_croissant`) and lists it in ``artifacts.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from splitscope.records.croissant import write_croissant
from splitscope.records.exports import ARTIFACTS_FILE, write_artifacts_manifest, write_json

__all__ = ["COMMANDS", "add_croissant", "croissant_command"]


def add_croissant(out_dir: str | Path, *, license: str | None = None,
                  cite_as: str | None = None, url: str | None = None) -> Path:
    """Write ``OUT_DIR/croissant.json`` for the finished audit in ``out_dir`` (see the module
    docstring); returns its path. A list changed since the audit is an ``InputError``."""
    from splitscope.audit.protocol import record_roles
    from splitscope.features.sources import open_image
    from splitscope.records.croissant import croissant_record
    from splitscope.report.html import render_report

    out = Path(out_dir)
    roles = record_roles()
    croissant_record(out, roles=roles)  # checks the folder and lists before anything is rewritten
    audit_json = out / "audit.json"
    doc = json.loads(audit_json.read_text(encoding="utf-8"))
    if not doc["params"].get("croissant"):
        doc["params"]["croissant"] = True
        write_json(doc, audit_json)
        render_report(doc, out / "report.html", roles=roles,
                      max_pairs=int(doc["params"].get("max_gallery_pairs") or 60),
                      opener=open_image)
    path = write_croissant(out, roles=roles, license=license, cite_as=cite_as, url=url)
    files = [audit_json, out / "report.html", path] + [out / a["path"] for a in doc["artifacts"]]
    write_artifacts_manifest(out, [f for f in files if f.is_file()])
    return path


@click.command("croissant")
@click.argument("out_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--license", "license_", default=None,
              help="The release's licence (URL or SPDX name), written as the record's license.")
@click.option("--cite-as", default=None, help="The release's citation (citeAs).")
@click.option("--url", default=None, help="The release's home page (url).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def croissant_command(out_dir, license_, cite_as, url, as_json) -> None:
    """Write OUT_DIR/croissant.json, a Croissant 1.0 JSON-LD record (with RAI fields) of the
    release a finished audit in OUT_DIR audited: its files, the deduplicated and re-split
    record sets, the contaminated-file lists, each file with its SHA-256.

    The report is rendered again to link it, and artifacts.json lists it. Exit code 2 when
    OUT_DIR holds no audit or one of its lists changed since the audit wrote it.
    """
    path = add_croissant(out_dir, license=license_, cite_as=cite_as, url=url)
    record = json.loads(path.read_text(encoding="utf-8"))
    payload = {"croissant_json": str(path), "bytes": path.stat().st_size,
               "artifacts_json": str(Path(out_dir) / ARTIFACTS_FILE),
               "files": len(record["distribution"]),
               "record_sets": [r["name"] for r in record["recordSet"]]}
    if as_json:
        click.echo(json.dumps(payload, indent=1, ensure_ascii=False))
    else:
        click.echo(f"Wrote {path} ({payload['bytes']} bytes): {payload['files']} files and "
                   f"record sets {', '.join(payload['record_sets'])}")


COMMANDS: list = [croissant_command]
