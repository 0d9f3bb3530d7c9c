"""Per-term breakdowns of one evaluated layout, with the formula and source of each term."""

from __future__ import annotations

from typing import Any

from autoplan.cost.evaluate import CostTable
from autoplan.cost.memory import MEMORY_TERMS
from autoplan.units import GiB

MEMORY_SOURCES = {
    "weights": ("params_on_stage × weight_bytes / (dp·cp if zero ≥ 3)", "ZeRO (Rajbhandari 2020) Fig. 1; trainer profile"),
    "gradients": ("params_on_stage × grad_bytes / (dp·cp if zero ≥ 2)", "ZeRO Fig. 1; trainer profile"),
    "master_weights": ("params_on_stage × 4 / (dp·cp if zero ≥ 1)", "ZeRO Fig. 1; megatron theoretical_memory_usage.py"),
    "optimizer_states": ("params_on_stage × 8 / (dp·cp if zero ≥ 1)", "ZeRO Fig. 1 (Adam K=12 incl. master)"),
    "activations": ("per-layer bytes × layer-activations in flight (1F1B warm-up)", "Korthikanti 2022 Table 2; schedules.py"),
    "embedding_output": ("mbs·s/cp × h × 2 / (tp if sp)", "first stage output buffer"),
    "logits_and_loss": ("mbs·s/cp × V/tp × logits_bytes_per_vocab", "trainer cross-entropy (vocab-parallel)"),
    "communication_buffers": ("ZeRO-3 gathered layers + TP all-gather buffer", "FSDP2 prefetch; Megatron SP"),
    "reserve": ("allocator_overhead × tracked + memory_reserve_bytes", "calibrated (profiles/*.yaml)"),
}
TIME_SOURCES = {
    "compute": ("layers × (fwd + 2×bwd) matmul/attention/element-wise", "SC'21 Sec. 5.1; GEMM efficiency curve"),
    "recompute": ("extra forward work of recomputation", "Korthikanti 2022 App. A"),
    "tp_exposed": ("per layer 2 AG + 2 RS per pass × (1 − tp_overlap)", "Korthikanti 2022 Sec. 4.2.2"),
    "cp_exposed": ("ring K/V exchange not hidden by attention", "ring attention (Liu 2023)"),
    "ep_exposed": ("all-to-all dispatch + combine per MoE layer", "Megatron-Core MoE token dispatcher"),
    "pp_exposed": ("p2p activation/gradient sends per micro-batch", "SC'21 Sec. 2.2"),
    "dp_exposed": ("gradient reduce-scatter/all-reduce not hidden by the last backward", "PyTorch DDP buckets; ZeRO"),
    "bubble": ("(pp − 1)/vpp × t_microbatch", "SC'21 Sec. 2.2.2"),
    "optimizer": ("sharded params × (grad + 2·(master + m, v) + weight bytes) / HBM bandwidth",
                  "Adam step memory traffic (time.adam_step_bytes_per_param)"),
    "overhead": ("fixed per-step overhead", "calibrated"),
    "memory_pressure": ("step × slowdown × excess over the pressure threshold", "calibrated (allocator retries)"),
}


def explain_terms(table: CostTable, i: int) -> list[dict[str, Any]]:
    """Every memory term (per stage) and time term of layout ``i`` with formula and source."""
    rows = []
    for stage in ("first", "last"):
        for term in MEMORY_TERMS:
            formula, source = MEMORY_SOURCES[term]
            value = float(table[f"mem_{stage}_{term}_bytes"][i])
            rows.append({"kind": "memory", "stage": stage, "term": term, "value": value / GiB,
                         "unit": "GiB", "formula": formula, "source": source})
    for term, (formula, source) in TIME_SOURCES.items():
        value = float(table[f"time_{term}_s"][i])
        rows.append({"kind": "time", "stage": "step", "term": term, "value": value, "unit": "s",
                     "formula": formula, "source": source})
    return rows


def bottleneck(table: CostTable, i: int) -> str:
    """The largest non-compute share of the step, named."""
    step = float(table["step_time_s"][i])
    shares = {term: float(table[f"time_{term}_s"][i]) / step for term in TIME_SOURCES if term != "compute"}
    name, share = max(shares.items(), key=lambda kv: kv[1])
    words = {"tp_exposed": "exposed tensor-parallel communication", "cp_exposed": "exposed context-parallel ring",
             "ep_exposed": "exposed expert all-to-all", "pp_exposed": "exposed pipeline sends",
             "dp_exposed": "exposed data-parallel gradient reduction", "bubble": "pipeline bubble",
             "recompute": "activation recomputation", "optimizer": "optimizer step", "overhead": "step overhead",
             "memory_pressure": "allocator pressure near the memory limit"}
    return f"{words[name]}: {share:.0%} of the step"
