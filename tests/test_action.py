"""The GitHub Action (``action.yml``): its shell steps run as a runner runs them, on a release
with a planted byte copy (the job fails with exit code 1 and the job page names the figure) and
on the same release without it (exit code 0)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import splitscope

sys.path.insert(0, str(Path(__file__).parent / "audit"))  # the release builder lives there
from audit_helpers import tiny_release

ROOT = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
ARGS = "--fail-on 'byte_identical_rate>0' --workers 1 --layers duplicates"
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def _expand(text: str, inputs: dict, outputs: dict) -> str:
    """``text`` with the expressions the action uses replaced as the runner would."""
    def value(match: re.Match) -> str:
        expr = match.group(1)
        if expr.startswith("inputs."):
            return inputs[expr.removeprefix("inputs.")]
        if expr.startswith("steps."):
            _, step, _, name = expr.split(".", 3)
            return outputs.get(step, {}).get(name, "")
        if expr.startswith("github."):
            return {"github.workspace": os.getcwd()}[expr]
        raise AssertionError(f"unexpected expression {expr}")

    return EXPRESSION.sub(value, text)


def _tools(folder: Path) -> Path:
    """``splitscope`` and ``python`` commands running this checkout, as the install step and
    actions/setup-python provide them on a runner."""
    folder.mkdir()
    (folder / "python").symlink_to(sys.executable)
    shim = folder / "splitscope"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m splitscope.cli "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    return folder


def run_action(workspace: Path, **given: str) -> tuple[int, str, list[str]]:
    """Run the action's ``run:`` steps in ``workspace`` (``uses:`` steps skipped, the install a
    no-op), stopping at the first failing step as a runner does: its exit code, the job
    summary, and the names of the steps run."""
    inputs = {name: str(spec.get("default", "")) for name, spec in ACTION["inputs"].items()}
    inputs.update(install="true", **given)
    summary = workspace / "step_summary.md"
    summary.touch()
    tools = _tools(workspace / "bin")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_"))}
    env.update(PATH=f"{tools}{os.pathsep}{env['PATH']}", GITHUB_STEP_SUMMARY=str(summary),
               GITHUB_WORKSPACE=str(workspace),
               PYTHONPATH=os.pathsep.join([str(Path(splitscope.__file__).parents[1]),
                                           env.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    outputs: dict[str, dict[str, str]] = {}
    ran = []
    for i, step in enumerate(ACTION["runs"]["steps"]):
        if "uses" in step:
            continue
        assert "${{" not in step["run"], "expressions go through env:, never into a script"
        assert "if" not in step and step["shell"] == "bash"
        output = workspace / f"output_{i}"
        output.touch()
        script = workspace / f"step_{i}.sh"
        script.write_text(step["run"])
        step_env = {k: _expand(str(v), inputs, outputs) for k, v in step.get("env", {}).items()}
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                              check=False, cwd=workspace,
                              env={**env, **step_env, "GITHUB_OUTPUT": str(output)},
                              capture_output=True, text=True, timeout=300)
        ran.append(step["name"])
        if "id" in step:
            outputs[step["id"]] = dict(line.split("=", 1)
                                       for line in output.read_text().splitlines() if line)
        if done.returncode:
            return done.returncode, summary.read_text(encoding="utf-8"), ran
    return 0, summary.read_text(encoding="utf-8"), ran


def test_the_action_declares_its_inputs_and_steps():
    assert ACTION["runs"]["using"] == "composite"
    assert {"path", "args", "python-version", "out", "upload-report", "install"} <= set(
        ACTION["inputs"])
    assert ACTION["inputs"]["python-version"]["default"] == "3.11"
    assert ACTION["inputs"]["out"]["default"] == "splitscope-audit"
    assert ACTION["inputs"]["install"]["default"] == "pip install splitscope"
    uses = [s["uses"].split("@")[0] for s in ACTION["runs"]["steps"] if "uses" in s]
    assert uses == ["actions/setup-python", "actions/upload-artifact"]


@pytest.mark.slow
def test_the_action_fails_on_a_planted_copy_and_names_the_figure(tmp_path):
    tiny_release(tmp_path / "release", copy=("train/a/train_0.png", "test/a/copied.png"))
    code, summary, ran = run_action(tmp_path, path="release", args=ARGS)
    assert code == 1
    assert ran[-1] == "Exit with the audit's code"  # the summary was written before it
    assert "a --fail-on condition held (exit code 1)" in summary
    assert "| `byte_identical_rate>0` | 0.1429 | **HELD** |" in summary
    assert "identity.sha256.test--train (1 of 7)" in summary
    assert "- Do not trust a score on test as is: 14.3% of test (1 of 7 rows) is a byte copy" \
        in summary
    assert ("| byte copies | test → train | yes | 1 of 7 (14.29%) | 95% Wilson interval | "
            "identity.sha256.test--train |") in summary
    assert "- groups: not assessed" in summary  # --layers duplicates left it out
    assert "splitscope-audit/report.html" in summary
    assert "artifact `splitscope-audit`" in summary
    assert (tmp_path / "splitscope-audit" / "audit.json").is_file()


@pytest.mark.slow
def test_the_action_passes_on_the_release_without_the_copy(tmp_path):
    tiny_release(tmp_path / "release")
    code, summary, _ = run_action(tmp_path, path="release", args=ARGS, out="audit-out",
                                  **{"upload-report": "false"})
    assert code == 0
    assert "splitscope audit: passed (exit code 0)" in summary
    assert "| `byte_identical_rate>0` | 0 | not held | identity.sha256.test--train (0 of 6) |" \
        in summary
    assert "audit-out/report.html" in summary and "artifact" not in summary


@pytest.mark.slow
def test_an_input_error_still_writes_the_summary_and_exits_2(tmp_path):
    code, summary, ran = run_action(tmp_path, path="absent", args="--workers 1")
    assert code == 2 and ran[-1] == "Exit with the audit's code"
    assert "usage or input error, nothing written (exit code 2)" in summary


def test_an_unclosed_quote_in_args_is_an_input_error(tmp_path):
    code, summary, _ = run_action(tmp_path, path="absent", args="--fail-on 'ncc_rate>0")
    assert code == 2 and "exit code 2" in summary


@pytest.mark.slow
def test_the_action_fails_on_a_gate_the_audit_did_not_measure(tmp_path):
    args = "--fail-on 'byte_identical_rate>0' --workers 1 --layers groups"
    for run in ("gated", "allowed"):
        tiny_release(tmp_path / run / "release")
    code, summary, ran = run_action(tmp_path / "gated", path="release", args=args)
    assert code == 5 and ran[-1] == "Exit with the audit's code"
    assert "a --fail-on metric was not measured (exit code 5)" in summary
    assert ("| `byte_identical_rate>0` | not measured | NOT MEASURED, the gate fails (exit 5): "
            "layer duplicates not assessed: not requested (layers= option) |  |") in summary
    code, summary, _ = run_action(tmp_path / "allowed", path="release",
                                  args=args + " --allow-unmeasured")
    assert code == 0 and "splitscope audit: passed (exit code 0)" in summary
    assert "not measured, allowed (--allow-unmeasured)" in summary
