"""splitscope: audit machine-learning benchmarks for train/test contamination and for how
evaluation choices move a headline score.

Names are imported on first use (``splitscope.build_manifest`` loads pandas only then), so
worker processes that extract features start quickly.

``splitscope.audit`` is the function :func:`splitscope.core.run.audit`; the audit's machinery
(the layer protocol, the options, the document) is the package :mod:`splitscope.core`.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from splitscope.errors import InputError

try:
    __version__ = _version("splitscope")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

_MANIFEST = ("Arrays", "build_manifest", "read_folder", "read_list")

__all__ = ["Arrays", "AuditResult", "InputError", "__version__", "audit", "build_manifest",
           "read_folder", "read_list", "scan"]


def __getattr__(name: str):
    if name in _MANIFEST:
        from splitscope import manifest

        return getattr(manifest, name)
    if name == "scan":
        from splitscope.features.scanning import scan

        return scan
    if name == "audit":  # the function that runs an audit (loads pandas, so not before)
        from splitscope.core.run import audit

        globals()["audit"] = audit
        return audit
    if name == "AuditResult":  # what an audit returns; AuditResult.load reopens a folder
        from splitscope.core.run import AuditResult

        return AuditResult
    raise AttributeError(f"module 'splitscope' has no attribute {name!r}")
