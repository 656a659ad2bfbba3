"""The evaluation layer's options (METHODS §5): what the saved prediction scores are, and how
their files are read when detection needs help. The audit's ``--score-kind``, ``--sheet``,
``--header-row``, ``--sep`` and ``--decimal`` are generated from these fields;
``context.options.evaluation`` is one of these."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from splitscope.errors import InputError
from splitscope.evaluation.readers import ReadOptions, sheet_arg
from splitscope.options import option

__all__ = ["SCORE_KINDS", "EvaluationOptions"]

#: what saved prediction scores may be (declared, never guessed), in the flag's order
SCORE_KINDS = ("score", "probability", "logit")


def _separator(text: str) -> str:
    return {"\\t": "\t", "tab": "\t"}.get(text, text)


@dataclass(frozen=True)
class EvaluationOptions:
    """The saved predictions: what their scores are and how their files are read (``None``:
    detected, and what was found is recorded in the verdicts)."""

    group: ClassVar[str] = "evaluation"

    score_kind: str = option(
        "score", "What the saved prediction scores are (declared, never guessed); calibration "
                 "metrics and reliability diagrams need probability or logit.",
        choices=SCORE_KINDS)
    sheet: str | int | None = option(
        None, "Workbook sheet of the prediction files: NAME or 0-based INDEX (default: the "
              "first; a note says when another sheet holds the paths).", kind=str,
        parse=sheet_arg)
    header_row: int | None = option(
        None, "Row number (1 = first) of the prediction files' header (default: detected).",
        kind=int, minimum=1)
    sep: str | None = option(None, "CSV delimiter of the prediction files (default: sniffed).",
                             kind=str, parse=_separator)
    decimal: str | None = option(
        None, "CSV decimal mark of the prediction files (default: detected).",
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
