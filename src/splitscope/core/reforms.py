"""The REFORMS checklist read from a finished audit: the ``reforms`` verb.

:func:`add_reforms` writes ``reforms.json`` and ``reforms.md``
(:mod:`splitscope.records.reforms`) into the audit's folder and lists them in
``artifacts.json``; the audit's other files carry over unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from splitscope.records.exports import ARTIFACTS_FILE

__all__ = ["COMMANDS", "add_reforms", "reforms_command"]


def add_reforms(out_dir: str | Path, *, force: bool = False) -> dict:
    """Write ``OUT_DIR/reforms.json`` and ``OUT_DIR/reforms.md`` for the finished audit in
    ``out_dir``; returns the ``reforms.json`` document. No audit, or an audit document of
    another schema, is an ``InputError``; so is a file in ``out_dir`` the audit did not write,
    unless ``force`` (it is then kept).

    The folder is rewritten as a whole (:func:`splitscope.records.publish.publishing`), so a
    kill leaves either the audit as it was or the audit with both files."""
    from splitscope.core.conditions import all_metrics
    from splitscope.core.finished import adding_to
    from splitscope.core.protocol import scorecard_measures
    from splitscope.records.reforms import REFORMS_JSON, REFORMS_MD, write_reforms

    with adding_to(out_dir, (REFORMS_JSON, REFORMS_MD), force=force) as (doc, folder):
        report = write_reforms(doc, folder.path, all_metrics(), scorecard_measures())
    return report


@click.command("reforms")
@click.argument("out_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--force", is_flag=True,
              help="Write although OUT_DIR holds files the audit did not write (they are kept).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def reforms_command(out_dir, force, as_json) -> None:
    """Write OUT_DIR/reforms.json and OUT_DIR/reforms.md: each of the 32 items of the REFORMS
    checklist (Kapoor et al., Science Advances 2024) with what the finished audit in OUT_DIR
    says of it (evidence found, concern, not assessed, or not applicable to an automated
    audit) and the records, with numerators and denominators, behind it.

    artifacts.json lists both files. Exit code 2 when OUT_DIR holds no audit, an audit of
    another schema, or a file the audit did not write (kept with --force).
    """
    from splitscope.records.reforms import REFORMS_JSON, REFORMS_MD

    report = add_reforms(out_dir, force=force)
    out = Path(out_dir)
    payload = {"reforms_json": str(out / REFORMS_JSON), "reforms_md": str(out / REFORMS_MD),
               "artifacts_json": str(out / ARTIFACTS_FILE), "statuses": report["statuses"]}
    if as_json:
        click.echo(json.dumps(payload, indent=1, ensure_ascii=False))
    else:
        click.echo(f"Wrote {payload['reforms_json']} and {payload['reforms_md']}: "
                   + ", ".join(f"{s} {n}" for s, n in report["statuses"].items()))


COMMANDS: list = [reforms_command]
