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
