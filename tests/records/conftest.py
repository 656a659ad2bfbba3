"""Fixtures of the records tests."""

from __future__ import annotations

import pytest

from splitscope.core.options import AuditOptions
from splitscope.core.run import audit


@pytest.fixture(scope="session")
def kermany_audit(shared_data, tmp_path_factory):
    """One audit of the Kermany folder (duplicates and groups, person ids as groups) with its
    Croissant record and dataset card, shared by the tests that read them."""
    root = shared_data / "kermany-chest-xray-224"
    if not root.is_dir():
        pytest.skip(f"{root} absent")
    out = tmp_path_factory.mktemp("kermany") / "k"
    audit(root, AuditOptions.from_flags(workers=2, progress=False,
                                        layers=["duplicates", "groups"],
                                        group_regex=r"person(?P<group>\d+)_", transforms=0,
                                        croissant=True, card=True), out_dir=out)
    return out


@pytest.fixture(scope="session")
def demo_audit(tmp_path_factory):
    """The demo (100 train and 50 test images, seed 0) audited once; a test that writes into
    its folder works on a copy."""
    from splitscope.workflows.demo import run_demo

    result, _ = run_demo(tmp_path_factory.mktemp("demo-audit") / "demo", seed=0, n_train=100,
                         n_test=50, workers=1, progress=False)
    return result

