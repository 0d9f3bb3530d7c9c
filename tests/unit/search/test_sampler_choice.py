"""The exhaustive sampler walks the whole product of the space: a huge one is refused up front
and ``auto`` never picks it (issue 18: a 4·10¹⁴-layout space died with MemoryError)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from autoplan.cli import main
from autoplan.errors import AutoplanError
from autoplan.search import AUTO_EXHAUSTIVE_LIMIT, EXHAUSTIVE_LIMIT, choose_sampler
from autoplan.space import load_space

WIDE = tuple(range(1, 2001))


def huge_space():
    return load_space("default").with_overrides(tp=WIDE, pp=WIDE, mbs=WIDE)


def test_exhaustive_on_a_huge_space_is_refused_naming_its_size():
    space = huge_space()
    assert space.size > EXHAUSTIVE_LIMIT
    with pytest.raises(AutoplanError, match=r"holds .*e\+.* layouts.*--sampler tpe"):
        choose_sampler("exhaustive", space, enumerable=10)


def test_auto_never_picks_exhaustive_for_a_huge_product_even_if_few_layouts_are_enumerable():
    # the exhaustive walk covers space.size, not only the layouts whose dp is an integer
    space = huge_space()
    assert choose_sampler("auto", space, enumerable=1) == "tpe"
    small = load_space("default").with_overrides(tp=(1, 2), pp=(1,), mbs=(1,))
    assert small.size <= AUTO_EXHAUSTIVE_LIMIT
    assert choose_sampler("auto", small, enumerable=small.size) == "exhaustive"


def test_cli_refuses_it_in_one_line_with_exit_2():
    wide = ",".join(map(str, WIDE))
    result = CliRunner().invoke(main, ["search", "-m", "8b", "-g", "64", "--gbs-seqs", "256",
                                       "--sampler", "exhaustive", "--tp", wide, "--pp", wide,
                                       "--mbs", wide])
    assert result.exit_code == 2, result.output
    assert "--sampler tpe" in result.output and "layouts" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
