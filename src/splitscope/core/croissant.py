"""Croissant record of a finished audit: the ``croissant`` verb, and the step ``audit
--croissant`` runs after writing its folder.

:func:`add_croissant` records the choice in ``audit.json`` (``options.run.croissant``), renders
``report.html`` again so that it links the record, writes ``croissant.json``
(:func:`splitscope.records.croissant.write_croissant`) and lists it in ``artifacts.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from splitscope.records.exports import ARTIFACTS_FILE, write_json

__all__ = ["COMMANDS", "add_croissant", "croissant_command"]


def add_croissant(out_dir: str | Path, *, license: str | None = None,
                  cite_as: str | None = None, url: str | None = None,
                  force: bool = False) -> Path:
    """Write ``OUT_DIR/croissant.json`` for the finished audit in ``out_dir`` (see the module
    docstring); returns its path. A list changed since the audit is an ``InputError``; so is
    a file in ``out_dir`` the audit did not write, unless ``force`` (it is then kept).

    The folder is rewritten as a whole (:func:`splitscope.records.publish.publishing`): the
    audit's other files carry over, and a kill leaves either the audit as it was or the audit
    with its record."""
    from splitscope.core.finished import adding_to
    from splitscope.core.protocol import record_roles
    from splitscope.features.sources import open_image
    from splitscope.records.croissant import CROISSANT_FILE, croissant_record
    from splitscope.report.html import render_report

    out = Path(out_dir)
    roles = record_roles()
    with adding_to(out, ("audit.json", "report.html", CROISSANT_FILE),
                   force=force) as (doc, folder):
        # checks the folder and lists before anything is written
        record = croissant_record(out, roles=roles, license=license, cite_as=cite_as, url=url)
        run = doc["options"]["run"]
        if not run.get("croissant"):
            run["croissant"] = True
            write_json(doc, folder.path / "audit.json")
            render_report(doc, folder.path / "report.html", roles=roles,
                          max_pairs=int(run["max_pairs"]), opener=open_image)
            _describe_staged(record, folder.path)
        write_json({k: v for k, v in record.items() if v is not None},
                   folder.path / CROISSANT_FILE)
    return out / CROISSANT_FILE


def _describe_staged(record: dict, staged: Path) -> None:
    """Give the record's entries of ``audit.json`` and ``report.html`` the size and SHA-256 of
    the ones staged to replace them (the record was made from the folder's)."""
    from splitscope.records.model import sha256_file

    for entry in record["distribution"]:
        path = staged / str(entry.get("contentUrl"))
        if entry.get("@type") == "cr:FileObject" and entry.get("contentUrl") in (
                "audit.json", "report.html") and path.is_file():
            entry["sha256"] = sha256_file(path)
            entry["contentSize"] = f"{path.stat().st_size} B"


@click.command("croissant")
@click.argument("out_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--license", "license_", default=None,
              help="The release's licence (URL or SPDX name), written as the record's license.")
@click.option("--cite-as", default=None, help="The release's citation (citeAs).")
@click.option("--url", default=None, help="The release's home page (url).")
@click.option("--force", is_flag=True,
              help="Write although OUT_DIR holds files the audit did not write (they are kept).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def croissant_command(out_dir, license_, cite_as, url, force, as_json) -> None:
    """Write OUT_DIR/croissant.json, a Croissant 1.0 JSON-LD record (with RAI fields) of the
    release a finished audit in OUT_DIR audited: its files, the deduplicated and re-split
    record sets, the contaminated-file lists, each file with its SHA-256.

    The report is rendered again to link it, and artifacts.json lists it. Exit code 2 when
    OUT_DIR holds no audit, one of its lists changed since the audit wrote it, or a file the
    audit did not write (kept with --force).
    """
    path = add_croissant(out_dir, license=license_, cite_as=cite_as, url=url, force=force)
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
