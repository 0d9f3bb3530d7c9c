"""The host-link copies measured on an H200 and what autoplan/calibration/host_link.py reads off them."""

import numpy as np
import pytest

from autoplan.calibration.host_link import LARGE_COPY_BYTES, host_link_figures, shipped_host_link_figures
from autoplan.calibration.kernels import Table
from autoplan.cost.host_link import HOST_LINK_EFFICIENCY

LINK = 64e9
MiB = 2**20


def _copy(kind, size, rate, note="pinned"):
    return {"kind": kind, "bytes": float(size), "seconds": size / rate, "note": note}


def _table(one_way=0.85, both=0.75, slowdown=0.05):
    rows = [_copy(k, s, one_way * LINK * (s / (s + 1 * MiB) if s < LARGE_COPY_BYTES else 1.0))
            for k in ("h2d", "d2h") for s in (MiB, 8 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB)]
    rows += [_copy("h2d", 1024 * MiB, 0.2 * LINK, "pageable"), _copy("d2h", 1024 * MiB, 0.3 * LINK, "pageable"),
             _copy("bidirectional", 1024 * MiB, 2 * both * LINK, "both directions together, pinned"),
             {"kind": "gemm_alone", "bytes": 0.0, "seconds": 1e-3, "note": ""},
             {"kind": "gemm_with_copies", "bytes": 0.0, "seconds": 1e-3 * (1 + slowdown), "note": ""}]
    return Table({}, rows)


def test_the_figures_of_a_known_table_come_back():
    f = host_link_figures(_table(0.85, 0.75, 0.05), LINK)
    assert f.one_way == pytest.approx(0.85)  # small copies (launch-bound) left out
    assert f.both_ways == pytest.approx(0.75)
    assert (f.pageable_h2d, f.pageable_d2h) == (pytest.approx(0.2), pytest.approx(0.3))
    assert f.gemm_slowdown == pytest.approx(0.05)


def test_a_table_without_large_pinned_copies_or_a_link_rate_is_refused():
    small = Table({}, [_copy("h2d", MiB, 50e9)])
    with pytest.raises(ValueError, match="no pinned copies of at least"):
        host_link_figures(small, LINK)
    with pytest.raises(ValueError, match="link_bytes_per_s must be > 0"):
        host_link_figures(_table(), 0.0)


def test_the_cost_models_host_link_efficiency_is_the_measured_one_way_share():
    f = shipped_host_link_figures()
    assert HOST_LINK_EFFICIENCY == pytest.approx(f.one_way, rel=0.01)
    # PCIe Gen5 payload can not exceed 128/130 encoding x 256/(256 + 24) header bytes ~ 0.90.
    assert 0.7 < f.one_way < 0.9
    assert f.both_ways < f.one_way  # both directions at once: each gets less
    assert np.isfinite(f.gemm_slowdown) and 0.0 <= f.gemm_slowdown < 0.2
