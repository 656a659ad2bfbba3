"""The audit: one run over every registered layer, one audit document.

- :mod:`splitscope.audit.protocol` — the layer protocol (name, needs, applies, run), the
  registry and the one guarded call;
- :mod:`splitscope.audit.run` — :func:`audit`: context, layer loop, document, outputs;
- :mod:`splitscope.audit.conditions` — ``--fail-on`` metrics, each declared once;
- :mod:`splitscope.audit.verdicts` — the verdict lines and notes, from the document alone;
- :mod:`splitscope.audit.commands` — the ``audit`` and ``demo`` verbs.

``splitscope.audit(...)`` and ``splitscope.audit.audit(...)`` run an audit.
"""

from __future__ import annotations

import sys
import types

from splitscope.audit.run import (
    EXIT_FAIL_ON,
    EXIT_INPUT_ERROR,
    EXIT_LAYER_FAILED,
    EXIT_OK,
    AuditResult,
    audit,
)

__all__ = ["EXIT_FAIL_ON", "EXIT_INPUT_ERROR", "EXIT_LAYER_FAILED", "EXIT_OK", "AuditResult",
           "audit"]


class _AuditPackage(types.ModuleType):
    """Lets ``splitscope.audit(...)`` run :func:`audit` while the package keeps its modules."""

    def __call__(self, *args, **kwargs) -> AuditResult:
        return audit(*args, **kwargs)


sys.modules[__name__].__class__ = _AuditPackage
