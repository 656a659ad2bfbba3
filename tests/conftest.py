"""Shared fixtures. Real-data tests use ``shared_data`` and skip when ../shared/data is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_DEFAULT_SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SHARED_DATA = Path(os.environ.get("SPLITSCOPE_SHARED_DATA", _DEFAULT_SHARED))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (or ``$SPLITSCOPE_SHARED_DATA``); skips the test when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not present at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def kermany_workspace(shared_data, tmp_path_factory) -> Path:
    """One feature cache (workspace) for the Kermany folder, shared by the tests that audit it:
    it is read once per session (the scan's own tests scan it afresh)."""
    if not (shared_data / "kermany-chest-xray-224").is_dir():
        pytest.skip("kermany-chest-xray-224 absent")
    return tmp_path_factory.mktemp("kermany-workspace") / "ws"


@pytest.fixture(scope="session")
def kermany_audit(shared_data, kermany_workspace, tmp_path_factory) -> Path:
    """One audit of the Kermany folder (duplicates and groups, person ids as groups, no
    transform probe) with its Croissant record and dataset card, shared by the tests that read
    them: its output folder."""
    from splitscope.core.options import AuditOptions
    from splitscope.core.run import audit

    out = tmp_path_factory.mktemp("kermany") / "k"
    audit(shared_data / "kermany-chest-xray-224",
          AuditOptions.from_flags(workers=2, progress=False, layers=["duplicates", "groups"],
                                  group_regex=r"person(?P<group>\d+)_", transforms=0,
                                  croissant=True, card=True, workspace=str(kermany_workspace)),
          out_dir=out)
    return out


@pytest.fixture(scope="session")
def c3_audit(shared_data, tmp_path_factory) -> tuple[int, Path]:
    """The default audit of the brain-MRI yes/no release (no split: audited against itself;
    every layer that applies, 2 workers), run once for the tests that read it: ``(exit code,
    output folder)``."""
    from splitscope.cli import main

    root = shared_data / "c3-brain-mri-yes-no"
    if not root.is_dir():
        pytest.skip(f"{root} absent")
    out = tmp_path_factory.mktemp("c3") / "audit"
    return main(["audit", str(root), "--out", str(out), "--workers", "2"]), out


@pytest.fixture(scope="session")
def small_demo_run(tmp_path_factory):
    """The demo (seed 0; 70 train and 45 test images, every kind of planted leakage) audited
    once, for every test that only reads a finished audit (a test that writes into its folder
    works on a copy): ``(AuditResult, check)``, the release in ``DIRECTORY/data``."""
    from splitscope.workflows.demo import run_demo

    return run_demo(tmp_path_factory.mktemp("small-demo") / "demo", workers=1,
                    progress=False, n_train=70, n_test=45)


@pytest.fixture(scope="session")
def small_demo(small_demo_run):
    """The audit of ``small_demo_run``."""
    return small_demo_run[0]
