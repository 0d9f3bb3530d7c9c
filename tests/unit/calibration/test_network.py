"""The per-hop latency of the sweep's network, refitted from the shipped nccl-tests copy."""

from __future__ import annotations

import numpy as np
import pytest

from autoplan.calibration.network import NcclRows, all_reduce_parts, load_nccl_all_reduce, scale_out_latency_fit
from autoplan.calibration.validation import PLAYBOOK_HARDWARE, load_playbook_best, load_playbook_sweep
from autoplan.calibration.rows import row_context
from autoplan.specs.hardware import load_gpu

PLAYBOOK_SCALE_OUT_LATENCY_S = load_gpu(PLAYBOOK_HARDWARE).scale_out_latency_s


def test_the_sweep_rows_carry_the_latency_fitted_to_the_p5_measurements():
    fit = scale_out_latency_fit()
    assert fit.scale_out_latency_s == pytest.approx(PLAYBOOK_SCALE_OUT_LATENCY_S, rel=0.02)
    assert fit.median_abs_error < 0.15
    # an order of magnitude above the InfiniBand preset's nominal figure
    assert fit.scale_out_latency_s > 10 * load_gpu("h100-sxm").scale_out_latency_s
    for source in (load_playbook_sweep(), load_playbook_best()):  # on the p5 preset, which has it
        assert {row_context(r).cluster.gpu.scale_out_latency_s for r in source.rows[:50]} == {PLAYBOOK_SCALE_OUT_LATENCY_S}


def test_the_file_spans_2_to_32_nodes_at_32_mb_to_8_gb():
    rows = load_nccl_all_reduce()
    assert sorted(set(rows.nodes)) == [2, 4, 8, 16, 32]
    assert rows.num_bytes.min() == 32 * 2**20 and rows.num_bytes.max() == 8192 * 2**20
    assert np.all(rows.gpus == 8 * rows.nodes)


def test_the_fit_recovers_a_known_latency_from_the_model_s_own_times():
    # Times the cost model itself gives at α_out = 200 µs and NIC efficiency 0.8: the grid finds both.
    rows = load_nccl_all_reduce()
    synthetic = NcclRows(rows.nodes, rows.gpus, rows.num_bytes,
                         all_reduce_parts(rows).seconds(np.array(0.8), np.array(200e-6)))
    fit = scale_out_latency_fit(synthetic)
    assert fit.scale_out_latency_s == pytest.approx(200e-6, rel=0.01)
    assert fit.nic_efficiency == pytest.approx(0.8, abs=0.01)
    assert fit.median_abs_error < 1e-3


def test_the_p5_preset_carries_the_fitted_latency_and_the_h100_s_other_figures():
    p5, h100 = load_gpu("p5.48xlarge"), load_gpu("h100-sxm")
    assert p5.name == "h100-sxm-efa"
    assert p5.scale_out_latency_s == PLAYBOOK_SCALE_OUT_LATENCY_S
    for field in ("peak_bf16_flops_per_s", "hbm_bytes_per_s", "scale_up_bytes_per_s", "nic_bytes_per_s",
                  "usable_memory_bytes", "scale_up_latency_s"):
        assert getattr(p5, field) == getattr(h100, field)
