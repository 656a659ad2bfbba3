"""Verbs above the core and the layers: ``demo`` (make the demo benchmark, audit it, score the
audit against what was planted) and ``experiment`` (pools → train → effects → explain → one
audit)."""
