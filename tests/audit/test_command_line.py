"""The audit verb at the terminal: a progress line per stage on stderr whether it is a terminal
or not, its ``--help`` in sections, and the flags generated from option groups found without
importing a layer."""

from __future__ import annotations

import re

import pytest
from audit_helpers import tiny_release
from click.testing import CliRunner

from splitscope.cli import app
from splitscope.core.options import core_groups
from splitscope.core.protocol import flag_groups, option_groups, registered_layers
from splitscope.options import SECTIONS, field_section, flag_fields


@pytest.mark.slow  # a whole demo audit in a subprocess
def test_progress_lines_on_a_captured_stderr(tmp_path):
    """Captured stderr is no terminal: still one line as each layer starts and one as it
    ends, with its records and seconds, and the scan's line; ``--quiet`` silences them."""
    release = tiny_release(tmp_path / "release")
    res = CliRunner().invoke(app, ["audit", str(release), "--out", str(tmp_path / "out"),
                                   "--workers", "1", "--resamples", "50", "--json"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    lines = res.stderr.splitlines()
    assert all(line.startswith("splitscope audit [") for line in lines), lines
    names = [layer.name for layer in registered_layers()]
    for i, name in enumerate(names, 1):
        step = re.escape(f"layer {i}/{len(names)} {name}")
        started = [line for line in lines if re.search(rf"\] {step}: started on \d+ rows", line)]
        ended = [line for line in lines
                 if re.search(rf"\] {step}: [a-z ]+, \d+ records? in \d+\.\d s$", line)]
        assert len(started) == len(ended) == 1, (name, lines)
    assert any(re.search(r"\] scan: \d+ rows, \d+ files \(\d+ read, \d+ from the cache\) in "
                         r"\d+\.\d s$", line) for line in lines), lines
    assert all(re.match(r"splitscope audit \[ *\d+\.\d s\] ", line) for line in lines)

    quiet = CliRunner().invoke(app, ["audit", str(release), "--out", str(tmp_path / "out"),
                                     "--workers", "1", "--resamples", "50", "--quiet"],
                               catch_exceptions=False)
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stderr == ""


def test_audit_help_in_sections_and_short():
    text = CliRunner().invoke(app, ["audit", "--help"]).output
    titles = [line[:-1] for line in text.splitlines() if line.endswith(":") and
              not line.startswith(" ")]
    assert titles == [*SECTIONS.values(), "Other"]
    assert len(text.splitlines()) < 95  # at click's default width of 80 columns
    sections = dict(re.findall(r"\n([A-Z][^\n]*):\n((?:  [^\n]*\n?)+)", text))
    assert "--fail-on" in sections["Gates"] and "--workers" in sections["Performance"]
    assert "--tau" in sections["What to check"] and "--group-regex" in sections["Inputs"]
    assert "--json" in sections["Outputs"] and "--quiet" in sections["Outputs"]


def test_every_flag_names_a_section():
    groups = [*core_groups().values(), *flag_groups().values()]
    for group in groups:
        for f in flag_fields(group):
            assert field_section(group, f) in SECTIONS, (group.__name__, f.name)


def test_flag_groups_are_the_registered_layers_option_groups():
    """The flags come from the layer packages' options modules; the audit reads the layers'
    own groups: the same classes under the same names."""
    assert flag_groups() == option_groups()
