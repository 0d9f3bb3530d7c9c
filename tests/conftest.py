"""Test-session settings: the parsed-YAML cache (:mod:`autoplan.specs.yaml_cache`) lives in a
folder of this session, so the tests neither read the user's cache nor fill it."""

from __future__ import annotations

import os
import shutil
import tempfile

_CACHE = tempfile.mkdtemp(prefix="autoplan-test-cache-")


def pytest_configure(config) -> None:
    os.environ["AUTOPLAN_CACHE_DIR"] = _CACHE


def pytest_unconfigure(config) -> None:
    shutil.rmtree(_CACHE, ignore_errors=True)
