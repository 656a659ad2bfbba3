"""The command line. Thin: parses, calls the API, prints, sets the exit code.

Exit codes (:mod:`splitscope.exit_codes`): 0 success, 1 a ``--fail-on`` condition held, 2 usage
or input error (a release of which no file could be read is one), 3 an audit was written but
one of its layers failed (recorded as ``not assessed``), 4 an internal error (one line on the
terminal, the traceback in a log file), 5 a ``--fail-on`` metric was not measured (the audit
was written; ``--allow-unmeasured`` lets it pass), 141 the reader of stdout went away
(``| head``; nothing is printed), 130 interrupted. Each layer contributes
its verbs from ``splitscope.<layer>.commands`` (a list ``COMMANDS`` of click commands), so the
verbs live next to the code they call.
"""

from __future__ import annotations

import errno
import importlib
import os
import secrets
import sys
import tempfile
import time
import traceback
from pathlib import Path

import click

from splitscope import __version__
from splitscope.errors import InputError
from splitscope.exit_codes import EXIT_INPUT_ERROR, EXIT_INTERNAL

# verb → module whose ``COMMANDS`` list holds it. A module is imported only when its verb runs
# (or shows its --help), so a verb pays only for the libraries it uses.
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
    "audit": "splitscope.core.commands",
    "demo": "splitscope.workflows.demo",
    "croissant": "splitscope.core.croissant",
    "card": "splitscope.core.card",
    "reforms": "splitscope.core.reforms",
    "summary": "splitscope.core.summary",
    "train": "splitscope.experiments.commands",
    "embed": "splitscope.experiments.commands",
    "explain": "splitscope.experiments.commands",
    "experiment": "splitscope.workflows.experiment",
    "help": "splitscope.core.topics",
}

