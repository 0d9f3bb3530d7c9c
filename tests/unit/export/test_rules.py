"""Export refuses a plan that breaks its trainer's rules, naming the invariant and the values.

The rules are the search's own table (``autoplan.rules``), evaluated by ``render`` on a batch of
one; these cases are the checks the trainers make before they start.
"""

from __future__ import annotations

import dataclasses

import pytest

from autoplan.api import plan_from_record
from autoplan.errors import AutoplanError, LayoutError
from autoplan.export import TRAINERS, TrainerRuleError, render
from autoplan.layout import LayoutBatch
from autoplan.profiles import load_profile
from autoplan.rules import RULES, RuleContext, broken_rules, check_layout
from autoplan.specs.models import load_model


def lay(**values):
    """(layout, training) of a plan on 8 GPUs, seq 4096, gbs 64 unless ``values`` say otherwise."""
    base = {"gpus": 8, "seq_len": 4096, "gbs_seqs": 64}
    return plan_from_record({**base, **values})


def broken(plan, **changes):
    """A plan with layout fields changed after resolution (to break invariants resolve_layout checks)."""
    layout, training = plan
    return dataclasses.replace(layout, **changes), training


def check(trainer, model, layout, training, *, allow_uneven_pp=False):
    check_layout(RuleContext(model, load_profile(trainer), training, allow_uneven_pp=allow_uneven_pp), layout)


def delayed(plan):
    """The plan under Megatron's delayed-scaling FP8 recipe."""
    layout, training = plan
    return layout, dataclasses.replace(training, fp8_recipe="delayed")


def gather_fp8(plan):
    """The plan with FP8 primary weights (--fp8-param-gather)."""
    layout, training = plan
    return layout, dataclasses.replace(training, fp8_param_gather=True)


def with_setup(plan, **settings):
    """The plan under other setup settings."""
    layout, training = plan
    return layout, dataclasses.replace(training, **settings)


def bf16_moments(plan):
    """The plan with bf16 AdamW moments and int16 master remainders (precision-aware optimizer)."""
    layout, training = plan
    return layout, dataclasses.replace(training, optimizer_state_dtype="bf16", master_weights="remainders")


