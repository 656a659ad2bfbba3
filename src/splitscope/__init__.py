"""splitscope: audit machine-learning benchmarks for train/test contamination and for how
evaluation choices move a headline score.

Names are imported on first use (``splitscope.build_manifest`` loads pandas only then), so
worker processes that extract features start quickly.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from splitscope import _moved
from splitscope.errors import InputError

_moved.install()

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
    if name == "audit":  # the package, callable: splitscope.audit(...) runs an audit
        import splitscope.audit

        return splitscope.audit
    if name == "AuditResult":  # what an audit returns; AuditResult.load reopens a folder
        from splitscope.audit.run import AuditResult

        return AuditResult
    raise AttributeError(f"module 'splitscope' has no attribute {name!r}")
