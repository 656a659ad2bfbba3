"""One extraction batch, as a worker process runs it.

This module and what it imports load no pandas: with the default extractor a worker builds
the batch's Arrow table from the plain lists and arrays of :func:`splitscope.features.extract.
extract_batch` (:func:`~splitscope.features.extract.arrow_from_batch`, no pandas either), so
each worker starts in a fraction of the time and the scanning process only commits it.
"""

from __future__ import annotations

import time


def run_batch(payload: tuple) -> tuple[object, float]:
    """Extract one batch: ``payload = (extractor, files, params)`` or ``(extractor, files,
    params, layout, fixed)``, ``extractor`` None for :func:`~splitscope.features.extract.
    extract_batch`. Returns the extractor's output and the seconds the extraction took. The
    output is a ``(table, thumbs)`` pair from an extractor that builds its own table; a raw
    batch dict otherwise, which, given the shard's Arrow schema ``layout`` and its whole
    columns ``fixed`` (file names and stat signature), comes back as ``{"arrow": table,
    "thumbs": thumbs}`` (built here, beside the extraction, instead of in the scanning
    process) when it has one row and one thumbnail per file."""
    extractor, files, params, *shard = payload
    if extractor is None:
        from splitscope.features.extract import extract_batch as extractor
    start = time.perf_counter()
    output = extractor(list(files), params)
    seconds = time.perf_counter() - start
    if shard and isinstance(output, dict) and len(output["rows"]) == len(files) == len(
            output["thumbs"]):
        from splitscope.features.extract import arrow_from_batch

        output = {"arrow": arrow_from_batch(output, *shard), "thumbs": output["thumbs"]}
    return output, seconds