# (rule, trainer, model, layout, text that must appear in the message)
CASES = [
    ("degrees", "megatron", "llama3-8b", broken(lay(), dp=3), "dp(3)·tp(1)·pp(1)·cp(1) = 3 != gpus(8)"),
    ("tp_heads", "megatron", "llama3-8b", lay(gpus=16, tp=16), "heads=32, kv_heads=8, tp=16"),
    ("pp_layers", "megatron", "llama3.2-1b", lay(gpus=32, pp=32, gbs_seqs=32), "layers=16, pp(32)·vpp(1) = 32"),
    ("sp_needs_tp", "deepspeed", "llama3-8b", lay(sp=True), "sp=true, tp=1"),
    ("pp_uneven", "megatron", "llama3-8b", lay(gpus=24, pp=3, gbs_seqs=48),
     "layers=32, pp(3)·vpp(1) = 3, 32 mod 3 = 2"),
    # 32 layers on 3 ranks × 4 virtual stages: torchtitan makes at most 2 stages per rank unevenly
    ("trainer_uneven_pp", "torchtitan", "llama3-8b", lay(gpus=24, pp=3, vpp=4, zero=0, gbs_seqs=96),
     "torchtitan splits unequal layers only with vpp <= 2"),
    ("vpp_needs_pp", "torchtitan", "llama3-8b", lay(vpp=2, zero=3), "vpp=2, pp=1"),
    ("vpp_microbatches", "megatron", "llama3-8b", lay(gpus=32, pp=4, vpp=2, gbs_seqs=48),
     "grad_acc=6, pp=4, vpp=2"),
    # torch's Interleaved1F1B: 11 micro-batches on pp 4 make 2 rounds, and 2 does not divide 11
    ("vpp_microbatch_rounds", "torchtitan", "llama3-8b", lay(gpus=32, pp=4, vpp=2, zero=3, gbs_seqs=88),
     "grad_acc=11, pp=4, rounds=2, vpp=2"),
    ("cp_seq", "megatron", "llama3-8b", lay(cp=4, seq_len=4100, gbs_seqs=16), "seq_len=4100, 2·cp=8"),
    ("sp_seq", "megatron", "llama3-8b", lay(tp=8, seq_len=4092, gbs_seqs=16), "seq_len=4092, cp·tp=8"),
    ("sequence_shards", "torchtitan", "llama3-8b", lay(tp=4, zero=3, seq_len=4094, gbs_seqs=16),
     "seq_len=4094, divisor=4 (tp=4, sp=True, cp=1)"),
    ("tied_pp", "torchtitan", "llama3.2-1b", lay(pp=2, zero=3), "ties its embeddings, pp=2"),
    ("ep_dense", "megatron", "llama3-8b", lay(ep=2), "ep=2, etp=1, model 'llama3-8b' is dense"),
    ("ep_experts", "megatron", "mixtral-8x7b", lay(gpus=16, ep=16), "experts=8, ep=16"),
    ("ep_grid", "megatron", "mixtral-8x7b", lay(ep=8, etp=2), "ep(8)·etp(2) = 16, dp·cp·tp = 8"),
    ("moe_tp_needs_sp", "megatron", "mixtral-8x7b", lay(tp=2, sp=False), "tp=2, sp=false"),
    ("ep_mesh", "torchtitan", "qwen3-30b-a3b", lay(ep=8, zero=0), "ep=8, dp_shard(1)·cp(1)·tp(1) = 1"),
    ("expert_tp", "nanotron", "mixtral-8x7b", lay(tp=2, etp=2), "etp=2"),
    ("ep_divides_dp", "deepspeed", "mixtral-8x7b", lay(tp=2, ep=8), "ep=8, dp=4"),
    ("recompute_knobs", "megatron", "llama3-8b", broken(lay(recompute="none"), recompute_layers=2),
     "recompute=none, recompute_layers=2"),
    # llama3-8b: 32 layers on pp 2 → 16 per stage
    ("recompute_layers_stage", "megatron", "llama3-8b", lay(pp=2, recompute="full", recompute_layers=17),
     "recompute_layers=17, layers=32, pp·vpp=2, largest stage 16"),
    ("trainer_recompute_layers", "torchtitan", "llama3-8b", lay(zero=3, recompute="full", recompute_layers=4),
     "recompute_layers=4, trainer torchtitan"),
    ("trainer_recompute_modules", "nanotron", "llama3-8b", lay(recompute="selective", recompute_modules="mlp"),
     "recompute_modules=mlp, trainer nanotron"),
    ("recompute_mla_up_proj", "megatron", "llama3-8b", lay(recompute="selective", recompute_modules="mla_up_proj"),
     "model 'llama3-8b' has no MLA"),
    ("recompute_fp8_delayed", "megatron", "llama3-8b",
     delayed(lay(recompute="selective", recompute_modules="layernorm", precision="fp8")),
     "precision=fp8, fp8_recipe=delayed"),
    ("cuda_graphs_full_recompute", "megatron-bridge", "llama3-8b",
     with_setup(lay(recompute="full"), cuda_graphs="attn"), "cuda_graphs=attn, recompute=full"),
    ("fp8_param_gather_optimizer", "megatron", "llama3-8b",
     gather_fp8(lay(precision="fp8", zero=0)), "fp8_param_gather=true, zero=0"),
    ("precision_aware_optimizer", "megatron", "llama3-8b", bf16_moments(lay(zero=0)),
     "optimizer_state_dtype=bf16, master_weights=remainders, zero=0, optimizer=adamw"),
    ("offload_megatron", "megatron", "llama3-8b", lay(pp=2, offload_layers=4), "offload_layers=4, pp=2"),
    ("trainer_offload", "megatron", "llama3-8b", lay(offload_layers=4), "no --cpu-offloading-num-layers"),
    ("deepspeed_etp", "deepspeed", "mixtral-8x7b", lay(tp=2, ep=2, etp=4), "etp=4, tp=2"),
    ("deepspeed_zero3_native_moe", "deepspeed", "mixtral-8x7b", lay(tp=2, zero=3), "zero=3, tp=2, pp=1"),
    ("megatron_deepspeed_model", "deepspeed", "qwen3-30b-a3b", lay(tp=2, zero=1),
     "tp=2, pp=1, model 'qwen3-30b-a3b' has experts 768 wide beside ffn 6144"),
    ("seq_positions", "megatron", "gpt3-175b", lay(seq_len=4096), "seq_len=4096 > 2048"),
    ("trainer_zero", "torchtitan", "llama3-8b", lay(zero=1), "zero=1, torchtitan supports [0, 3]"),
    ("trainer_zero_pp", "deepspeed", "llama3-8b", lay(pp=2, zero=2),
     "zero=2 with pp=2; deepspeed allows zero <= 1 with pp > 1"),
    ("trainer_vpp", "nanotron", "llama3-8b", lay(pp=2, vpp=2), "vpp=2; nanotron has no interleaved schedule"),
    ("trainer_cp", "deepspeed", "llama3-8b", lay(cp=2), "cp=2; deepspeed has no context parallelism"),
    ("trainer_ep", "nanotron", "mixtral-8x7b", lay(ep=2), "ep=2; nanotron has no expert parallelism"),
    ("pp_schedule_needs_pp", "torchtitan", "llama3-8b", lay(zero=3, pp_schedule="afab"), "pp_schedule=afab, pp=1"),
    ("pp_schedule_vpp", "torchtitan", "llama3-8b", lay(pp=2, zero=3, pp_schedule="zb-v"), "pp_schedule=zb-v, vpp=1"),
    # dualpipe on pp 2 with grad_acc = 64/(4·1) = 16 >= 2·pp passes; pp 3 is odd
    ("pp_schedule_dualpipe", "megatron", "llama3-8b", lay(gpus=6, pp=3, gbs_seqs=4, pp_schedule="dualpipe"),
     "pp_schedule=dualpipe, pp=3, grad_acc=2"),
    ("trainer_pp_schedule", "megatron", "llama3-8b", lay(pp=2, pp_schedule="dualpipe"),
     "pp_schedule=dualpipe, megatron runs 1f1b, interleaved; DualPipe is DeepSeek's standalone library"),
    ("torchtitan_multi_stage", "torchtitan", "llama3-8b", lay(pp=2, zero=3, pp_schedule="zb-h1"),
     "pp_schedule=zb-h1, vpp=1"),
    # 8 GPUs on pp 4: dp 2, and gbs 6 gives 3 micro-batches for 4 stages
    ("torchtitan_1f1b_microbatches", "torchtitan", "llama3-8b", lay(pp=4, zero=3, gbs_seqs=6),
     "grad_acc=3, pp=4"),
    ("trainer_pp_split", "nanotron", "llama3-8b", lay(pp=2, pp_split="embed-loss"),
     "pp_split=embed-loss, nanotron splits balanced"),
    ("trainer_optimizer", "torchtitan", "llama3-8b", lay(zero=3, optimizer="muon"),
     "optimizer=muon, torchtitan runs adamw"),
    ("megatron_emerging_optimizer_fsdp", "megatron", "llama3-8b", lay(zero=3, optimizer="muon"),
     "optimizer=muon, zero=3"),
    # 8 GPUs: dp = 8; Muon with the distributed optimizer, and (zero 0) with the overlapped reduction
    ("megatron_muon_data_parallel", "megatron", "llama3-8b", lay(zero=1, optimizer="muon"),
     "optimizer=muon, zero=1, dp·cp=8, overlap_grad_reduce=True"),
    ("deepspeed_megatron_optimizer", "deepspeed", "llama3-8b", lay(gpus=16, tp=2, optimizer="lion"),
     "optimizer=lion, tp=2, pp=1"),
    ("trainer_state_offload", "nanotron", "llama3-8b", lay(offload="optimizer"),
     "offload=optimizer, nanotron offloads nothing"),
    ("offload_params_zero3", "deepspeed", "llama3-8b", lay(zero=1, offload="params"), "offload=params, zero=1"),
    ("offload_needs_zero", "deepspeed", "llama3-8b", lay(zero=0, offload="optimizer"), "offload=optimizer, zero=0"),
    ("offload_cpu_optimizer", "megatron", "llama3-8b", lay(optimizer="muon", offload="optimizer"),
     "optimizer=muon, offload=optimizer, megatron runs adamw, sgd on the CPU"),
    # 8 GPUs: dp = 8 (ZeRO group 8); hsdp 3 does not divide it
    ("hsdp_divides", "torchtitan", "llama3-8b", lay(zero=3, hsdp=3), "hsdp=3, ZeRO group 8"),
    ("trainer_hsdp", "nanotron", "llama3-8b", lay(zero=1, hsdp=4),
     "hsdp=4, zero=1, nanotron shards hybrid at: none"),
    # dp = 8/2 = 4, ZeRO group dp·cp = 8: hsdp 2 divides it, but the shard mesh dp_shard × cp needs cp | hsdp
    ("torchtitan_hsdp_cp", "torchtitan", "llama3-8b", lay(cp=4, zero=3, hsdp=2), "hsdp=2, cp=4"),
    ("fp8_hardware", "megatron", "llama3-8b", plan_from_record(
        {"gpus": 8, "seq_len": 4096, "gbs_seqs": 64, "precision": "fp8"}, hardware="a100-80gb"), "fp8"),
    ("fp8_recipe_hardware", "megatron", "llama3-8b", with_setup(lay(precision="fp8"), fp8_recipe="mxfp8"),
     "fp8_recipe=mxfp8, gpu=h100-sxm (hopper); mxfp8 needs blackwell"),
    ("fp8_attention_hardware", "megatron-bridge", "llama3-8b", with_setup(plan_from_record(
        {"gpus": 8, "seq_len": 4096, "gbs_seqs": 64, "precision": "fp8"}, hardware="mi300x"), fp8_attention=True),
     "fp8_attention=true, attention_kernel=flash, gpu=mi300x (cdna3); FP8 attention needs the flash kernel on "
     "hopper or blackwell"),
    ("trainer_precision", "nanotron", "llama3-8b", lay(precision="fp8"), "precision=fp8, nanotron trains in bf16"),
    ("trainer_setting", "torchtitan", "llama3-8b", with_setup(lay(zero=3), grad_reduce_in_bf16=True),
     "grad_reduce_in_bf16=True, torchtitan runs False"),
    ("megatron_master_remainders", "megatron", "llama3-8b", with_setup(lay(), optimizer_state_dtype="bf16"),
     "optimizer_state_dtype=bf16, master_weights=fp32"),
]


