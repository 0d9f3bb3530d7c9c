"""The same inputs and seed give a byte-identical plans.csv.

Two exhaustive runs are compared in tests/cli/test_search_cli.py
(``test_plans_csv_has_every_candidate_ranked_and_is_reproducible``) and the exhaustive sampler
across --workers in test_parallel_workers.py; here: tpe with --seed 3, run twice, once with a
fresh SQLite study (whose per-batch write and read back must not change what is sampled), and a
different seed, which must sample differently.
"""

from __future__ import annotations

from click.testing import CliRunner

from autoplan.cli import main

TPE = ["search", "-m", "8b", "-g", "64", "--gbs-seqs", "256", "--pp", "1,2,4", "--vpp", "1,2", "--mbs", "1,2",
       "--sampler", "tpe", "--trials", "64", "--format", "csv"]


def _plans(tmp_path, name: str, *extra: str) -> bytes:
    result = CliRunner().invoke(main, [*TPE, *extra, "--out", str(tmp_path / name)])
    assert result.exit_code == 0, result.output + result.stderr
    return (tmp_path / name / "plans.csv").read_bytes()


def test_tpe_with_a_seed_gives_a_byte_identical_plans_csv(tmp_path):
    first = _plans(tmp_path, "first", "--seed", "3")
    assert _plans(tmp_path, "second", "--seed", "3") == first
    stored = _plans(tmp_path, "stored", "--seed", "3", "--storage", f"sqlite:///{tmp_path / 'study.db'}")
    assert stored == first
    assert _plans(tmp_path, "other", "--seed", "4") != first
