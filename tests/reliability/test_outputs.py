"""Output destinations are checked before the work and written whole or not at all; a result
folder of another search is refused; exit codes 0 / 1 / 2; a closed pipe exits 0 quietly
(issue 18, items 5, 6 and 9)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from click.testing import CliRunner

from autoplan.cli import main
from autoplan.report.destination import OutputError, write_text

SEARCH = ["search", "-m", "8b", "-g", "8", "--gbs-seqs", "64", "--format", "json"]


def _search(*args):
    return CliRunner().invoke(main, [*SEARCH, *args])


def test_out_on_a_file_a_device_or_a_dangling_link_fails_before_the_search(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for out, message in ((afile, "is a file"), ("/dev/full", "not a folder"),
                         (tmp_path / "dangling", "a link to nothing")):
        result = _search("--out", str(out))
        assert result.exit_code == 2 and message in result.stderr, result.output
        assert "Recipe" not in result.stderr  # refused before searching
        assert result.stderr.strip().count("\n") == 0


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_folder_fails_before_the_search(tmp_path):
    (tmp_path / "ro").mkdir(mode=0o555)
    result = _search("--out", str(tmp_path / "ro" / "out"))
    assert result.exit_code == 2 and "cannot write there" in result.stderr and "Recipe" not in result.stderr


def test_a_failed_search_leaves_no_empty_folder(tmp_path):
    (tmp_path / "s.db").write_text("not a database")
    result = _search("--storage", f"sqlite:///{tmp_path / 's.db'}", "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "not an SQLite database" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_folder_of_another_search_is_refused_and_a_rerun_clears_its_own_files(tmp_path):
    out = str(tmp_path / "out")
    assert _search("--out", out, "--export", "megatron").exit_code == 0
    assert (tmp_path / "out" / "configs").is_dir()
    again = _search("--out", out)  # the same study: its earlier files are cleared, not mixed in
    assert again.exit_code == 0, again.output
    assert not (tmp_path / "out" / "configs").exists()
    other = CliRunner().invoke(main, ["search", "-m", "8b", "-g", "16", "--gbs-seqs", "64", "--out", out])
    assert other.exit_code == 2 and "another search's results" in other.stderr
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("keep")
    mine = _search("--out", str(tmp_path / "mine"))
    assert mine.exit_code == 2 and (tmp_path / "mine" / "thesis.tex").read_text() == "keep"


def test_a_full_disk_leaves_the_old_file_whole_and_exits_2(tmp_path):
    """``ulimit -f`` stands in for a full disk: the write fails part way."""
    target = tmp_path / "plans.csv"
    target.write_text("old\n")
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096));"
            "from autoplan.report.destination import write_text;"
            "write_text(sys.argv[1], 'x' * 100000)")
    done = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True)
    assert "OutputError: cannot write" in done.stderr and "File too large" in done.stderr
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["plans.csv"]  # no temporary file left


def test_dev_full_as_a_compare_or_export_file_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OutputError, match="cannot write /dev/full: No space left on device"):
        write_text("/dev/full", "x" * 10)
    result = CliRunner().invoke(main, ["export", "--to", "megatron", "-m", "8b", "-g", "8", "--gbs-seqs", "64",
                                       "-o", str(tmp_path / "afile" / "x.sh")])
    assert result.exit_code == 2 and "is not a folder" in result.stderr


def test_export_keeps_an_existing_files_mode(tmp_path):
    target = tmp_path / "mine.sh"
    target.write_text("")
    target.chmod(0o600)
    result = CliRunner().invoke(main, ["export", "--to", "megatron", "-m", "8b", "-g", "8", "--gbs-seqs", "64",
                                       "-o", str(target)])
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_text().startswith("#!")
    new = CliRunner().invoke(main, ["export", "--to", "megatron", "-m", "8b", "-g", "8", "--gbs-seqs", "64",
                                    "-o", str(tmp_path / "new.sh")])
    assert new.exit_code == 0 and os.access(tmp_path / "new.sh", os.X_OK)  # a new launch script runs


def test_estimate_exits_1_when_the_layout_does_not_fit():
    args = ["estimate", "-m", "70b", "-g", "8", "--gbs-seqs", "64", "--tp", "1", "--pp", "1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1 and "DOES NOT FIT" in result.output
    assert CliRunner().invoke(main, [*args, "--format", "json"]).exit_code == 1
    fits = CliRunner().invoke(main, ["estimate", "-m", "8b", "-g", "8", "--gbs-seqs", "64", "--tp", "2"])
    assert fits.exit_code == 0, fits.output


def test_a_closed_pipe_exits_0_quietly(tmp_path):
    command = f"{sys.executable} -m autoplan.cli search -m 8b -g 8 --gbs-seqs 64 --top 100 --out out | true"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Error" not in done.stderr and "Traceback" not in done.stderr


def test_more_workers_than_cpus_is_one_warning(tmp_path):
    many = len(os.sched_getaffinity(0)) + 1 if hasattr(os, "sched_getaffinity") else os.cpu_count() + 1
    result = _search("--sampler", "random", "--trials", "16", "--workers", str(many),
                     "--storage", f"sqlite:///{tmp_path / 's.db'}", "--out", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    assert f"--workers {many} is more than the" in result.stderr