@pytest.mark.parametrize(("rule", "trainer", "model", "layout", "values"), CASES, ids=[c[0] for c in CASES])
def test_rule_refuses_with_the_values(rule, trainer, model, layout, values):
    with pytest.raises(TrainerRuleError) as info:
        check(trainer, load_model(model), *layout)
    assert rule in [name for name, _ in info.value.broken]
    message = str(info.value)
    assert message.startswith(f"{trainer} refuses this plan: ")
    assert values in message
    invariant = next(r.invariant for r in RULES if r.name == rule)
    assert invariant in message


@pytest.mark.parametrize(("rule", "trainer", "model", "layout", "values"), CASES, ids=[c[0] for c in CASES])
def test_render_refuses_too(rule, trainer, model, layout, values):
    with pytest.raises(AutoplanError, match="refuses this plan"):
        render(trainer, load_model(model), *layout, allow_uneven_pp=rule != "pp_uneven")


def test_every_rule_has_a_case():
    tested = {case[0] for case in CASES}
    assert tested == {rule.name for rule in RULES}


def test_expert_parallel_rule_follows_the_profile():
    no_ep = load_profile("megatron").with_overrides([("expert_parallel", False)])
    with pytest.raises(TrainerRuleError, match=r"ep=2; megatron has no expert parallelism"):
        check_layout(RuleContext(load_model("mixtral-8x7b"), no_ep, lay(ep=2)[1]), lay(ep=2)[0])


