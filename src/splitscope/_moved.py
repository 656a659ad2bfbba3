"""Old module paths that still import, with a DeprecationWarning, as the module that now
holds their code (the same module object, so attributes and monkeypatches are shared), or,
for an old module whose code now lives in several, as a module that reads names from them."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

#: old module → module that holds its code now (or the modules, in lookup order)
MOVED: dict[str, str | tuple[str, ...]] = {
    "splitscope.probes.audit": ("splitscope.groups.layer", "splitscope.provenance.layer"),
    "splitscope.probes": "splitscope.provenance",
    "splitscope.probes.header_probe": "splitscope.provenance.header_probe",
    "splitscope.probes.association": "splitscope.provenance.association",
    "splitscope.probes.partition": "splitscope.provenance.partition",
    "splitscope.probes.stats": "splitscope.provenance.stats",
    "splitscope.probes.commands": "splitscope.provenance.commands",
    "splitscope.relations.audit": "splitscope.relations.layer",
    "splitscope.relations.groups": "splitscope.groups.overlap",
    "splitscope.relations.recovery": "splitscope.groups.recovery",
    "splitscope.relations.resplit": "splitscope.groups.resplit",
    "splitscope.evaluation.audit": "splitscope.evaluation.layer",
    "splitscope.report.audit": "splitscope.audit.run",
    "splitscope.report.commands": "splitscope.audit.commands",
    "splitscope.report.demo": "splitscope.audit.demo",
}


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        target = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {' and '.join(_names(target))}; import it from "
                      "there", DeprecationWarning, stacklevel=3)
        if isinstance(target, str):
            return importlib.import_module(target)
        merged = types.ModuleType(spec.name)
        sources = [importlib.import_module(t) for t in target]

        def __getattr__(name: str):
            for source in sources:
                if hasattr(source, name):
                    return getattr(source, name)
            raise AttributeError(f"module {spec.name!r} has no attribute {name!r}")

        merged.__getattr__ = __getattr__
        return merged

    def exec_module(self, module) -> None:
        """The target module is already executed."""


def _names(target: str | tuple[str, ...]) -> tuple[str, ...]:
    return (target,) if isinstance(target, str) else target


def install() -> None:
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())  # before the path finder, which would load
        # a second copy of a moved module through its old package's new __path__