#: what ``splitscope --help`` says of each verb (listing the verbs imports none of them)
SUMMARIES = {
    "scan": "Read a release and cache its per-file features.",
    "duplicates": "Byte, pixel, hash and NCC copies across a boundary.",
    "groups": "Patients or videos on both sides of a boundary.",
    "resplit": "Group-disjoint train/val/test parts and folds.",
    "probe": "Header-only and image-statistics probes of the label.",
    "shift": "Partition classifier: can images tell the splits apart?",
    "metrics": "Metrics of one prediction file on every view.",
    "rescore": "Re-score submissions on cleaner evaluation views.",
    "effects": "Protocol effects and paired contrasts from a run table.",
    "pools": "Training-pool controls from a manifest.",
    "attribution": "Attribution mass outside anatomy: leaked vs clean rows.",
    "audit": "Audit a release with every layer (the one command).",
    "demo": "Make the demo benchmark with planted leaks and audit it.",
    "croissant": "Add croissant.json to a finished audit.",
    "card": "Add dataset-card.md to a finished audit.",
    "reforms": "Add the REFORMS checklist to a finished audit.",
    "summary": "Print the summary of a finished audit.",
    "train": "Controlled re-training of backbones ([torch]).",
    "embed": "Backbone embeddings per released path ([torch]).",
    "explain": "Grad-CAM maps of a finished run ([torch]).",
    "experiment": "Train, score, explain and audit in one run ([torch]).",
    "help": "Help topics: --fail-on's metrics, the layers.",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(VERBS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The verbs with their :data:`SUMMARIES`, without importing their modules."""
        with formatter.section("Commands"):
            formatter.write_dl([(verb, SUMMARIES[verb]) for verb in self.list_commands(ctx)])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in VERBS:
            return None
        module = importlib.import_module(VERBS[name])
        command = next(c for c in module.COMMANDS if c.name == name)
        writes = any(param.name in OUTPUT_PARAMS for param in command.params)
        if command.callback is not None and writes \
                and not getattr(command.callback, "_guarded", False):
            command.callback = _guarded(command.callback)
        return command


#: the parameters that name what a verb writes (the outputs that
#: :func:`splitscope.manifest.roots.refuse_output_locations` checks and that
#: :func:`splitscope.features.workspace.output_locks` locks); a verb with none of them (``help``)
#: runs unguarded, without importing either module
OUTPUT_PARAMS = frozenset({"out_dir", "out_file", "workspace", "directory"})


def _guarded(callback):
    """The verb's callback, run after its outputs are checked against its inputs (the one
    output-location rule, :mod:`splitscope.manifest.roots`), before anything is written, and
    holding the lock of each output it writes (:func:`splitscope.features.workspace.
    output_locks`: a second run on the same ``--out`` at once is refused in one sentence)."""
    import functools

    @functools.wraps(callback)
    def run(*args, **params):
        from splitscope.features.workspace import output_locks
        from splitscope.manifest.roots import refuse_output_locations

        refuse_output_locations(params)
        with output_locks(params):
            return callback(*args, **params)

    run._guarded = True
    return run


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="splitscope")
def app() -> None:
    """Audit a machine-learning benchmark for train/test contamination and for how evaluation
    choices move its headline score."""


EXIT_BROKEN_PIPE = 141  # as a shell reports a process ended by SIGPIPE

LOG_PREFIX = "splitscope-error-"
"""Crash logs are ``splitscope-error-<UTC time>-<pid>-<random>.log``: a new file each time."""
TRACEBACK_VARIABLE = "SPLITSCOPE_TRACEBACK"  # set to 1 to print the traceback on stderr too


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI and map every outcome to its exit code (module docstring).

    An input error is one line and exit 2; so is a full disk or a file-size limit met while
    writing (``ENOSPC``, ``EDQUOT``, ``EFBIG``; every output is written to a temporary name and
    renamed when complete, so nothing is left half-written). An unexpected error is one line
    naming what failed and the log file holding its traceback (a new file under ``--out``, else
    ``--workspace``, else the temporary folder), exit 4, so a crash is never read as a held
    ``--fail-on`` condition. A closed stdout (``splitscope ... | head``) ends quietly.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        app.main(args=args, prog_name="splitscope", standalone_mode=False)
    except InputError as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_INPUT_ERROR
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:  # a verb's exit code: 1 held, 3 a layer failed, 5 not measured
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except click.ClickException as exc:
        exc.show()
        return 2
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        if exc.errno not in _FULL_ERRNOS:
            return _internal_error(args, exc)
        where = f" {exc.filename}" if exc.filename else ""
        click.echo(f"error: cannot write{where}: {exc.strerror or exc}; free some space or "
                   f"raise the file-size limit (ulimit -f), or write elsewhere, and rerun",
                   err=True)
        return 2
    except Exception as exc:  # noqa: BLE001 - every other error is a bug: logged, exit 4
        return _internal_error(args, exc)
    return 0


_FULL_ERRNOS = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}


def _internal_error(args: list[str], exc: BaseException) -> int:
    log = _write_log(args, exc)
    where = f"traceback in {log}" if log else "no log file could be written"
    click.echo(f"internal error: {type(exc).__name__}: {str(exc)[:200]} ({where}); "
               f"please report it", err=True)
    if os.environ.get(TRACEBACK_VARIABLE) == "1":
        traceback.print_exception(exc, file=sys.stderr)
    return EXIT_INTERNAL


def _option_value(args: list[str], names: tuple[str, ...]) -> str | None:
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _write_log(args: list[str], exc: BaseException) -> Path | None:
    """Write the traceback of ``exc`` to a new log file in the first existing folder of
    ``--out``, ``--workspace`` and the temporary folder; its path, or None when none is
    writable. The file is created under a name of its own (:data:`LOG_PREFIX`) with
    ``O_CREAT | O_EXCL | O_NOFOLLOW``: an existing file or a symbolic link planted there is
    never opened, followed or overwritten."""
    text = (f"splitscope {__version__} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n"
            f"command: splitscope {' '.join(args)}\n\n"
            + "".join(traceback.format_exception(exc)))
    name = (f"{LOG_PREFIX}{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}-"
            f"{secrets.token_hex(4)}.log")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    folders = [_option_value(args, names) for names in (("--out",), ("--workspace", "-w"))]
    for folder in [f for f in folders if f] + [tempfile.gettempdir()]:
        path = Path(folder) / name
        try:
            if not Path(folder).is_dir():
                continue
            fd = os.open(path, flags, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
                fh.write(text)
            return path.resolve()
        except OSError:
            continue
    return None


def _silence_stdout() -> None:
    """Point stdout at the null device, so the interpreter's final flush into the closed pipe
    raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real descriptor (captured output)
        pass


if __name__ == "__main__":
    sys.exit(main())
