"""The published JSON Schema of the audit document and of one audit record (METHODS §6.1).

``audit.schema.json`` (packaged beside this module) describes ``audit.json``: run metadata,
inputs with their SHA-256, every option by group, software versions, boundaries, one record per finding,
the score card, the ``--fail-on`` outcomes and every output file with its SHA-256. A record is
``$defs/record`` of the same schema, so a pipeline can validate one record alone.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

from splitscope.errors import InputError

SCHEMA_PATH = Path(__file__).with_name("audit.schema.json")
SCHEMA_VERSION = "2.0"


@functools.lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    """The audit-document schema (JSON Schema draft 2020-12) as a dict."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def record_schema() -> dict[str, Any]:
    """The schema of one audit record: ``$defs/record`` with the shared definitions."""
    schema = load_schema()
    return {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": "#/$defs/record"}


def _errors(instance: Any, schema: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    found = sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    out = []
    for err in found:
        where = "/".join(str(p) for p in err.absolute_path) or "(document)"
        out.append(f"{where}: {err.message}")
    return out


def validation_errors(audit: dict[str, Any]) -> list[str]:
    """Every schema violation of an audit document, as ``json/path: message`` lines (empty
    when the document is valid)."""
    return _errors(audit, load_schema())


def validate(audit: dict[str, Any]) -> None:
    """Raise :class:`~splitscope.errors.InputError` listing every violation when ``audit`` does
    not conform to the published schema; return ``None`` when it does."""
    errors = validation_errors(audit)
    if errors:
        shown = "\n  ".join(errors[:20])
        more = f"\n  ... and {len(errors) - 20} more" if len(errors) > 20 else ""
        raise InputError(f"audit document does not match the schema:\n  {shown}{more}")


def validate_record(record: dict[str, Any]) -> None:
    """Like :func:`validate`, for one record dict (``AuditRecord.to_dict()``)."""
    errors = _errors(record, record_schema())
    if errors:
        raise InputError(f"record {record.get('id')!r} does not match the schema: "
                         + "; ".join(errors[:10]))
