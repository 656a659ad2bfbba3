"""The benchmarks' common last step: their report as indented JSON, printed and, when asked,
written to a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def emit(report: Any, path: Path | None = None, *, default: Any = None) -> str:
    """Print ``report`` as indented JSON (``default`` for values JSON lacks) and write the
    same text to ``path`` when one is given; returns the text."""
    text = json.dumps(report, indent=2, default=default)
    print(text)
    if path:
        path.write_text(text)
    return text
