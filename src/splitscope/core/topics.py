"""``splitscope help [TOPIC]``: the texts that a verb's ``--help`` points to rather than
repeats — ``--fail-on``'s grammar and metrics, and the layers an audit runs.

Each topic is built when it is asked for from what the audit declares (the registered layers'
metrics, names, needs and options), so it cannot drift from what runs; ``splitscope help VERB``
is the verb's ``--help``.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import click

__all__ = ["TOPICS", "Topic", "help_command", "topic_text"]

#: widest a topic's lines are wrapped to, whatever the terminal's width
MAX_WIDTH = 100


@dataclass(frozen=True)
class Topic:
    """A help topic: one line saying what it is, and the function that writes it."""

    summary: str
    text: Callable[[], list[str]]


def _fail_on() -> list[str]:
    from splitscope.core.conditions import all_metrics

    return [
        ("--fail-on CONDITION (audit, demo; repeatable): exit with code 1 when a condition "
         "holds, so that a CI job fails on a contaminated split."),
        "",
        ("A condition is METRIC OP VALUE, quoted for the shell: ops > >= < <= == !=; a value "
         "may end in % ('ncc_rate>1%' is 'ncc_rate>0.01')."),
        ("The metric's value is its largest over the audited boundaries (the worst boundary, "
         "e.g. test → train or val → train), read from the completed records of the layer "
         "that declares it."),
        ("A gate never passes on nothing: a condition whose metric the run did not measure (its "
         "layer did not run or was not applicable) fails the run with exit code 5, and the "
         "summary says why; --allow-unmeasured reports it 'not measured' and lets it pass."),
        "",
        "Example:",
        ("  splitscope audit RELEASE --fail-on 'byte_identical_rate>0' --fail-on "
         "'ncc_rate>0.01' --fail-on 'header_probe_ba>0.7'"),
        "",
        "Metrics (name: what it is [the records it reads, and how]):",
        *(f"  {m.help_line()}" for m in all_metrics().values()),
        "",
        ("The per-layer verbs (duplicates, groups, probe, …) take --fail-on over their own "
         "metrics, with the same grammar."),
    ]


def _first_sentence(text: str | None) -> str:
    words = " ".join((text or "").split())
    return words.split(". ")[0].rstrip(".") + "." if words else ""


def _layers() -> list[str]:
    from splitscope.core.protocol import registered_layers
    from splitscope.options import flag_fields

    lines = [("The layers `splitscope audit` runs, in the method's order (--layers a,b runs "
              "only those; the others are recorded 'not assessed'):"), ""]
    for layer in registered_layers():
        reason = getattr(layer, "reason", None)
        about = reason if reason else _first_sentence(type(layer).__doc__).replace("``", "`")
        lines.append(f"  {layer.name}: {about}")
        needs = getattr(layer, "needs", None) or {}
        if needs:
            lines.append(f"    needs: {'; '.join(needs.values())}")
        group = getattr(layer, "options", None)
        flags = [f.metadata.get("flag") or "--" + f.name.replace("_", "-")
                 for f in flag_fields(group)] if group is not None else []
        if flags:
            lines.append(f"    flags: {', '.join(flags)}")
    return lines


#: the topics by name, in the order ``splitscope help`` lists them
TOPICS: dict[str, Topic] = {
    "fail-on": Topic("--fail-on: the grammar, and every metric a gate can read", _fail_on),
    "layers": Topic("the layers an audit runs: what each checks, what it needs", _layers),
}


def topic_text(name: str, width: int | None = None) -> str:
    """A topic's text, each line wrapped to ``width`` (default: the terminal's, at most
    :data:`MAX_WIDTH`) with the indent of its first line kept, words never split."""
    if name not in TOPICS:
        raise click.UsageError(f"no help topic {name!r}; topics: {', '.join(TOPICS)} (or a "
                               f"verb's name)")
    width = width or min(MAX_WIDTH, shutil.get_terminal_size((80, 24)).columns)
    out = []
    for line in TOPICS[name].text():
        indent = " " * (len(line) - len(line.lstrip()))
        out.append(textwrap.fill(line, width, subsequent_indent=indent + "  ",
                                 break_long_words=False, break_on_hyphens=False) or "")
    return "\n".join(out)


@click.command("help")
@click.argument("topic", required=False)
@click.pass_context
def help_command(ctx: click.Context, topic: str | None) -> None:
    """Print a help topic (fail-on, layers) or a verb's help; without TOPIC, list the
    topics."""
    if topic is None:
        width = max(len(name) for name in TOPICS)
        click.echo("Help topics (splitscope help TOPIC):")
        for name, entry in TOPICS.items():
            click.echo(f"  {name:<{width}}  {entry.summary}")
        click.echo("A verb's options: splitscope VERB --help (or splitscope help VERB).")
        return
    parent = ctx.parent
    verb = parent.command.get_command(parent, topic) if parent is not None and isinstance(
        parent.command, click.Group) and topic not in TOPICS else None
    if verb is not None:
        with click.Context(verb, info_name=topic, parent=parent) as verb_ctx:
            click.echo(verb.get_help(verb_ctx))
        return
    click.echo(topic_text(topic))


COMMANDS: list = [help_command]
