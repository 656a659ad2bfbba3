"""Hugging Face dataset card of a finished audit: the ``card`` verb, and the step ``audit
--card`` runs after writing its folder.

:func:`add_card` writes ``dataset-card.md`` (:func:`splitscope.records.card.card_text`) into a
finished audit folder and lists it in ``artifacts.json``, through the same publish as the
``croissant`` verb; with ``append`` it also puts the section into an existing card
(:func:`splitscope.records.card.merge_card`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from splitscope.errors import InputError
from splitscope.records.exports import ARTIFACTS_FILE

__all__ = ["COMMANDS", "add_card", "append_card", "card_command"]


def _card_reading() -> tuple[list, dict]:
    """The registered layers' findings and ``--fail-on`` metrics the card reads its figures
    through."""
    from splitscope.core.conditions import all_metrics
    from splitscope.core.protocol import declared

    return declared("findings"), all_metrics()


def add_card(out_dir: str | Path, *, append: str | Path | None = None,
             force: bool = False) -> Path:
    """Write ``OUT_DIR/dataset-card.md`` for the finished audit in ``out_dir``; returns its
    path.

    The folder is rewritten as a whole (:func:`splitscope.records.publish.publishing`, as
    :func:`splitscope.core.croissant.add_croissant` does): the audit's other files carry over
    unchanged and ``artifacts.json`` lists the card with its SHA-256. ``append``: an existing
    card that then receives the section too (:func:`append_card`). ``force``: write although
    ``out_dir`` holds files the audit did not write (they are kept).

    Raises
    ------
    InputError
        When ``out_dir`` holds no audit document of the schema this splitscope reads, or
        foreign files without ``force``.
    """
    from splitscope.core.finished import adding_to
    from splitscope.core.protocol import record_roles
    from splitscope.records.card import CARD_FILE, write_card

    out = Path(out_dir)
    if append is not None and Path(append).resolve() == (out / CARD_FILE).resolve():
        raise InputError(f"--append {append} is the card this command writes; name another")
    with adding_to(out, (CARD_FILE,), force=force) as (doc, folder):
        write_card(folder.path, doc, *_card_reading(), roles=record_roles())
    if append is not None:
        append_card(out / CARD_FILE, append)
    return out / CARD_FILE


def append_card(card: str | Path, target: str | Path) -> Path:
    """Put the section of ``card`` into the existing card ``target`` (replacing the one an
    earlier run put there) and add the front-matter keys it lacks; the rest of ``target``
    keeps its bytes. The file is replaced at once (written beside it, then renamed)."""
    from splitscope.records.card import merge_card

    target = Path(target)
    if not target.is_file():
        raise InputError(f"--append {target}: no such card")
    with open(target, encoding="utf-8", newline="") as f:
        existing = f.read()
    merged = merge_card(existing, Path(card).read_text(encoding="utf-8"))
    tmp = target.with_name(f".{target.name}.splitscope-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(merged)
    os.replace(tmp, target)
    return target


@click.command("card")
@click.argument("out_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--append", "append", default=None, type=click.Path(dir_okay=False),
              metavar="CARD.md",
              help="Also put the section into this existing card (the text between "
                   "<!-- splitscope:begin --> and <!-- splitscope:end --> is replaced; only "
                   "missing front-matter keys are added; the rest is kept byte for byte).")
@click.option("--force", is_flag=True,
              help="Write although OUT_DIR holds files the audit did not write (they are kept).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def card_command(out_dir, append, force, as_json) -> None:
    """Write OUT_DIR/dataset-card.md, a Hugging Face dataset-card section of the finished
    audit in OUT_DIR: card metadata the audit knows, the verdicts, per boundary the copies,
    near twins, shared groups and label conflicts with numerators and denominators, the
    deduplicated splits, the reproduce command and the splitscope version.

    artifacts.json lists it. Exit code 2 when OUT_DIR holds no audit of this schema, or a file
    the audit did not write (kept with --force).
    """
    path = add_card(out_dir, append=append, force=force)
    payload = {"card": str(path), "bytes": path.stat().st_size,
               "artifacts_json": str(Path(out_dir) / ARTIFACTS_FILE),
               "appended_to": str(append) if append else None}
    if as_json:
        click.echo(json.dumps(payload, indent=1, ensure_ascii=False))
    else:
        tail = f"; section put into {append}" if append else ""
        click.echo(f"Wrote {path} ({payload['bytes']} bytes){tail}")


COMMANDS: list = [card_command]
