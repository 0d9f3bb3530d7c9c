"""Fixtures shared by the CLI tests."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from autoplan.cli import main


@pytest.fixture(scope="session")
def plans(tmp_path_factory):
    """plans.json of `autoplan search -m 8b -g 16 --gbs-tokens 1M --hardware h100-sxm` (megatron):
    its top plans are near-tied (9,263, 9,250 and 9,235 tokens/s/GPU predicted)."""
    out = tmp_path_factory.mktemp("search") / "s"
    result = CliRunner().invoke(main, ["search", "-m", "8b", "-g", "16", "--gbs-tokens", "1M", "--hardware",
                                       "h100-sxm", "--out", str(out)])
    assert result.exit_code == 0, result.output + result.stderr
    return out / "plans.json"
