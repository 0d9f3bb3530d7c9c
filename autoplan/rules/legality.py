"""Legality of layouts, checked vectorised before costing, with reason codes.

Each rule is a boolean array over layouts (True = broken) and a message template; a layout's
reason is the first rule it breaks. The rules are those of the trainers' own argument checks
(Megatron-LM ``megatron/training/arguments.py``, torchtitan ``parallel_dims.py``, nanotron
``config/parallelism_config.py``, DeepSpeed ``runtime/pipe/engine.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autoplan.cost.context import CostContext
from autoplan.layout import LayoutBatch

Rule = tuple[str, Callable[[CostContext, LayoutBatch], np.ndarray], str]


def _moe(ctx: CostContext) -> tuple[float, bool]:
    moe = ctx.model.moe
    return (float(moe.num_experts) if moe else 1.0), moe is not None


RULES: list[Rule] = [
    ("degrees", lambda c, b: b.dp * b.tp * b.pp * b.cp != c.training.gpus,
     "dp·tp·pp·cp must equal gpus"),
    ("node_multiple", lambda c, b: (c.training.gpus > c.cluster.gpus_per_node)
     & (c.training.gpus % c.cluster.gpus_per_node != 0),
     "gpus must be a multiple of the GPUs per node when larger than one node"),
    ("tp_heads", lambda c, b: (c.model.num_attention_heads % b.tp != 0) | (c.model.num_kv_heads % b.tp != 0),
     "attention heads and KV heads must be divisible by tp"),
    ("pp_layers", lambda c, b: b.pp * b.vpp > c.model.num_layers,
     "pp·vpp must not exceed the number of layers"),
    ("pp_uneven", lambda c, b: c.model.num_layers % (b.pp * b.vpp) != 0,
     "layers must be divisible by pp·vpp"),
    ("vpp_needs_pp", lambda c, b: (b.vpp > 1) & (b.pp == 1),
     "virtual stages (vpp > 1) need pp > 1"),
    ("vpp_microbatches", lambda c, b: (b.vpp > 1) & (b.grad_acc % b.pp != 0),
     "interleaved 1F1B needs micro-batches (grad_acc) divisible by pp"),
    ("cp_seq", lambda c, b: (b.cp > 1) & (c.training.seq_len % (2 * b.cp) != 0),
     "seq_len must be divisible by 2·cp"),
    ("ep_dense", lambda c, b: ((b.ep > 1) | (b.etp > 1)) & (not _moe(c)[1]),
     "ep/etp > 1 need a mixture-of-experts model"),
    ("ep_experts", lambda c, b: _moe(c)[0] % b.ep != 0,
     "routed experts must be divisible by ep"),
    ("ep_grid", lambda c, b: (b.dp * b.cp * b.tp) % (b.ep * b.etp) != 0,
     "ep·etp must divide dp·cp·tp (expert grid)"),
    ("sp_needs_tp", lambda c, b: (b.sp > 0) & (b.tp == 1),
     "sequence parallel needs tp > 1"),
    ("sp_seq", lambda c, b: (b.sp > 0) & ((c.training.seq_len / b.cp) % b.tp != 0),
     "with sequence parallel, seq_len/cp must be divisible by tp"),
    ("trainer_moe_sp", lambda c, b: (c.profile.name == "megatron") & (c.model.moe is not None)
     & (b.tp > 1) & (b.sp == 0),
     "Megatron-Core MoE with tp > 1 needs sequence parallel"),
    ("trainer_tied_pp", lambda c, b: (c.profile.name == "torchtitan") & c.model.tied_embeddings & (b.pp > 1),
     "torchtitan cannot tie embeddings across pipeline stages"),
    ("trainer_etp", lambda c, b: ((c.profile.name == "torchtitan") & (b.etp > 1))
     | ((c.profile.name == "deepspeed") & (b.etp > 1) & (b.etp != b.tp)),
     "the trainer does not support this expert tensor-parallel size"),
    ("trainer_ep_dp", lambda c, b: (c.profile.name == "deepspeed") & (b.dp % b.ep != 0),
     "DeepSpeed needs ep to divide dp"),
    ("batch", lambda c, b: b.dp * b.mbs * b.grad_acc != b.gbs_seqs,
     "gbs_seqs must equal dp·mbs·grad_acc"),
    ("seq_positions", lambda c, b: (c.model.position_embedding == "learned")
     & (c.training.seq_len > c.model.max_position_embeddings),
     "seq_len exceeds the model's learned position embeddings"),
    ("fp8_hardware", lambda c, b: (b.precision == 1) & (c.cluster.gpu.peak_fp8_flops_per_s <= 0),
     "fp8 needs a GPU with FP8 tensor cores"),
    ("trainer_zero", lambda c, b: ~np.isin(b.zero, c.profile.allowed_zero),
     "the trainer does not support this ZeRO stage"),
    ("trainer_zero_pp", lambda c, b: (b.pp > 1) & (b.zero > c.profile.max_zero_with_pp),
     "the trainer does not support this ZeRO stage with pipeline parallelism"),
    ("trainer_vpp", lambda c, b: (b.vpp > 1) & (not c.profile.supports_vpp),
     "the trainer has no virtual pipeline stages"),
    ("trainer_cp", lambda c, b: (b.cp > 1) & (not c.profile.supports_cp),
     "the trainer has no context parallelism"),
    ("trainer_ep", lambda c, b: (b.ep > 1) & (not c.profile.supports_ep),
     "the trainer has no expert parallelism"),
]
REASON_CODES = ["ok"] + [name for name, _, _ in RULES]
REASON_MESSAGES = {name: message for name, _, message in RULES}


def legality_codes(ctx: CostContext, batch: LayoutBatch, *, allow_uneven: bool = False) -> np.ndarray:
    """Index into ``REASON_CODES`` of the first broken rule per layout (0 = legal)."""
    codes = np.zeros(len(batch), dtype=np.int64)
    # Last rule first, so an earlier rule overwrites a later one: the first broken rule wins.
    for index, (name, rule, _) in reversed(list(enumerate(RULES, start=1))):
        if name == "pp_uneven" and allow_uneven:
            continue
        broken = rule(ctx, batch)
        if np.ndim(broken) == 0:
            if broken:
                codes[:] = index
            continue
        codes[broken] = index
    return codes


def explain_reason(ctx: CostContext, batch: LayoutBatch, i: int, code: int) -> str:
    """A one-line message for layout ``i`` broken by rule ``code``, with its values."""
    if code == 0:
        return ""
    name = REASON_CODES[code]
    lay = batch.layout(i)
    m = ctx.model
    values = {
        "degrees": f"dp({lay.dp})·tp({lay.tp})·pp({lay.pp})·cp({lay.cp}) != gpus({ctx.training.gpus})",
        "node_multiple": f"gpus={ctx.training.gpus}, gpus per node={ctx.cluster.gpus_per_node}",
        "tp_heads": f"heads={m.num_attention_heads}, kv_heads={m.num_kv_heads}, tp={lay.tp}",
        "pp_layers": f"layers={m.num_layers}, pp·vpp={lay.pp * lay.vpp}",
        "pp_uneven": f"layers={m.num_layers}, pp·vpp={lay.pp * lay.vpp}",
        "vpp_microbatches": f"grad_acc={lay.grad_acc}, pp={lay.pp}",
        "cp_seq": f"seq_len={ctx.training.seq_len}, 2·cp={2 * lay.cp}",
        "ep_experts": f"experts={m.moe.num_experts if m.moe else 0}, ep={lay.ep}",
        "ep_grid": f"ep·etp={lay.ep * lay.etp}, dp·cp·tp={lay.dp * lay.cp * lay.tp}",
        "batch": f"gbs_seqs={lay.gbs_seqs}, dp·mbs·grad_acc={lay.dp * lay.mbs * lay.grad_acc}",
        "seq_positions": f"seq_len={ctx.training.seq_len} > {m.max_position_embeddings}",
        "trainer_zero": f"zero={lay.zero}, {ctx.profile.name} supports {list(ctx.profile.allowed_zero)}",
        "trainer_zero_pp": f"zero={lay.zero}, pp={lay.pp}, {ctx.profile.name} allows zero <= "
                           f"{ctx.profile.max_zero_with_pp} with pp > 1",
    }.get(name, lay.describe())
    return f"{REASON_MESSAGES[name]} ({values})"


def suggest_fix(ctx: CostContext, batch: LayoutBatch, i: int, code: int) -> str:
    """The nearest change that repairs rule ``code`` for layout ``i`` ('' when none is obvious)."""
    name = REASON_CODES[code]
    lay, m = batch.layout(i), ctx.model

    def nearest(value: int, ok) -> int | None:
        for delta in range(0, 4096):
            for candidate in (value - delta, value + delta):
                if candidate >= 1 and ok(candidate):
                    return candidate
        return None

    if name == "tp_heads":
        tp = nearest(lay.tp, lambda t: m.num_attention_heads % t == 0 and m.num_kv_heads % t == 0
                     and ctx.training.gpus % (t * lay.pp * lay.cp) == 0)
        return f"try --tp {tp}" if tp else ""
    if name in ("pp_uneven", "pp_layers"):
        pp = nearest(lay.pp, lambda p: m.num_layers % (p * lay.vpp) == 0
                     and ctx.training.gpus % (lay.tp * p * lay.cp) == 0)
        return f"try --pp {pp}" if pp else ""
    if name == "cp_seq":
        return f"try --seq-len {(ctx.training.seq_len // (2 * lay.cp) + 1) * 2 * lay.cp} or a smaller --cp"
    if name == "sp_needs_tp":
        return "drop --sp or use --tp > 1"
    if name in ("trainer_zero", "trainer_zero_pp"):
        allowed = [z for z in ctx.profile.allowed_zero if lay.pp == 1 or z <= ctx.profile.max_zero_with_pp]
        return f"try --zero {max(allowed)}" if allowed else ""
    if name == "vpp_microbatches":
        return f"try a global batch whose micro-batch count is a multiple of pp={lay.pp}, or --vpp 1"
    if name == "fp8_hardware":
        return "use --precision bf16"
    return ""
