"""Each trainer's consistency rules, checked on one plan before it is exported.

A rule is data: the trainers it binds, the invariant in words, a predicate that is true when the
plan breaks it, and the values to show. ``check`` refuses a plan with every broken rule and its
values (STYLE.md §6). The rules restate the trainers' own checks, with the file each comes from:

* Megatron-LM core_v0.15.3: ``megatron/training/arguments.py`` (``validate_args``), the
  interleaved schedule in ``megatron/core/pipeline_parallel/schedules.py``,
  ``megatron/core/transformer/moe/moe_layer.py`` (MoE with TP needs sequence parallel).
* torchtitan 0.3.0: ``torchtitan/distributed/parallel_dims.py`` (world size, the ``efsdp``
  mesh ``dp_shard·cp·tp / ep``), ``torchtitan/trainer.py`` (global batch divisible by local
  batch × DP), ``torchtitan/distributed/pipeline_parallel.py`` (layers per stage).
* nanotron main @ 2411b022: ``src/nanotron/config/config.py`` (heads vs TP),
  ``src/nanotron/parallel/context.py`` (``tp·cp·dp·pp == world``, then a reshape that includes
  ``expert_parallel_size``, so EP > 1 cannot start).
* DeepSpeed 0.19.8: ``deepspeed/runtime/config.py`` (``train_batch_size ==
  micro × grad_acc × dp``), ``deepspeed/runtime/pipe/engine.py`` (pipeline with ZeRO <= 1),
  ``deepspeed/utils/groups.py`` (expert groups are carved from DP: ``dp % ep == 0``).

Stages, virtual stages, CP and EP support come from the trainer profiles
(``autoplan/profiles/*.yaml``), so the export refuses exactly what the search never proposes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

from autoplan.errors import LayoutError
from autoplan.layout import Layout
from autoplan.profiles import load_profile
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import TrainingSpec

TRAINERS = ("megatron", "torchtitan", "nanotron", "deepspeed")
ALL = TRAINERS


@dataclass(frozen=True)
class Rule:
    name: str
    trainers: tuple[str, ...]
    invariant: str
    broken: Callable[[ModelSpec, Layout, str], bool]
    values: Callable[[ModelSpec, Layout, str], str]


class TrainerRuleError(LayoutError):
    """A plan that a trainer would refuse; ``broken`` lists (rule name, message) pairs."""

    def __init__(self, trainer: str, broken: list[tuple[str, str]]):
        self.trainer = trainer
        self.broken = broken
        lines = "; ".join(message for _, message in broken)
        super().__init__(f"{trainer} refuses this plan: {lines}")


def _experts(m: ModelSpec) -> int:
    return m.moe.num_experts if m.moe is not None else 0


def _dp_shard(lay: Layout) -> int:
    """torchtitan's FSDP degree: dp with ZeRO-3, 1 (pure replication) otherwise."""
    return lay.dp if lay.zero == 3 else 1


def _seq_divisor(lay: Layout) -> int:
    """torchtitan/trainer.py: (tp if sequence parallel) × (2·cp if cp > 1)."""
    return (lay.tp if lay.sp else 1) * (2 * lay.cp if lay.cp > 1 else 1)


def _local_batch(lay: Layout) -> int:
    """torchtitan's local_batch_size: a whole pipeline round with PP, one micro-batch without."""
    return lay.mbs * lay.grad_acc if lay.pp > 1 else lay.mbs


def _profile_rules() -> list[Rule]:
    def p(trainer: str):
        return load_profile(trainer)  # looked up at check time (calibrated or patched profiles)

    return [
        Rule("zero_stage", ALL, "the trainer must support the ZeRO stage",
             lambda m, x, t: x.zero not in p(t).allowed_zero,
             lambda m, x, t: f"zero={x.zero}, {t} supports {list(p(t).allowed_zero)}"),
        Rule("zero_with_pp", ALL, "pipeline parallelism limits the ZeRO stage",
             lambda m, x, t: x.pp > 1 and x.zero > p(t).max_zero_with_pp,
             lambda m, x, t: f"zero={x.zero} with pp={x.pp}; {t} allows zero <= "
                             f"{p(t).max_zero_with_pp} with pp > 1"),
        Rule("virtual_stages", ALL, "the trainer must have virtual pipeline stages for vpp > 1",
             lambda m, x, t: x.vpp > 1 and not p(t).supports_vpp,
             lambda m, x, t: f"vpp={x.vpp}; {t} has no interleaved schedule"),
        Rule("context_parallel", ALL, "the trainer must have context parallelism for cp > 1",
             lambda m, x, t: x.cp > 1 and not p(t).supports_cp,
             lambda m, x, t: f"cp={x.cp}; {t} has no context parallelism"),
        Rule("expert_parallel", ALL, "the trainer must have expert parallelism for ep > 1",
             lambda m, x, t: x.ep > 1 and not p(t).supports_ep,
             lambda m, x, t: f"ep={x.ep}; {t} has no expert parallelism"),
    ]


