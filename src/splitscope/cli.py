"""The command line. Thin: parses, calls the API, prints, sets the exit code.

Exit codes: 0 success, 1 a ``--fail-on`` condition held, 2 usage or input error, 3 an audit
was written but one of its layers failed (recorded as ``not assessed``). Each layer contributes
its verbs from ``splitscope.<layer>.commands`` (a list ``COMMANDS`` of click commands), so the
verbs live next to the code they call.
"""

from __future__ import annotations

import importlib
import sys

import click

from splitscope import __version__
from splitscope.errors import InputError

# verb → module whose ``COMMANDS`` list holds it. Modules are imported only when their verb
# runs (or for --help), so a verb pays only for the libraries it uses.
VERBS = {
    "scan": "splitscope.features.commands",
    "duplicates": "splitscope.relations.commands",
    "groups": "splitscope.groups.commands",
    "resplit": "splitscope.groups.commands",
    "probe": "splitscope.provenance.commands",
    "shift": "splitscope.provenance.commands",
    "metrics": "splitscope.evaluation.commands",
    "rescore": "splitscope.evaluation.commands",
    "effects": "splitscope.evaluation.commands",
    "pools": "splitscope.evaluation.commands",
    "attribution": "splitscope.evaluation.commands",
    "audit": "splitscope.audit.commands",
    "demo": "splitscope.audit.commands",
    "train": "splitscope.experiments.commands",
    "embed": "splitscope.experiments.commands",
    "explain": "splitscope.experiments.commands",
    "experiment": "splitscope.audit.experiment",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(VERBS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in VERBS:
            return None
        module = importlib.import_module(VERBS[name])
        return next(c for c in module.COMMANDS if c.name == name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="splitscope")
def app() -> None:
    """Audit a machine-learning benchmark for train/test contamination and for how evaluation
    choices move its headline score."""


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, mapping input errors to exit code 2 with a one-line message."""
    try:
        app.main(args=argv, prog_name="splitscope", standalone_mode=False)
    except InputError as exc:
        click.echo(f"error: {exc}", err=True)
        return 2
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:  # a verb's exit code: 1 a --fail-on condition held, 3 a layer failed
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except click.ClickException as exc:
        exc.show()
        return 2
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
