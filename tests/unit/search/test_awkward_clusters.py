"""Clusters of any size get ranked plans at the batch the user meant (issue 15).

70B with a 4M-token batch is 4·2^20 / 8192 = 512 sequences. 96 = 2^5·3 GPUs has no data-parallel
degree of the default space whose multiples hit 512 exactly (dp = 96/(tp·pp·cp) carries the 3),
nor has 72 = 2^3·3^2 or 120 = 2^3·3·5; 1000 = 2^3·5^3 neither. By default (±5 %) each plan takes
its nearest reachable batch, and every plan says which.
"""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.api import build_context, build_training
from autoplan.errors import NoFeasiblePlanError
from autoplan.report.results import batch_text
from autoplan.search import SearchOptions, search
from autoplan.search.idle import gpu_counts
from autoplan.search.ranking import REORDER_WITHIN
from autoplan.space import load_space

GBS_SEQS = 4 * 2**20 // 8192  # 512
CLUSTERS = [(72, "gb200-nvl72"), (96, "h100-sxm"), (120, "h100-sxm"), (1000, "h100-sxm"), (1536, "h100-sxm")]


def run(gpus: int, hardware: str, **options):
    tolerance = options.pop("gbs_tolerance", None)
    extra = {} if tolerance is None else {"gbs_tolerance": tolerance}
    ctx = build_context("70b", build_training(gpus, 8192, GBS_SEQS, hardware=hardware, **extra))
    return search(ctx, load_space("default"), SearchOptions(sampler="exhaustive", **options))


@pytest.mark.parametrize("gpus, hardware", CLUSTERS)
def test_every_gpu_count_gets_ranked_plans_near_the_batch(gpus, hardware):
    result = run(gpus, hardware)
    rows = result.plan_rows()
    assert len(rows) > 0, result.counts.reasons
    table = result.table
    batch = table.batch.gbs_seqs[rows]
    assert (np.abs(batch - GBS_SEQS) <= 0.05 * GBS_SEQS).all()
    np.testing.assert_array_equal(table["gbs_tokens"][rows], batch * 8192)
    np.testing.assert_allclose(table["step_time_per_token_s"][rows], table["step_time_s"][rows] / (batch * 8192))
    tps = table["tokens_per_s_per_gpu"][rows]
    moved = table["robust_moved"][rows]  # near-tied plans within 5% of the best, ordered by robustness
    assert (np.diff(tps[~moved]) <= 0).all(), "ranked by tokens/s per GPU"
    assert (tps[moved] >= (1 - REORDER_WITHIN) * tps.max()).all()
    # the header names the batches the feasible plans use, and only those
    assert set(result.counts.batches) == {int(b) for b in batch}  # every feasible row is kept here
    text = batch_text(result)
    if set(result.counts.batches) != {GBS_SEQS}:
        assert "plans use " + ", ".join(str(b) for b in sorted(result.counts.batches)[:6]) in text


def test_an_exact_batch_can_still_be_demanded():
    with pytest.raises(NoFeasiblePlanError, match="none reaches gbs 512 seqs exactly"):
        run(96, "h100-sxm", gbs_tolerance=0.0).check_feasible()


def test_the_header_of_an_exact_search_names_one_batch():
    result = run(512, "h100-sxm")
    assert set(result.counts.batches) == {GBS_SEQS}
    assert batch_text(result) == "gbs 512 ±5% x 8192 tokens"


def test_gpu_counts_with_idle_gpus():
    products = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256])
    # 1000 H100s, 8 per node: mp <= 8 fills 1000; mp 16 -> 62·16 = 992; 32 -> 31·32 = 992;
    # 64 -> 15·64 = 960; 128 -> 7·128 = 896; 256 -> 3·256 = 768; and dp dividing 512: 512.
    assert gpu_counts(products, 1000, 8, 512) == [1000, 992, 960, 896, 768, 512]
    # one NVL72 rack: less than a node is allowed, so 64 = 8·8 = 4·16 ...
    assert gpu_counts(products, 72, 72, 512) == [72, 64]


def test_allow_idle_gpus_finds_an_exact_batch_on_fewer_gpus():
    result = run(1000, "h100-sxm", gbs_tolerance=0.0, allow_idle_gpus=True)
    rows = result.plan_rows()
    assert len(rows) > 0
    table = result.table
    b = table.batch
    used = b.dp * b.tp * b.pp * b.cp
    np.testing.assert_array_equal(used[rows] + table["idle_gpus"][rows], 1000)
    assert (table["idle_gpus"][rows] > 0).all()  # 1000 GPUs reach 512 sequences on no layout
    assert (b.gbs_seqs[rows] == GBS_SEQS).all()
    record = result.top_records(1)[0]
    assert record["gpus"] == used[rows[0]] and record["idle_gpus"] == table["idle_gpus"][rows[0]]
    # per GPU of the job: the plan's own tokens/s spread over all 1000 GPUs
    tokens_per_s = GBS_SEQS * 8192 / table["step_time_s"][rows[0]]
    assert record["tokens_per_s_per_gpu"] == pytest.approx(tokens_per_s / 1000)


def test_without_the_option_no_gpu_is_left_idle():
    result = run(96, "h100-sxm")
    b = result.table.batch
    assert "idle_gpus" not in result.table.columns
    assert (b.dp * b.tp * b.pp * b.cp == 96).all()