RULES: list[Rule] = [
    Rule("world_size", ALL, "dp·tp·pp·cp must equal the world size",
         lambda m, x, t: x.dp * x.tp * x.pp * x.cp != x.gpus,
         lambda m, x, t: f"dp({x.dp})·tp({x.tp})·pp({x.pp})·cp({x.cp}) = "
                         f"{x.dp * x.tp * x.pp * x.cp} != gpus({x.gpus})"),
    Rule("global_batch", ALL, "global batch must equal dp × micro-batch × grad_acc",
         lambda m, x, t: x.dp * x.mbs * x.grad_acc != x.gbs_seqs,
         lambda m, x, t: f"gbs_seqs({x.gbs_seqs}) != dp({x.dp})·mbs({x.mbs})·grad_acc({x.grad_acc}) "
                         f"= {x.dp * x.mbs * x.grad_acc}"),
    Rule("heads_tp", ALL, "attention heads and KV heads (query groups) must be divisible by tp",
         lambda m, x, t: m.num_attention_heads % x.tp != 0 or m.num_kv_heads % x.tp != 0,
         lambda m, x, t: f"heads={m.num_attention_heads}, kv_heads={m.num_kv_heads}, tp={x.tp}"),
    Rule("sp_needs_tp", ALL, "sequence parallel needs tp > 1",
         lambda m, x, t: x.sp and x.tp == 1,
         lambda m, x, t: f"sp=true, tp={x.tp}"),
    Rule("layers_per_stage", ("megatron", "torchtitan"),
         "layers must be divisible by pp·vpp (equal layers per virtual stage)",
         lambda m, x, t: m.num_layers % (x.pp * x.vpp) != 0,
         lambda m, x, t: f"layers={m.num_layers}, pp({x.pp})·vpp({x.vpp}) = {x.pp * x.vpp}"),
    Rule("vpp_needs_pp", ("megatron", "torchtitan"), "virtual stages (vpp > 1) need pp > 1",
         lambda m, x, t: x.vpp > 1 and x.pp == 1,
         lambda m, x, t: f"vpp={x.vpp}, pp={x.pp}"),
    Rule("interleave_microbatches", ("megatron",),
         "the interleaved schedule needs micro-batches (grad_acc) divisible by pp",
         lambda m, x, t: x.vpp > 1 and x.grad_acc % x.pp != 0,
         lambda m, x, t: f"grad_acc={x.grad_acc}, pp={x.pp}, vpp={x.vpp}"),
    Rule("cp_sequence", ("megatron",), "seq_len must be divisible by 2·cp",
         lambda m, x, t: x.cp > 1 and x.seq_len % (2 * x.cp) != 0,
         lambda m, x, t: f"seq_len={x.seq_len}, 2·cp={2 * x.cp}"),
    Rule("sp_sequence", ("megatron",), "seq_len must be divisible by cp·tp with sequence parallel",
         lambda m, x, t: x.sp and x.seq_len % (x.cp * x.tp) != 0,
         lambda m, x, t: f"seq_len={x.seq_len}, cp·tp={x.cp * x.tp}"),
    Rule("sequence_shards", ("torchtitan",),
         "seq_len must be divisible by (tp if sp) × (2·cp if cp > 1)",
         lambda m, x, t: x.seq_len % _seq_divisor(x) != 0,
         lambda m, x, t: f"seq_len={x.seq_len}, divisor={_seq_divisor(x)} (tp={x.tp}, sp={x.sp}, cp={x.cp})"),
    Rule("tied_pp", ("torchtitan",), "weight tying is not supported with pipeline parallelism",
         lambda m, x, t: m.tied_embeddings and x.pp > 1,
         lambda m, x, t: f"model {m.name!r} ties its embeddings, pp={x.pp}"),
    Rule("ep_needs_moe", ALL, "ep > 1 or etp > 1 need a mixture-of-experts model",
         lambda m, x, t: (x.ep > 1 or x.etp > 1) and m.moe is None,
         lambda m, x, t: f"ep={x.ep}, etp={x.etp}, model {m.name!r} is dense"),
    Rule("experts_ep", ALL, "routed experts must be divisible by ep",
         lambda m, x, t: m.moe is not None and _experts(m) % x.ep != 0,
         lambda m, x, t: f"experts={_experts(m)}, ep={x.ep}"),
    Rule("expert_grid", ("megatron",), "ep·etp must divide dp·cp·tp (Megatron's expert grid)",
         lambda m, x, t: (x.dp * x.cp * x.tp) % (x.ep * x.etp) != 0,
         lambda m, x, t: f"ep({x.ep})·etp({x.etp}) = {x.ep * x.etp}, dp·cp·tp = {x.dp * x.cp * x.tp}"),
    Rule("moe_tp_needs_sp", ("megatron",), "MoE with tp > 1 needs sequence parallel in training",
         lambda m, x, t: m.moe is not None and x.tp > 1 and not x.sp,
         lambda m, x, t: f"tp={x.tp}, sp=false"),
    Rule("ep_mesh", ("torchtitan",), "ep must divide dp_shard·cp·tp (the efsdp mesh)",
         lambda m, x, t: (_dp_shard(x) * x.cp * x.tp) % x.ep != 0,
         lambda m, x, t: f"ep={x.ep}, dp_shard({_dp_shard(x)})·cp({x.cp})·tp({x.tp}) = "
                         f"{_dp_shard(x) * x.cp * x.tp} (dp_shard = dp only with zero=3)"),
    Rule("expert_tp", ("torchtitan", "nanotron"), "the trainer has no expert tensor parallelism",
         lambda m, x, t: x.etp > 1,
         lambda m, x, t: f"etp={x.etp}"),
    Rule("local_batch", ("torchtitan",),
         "global_batch_size must be divisible by local_batch_size × dp",
         lambda m, x, t: x.gbs_seqs % (_local_batch(x) * x.dp) != 0,
         lambda m, x, t: f"global_batch_size={x.gbs_seqs}, local_batch_size={_local_batch(x)}, dp={x.dp}"),
    Rule("nanotron_ep", ("nanotron",),
         "expert_parallel_size must be 1 (ParallelContext reshapes tp·cp·dp·pp ranks with ep)",
         lambda m, x, t: x.ep > 1,
         lambda m, x, t: f"ep={x.ep}"),
    Rule("ep_divides_dp", ("deepspeed",), "ep must divide dp (expert groups are carved from DP)",
         lambda m, x, t: x.dp % x.ep != 0,
         lambda m, x, t: f"ep={x.ep}, dp={x.dp}"),
    Rule("deepspeed_etp", ("deepspeed",),
         "etp must be 1 or tp (--enable-expert-tensor-parallelism shards experts over TP)",
         lambda m, x, t: x.etp not in (1, x.tp),
         lambda m, x, t: f"etp={x.etp}, tp={x.tp}"),
] + _profile_rules()


