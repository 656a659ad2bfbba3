"""Progress lines on stderr: one per stage of a run (the scan, each layer's start and end, the
outputs), each with the seconds since the run started, whether stderr is a terminal or not (a
CI log, a notebook, a pipe). ``progress=False`` (``--quiet``) silences them; ``None`` (the
default) and ``True`` print them. On a terminal the scan also draws its live bar
(:mod:`splitscope.features.scanning`)."""

from __future__ import annotations

import sys
import time

__all__ = ["ProgressLines"]


class ProgressLines:
    """Writes ``PREFIX [  12.3 s] text`` lines on stderr (``sys.stderr`` when the line is
    written, so a captured stream gets them), or nothing when disabled; false when disabled.

    Parameters
    ----------
    progress : bool or None
        ``False`` silences the lines; ``None`` and ``True`` print them.
    prefix : str
        What starts every line (``splitscope audit``).
    """

    def __init__(self, progress: bool | None, prefix: str = "splitscope") -> None:
        self.enabled = progress is not False
        self.prefix = prefix
        self.started = time.perf_counter()

    def __bool__(self) -> bool:
        return self.enabled

    def __call__(self, text: str) -> None:
        if self.enabled:
            elapsed = time.perf_counter() - self.started
            print(f"{self.prefix} [{elapsed:6.1f} s] {text}", file=sys.stderr, flush=True)
