"""The command line. Thin: parses, calls the API, prints, sets the exit code.

Exit codes: 0 success, 1 a ``--fail-on`` condition held, 2 usage or input error. Each layer
contributes its verbs from ``splitscope.<layer>.commands`` (a list ``COMMANDS`` of click
commands), so the verbs live next to the code they call.
"""

from __future__ import annotations

import importlib
import sys

import click

from splitscope import __version__
from splitscope.errors import InputError

_COMMAND_MODULES = (
    "splitscope.features.commands",  # scan
    "splitscope.relations.commands",  # duplicates
    "splitscope.probes.commands",  # groups, probe, shift
    "splitscope.evaluation.commands",  # metrics, rescore, effects, pools
    "splitscope.report.commands",  # audit, demo
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="splitscope")
def app() -> None:
    """Audit a machine-learning benchmark for train/test contamination and for how evaluation
    choices move its headline score."""


for _name in _COMMAND_MODULES:
    for _command in importlib.import_module(_name).COMMANDS:
        app.add_command(_command)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, mapping input errors to exit code 2 with a one-line message."""
    try:
        app.main(args=argv, prog_name="splitscope", standalone_mode=False)
    except InputError as exc:
        click.echo(f"error: {exc}", err=True)
        return 2
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return 2
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
