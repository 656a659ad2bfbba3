"""The command line frame: verb registry, exit codes, help and how quickly it appears."""

import importlib
import subprocess
import sys

import pytest
from click.testing import CliRunner

from splitscope import cli


def test_every_verb_is_registered_once_where_it_lives():
    listed = {}
    for module in set(cli.VERBS.values()):
        for command in importlib.import_module(module).COMMANDS:
            listed[command.name] = module
    assert listed == cli.VERBS


def test_help_version_and_unknown_verb(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(verb in out for verb in cli.VERBS)
    assert cli.main(["--version"]) == 0
    assert cli.main(["no-such-verb"]) == 2


def test_input_error_exits_2(tmp_path, capsys):
    assert cli.main(["scan", str(tmp_path / "absent"), "--workspace", str(tmp_path / "w")]) == 2
    assert "error" in capsys.readouterr().err.lower()


def test_exit_codes_are_documented_from_one_table():
    """The README's table, the audit's --help, the job summary and the Action's output say the
    exit codes of splitscope.exit_codes.EXIT_CODES."""
    from pathlib import Path

    import yaml
    from click.testing import CliRunner

    from splitscope.exit_codes import EXIT_CODES, PRECEDENCE
    from splitscope.records.summary_markdown import EXIT_MEANINGS

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8").replace("`", "")
    for code, meaning in EXIT_CODES.items():
        assert f"| {code} | {meaning}" in readme, code
    assert sorted(EXIT_CODES) == [0, 1, 2, 3, 4, 5] and set(PRECEDENCE) <= set(EXIT_CODES)
    assert EXIT_MEANINGS is EXIT_CODES
    text = " ".join(CliRunner().invoke(cli.app, ["audit", "--help"]).output.split())
    for code, meaning in EXIT_CODES.items():
        assert f"{code} {meaning}" in text, code
    action = yaml.safe_load((root / "action.yml").read_text(encoding="utf-8"))
    described = " ".join(action["outputs"]["exit-code"]["description"].split())
    assert all(f"{code} " in described for code in EXIT_CODES)
    assert "5 a --fail-on metric was not measured" in described


def test_every_verb_has_a_summary_and_listing_imports_none():
    assert set(cli.SUMMARIES) == set(cli.VERBS)
    assert all(len(line) <= 60 for line in cli.SUMMARIES.values())


def test_the_guard_covers_every_output_parameter():
    from splitscope.features.workspace import _LOCKED_OUTPUTS
    from splitscope.manifest.roots import _OUTPUTS

    assert {name for name, *_ in (*_OUTPUTS, *_LOCKED_OUTPUTS)} <= cli.OUTPUT_PARAMS


HEAVY = ("numpy", "pandas", "scipy", "sklearn", "torch", "matplotlib", "pyarrow", "PIL")


@pytest.mark.parametrize("args", [["--help"], ["audit", "--help"], ["help"]])
def test_help_imports_no_numerical_library(args):
    """The verb list and the audit's generated flags come from modules that import no
    numerical library: the deterministic proxy of a help that appears at once."""
    code = ("import contextlib, io, sys\n"
            "from splitscope.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            f"    code = main({args!r})\n"
            "assert code == 0 and out.getvalue(), (code, out.getvalue())\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_help_topics_and_verbs():
    runner = CliRunner()
    listing = runner.invoke(cli.app, ["help"])
    assert listing.exit_code == 0 and "fail-on" in listing.output and "layers" in listing.output
    layers = runner.invoke(cli.app, ["help", "layers"]).output
    from splitscope.core.protocol import layer_names

    assert all(f"  {name}: " in layers for name in layer_names())
    assert runner.invoke(cli.app, ["help", "audit"]).output == \
        runner.invoke(cli.app, ["audit", "--help"]).output
    unknown = runner.invoke(cli.app, ["help", "no-such-topic"])
    assert unknown.exit_code == 2 and "fail-on" in unknown.output
