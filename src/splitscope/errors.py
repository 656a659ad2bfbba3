"""Errors a user can act on."""


class InputError(ValueError):
    """Input that cannot be used as given: a missing column, an empty list, an unknown split.

    The message says what was wrong and what was found, so the user can fix the input. The CLI
    turns it into exit code 2.
    """
