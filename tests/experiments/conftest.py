"""Fixtures of the experiments tests (the ``[torch]`` extra; skipped without torch)."""

from __future__ import annotations

from pathlib import Path

import pytest
from experiment_helpers import make_release

pytest.importorskip("torch", reason="the experiments need the [torch] extra")


@pytest.fixture(scope="session")
def tiny_release(tmp_path_factory) -> Path:
    return make_release(tmp_path_factory.mktemp("tiny") / "release")
