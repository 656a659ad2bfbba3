"""The audit: one run over every registered layer, one audit document.

- :mod:`splitscope.core.protocol` — the layer protocol (name, needs, applies, run), the
  registry and the one guarded call;
- :mod:`splitscope.core.run` — :func:`~splitscope.core.run.audit`: context, layer loop,
  document, outputs;
- :mod:`splitscope.core.conditions` — ``--fail-on`` metrics, each declared once;
- :mod:`splitscope.core.verdicts` — the verdict lines and notes, from the document alone;
- :mod:`splitscope.core.commands` — the ``audit`` and ``demo`` verbs.

``splitscope.audit(...)`` is that function (``splitscope`` binds the name to it).
"""
