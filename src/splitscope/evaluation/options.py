"""The evaluation layer's options (METHODS §5): what the saved prediction scores are, and how
their files are read when detection needs help (and :class:`ReadOptions`, how any table is read
by :mod:`splitscope.evaluation.readers`). The audit's ``--score-kind``, ``--sheet``,
``--header-row``, ``--sep`` and ``--decimal`` are generated from these fields;
``context.options.evaluation`` is one of these. This module imports no numerical library, so
that the command line's flags cost none."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

from splitscope.errors import InputError
from splitscope.options import option

__all__ = ["SCORE_KINDS", "EvaluationOptions", "ReadOptions", "sheet_arg"]

#: what saved prediction scores may be (declared, never guessed), in the flag's order
SCORE_KINDS = ("score", "probability", "logit")


@dataclass(frozen=True)
class ReadOptions:
    """How a table is read; ``None`` means detect (and record what was found).

    Attributes
    ----------
    sheet : str or int, optional
        Workbook sheet by name or 0-based index (a digit string is an index).
    header_row : int, optional
        1-based row number of the header (rows above it are skipped).
    sep, decimal : str, optional
        CSV delimiter and decimal mark.
    engine : {"auto", "calamine", "openpyxl"}
        Workbook parser; ``auto`` is calamine with openpyxl as the fallback.
    cache : path, optional
        Folder of the parsed-workbook cache (in the workspace); ``None`` for no cache.
    """

    sheet: str | int | None = None
    header_row: int | None = None
    sep: str | None = None
    decimal: str | None = None
    engine: str = "auto"
    cache: str | Path | None = None

    def key(self) -> dict:
        """The options that change the parsed table (the cache folder does not)."""
        d = asdict(self)
        d.pop("cache")
        return d


def sheet_arg(value: str | int | None) -> str | int | None:
    """``--sheet`` value: a digit string is a 0-based index, anything else a name."""
    if value is None or isinstance(value, int):
        return value
    return int(value) if str(value).strip().isdigit() else str(value)


def _separator(text: str) -> str:
    return {"\\t": "\t", "tab": "\t"}.get(text, text)


@dataclass(frozen=True)
class EvaluationOptions:
    """The saved predictions: what their scores are and how their files are read (``None``:
    detected, and what was found is recorded in the verdicts)."""

    group: ClassVar[str] = "evaluation"
    section: ClassVar[str] = "inputs"  # of ``splitscope audit --help``: how predictions read

    score_kind: str = option(
        "score", "What the prediction scores are (never guessed).", choices=SCORE_KINDS)
    sheet: str | int | None = option(
        None, "Workbook sheet of the predictions (NAME, INDEX).", kind=str,
        parse=sheet_arg)
    header_row: int | None = option(
        None, "Header row (1 = first) of the predictions.",
        kind=int, minimum=1)
    sep: str | None = option(None, "CSV delimiter of the predictions (sniffed).",
                             kind=str, parse=_separator)
    decimal: str | None = option(
        None, "CSV decimal mark of the predictions (detected).",
        choices=(".", ","))

    def __post_init__(self) -> None:
        if self.score_kind not in SCORE_KINDS:
            raise InputError(f"score_kind {self.score_kind!r} unknown; use one of "
                             f"{', '.join(SCORE_KINDS)}")
        object.__setattr__(self, "sheet", sheet_arg(self.sheet))

    def reading(self, workspace: str | Path | None = None) -> ReadOptions:
        """How the prediction files are read, with the parsed-table cache in ``workspace``."""
        return ReadOptions(sheet=self.sheet, header_row=self.header_row, sep=self.sep,
                           decimal=self.decimal,
                           cache=Path(workspace) / "parsed-tables" if workspace else None)
