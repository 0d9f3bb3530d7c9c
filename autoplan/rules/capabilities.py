"""What each trainer can run at all: the allow-lists of its profile's ``capabilities:`` block.

The facts come from the trainer profiles (``autoplan/profiles/*.yaml``, read into
:class:`autoplan.profiles.capabilities.Capabilities`), which cite the trainer source of each;
these rules are the one place that enforces them, for every command. A trainer runs only what
its profile lists: a new profile that lists nothing runs bf16 AdamW data parallelism at the
default settings, never another trainer's knobs.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.context import per_context
from autoplan.cost.offload import CODE as OFFLOAD
from autoplan.cost.optimizer import CODE as OPTIMIZER
from autoplan.cost.schedule import CODE as SCHEDULE
from autoplan.layout import PRECISION, PP_SPLITS, PRECISIONS
from autoplan.rules.table import ALL, Rule, RuleContext, one_of
from autoplan.specs.training import FP8_ONLY_SETTINGS, TRAINER_SETTINGS, setting_choice

PROFILES = "autoplan/profiles/<trainer>.yaml capabilities"


def caps(ctx: RuleContext):
    return ctx.profile.capabilities


def listed(values: tuple, codes) -> list[float]:
    """The codes of the listed names (``codes``: name -> code, or a sequence of names)."""
    if isinstance(codes, dict):
        return [codes[v] for v in values]
    return [float(codes.index(v)) for v in values]


# The codes of each capability list a rule checks a knob against (``allowed``).
LIST_CODES = {"precisions": PRECISIONS, "pp_splits": PP_SPLITS, "optimizers": OPTIMIZER,
              "pp_schedules": SCHEDULE, "state_offloads": OFFLOAD, "cpu_optimizers": OPTIMIZER}


@per_context
def allowed(ctx: RuleContext, field: str) -> tuple[float, ...]:
    """``listed`` of the capability list ``field`` (LIST_CODES), once per context."""
    return tuple(listed(getattr(caps(ctx), field), LIST_CODES[field]))


def refused_settings(ctx: RuleContext, *, fp8: bool) -> list[str]:
    """'name=value (the values the trainer runs)' of each setup setting the trainer does not run;
    the FP8 settings (``FP8_ONLY_SETTINGS``, the recipe) count only for fp8 layouts (``fp8``)."""
    c, training = caps(ctx), ctx.training
    refused = []
    for name, default in TRAINER_SETTINGS.items():
        value = getattr(training, name)
        if (fp8 or name not in FP8_ONLY_SETTINGS) and not c.allows_setting(name, value):
            runs = c.settings.get(name, (setting_choice(name, default),))
            refused.append(f"{name}={value}, {ctx.profile.name} runs {' or '.join(map(str, runs))}")
    if fp8 and training.fp8_recipe not in c.fp8_recipes and "fp8" in c.precisions:
        refused.append(f"fp8_recipe={training.fp8_recipe}, {ctx.profile.name} runs {' or '.join(c.fp8_recipes)}")
    return refused


@per_context
def _refuses_settings(ctx: RuleContext) -> tuple[bool, bool]:
    """Whether the trainer refuses a setting of the setup (``refused_settings``): for a bf16 and
    for an fp8 layout."""
    return bool(refused_settings(ctx, fp8=False)), bool(refused_settings(ctx, fp8=True))


def _settings_broken(ctx: RuleContext, b) -> np.ndarray:
    always, with_fp8 = _refuses_settings(ctx)
    return np.where(b.precision == PRECISION["fp8"], with_fp8, always)


def _setting_values(ctx: RuleContext, x) -> str:
    return "; ".join(refused_settings(ctx, fp8=x.precision == "fp8"))


def _fix_zero(ctx, x) -> str:
    allowed = [z for z in caps(ctx).zero_stages if x.pp == 1 or z <= caps(ctx).max_zero_with_pp]
    return f"try --zero {max(allowed)}" if allowed else ""


def _names(values: tuple) -> str:
    return ", ".join(map(str, values)) or "none"


def _listed(name: str, knob: str, field: str, invariant: str, verb: str, fix: str, source: str = "") -> Rule:
    """The rule that a layout's ``knob`` is one of the capability list ``field`` (its codes:
    LIST_CODES): 'knob=value,
    <trainer> <verb> <the list>'."""
    return Rule(name, ALL, invariant,
                lambda c, b: ~one_of(getattr(b, knob), allowed(c, field)),
                lambda c, x: f"{knob}={getattr(x, knob)}, {c.profile.name} {_at_version(c)}{verb} "
                             f"{_names(getattr(caps(c), field))}{_later(c, field, getattr(x, knob))}",
                PROFILES + f" ({field}{source}; later_versions)", fix=lambda c, x: fix)


