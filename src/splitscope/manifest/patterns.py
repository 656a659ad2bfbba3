"""User regular expressions (``--group-regex``, ``--upstream-group-regex``) on a linear-time
engine.

A pattern the user writes is run over names the release chose, so neither side may be trusted
to be tame: ``(?P<group>(a+)+)$`` over a name of 32 ``a`` backtracks for hours in Python's
``re``. Patterns run on RE2 (``google-re2``), whose matching time is linear in the name's
length whatever the pattern, rather than on a backtracking engine with a time limit per match:
a limit makes the outcome depend on the machine's load, and a limit per match still multiplies
by the number of rows. RE2 gives every name's result, with no clock, on every machine.

What RE2 lacks is refused with an :class:`~splitscope.errors.InputError` that names the
pattern (exit 2): backreferences, lookahead and lookbehind, atomic groups, possessive
quantifiers, conditionals and ``(?x)``. The pattern is first checked by Python's ``re`` (the
syntax users know, and its error messages), then rewritten so that it means on RE2 what it
meant in Python: ``\\d``, ``\\w`` and ``\\s`` match Unicode digits, word characters and spaces
as Python's do (RE2's match ASCII only), ``\\Z`` is RE2's ``\\z``, ``\\uXXXX`` and
``\\N{NAME}`` become ``\\x{XXXX}``, and ``{,n}`` is ``{0,n}``. Two differences remain:
``\\b`` and ``\\B`` know ASCII word characters only (a pattern using them over a name that is
not ASCII is refused), and ``$`` does not match before a final newline.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

import pandas as pd

from splitscope.errors import InputError

__all__ = ["UserPattern", "compile_pattern", "re2_syntax"]

# Python's classes in RE2 syntax, equal on every character Python's Unicode database assigns
_WORD, _SPACE = r"\p{L}\p{N}_", r"\t-\r\x1c-\x1f\x85\p{Z}"
_OUTSIDE = {"d": r"\p{Nd}", "D": r"\P{Nd}", "w": f"[{_WORD}]", "W": f"[^{_WORD}]",
            "s": f"[{_SPACE}]", "S": f"[^{_SPACE}]", "Z": r"\z"}
_INSIDE = {"d": r"\p{Nd}", "D": r"\P{Nd}", "w": _WORD, "s": _SPACE}
_HEX_DIGITS = {"u": 4, "U": 8}
_OPEN_MIN = re.compile(r"\{,\d*\}")
_UNSUPPORTED = ("backreferences, lookahead and lookbehind, atomic groups, possessive "
                "quantifiers, conditionals and (?x) are not supported")


class _Refused(Exception):
    """A construct that has no RE2 form with Python's meaning."""


@dataclass(frozen=True)
class UserPattern:
    """A user's pattern compiled for RE2; :meth:`extract` applies it to a column."""

    pattern: str  # as the user wrote it
    what: str  # how messages name it, e.g. "group regex"
    groupindex: dict[str, int]
    ascii_boundary: bool  # uses \b or \B, which RE2 knows for ASCII only
    _compiled: Any

    def extract(self, values: pd.Series) -> pd.DataFrame:
        """Named groups of the first match in each value (``re.search``), one ``string``
        column per named group: ``<NA>`` where the pattern did not match, the group did not
        take part, or the value is missing (as ``Series.str.extract``)."""
        text = values.astype("string")
        if self.ascii_boundary and not text.dropna().map(str.isascii).all():
            raise InputError(
                f"{self.what} {self.pattern!r} uses \\b or \\B, which the linear-time engine "
                f"(RE2) applies to ASCII letters only, and some names are not ASCII; write the "
                f"boundary as a class instead, e.g. (?:^|[^\\w]) or [._-]")
        names = sorted(self.groupindex, key=self.groupindex.get)
        index = [self.groupindex[n] for n in names]
        columns: list[list] = [[] for _ in names]
        search = self._compiled.search
        for value in text.to_numpy(dtype=object, na_value=None):
            m = None if value is None else search(value.encode("utf-8", "surrogatepass"))
            for column, i in zip(columns, index):
                got = m.group(i) if m is not None else None
                column.append(None if got is None else got.decode("utf-8", "surrogatepass"))
        return pd.DataFrame({n: pd.array(c, dtype="string") for n, c in zip(names, columns)},
                            index=values.index)


def compile_pattern(pattern: str, what: str = "group regex") -> UserPattern:
    """Check ``pattern`` with Python's ``re`` and compile it for RE2 (see the module
    docstring). An invalid pattern, or one RE2 cannot run with Python's meaning, is an
    :class:`InputError` naming it."""
    try:
        python = re.compile(pattern)
    except re.error as exc:
        raise InputError(f"{what} {pattern!r} does not compile: {exc}") from exc
    try:
        translated, boundary = _to_re2(pattern)
    except _Refused as exc:
        raise InputError(f"{what} {pattern!r} cannot run on the linear-time engine (RE2): "
                         f"{exc}") from None
    import re2

    options = re2.Options()
    options.log_errors = False
    try:
        compiled = re2.compile(translated.encode("utf-8", "surrogatepass"), options=options)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(
            exc.args[0], bytes) else str(exc)
        raise InputError(f"{what} {pattern!r} cannot run on the linear-time engine (RE2): "
                         f"{reason}; {_UNSUPPORTED}: rewrite it with groups, classes and "
                         f"quantifiers") from None
    return UserPattern(pattern, what, dict(python.groupindex), boundary, compiled)


def re2_syntax(pattern: str) -> str:
    """``pattern`` (valid for Python's ``re``) in RE2 syntax with Python's meaning: the
    translation :func:`compile_pattern` runs, for a vectorised RE2 engine
    (``pyarrow.compute.extract_regex``) that must find what ``--group-regex`` finds.

    Raises
    ------
    InputError
        When RE2 cannot run the pattern with Python's meaning.
    """
    try:
        return _to_re2(pattern)[0]
    except _Refused as exc:
        raise InputError(f"{pattern!r} cannot run on the linear-time engine (RE2): "
                         f"{exc}") from None


def _to_re2(pattern: str) -> tuple[str, bool]:
    """``pattern`` (valid for Python's ``re``) in RE2 syntax with Python's meaning, and
    whether it uses ``\\b``/``\\B``."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = boundary = False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            e = pattern[i + 1]
            if e in _HEX_DIGITS:
                end = i + 2 + _HEX_DIGITS[e]
                out.append(f"\\x{{{pattern[i + 2:end]}}}")
                i = end
            elif e == "N":  # \N{NAME}; Python checked the name
                end = pattern.index("}", i)
                out.append(f"\\x{{{ord(unicodedata.lookup(pattern[i + 3:end])):x}}}")
                i = end + 1
            elif in_class and e in "WS":
                raise _Refused(f"\\{e} inside [...] has no Unicode form there; write "
                               f"(?:\\{e}|[...]) instead")
            else:
                boundary |= not in_class and e in "bB"
                out.append((_INSIDE if in_class else _OUTSIDE).get(e, pattern[i:i + 2]))
                i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
            out.append(r"\[" if c == "[" else c)  # RE2 reads [:alpha:] inside a class
            i += 1
        elif c == "[":
            j = i + 1 + (pattern[i + 1:i + 2] == "^")
            out.append(pattern[i:j])
            if pattern[j:j + 1] == "]":  # a ] first in a class is a literal
                out.append(r"\]")
                j += 1
            in_class, i = True, j
        elif c == "{" and _OPEN_MIN.match(pattern, i):
            out.append("{0,")
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out), boundary
