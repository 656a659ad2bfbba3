"""The exit codes of ``splitscope audit``, in one table: the audit's result
(:func:`splitscope.core.run.audit`), its ``--help``, the command line's entry point, the job
summary (:mod:`splitscope.records.summary_markdown`) and the README's table read them here (a
test checks the README and the help against :data:`EXIT_CODES`).

A gate never passes on nothing: a ``--fail-on`` condition whose metric the run did not measure
fails the run with :data:`EXIT_NOT_MEASURED` (as pytest's "no tests collected"), unless
``--allow-unmeasured``; a release of which no file could be read is an input error
(:data:`EXIT_INPUT_ERROR`). When several apply, the first of :data:`PRECEDENCE` is the code.
"""

from __future__ import annotations

__all__ = ["EXIT_CODES", "EXIT_FAIL_ON", "EXIT_INPUT_ERROR", "EXIT_INTERNAL",
           "EXIT_LAYER_FAILED", "EXIT_NOT_MEASURED", "EXIT_OK", "PRECEDENCE", "WRITTEN",
           "exit_codes_help"]

EXIT_OK = 0
EXIT_FAIL_ON = 1
EXIT_INPUT_ERROR = 2
EXIT_LAYER_FAILED = 3
EXIT_INTERNAL = 4
EXIT_NOT_MEASURED = 5

#: what each exit code means, as the help text, the job summary and the README say it
EXIT_CODES = {
    EXIT_OK: "passed",
    EXIT_FAIL_ON: "a --fail-on condition held",
    EXIT_INPUT_ERROR: "usage or input error, nothing written",
    EXIT_LAYER_FAILED: "a layer failed, written without it",
    EXIT_INTERNAL: "internal error (splitscope-error-*.log)",
    EXIT_NOT_MEASURED: "a --fail-on metric was not measured",
}

#: the exit codes with which an audit wrote its ``audit.json``
WRITTEN = (EXIT_OK, EXIT_FAIL_ON, EXIT_LAYER_FAILED, EXIT_NOT_MEASURED)

#: of the codes an audit that was written can end with, the one that wins: a held condition,
#: then a failed layer, then an unmeasured gate (2 and 4 stop the run before it is written)
PRECEDENCE = (EXIT_FAIL_ON, EXIT_LAYER_FAILED, EXIT_NOT_MEASURED, EXIT_OK)


def exit_codes_help() -> str:
    """The exit codes in one paragraph, for ``splitscope audit --help``."""
    codes = "; ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items())
    return f"Exit codes: {codes} (several: the first of {', '.join(map(str, PRECEDENCE))})."
