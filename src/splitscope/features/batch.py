"""One extraction batch, as a worker process runs it.

This module and what it imports load no pandas: with the default extractor a worker returns
plain lists and arrays (:func:`splitscope.features.extract.extract_batch`) and the scanning
process builds the batch's Arrow table from them (:func:`~splitscope.features.extract.
arrow_from_batch`, no pandas either), so each worker starts in a fraction of the time.
"""

from __future__ import annotations

import time


def run_batch(payload: tuple) -> tuple[object, float]:
    """Extract one batch: ``payload = (extractor, files, params)``, ``extractor`` None for
    :func:`~splitscope.features.extract.extract_batch`. Returns the extractor's output (a raw
    batch dict, or a ``(table, thumbs)`` pair) and the seconds it took."""
    extractor, files, params = payload
    if extractor is None:
        from splitscope.features.extract import extract_batch as extractor
    start = time.perf_counter()
    output = extractor(list(files), params)
    return output, time.perf_counter() - start
