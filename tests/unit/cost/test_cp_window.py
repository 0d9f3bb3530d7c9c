"""The data-parallel traffic beside the context-parallel ring (cost/overlap.py beside_cp_window_s):
on the ring's tier the ring's hidden transfer takes its share of the window, on another tier the
ring's exposed wait adds to it. The one-layer model and plain efficiencies of test_time.py, cp 2
at seq 1024, dp_overlap = cp_overlap = 1."""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.cost.overlap import beside_cp_window_s
from autoplan.cost.step_time import step_parts_s
from tests.unit.cost.test_time import ALPHA_UP, ATT_FWD, NVLINK, PLAIN, at, ctx_for

# The ring per rank: 512 queries, K and V of 8 heads of 128 in bf16, 2·512·1024·2 = 2 MiB a step;
# one exchange forward, two backward over NVLink (450 GB/s, 3 µs): 3·(2^21/450e9 + 3e-6) = 2.298e-5 s.
CP_TOTAL = 3 * (2 * 512 * 1024 * 2 / NVLINK + ALPHA_UP)
# Attention per rank, forward + backward: half of the 1024-token one, 3.5·ATT_FWD/2 = 7.600e-6 s,
# all of it hiding the ring (cp_overlap 1): 1.538e-5 s stays exposed.
CP_HIDDEN = 3.5 * ATT_FWD / 2
CP_EXPOSED = CP_TOTAL - CP_HIDDEN


def _parts(dp: int):
    ctx, batch = at(ctx_for(eff=PLAIN.with_values({"dp_overlap": 1.0, "cp_overlap": 1.0})),
                    {"gpus": 2 * dp, "cp": 2, "seq_len": 1024, "gbs_seqs": dp, "zero": 1})
    return {k: float(v[0]) for k, v in step_parts_s(ctx, batch).items()}


def test_the_ring_is_exposed_by_what_attention_does_not_cover():
    assert _parts(4)["cp"] == pytest.approx(CP_EXPOSED, rel=1e-12)


@pytest.mark.parametrize("dp, window_of", [
    (4, lambda compute: compute - CP_HIDDEN),   # 8 GPUs: dp·cp reduces over NVLink, the ring's links
    (8, lambda compute: compute + CP_EXPOSED),  # 16 GPUs: the reduction crosses nodes on the NICs
])
def test_the_reduction_and_the_gather_share_the_window_beside_the_ring(dp, window_of):
    # The gradient reduce-scatter hides behind 2/3 of the window (the last backward), the
    # parameter gather behind 1/3 (the first forward), one micro-batch.
    s = _parts(dp)
    window = window_of(s["compute"])
    grads, gathers = s["grad_reduce_total"], s["param_gather_total"]
    assert grads > 2 / 3 * window and gathers > window / 3  # min() does not clip
    assert s["grad_reduce"] == pytest.approx(grads - 2 / 3 * window, rel=1e-12)
    assert s["param_gather"] == pytest.approx(gathers - window / 3, rel=1e-12)


def test_the_window_beside_the_ring():
    # window 10 s; the ring hid 3 s and left 2 s exposed: 7 s on its links, 12 s on others.
    out = beside_cp_window_s(np.array([10.0, 10.0]), np.array([3.0, 3.0]), np.array([2.0, 2.0]),
                             np.array([True, False]))
    np.testing.assert_array_equal(out, [7.0, 12.0])
