"""Reading user files (issue 18, items 3, 8 and 9): regular files only, capped, strict CSV."""

from __future__ import annotations

import os

import pytest

from autoplan.errors import SpecError
from autoplan.files import read_user_bytes, read_user_csv, read_user_text

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")


@needs_fifo
def test_a_fifo_is_refused_before_reading(tmp_path):
    fifo = tmp_path / "model.json"
    os.mkfifo(fifo)  # opening it to read would wait for a writer forever
    with pytest.raises(SpecError, match="model.json: is a FIFO \\(named pipe\\), expected a regular file"):
        read_user_text(fifo)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_or_a_link_to_one_is_refused(tmp_path):
    link = tmp_path / "zero.yaml"
    link.symlink_to("/dev/zero")  # would read until memory runs out
    for path in ("/dev/zero", link):
        with pytest.raises(SpecError, match="is a character device, expected a regular file"):
            read_user_bytes(path)


def test_a_folder_and_a_missing_file_are_refused(tmp_path):
    with pytest.raises(SpecError, match="is a folder, expected a regular file"):
        read_user_text(tmp_path)
    with pytest.raises(SpecError, match="nowhere.yaml: cannot read file"):
        read_user_text(tmp_path / "nowhere.yaml")


def test_a_file_over_the_cap_is_refused_with_its_size(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * 1001)
    assert read_user_bytes(path, max_bytes=1001) == b"#" * 1001
    with pytest.raises(SpecError, match="big.yaml: file is 1,001 bytes, larger than the 1,000 bytes allowed"):
        read_user_bytes(path, max_bytes=1000)


def test_text_drops_a_byte_order_mark_and_refuses_other_encodings(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes("\ufefftp,pp\n".encode())
    assert read_user_text(path) == "tp,pp\n"
    path.write_bytes(b"tp\xff\n")
    with pytest.raises(SpecError, match="not UTF-8 text \\(byte 2\\)"):
        read_user_text(path)
    assert read_user_text(path, errors="replace") == "tp\ufffd\n"


def _csv(tmp_path, text: str, encoding: str = "utf-8"):
    path = tmp_path / "layouts.csv"
    path.write_text(text, encoding=encoding)
    return path


def test_csv_with_a_byte_order_mark_reads(tmp_path):
    columns, rows = read_user_csv(_csv(tmp_path, "tp,pp\n2,1\n", encoding="utf-8-sig"))
    assert columns == ["tp", "pp"] and rows == [{"tp": "2", "pp": "1"}]


def test_csv_row_with_an_extra_field_is_refused_with_its_line(tmp_path):
    # pandas would shift this row's cells one column to the right without a word
    path = _csv(tmp_path, "tp,pp\n2,1\n\n4,1,8\n")
    with pytest.raises(SpecError, match="layouts.csv: line 4: 3 fields, but the header has 2 columns"):
        read_user_csv(path)


def test_csv_duplicate_and_blank_columns_are_refused(tmp_path):
    with pytest.raises(SpecError, match="line 1: column 'tp' appears twice"):
        read_user_csv(_csv(tmp_path, "tp,pp, tp\n1,1,2\n"))
    with pytest.raises(SpecError, match="line 1: column 2 has no name"):
        read_user_csv(_csv(tmp_path, "tp,,pp\n1,1,2\n"))


def test_csv_short_rows_are_blank_filled_and_blank_lines_skipped(tmp_path):
    columns, rows = read_user_csv(_csv(tmp_path, "tp,pp,cp\n2\n\n,,\n4,2,1\n"))
    assert rows == [{"tp": "2", "pp": "", "cp": ""}, {"tp": "4", "pp": "2", "cp": "1"}]
    with pytest.raises(SpecError, match="has a header but no rows"):
        read_user_csv(_csv(tmp_path, "tp,pp\n"))
    assert read_user_csv(_csv(tmp_path, "tp,pp\n"), allow_no_rows=True) == (["tp", "pp"], [])