def _at_version(ctx: RuleContext) -> str:
    """'core_v0.15.3 ' where the capabilities name their version, else ''."""
    return f"{caps(ctx).version} " if caps(ctx).version else ""


def _later(ctx: RuleContext, field: str, value) -> str:
    """'; megatron core_v0.16.0 has it (--trainer-version core_v0.16.0)' where a later
    version of the trainer runs ``value`` (``Capabilities.first_version_with``), else ''."""
    version = caps(ctx).first_version_with(field, value)
    return f"; {ctx.profile.name} {version} has it (--trainer-version {version})" if version else ""


RULES = [
    Rule("expert_tp", ALL, "the trainer must have expert tensor parallelism for etp > 1",
         lambda c, b: b.etp > 1,
         lambda c, x: f"etp={x.etp}; {c.profile.name} shards experts over ep only",
         PROFILES + " (expert_tensor_parallel)", fix=lambda c, x: "use --etp 1",
         when=lambda c: not caps(c).expert_tensor_parallel),
]

# Last in the table: a layout is first told what in it is wrong, then what the trainer lacks.
PROFILE_RULES = [
    Rule("trainer_zero", ALL, "the trainer must support the ZeRO stage",
         lambda c, b: ~one_of(b.zero, caps(c).zero_stages),
         lambda c, x: f"zero={x.zero}, {c.profile.name} supports {list(caps(c).zero_stages)}",
         PROFILES + " (zero_stages)", fix=_fix_zero),
    Rule("trainer_zero_pp", ALL, "pipeline parallelism limits the ZeRO stage",
         lambda c, b: (b.pp > 1) & (b.zero > caps(c).max_zero_with_pp),
         lambda c, x: f"zero={x.zero} with pp={x.pp}; {c.profile.name} allows zero <= "
                      f"{caps(c).max_zero_with_pp} with pp > 1",
         PROFILES + " (max_zero_with_pp; DeepSpeed 0.19.8 deepspeed/runtime/pipe/engine.py)",
         fix=_fix_zero),
    Rule("trainer_vpp", ALL, "the trainer must have virtual pipeline stages for vpp > 1",
         lambda c, b: b.vpp > 1,
         lambda c, x: f"vpp={x.vpp}; {c.profile.name} has no interleaved schedule",
         PROFILES + " (virtual_stages)", fix=lambda c, x: "use --vpp 1",
         when=lambda c: not caps(c).virtual_stages),
    Rule("trainer_cp", ALL, "the trainer must have context parallelism for cp > 1",
         lambda c, b: b.cp > 1,
         lambda c, x: f"cp={x.cp}; {c.profile.name} has no context parallelism",
         PROFILES + " (context_parallel)", fix=lambda c, x: "use --cp 1",
         when=lambda c: not caps(c).context_parallel),
    Rule("trainer_ep", ALL, "the trainer must have expert parallelism for ep > 1",
         lambda c, b: b.ep > 1,
         lambda c, x: f"ep={x.ep}; {c.profile.name} has no expert parallelism",
         PROFILES + " (expert_parallel; nanotron src/nanotron/parallel/context.py cannot start with ep > 1)",
         fix=lambda c, x: "use --ep 1",
         when=lambda c: not caps(c).expert_parallel),
    _listed("trainer_precision", "precision", "precisions", "the trainer must train in the precision",
            "trains in", "use --precision bf16"),
    Rule("trainer_setting", ALL, "the trainer must run the setup's settings",
         _settings_broken, _setting_values, PROFILES + " (settings, fp8_recipes)",
         fix=lambda c, x: "drop the option, or pick a trainer that runs it (autoplan trainers)"),
    Rule("trainer_offload", ALL, "the trainer must be able to offload activations (offload_layers)",
         lambda c, b: b.offload_layers > 0,
         lambda c, x: f"offload_layers={x.offload_layers}, trainer {c.profile.name}"
                      + ("; pretrain_gpt.py at core_v0.15.3 has no --cpu-offloading-num-layers (core_v0.16.0 "
                         "adds it)" if c.profile.name == "megatron" else "; no activation offload option"),
         PROFILES + " (activation_offload; Megatron-LM core_v0.15.3 megatron/training/arguments.py has no "
                    "cpu-offloading flag, core_v0.16.0 adds --cpu-offloading-num-layers)",
         fix=lambda c, x: "try --offload-layers 0", when=lambda c: not caps(c).activation_offload),
    *(Rule(f"trainer_{knob}", ALL, f"the trainer must run {what} ({knob})",
           lambda c, b, knob=knob: getattr(b, knob) > 0,
           lambda c, x, knob=knob: f"{knob}={getattr(x, knob)}, trainer {c.profile.name}",
           PROFILES + " (partial_recompute; torchtitan 0.3.0 ActivationCheckpoint mode/selective_ac_option, "
                      "nanotron recompute_layer, the DeepSpeed export: every layer)",
           fix=lambda c, x, fix=fix: fix, when=lambda c: not caps(c).partial_recompute)
      for knob, what, fix in (
          ("recompute_layers", "full recompute of N layers per stage", "try --recompute-layers 0 or --trainer megatron"),
          ("recompute_modules", "selective recompute of named modules",
           "leave --recompute-modules empty (the trainer's own selective recompute)"))),
    Rule("trainer_pp_schedule", ALL, "the trainer must implement the pipeline schedule",
         lambda c, b: ~one_of(b.pp_schedule, allowed(c, "pp_schedules")),
         lambda c, x: f"pp_schedule={x.pp_schedule}, {c.profile.name} runs "
                      f"{', '.join(caps(c).pp_schedules[1:]) or 'only its own'}"
                      + ("; DualPipe is DeepSeek's standalone library" if x.pp_schedule == "dualpipe" else ""),
         PROFILES + " (pp_schedules)", fix=lambda c, x: "try --pp-schedule default"),
    _listed("trainer_pp_split", "pp_split", "pp_splits",
            "the trainer must place the layers on stages as pp_split says", "splits",
            "try --pp-split balanced or --trainer megatron",
            "; Megatron-LM core_v0.15.3 pipeline_parallel_layer_layout.py, layout 'E...L'"),
    _listed("trainer_optimizer", "optimizer", "optimizers", "the trainer must implement the optimizer",
            "runs", "try --optimizer adamw"),
    Rule("trainer_state_offload", ALL, "the trainer must be able to offload these model states to the host",
         lambda c, b: ~one_of(b.offload, allowed(c, "state_offloads")),
         lambda c, x: f"offload={x.offload}, {c.profile.name} offloads "
                      f"{', '.join(caps(c).state_offloads[1:]) or 'nothing'}",
         PROFILES + " (state_offloads)", fix=lambda c, x: "try --offload none"),
    Rule("offload_cpu_optimizer", ALL, "an offloaded optimizer step needs the trainer's CPU version of the optimizer",
         lambda c, b: (b.offload >= OFFLOAD["optimizer"])
         & ~one_of(b.optimizer, allowed(c, "cpu_optimizers")),
         lambda c, x: f"optimizer={x.optimizer}, offload={x.offload}, {c.profile.name} runs "
                      f"{_names(caps(c).cpu_optimizers)} on the CPU",
         PROFILES + " (cpu_optimizers)", fix=lambda c, x: "try --optimizer adamw"),
    Rule("trainer_hsdp", ALL, "the trainer must shard hybrid at this ZeRO stage",
         lambda c, b: (b.hsdp > 0) & ~one_of(b.zero, caps(c).hybrid_shard_zero_stages),
         lambda c, x: f"hsdp={x.hsdp}, zero={x.zero}, {c.profile.name} shards hybrid at: "
                      + (f"zero {_names(caps(c).hybrid_shard_zero_stages)}" if caps(c).hybrid_shard_zero_stages
                         else "none"),
         PROFILES + " (hybrid_shard_zero_stages)", fix=lambda c, x: "try --hsdp 0"),
]
