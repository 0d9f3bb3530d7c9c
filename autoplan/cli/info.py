"""`autoplan models`, `autoplan hardware`, `autoplan trainers`: what autoplan knows."""

from __future__ import annotations

import click

from autoplan.cli.options import output_format_option
from autoplan.cli.render import emit_records
from autoplan.units import GiB, format_count


@click.command("models")
@output_format_option()
def models_command(output_format: str) -> None:
    """List the model presets (model_db/) with their parameter counts."""
    from autoplan.cost.params import count_params
    from autoplan.specs.models import list_models

    records = []
    for m in list_models():
        records.append({
            "name": m.name, "aliases": ",".join(m.aliases), "model_type": m.model_type,
            "num_params": count_params(m).total, "num_active_params": count_params(m).active,
            "num_layers": m.num_layers, "hidden_size": m.hidden_size,
            "num_attention_heads": m.num_attention_heads, "num_kv_heads": m.num_kv_heads,
            "vocab_size": m.vocab_size, "num_experts": m.moe.num_experts if m.moe else 0,
            "seq_len": m.seq_len,
        })
    if output_format == "json":
        for r in records:
            r["aliases"] = r["aliases"].split(",") if r["aliases"] else []
    emit_records(records, output_format, title="Model presets",
                 columns=["name", "aliases", "num_params", "num_active_params", "num_layers",
                          "hidden_size", "num_experts", "seq_len"],
                 formatters={"num_params": format_count, "num_active_params": format_count})


@click.command("hardware")
@output_format_option()
def hardware_command(output_format: str) -> None:
    """List the GPU presets (hardware_db/gpus/) with their key figures."""
    from autoplan.specs.hardware import list_gpus

    records = [{
        "name": g.name, "aliases": ",".join(g.aliases), "memory_gib": g.memory_bytes / GiB,
        "usable_memory_gib": g.usable_memory_bytes / GiB,
        "peak_bf16_tflops": g.peak_bf16_flops_per_s / 1e12, "peak_fp8_tflops": g.peak_fp8_flops_per_s / 1e12,
        "power_limited_clock_fraction": g.power_limited_clock_fraction,
        "hbm_tb_per_s": g.hbm_bytes_per_s / 1e12,
        "scale_up_gb_per_s_per_direction": g.scale_up_bytes_per_s / 1e9,
        "scale_up_domain": g.scale_up_domain_size,
        "nic_gbit_per_s_per_direction": g.nic_bytes_per_s * 8 / 1e9, "gpus_per_node": g.gpus_per_node,
    } for g in list_gpus()]
    if output_format == "json":
        for r in records:
            r["aliases"] = r["aliases"].split(",") if r["aliases"] else []
    num = "{:.4g}".format
    emit_records(records, output_format, title="GPU presets (bandwidths per direction)",
                 columns=["name", "usable_memory_gib", "peak_bf16_tflops", "peak_fp8_tflops",
                          "power_limited_clock_fraction", "hbm_tb_per_s", "scale_up_gb_per_s_per_direction", "scale_up_domain",
                          "nic_gbit_per_s_per_direction"],
                 headers={"usable_memory_gib": "usable GiB", "peak_bf16_tflops": "BF16 TFLOP/s",
                          "peak_fp8_tflops": "FP8 TFLOP/s", "power_limited_clock_fraction": "clock",
                          "hbm_tb_per_s": "HBM TB/s",
                          "scale_up_gb_per_s_per_direction": "scale-up GB/s",
                          "scale_up_domain": "domain", "nic_gbit_per_s_per_direction": "NIC Gb/s"},
                 formatters={k: num for k in ("usable_memory_gib", "peak_bf16_tflops", "peak_fp8_tflops",
                                              "power_limited_clock_fraction", "hbm_tb_per_s", "scale_up_gb_per_s_per_direction",
                                              "nic_gbit_per_s_per_direction")})


@click.command("trainers")
@output_format_option()
def trainers_command(output_format: str) -> None:
    """List the trainer profiles and what each supports."""
    from autoplan.profiles import list_trainers, load_profile

    records = []
    for name in list_trainers():
        p = load_profile(name)
        c = p.capabilities
        records.append({"name": p.name, "description": p.description,
                        "zero_stages": ",".join(map(str, c.zero_stages)),
                        "virtual_stages": c.virtual_stages, "context_parallel": c.context_parallel,
                        "expert_parallel": c.expert_parallel, "precisions": ",".join(c.precisions),
                        "fp8_recipes": ",".join(c.fp8_recipes),
                        "settings": "; ".join(f"{k}: {','.join(map(str, v))}" for k, v in c.settings.items()),
                        "calibrated_for": ",".join(k for k in p.parameters if k != "default")})
    emit_records(records, output_format, title="Trainer profiles",
                 columns=["name", "description", "zero_stages", "virtual_stages",
                          "context_parallel", "precisions", "fp8_recipes", "calibrated_for"])
