"""The documented library API: every public name resolves, and the docstring example runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import autoplan


def test_every_public_name_resolves():
    for name in autoplan.__all__:
        assert getattr(autoplan, name) is not None, name
    assert autoplan.search_layouts.__module__ == "autoplan.search"


def test_importing_the_package_loads_no_heavy_module():
    code = "import sys, autoplan; print(sorted(m for m in ('numpy', 'pandas', 'optuna') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_docstring_example_runs(tmp_path):
    doc = autoplan.__doc__
    example = textwrap.dedent(doc.split("::", 1)[1].split("\nThe inputs are", 1)[0])
    namespace: dict = {}
    exec(compile(example, "autoplan.__doc__", "exec"), namespace)  # noqa: S102 - our own docstring
    assert "megatron_pretrain_gpt.sh" in namespace["files"].files
    assert namespace["best"]["tokens_per_s_per_gpu"] > 0
    assert namespace["table"]["step_time_s"][0] > 0