def rules_for(trainer: str) -> list[Rule]:
    return [rule for rule in RULES if trainer in rule.trainers]


def broken_rules(trainer: str, model: ModelSpec, layout: Layout, training: TrainingSpec) -> list[tuple[str, str]]:
    """(rule name, 'invariant (values)') for every rule of ``trainer`` the plan breaks."""
    _known(trainer)
    # The rules read the setup too: gpus, seq_len and the batch the trainer is given.
    layout = SimpleNamespace(**{**layout.to_record(training), "gbs_seqs": training.gbs_seqs})
    return [(rule.name, f"{rule.invariant} ({rule.values(model, layout, trainer)})")
            for rule in rules_for(trainer) if rule.broken(model, layout, trainer)]


def check(trainer: str, model: ModelSpec, layout: Layout, training: TrainingSpec) -> None:
    """Raise ``TrainerRuleError`` naming every broken rule with its values."""
    broken = broken_rules(trainer, model, layout, training)
    if broken:
        raise TrainerRuleError(trainer, broken)


def _known(trainer: str) -> None:
    if trainer not in TRAINERS:
        from autoplan.errors import UnknownNameError

        raise UnknownNameError("export trainer", trainer, TRAINERS)


def effective_order(order: str, layout: Layout) -> tuple[str, ...]:
    """The rank order without dimensions of size 1 ('tp-cp-dp-pp' with cp = 1 -> tp, dp, pp)."""
    sizes = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp, "pp": layout.pp}
    return tuple(dim for dim in order.split("-") if sizes[dim] > 1)


def placement_warning(trainer_label: str, orders: dict[str, str], layout: Layout) -> str | None:
    """A warning when no order the trainer offers equals the plan's placement (or None)."""
    if matching_order(orders, layout) is not None:
        return None
    offered = ", ".join(orders.values())
    return (f"placement {layout.placement} (rank order, innermost first) cannot be expressed; "
            f"{trainer_label} orders ranks as {offered}; communication costs may differ from "
            "the prediction")


def matching_order(orders: dict[str, str], layout: Layout) -> str | None:
    """The key of the first trainer order equivalent to the plan's placement."""
    wanted = effective_order(layout.placement, layout)
    for key, order in orders.items():
        if effective_order(order, layout) == wanted:
            return key
    return None
