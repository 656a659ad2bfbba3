"""The command line frame: verb registry, exit codes."""

import importlib

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
