"""The audit: one run over every registered layer, one audit document.

- :mod:`splitscope.audit.protocol` — the layer protocol (name, needs, applies, run), the
  registry and the one guarded call;
- :mod:`splitscope.audit.run` — :func:`~splitscope.audit.run.audit`: context, layer loop,
  document, outputs;
- :mod:`splitscope.audit.conditions` — ``--fail-on`` metrics, each declared once;
- :mod:`splitscope.audit.verdicts` — the verdict lines and notes, from the document alone;
- :mod:`splitscope.audit.commands` — the ``audit`` and ``demo`` verbs.

``splitscope.audit(...)`` is that function (``splitscope`` binds the name to it).
"""
