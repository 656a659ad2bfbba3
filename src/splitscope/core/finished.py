"""Adding files to a finished audit folder (the ``croissant``, ``card`` and ``reforms``
verbs): the folder's ``audit.json`` is read and checked once, and the new files are published
with everything the audit wrote carried over, by the one publish mechanism
(:func:`splitscope.records.publish.publishing`), so a kill leaves either the folder as it was
or the folder with the new files, and ``artifacts.json`` lists them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["adding_to"]


@contextlib.contextmanager
def adding_to(out_dir: str | Path, writes: Sequence[str], *,
              force: bool = False) -> Iterator[tuple[dict[str, Any], Any]]:
    """Yield ``(audit document, staging folder)`` for writing ``writes`` (paths relative to
    ``out_dir``) into the finished audit in ``out_dir``; the audit's other files carry over.

    Raises
    ------
    InputError
        When ``out_dir`` holds no audit document of the schema this splitscope reads, or files
        the audit did not write (kept, with ``force``).
    """
    from splitscope.core.run import caches
    from splitscope.records.croissant import load_audit
    from splitscope.records.publish import publishing

    out = Path(out_dir)
    doc = load_audit(out)  # refuses a folder without an audit, or of another schema
    workspace = (doc.get("options") or {}).get("run", {}).get("workspace")
    with publishing(out, force=force, keep=caches(out, workspace), writes=tuple(writes),
                    what="OUT_DIR") as folder:
        folder.carry()  # audit.json, the report and the lists stay as they are
        yield doc, folder
