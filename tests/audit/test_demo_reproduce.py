"""The demo records the `splitscope audit` command that reproduces its audit, and that command
gives the same records."""

from __future__ import annotations

import json
import shlex

from splitscope.audit.demo import run_demo
from splitscope.cli import main

_SAME = ("status", "numerator", "denominator", "estimate", "uncertainty", "coverage")


def test_the_demo_re_audits_to_itself(tmp_path):
    result, _ = run_demo(tmp_path / "demo", workers=1, progress=False, n_train=70, n_test=45)
    reproduce = result.document["run"]["reproduce"]
    argv = shlex.split(reproduce)
    assert argv[:2] == ["splitscope", "audit"]
    assert "--dihedral" in argv and "--group-regex" in argv  # what the demo adds
    out = argv.index("--out")
    argv[out + 1] = str(tmp_path / "again")
    assert main(argv[1:] + ["--workers", "1"]) == result.exit_code
    again = json.loads((tmp_path / "again" / "audit.json").read_text())
    mine = {r["id"]: {k: r.get(k) for k in _SAME} for r in result.document["records"]}
    theirs = {r["id"]: {k: r.get(k) for k in _SAME} for r in again["records"]}
    assert mine == theirs and len(mine) > 50
    assert again["summary"]["verdicts"] == result.document["summary"]["verdicts"]
    assert "reproduce" not in again["run"]  # a plain audit records its own command only