def test_error_is_a_layout_error_and_lists_every_broken_rule():
    layout = lay(gpus=16, tp=16, sp=False, vpp=2, zero=2)
    ctx = RuleContext(load_model("llama3-8b"), load_profile("nanotron"), layout[1])
    found = [name for name, _ in broken_rules(ctx, LayoutBatch.from_layouts([layout[0]]), 0)]
    assert found == ["tp_heads", "vpp_needs_pp", "trainer_zero", "trainer_vpp"]
    with pytest.raises(LayoutError):
        check("nanotron", load_model("llama3-8b"), *layout)
    assert issubclass(TrainerRuleError, ValueError)


def test_torch_pipelining_runs_what_megatron_refuses():
    """10 micro-batches on pp 4 with vpp 2: Megatron's groups of pp leave a remainder of 2 < pp;
    torch's Interleaved1F1B runs 2 rounds of 5, and ZB-V has no rule on the count."""
    plan = lay(gpus=32, pp=4, vpp=2, zero=3, gbs_seqs=80)
    check("torchtitan", load_model("llama3-8b"), *plan)
    check("torchtitan", load_model("llama3-8b"), *broken(plan, pp_schedule="zb-v"))
    with pytest.raises(TrainerRuleError, match="grad_acc=10, pp=4"):
        check("megatron", load_model("llama3-8b"), *lay(gpus=32, pp=4, vpp=2, gbs_seqs=80))


def test_a_legal_plan_passes_every_trainer():
    layout = lay(tp=2, zero=0)
    for trainer in TRAINERS:
        check(trainer, load_model("llama3-8b"), *layout)


def test_unknown_trainer_suggests_the_near_miss():
    with pytest.raises(AutoplanError, match="did you mean 'megatron'"):
        render("megatorn", load_model("llama3-8b"), *lay())


def test_fp8_attention_needs_the_fused_kernel_and_counts_for_fp8_layouts_only():
    """TE trains FP8 attention only in cuDNN's fused kernel (no unfused FP8 path), and an fp8-only
    setting is ignored by a bf16 layout, as the trainer ignores fp8_dot_product_attention without fp8."""
    model = load_model("llama3-8b")
    eager = with_setup(lay(precision="fp8"), fp8_attention=True, attention_kernel="eager")
    ctx = RuleContext(model, load_profile("megatron-bridge"), eager[1])
    assert "fp8_attention_hardware" in [n for n, _ in broken_rules(ctx, LayoutBatch.from_layouts([eager[0]]), 0)]
    check("megatron-bridge", model, *with_setup(lay(precision="bf16"), fp8_attention=True))  # no refusal
    check("megatron-bridge", model, *with_setup(lay(precision="fp8"), fp8_attention=True))  # hopper: runs
