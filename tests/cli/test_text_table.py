"""The plain table and line of autoplan.cli.text_table are byte for byte what rich prints on a
stream that is not a terminal, and are declined (None) wherever rich would do more."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from autoplan.cli.text_table import TextColumn, is_plain_stream, plain_line, render_table, rich_table

# Cell text: the characters a plan table holds, spaces, line breaks; half the cells also draw from
# characters rich treats specially (markup "[", emoji ":x:", a two-cell-wide character).
_PLAIN_CHARS = "abz019 .,=+-%()/µ±·\n"
_cell = st.text(alphabet=_PLAIN_CHARS, max_size=14) | st.text(alphabet=_PLAIN_CHARS + "[:一", max_size=14)
_column = st.builds(TextColumn, header=_cell, justify=st.sampled_from(["left", "right"]),
                    min_width=st.integers(0, 12))


def rich_text(title, columns, rows, width) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, highlight=False)
    assert not console.is_terminal  # the case render_table stands in for
    console.print(rich_table(title, columns, rows, no_wrap=[False] * len(columns)))
    return out.getvalue()


@settings(max_examples=120, deadline=None)
@given(title=_cell, columns=st.lists(_column, min_size=1, max_size=5), data=st.data(),
       width=st.integers(20, 90))
def test_table_is_rich_s_own_or_declined(title, columns, data, width):
    rows = data.draw(st.lists(st.lists(_cell, min_size=len(columns), max_size=len(columns)), max_size=4))
    plain = render_table(title, columns, rows, width)
    if plain is not None:
        assert plain == rich_text(title, columns, rows, width)


def test_the_plan_table_s_shape_is_drawn_plain():
    """A table shaped like the search's (two-line headers, a folded twin under a layout,
    right-justified numbers) is drawn, not declined, and equals rich's."""
    columns = [TextColumn("rank", "right"), TextColumn("layout", min_width=24),
               TextColumn("peak GiB\n(room)", "right"), TextColumn("tokens/s\n/GPU\n(unmeasured pair)", "right")]
    rows = [["1", "tp=1 pp=1 dp=512 zero=3 mbs=1\n= dp=256 cp=2 mbs=2", "30.2 (+49.5)", "1,003 -17/+14%"],
            ["2", "tp=8 pp=2 vpp=4 dp=32", "79.3 (+0.3)", "928 ±9%"]]
    plain = render_table("Best plans (llama3-70b, 512 x h100-sxm, megatron)", columns, rows, 160)
    assert plain is not None
    assert plain == rich_text("Best plans (llama3-70b, 512 x h100-sxm, megatron)", columns, rows, 160)


def test_what_rich_would_change_is_declined():
    columns = [TextColumn("layout")]
    assert render_table("t", columns, [["x" * 30]], 20) is None  # rich would wrap it
    assert render_table("t", columns, [["rc=[bold]x"]], 80) is None  # markup
    assert render_table("t", columns, [[":smile:"]], 80) is None  # emoji code
    assert render_table("t", columns, [["一"]], 80) is None  # two cells wide
    assert render_table("a title longer than the table", columns, [["x"]], 80) is None  # wrapped title


def test_line_is_rich_s_own_or_declined():
    for text, width in (("Recipe: 3240 candidates -> 1752 legal", 160), ("a b c", 3), ("x [red]y", 80),
                        ("10 µs ±9%", 80), ("two\nlines", 80)):
        line = plain_line(text, width)
        out = io.StringIO()
        Console(file=out, width=width, highlight=False).print(text)
        assert line is None or line == out.getvalue()
    assert plain_line("Recipe: 3240 candidates", 160) is not None
    assert plain_line("a b c d e f", 5) is None


def test_plain_stream_only_off_a_utf8_non_terminal(monkeypatch):
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    utf8 = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    assert is_plain_stream(utf8)
    assert not is_plain_stream(io.TextIOWrapper(io.BytesIO(), encoding="ascii"))  # rich draws an ASCII box
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert not is_plain_stream(utf8)
