"""The headline search imports only what it uses (issue 15: the headline command within 0.4 s):
no pandas (~150 ms), optuna, matplotlib or scipy; no rich when stdout is not a terminal (its
table is drawn as plain text, autoplan.cli.text_table); no tempfile (autoplan.report.destination
makes its own temporary names); no importlib.metadata (versions read from dist-info names)."""

from __future__ import annotations

import os
import subprocess
import sys

NOT_IMPORTED = ("pandas", "optuna", "matplotlib", "scipy", "rich", "tempfile", "importlib.metadata")


def test_the_headline_search_imports_no_heavy_module(tmp_path):
    code = ("import sys\nfrom autoplan.cli import main\n"
            "try:\n    main(['search', '--model', '70b', '--gpus', '512', '--gbs-tokens', '4M'])\n"
            "except SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
            f"print(sorted(m for m in {NOT_IMPORTED!r} if m in sys.modules), file=sys.stderr)")
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "Best plans (llama3-70b" in done.stdout  # the table was drawn
    assert done.stderr.strip().splitlines()[-1] == "[]"
