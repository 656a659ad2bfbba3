"""``--fail-on`` metrics are declared once: the help topic (``splitscope help fail-on``) and the
error message come from the same table that is evaluated."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from splitscope.cli import app
from splitscope.core.conditions import all_metrics, metric_table, parse_condition
from splitscope.errors import InputError


def test_help_lists_every_metric_with_what_it_reads():
    """``splitscope help fail-on`` holds the grammar and every metric; ``audit --help`` and
    ``demo --help`` point there in a line or two."""
    text = " ".join(CliRunner().invoke(app, ["help", "fail-on"]).output.split())
    for metric in all_metrics().values():
        assert metric.help_line() in text, metric.name
    assert "largest over the audited boundaries" in text
    assert "ops > >= < <= == !=" in text
    for verb in ("audit", "demo"):
        shown = " ".join(CliRunner().invoke(app, [verb, "--help"], terminal_width=10_000)
                         .output.split())
        assert "`splitscope help fail-on`" in shown
        assert not any(metric.help_line() in shown for metric in all_metrics().values())


def test_unknown_metric_lists_the_table():
    with pytest.raises(InputError) as info:
        parse_condition("no_such_rate>0")
    assert metric_table() in str(info.value)
    assert all(name in str(info.value) for name in all_metrics())
