"""Alpha-beta collective times and group placement against hand-computed values.

H100 SXM preset: NVLink 450 GB/s per direction in domains of 8, one 400 Gb/s (50 GB/s) NIC per
GPU, latencies 3 µs (NVLink) and 10 µs (NIC); link efficiencies pinned to 1 so the numbers are
plain arithmetic. Ring formulas: Thakur et al. 2005; NCCL's bus-bandwidth convention.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autoplan.cost import comm
from autoplan.cost.context import CostContext
from autoplan.layout import PLACEMENTS
from autoplan.profiles import load_profile
from autoplan.profiles.parameter_files import load_defaults
from autoplan.specs.hardware import load_gpu, make_cluster
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec

GPU = load_gpu("h100-sxm")
NVLINK, NIC = 450e9, 50e9
ALPHA_UP, ALPHA_OUT = 3e-6, 10e-6
MODEL = ModelSpec(name="m", num_layers=2, hidden_size=256, ffn_hidden_size=512,
                  num_attention_heads=4, num_kv_heads=4, head_dim=64, vocab_size=100)


def ctx_for(domain: int | None = None, up_eff: float = 1.0, out_eff: float = 1.0) -> CostContext:
    cluster = make_cluster(GPU, 8)
    if domain is not None:
        cluster = dataclasses.replace(cluster, scale_up_domain_size=domain)
    return CostContext(model=MODEL, training=TrainingSpec(cluster, seq_len=1024, gbs_seqs=8),
                       profile=load_profile("megatron"),
                       parameters=load_defaults().with_values(
                           {"scale_up_efficiency": up_eff, "scale_out_efficiency": out_eff}))


def link(size: float, stride: float, ctx: CostContext | None = None) -> comm.GroupLink:
    return comm.group_link(ctx or ctx_for(), np.array([float(size)]), np.array([float(stride)]))


@pytest.mark.parametrize("size, stride, inside, per_domain, bus", [
    (8, 1, True, 8, NVLINK),             # a whole HGX node: NVLink
    (4, 2, True, 4, NVLINK),             # 4 ranks at stride 2 span 8 GPUs: still one domain
    (2, 4, True, 2, NVLINK),
    (2, 8, False, 1, NIC),               # one rank per node: min(450e9, 1 × 50e9)
    (4, 4, False, 2, 2 * NIC),           # 2 ranks per node, 2 NICs: min(450e9, 100e9)
    (16, 1, False, 8, 8 * NIC),          # 8 ranks per node: min(450e9, 400e9) = 400e9
    (64, 1, False, 8, 8 * NIC),
    (1, 1, True, 1, NVLINK),             # trivial group
])
def test_group_placement_and_bus_bandwidth(size, stride, inside, per_domain, bus):
    g = link(size, stride)
    assert bool(g.inside_domain[0]) is inside
    assert g.ranks_per_domain[0] == per_domain
    assert g.bus_bytes_per_s[0] == pytest.approx(bus, rel=1e-15)
    assert g.latency_s[0] == pytest.approx(ALPHA_UP if inside else ALPHA_OUT, rel=1e-12)


def test_bus_bandwidth_is_capped_by_nvlink():
    # NVL72-sized per-node NIC count with a small domain: 16 ranks per domain of 16 at 50 GB/s
    # would be 800 GB/s of NICs, but a GPU cannot push more than its 450 GB/s of NVLink.
    g = link(32, 1, ctx_for(domain=16))
    assert g.bus_bytes_per_s[0] == NVLINK


def test_link_efficiencies_scale_the_bus():
    g_in = link(8, 1, ctx_for(up_eff=0.75, out_eff=0.8))
    g_out = link(16, 1, ctx_for(up_eff=0.75, out_eff=0.8))
    assert g_in.bus_bytes_per_s[0] == pytest.approx(0.75 * NVLINK)
    assert g_out.bus_bytes_per_s[0] == pytest.approx(min(0.75 * NVLINK, 8 * 0.8 * NIC))  # 320e9


def test_ring_all_reduce_inside_a_node():
    # 2(n-1)/n · S / busbw + 2·log2(n)·α = 1.75 · 1e9 / 450e9 + 6 · 3 µs
    #   = 3.888889e-3 + 1.8e-5 = 3.906889e-3 s
    t = comm.all_reduce_s(link(8, 1), np.array([1e9]))
    assert t[0] == pytest.approx(1.75e9 / NVLINK + 18e-6, rel=1e-12)
    assert t[0] == pytest.approx(3.906889e-3, rel=1e-6)


def test_ring_all_reduce_across_nodes():
    # 64 ranks, 8 per node: busbw = 400e9; 2·63/64 · 1e9 / 400e9 + 2·6·10 µs = 4.921875e-3 + 1.2e-4
    t = comm.all_reduce_s(link(64, 1), np.array([1e9]))
    assert t[0] == pytest.approx(2 * 63 / 64 * 1e9 / (8 * NIC) + 12 * ALPHA_OUT, rel=1e-12)


def test_all_gather_and_reduce_scatter_are_half_an_all_reduce():
    g = link(8, 1)
    size = np.array([3e8])
    gather = comm.all_gather_s(g, size)
    scatter = comm.reduce_scatter_s(g, size)
    # (n-1)/n · S / busbw + log2(n)·α = 7/8 · 3e8 / 450e9 + 9 µs
    assert gather[0] == pytest.approx(7 / 8 * 3e8 / NVLINK + 9e-6, rel=1e-12)
    assert scatter[0] == gather[0]
    assert gather[0] + scatter[0] == pytest.approx(comm.all_reduce_s(g, size)[0], rel=1e-12)


def test_collectives_of_one_rank_cost_nothing():
    g = link(1, 1)
    size = np.array([1e9])
    assert comm.all_reduce_s(g, size)[0] == 0.0
    assert comm.all_gather_s(g, size)[0] == 0.0
    assert comm.all_to_all_s(ctx_for(), g, size)[0] == 0.0


def test_all_to_all_inside_and_across_domains():
    ctx = ctx_for()
    size = np.array([8e8])
    # inside (n = k = 8): 7/8 of the bytes over NVLink: 7e8/450e9 + log2(8)·3 µs
    inside = comm.all_to_all_s(ctx, link(8, 1), size)
    assert inside[0] == pytest.approx(7e8 / NVLINK + 9e-6, rel=1e-12)
    # 16 ranks, 8 per domain: max(7/16 · 8e8 / 450e9, 8/16 · 8e8 / 50e9) + 4·10 µs
    #   = max(7.78e-4, 8e-3) + 4e-5 = 8.04e-3 s (the NIC share dominates)
    across = comm.all_to_all_s(ctx, link(16, 1), size)
    assert across[0] == pytest.approx(max(3.5e8 / NVLINK, 4e8 / NIC) + 40e-6, rel=1e-12)


@pytest.mark.parametrize("stride, expected", [
    (1, 1e8 / NVLINK + ALPHA_UP),   # neighbours in the same node
    (4, 1e8 / NVLINK + ALPHA_UP),
    (8, 1e8 / NIC + ALPHA_OUT),     # next node: NIC
    (64, 1e8 / NIC + ALPHA_OUT),
])
def test_point_to_point(stride, expected):
    # a two-stage chain: inside the domain while stride · 2 <= 8
    t = comm.p2p_s(ctx_for(), np.array([float(stride)]), np.array([2.0]), np.array([1e8]))
    assert t[0] == pytest.approx(expected, rel=1e-12)


def test_strides_follow_the_placement_order():
    tp, cp, dp, pp = (np.array([v]) for v in (2.0, 4.0, 8.0, 16.0))
    expected = {
        # innermost first: each dimension's stride is the product of the sizes inside it
        "tp-cp-dp-pp": {"tp": 1, "cp": 2, "dp": 8, "pp": 64},
        "tp-dp-cp-pp": {"tp": 1, "dp": 2, "cp": 16, "pp": 64},
        "tp-pp-cp-dp": {"tp": 1, "pp": 2, "cp": 32, "dp": 128},
        "cp-tp-dp-pp": {"cp": 1, "tp": 4, "dp": 8, "pp": 64},
    }
    assert set(expected) == set(PLACEMENTS)
    for code, order in enumerate(PLACEMENTS):
        st = comm.strides(np.array([float(code)]), tp, cp, dp, pp)
        assert {k: int(v[0]) for k, v in st.items()} == expected[order], order


def test_tp_group_leaves_the_node_when_cp_is_innermost():
    # cp-tp-dp-pp with cp = 2, tp = 8: TP ranks sit 2 apart, 16 GPUs wide: across two nodes,
    # 4 TP ranks per node -> busbw min(450e9, 4 × 50e9) = 200e9
    st = comm.strides(np.array([float(PLACEMENTS.index("cp-tp-dp-pp"))]), np.array([8.0]),
                      np.array([2.0]), np.array([1.0]), np.array([1.0]))
    g = comm.group_link(ctx_for(), np.array([8.0]), st["tp"])
    assert not g.inside_domain[0]
    assert g.bus_bytes_per_s[0] == 4 * NIC


# --- data-parallel collectives: NCCL's ring / tree latency (src/graph/tuning.cc) ----------------

@pytest.mark.parametrize("size, stride, rounds, expected", [
    (8, 1, 1, 7 * ALPHA_UP),                           # one domain: 7 ring steps over NVLink
    (16, 1, 1, 14 * ALPHA_UP + 1 * ALPHA_OUT),         # 2 nodes: 15 steps, 1 of them crosses a NIC
    (64, 1, 2, 2 * (56 * ALPHA_UP + 7 * ALPHA_OUT)),   # all-reduce ring: twice the 63 steps, 7 inter
    (4, 8, 1, 3 * ALPHA_OUT),                          # one rank per node: every step crosses a NIC
])
def test_ring_latency_counts_intra_and_inter_node_steps(size, stride, rounds, expected):
    assert comm.ring_latency_s(ctx_for(), link(size, stride), rounds)[0] == pytest.approx(expected, rel=1e-12)


def test_tree_latency_climbs_log2_levels_inside_and_across_nodes():
    # 64 ranks, 8 per node: 2·(log2(8)·α_up + log2(8)·α_out)
    assert comm.tree_latency_s(ctx_for(), link(64, 1))[0] == pytest.approx(2 * (3 * ALPHA_UP + 3 * ALPHA_OUT))


def test_dp_all_reduce_takes_the_faster_algorithm_per_collective():
    # 512 ranks over 64 nodes: ring 2·(448·α_up + 63·α_out) = 3.948 ms, tree 2·(3·α_up + 6·α_out)
    # = 0.138 ms: 3 all-reduces of 1 GB cost 2·511/512·1e9/400e9 + 3 × the tree's latency.
    g, ctx = link(512, 1), ctx_for()
    tree = 2 * (3 * ALPHA_UP + 6 * ALPHA_OUT)
    t = comm.dp_all_reduce_s(ctx, g, np.array([1e9]), np.array([3.0]))
    assert t[0] == pytest.approx(2 * 511 / 512 * 1e9 / (8 * NIC) + 3 * tree, rel=1e-12)


def test_dp_all_gather_pays_one_ring_latency_per_collective():
    # 16 ranks over 2 nodes, 32 per-layer gathers of 1 GB in all: 15/16·1e9/400e9 + 32·(14·α_up + α_out)
    g = link(16, 1)
    t = comm.dp_all_gather_s(ctx_for(), g, np.array([1e9]), np.array([32.0]))
    assert t[0] == pytest.approx(15 / 16 * 1e9 / (8 * NIC) + 32 * (14 * ALPHA_UP + ALPHA_OUT), rel=1e-12)


def test_a_full_mesh_gives_a_group_one_link_per_peer():
    """MI300X's XGMI is a full mesh of 7 links of 64 GB/s per direction (its YAML says so): a TP
    group of 2 reaches one link, 64 GB/s, not the 448 GB/s aggregate it was costed at; a group
    of n reaches (n - 1) links, the whole 448 GB/s at 8. An NVSwitch part is unchanged."""
    mi300x = load_gpu("mi300x")
    assert mi300x.scale_up_peer_link_bytes_per_s == 64e9 and mi300x.scale_up_bytes_per_s == 448e9
    ctx = dataclasses.replace(ctx_for(), training=TrainingSpec(make_cluster(mi300x, 8), seq_len=1024, gbs_seqs=8))
    sizes = np.array([2.0, 4.0, 8.0])
    link = comm.group_link(ctx, sizes, np.ones(3))
    np.testing.assert_allclose(link.bus_bytes_per_s, [64e9, 3 * 64e9, 7 * 64e9])
    # 1 GB all-reduced by 2 ranks: 2·(1/2)·1e9 / 64e9 + 2·log2(2)·3 µs
    assert comm.all_reduce_s(link, np.full(3, 1e9))[0] == pytest.approx(1e9 / 64e9 + 2 * 3e-6)
    switched = comm.group_link(ctx_for(), sizes, np.ones(3))
    np.testing.assert_allclose(switched.bus_bytes_per_s, NVLINK)
