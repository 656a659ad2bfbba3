"""The pre-commit hook (``.pre-commit-hooks.yaml``), installed by pre-commit itself from a
committed copy of this checkout into its own virtual environment: it fails on a release with a
planted byte copy and passes once the copy is removed.

``pre-commit try-repo`` cannot pass ``args`` to a hook, and the hook needs the release path and
the gate there, so the test writes a ``.pre-commit-config.yaml`` naming the copy's commit and
runs ``pre-commit run --all-files``, as a user's repository would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent / "audit"))  # the release builder lives there
from audit_helpers import tiny_release

ROOT = Path(__file__).resolve().parents[1]
HOOKS = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
GIT = ["git", "-c", "user.name=splitscope", "-c", "user.email=splitscope@example.invalid",
       "-c", "commit.gpgsign=false"]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def _commit_all(repo: Path) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "snapshot")
    return _git(repo, "rev-parse", "HEAD")


def test_the_hook_is_declared_for_lists_and_images():
    import re

    (hook,) = HOOKS
    assert hook["id"] == "splitscope-audit" and hook["entry"] == "splitscope audit"
    assert hook["language"] == "python" and hook["pass_filenames"] is False
    files = re.compile(hook["files"])
    assert all(files.search(p) for p in ("lists/index.csv", "a/x.PNG", "b/y.jpeg", "c.parquet"))
    assert not files.search("src/model.py")


@pytest.mark.slow
def test_the_hook_fails_on_a_planted_copy_and_passes_without_it(tmp_path):
    if shutil.which("pre-commit") is None or shutil.which("git") is None:
        pytest.skip("pre-commit (the test extra) or git is not installed")
    hook_repo = tmp_path / "hook-repo"  # this checkout's files, committed
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (hook_repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, hook_repo / name)
    _git(hook_repo, "init", "-q")
    rev = _commit_all(hook_repo)

    data = tmp_path / "data"
    tiny_release(data / "release", copy=("train/a/train_0.png", "test/a/copied.png"))
    _git(data, "init", "-q")

    def config(out: str) -> None:
        hook = {"id": "splitscope-audit",
                "args": ["release", "--fail-on", "byte_identical_rate>0", "--layers",
                         "duplicates", "--workers", "1", "--out", str(tmp_path / out)]}
        (data / ".pre-commit-config.yaml").write_text(yaml.safe_dump(
            {"repos": [{"repo": str(hook_repo), "rev": rev, "hooks": [hook]}]}))
        _commit_all(data)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PRE_COMMIT")}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(["pre-commit", "run", "--all-files", "--verbose"], check=False,
                              cwd=data, env=env, capture_output=True, text=True, timeout=900)

    config("audit-copy")
    failed = run()
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "byte_identical_rate>0" in failed.stdout and "exit code: 1" in failed.stdout
    assert (tmp_path / "audit-copy" / "audit.json").is_file()

    (data / "release" / "test" / "a" / "copied.png").unlink()
    config("audit-clean")
    passed = run()
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Passed" in passed.stdout
