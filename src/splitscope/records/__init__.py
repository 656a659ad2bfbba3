"""Audit records (METHODS §6.1): every finding of every layer as one structured record."""

from splitscope.records.model import (
    STATUSES,
    AuditRecord,
    LayerResult,
    Uncertainty,
    file_fingerprint,
    not_run_record,
    sha256_file,
    software_versions,
)

__all__ = ["STATUSES", "AuditRecord", "LayerResult", "Uncertainty", "file_fingerprint",
           "not_run_record", "sha256_file", "software_versions"]
