"""The ``summary`` verb: a finished audit's outcome as Markdown (a CI job page) or plain text.
Registered by :mod:`splitscope.cli`; the text is :func:`splitscope.records.summary_markdown.
audit_summary`'s."""

from __future__ import annotations

import click

from splitscope.records.summary_markdown import audit_summary


@click.command("summary")
@click.argument("audit_dir", type=click.Path(file_okay=False))
@click.option("--markdown", is_flag=True,
              help="Markdown (for $GITHUB_STEP_SUMMARY) instead of plain text.")
@click.option("--exit-code", type=int, default=None,
              help="The audit's exit code, when it is known; one that means no audit was "
                   "written (2, 4) leaves an audit.json of an earlier run unread. Default: "
                   "the one audit.json records.")
@click.option("--artifact", default=None,
              help="Name of the CI artifact the folder is uploaded as, to say where it is.")
def summary_command(audit_dir, markdown, exit_code, artifact) -> None:
    """Print the summary of the audit in AUDIT_DIR: its outcome, verdict lines, --fail-on
    outcomes, every finding with its numerator and denominator, the layers not completed, and
    where the report is.

    AUDIT_DIR may lack an audit (the audit stopped first): the summary says so. Exit code 0.
    """
    click.echo(audit_summary(audit_dir, exit_code=exit_code, artifact=artifact,
                             markdown=markdown), nl=False)


COMMANDS: list = [summary_command]

__all__ = ["COMMANDS", "summary_command"]
