"""splitscope: audit machine-learning benchmarks for train/test contamination and for how
evaluation choices move a headline score."""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("splitscope")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

from splitscope.errors import InputError
from splitscope.manifest import build_manifest, read_folder, read_list

__all__ = ["InputError", "__version__", "build_manifest", "read_folder", "read_list"]
