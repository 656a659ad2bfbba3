"""``--fail-on`` metrics are declared once: the help text and the error message come from the
same table that is evaluated."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from splitscope.cli import app
from splitscope.core.conditions import all_metrics, metric_table, parse_condition
from splitscope.errors import InputError


def test_help_lists_every_metric_with_what_it_reads():
    text = " ".join(CliRunner().invoke(app, ["audit", "--help"], terminal_width=10_000)
                    .output.split())
    for metric in all_metrics().values():
        assert metric.help_line() in text, metric.name
    assert "largest over the boundaries" in text


def test_unknown_metric_lists_the_table():
    with pytest.raises(InputError) as info:
        parse_condition("no_such_rate>0")
    assert metric_table() in str(info.value)
    assert all(name in str(info.value) for name in all_metrics())
