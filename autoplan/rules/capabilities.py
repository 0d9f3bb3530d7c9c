"""What each trainer supports at all: ZeRO stages, virtual stages, CP, EP, expert TP.

The facts come from the trainer profiles (``autoplan/profiles/*.yaml``: ``allowed_zero``,
``max_zero_with_pp``, ``supports_vpp``, ``supports_cp``, ``supports_ep``), which cite the trainer
source of each; these rules only state them. Expert tensor parallelism is not a profile field:
the trainers that lack it are named here with their source.
"""

from __future__ import annotations

import numpy as np

from autoplan.rules.table import ALL, Rule

PROFILES = "autoplan/profiles/<trainer>.yaml"
NO_EXPERT_TP = ("torchtitan", "nanotron", "hf", "llmfoundry")


def _fix_zero(ctx, x) -> str:
    allowed = [z for z in ctx.profile.allowed_zero if x.pp == 1 or z <= ctx.profile.max_zero_with_pp]
    return f"try --zero {max(allowed)}" if allowed else ""


RULES = [
    Rule("expert_tp", NO_EXPERT_TP, "the trainer has no expert tensor parallelism (etp must be 1)",
         lambda c, b: b.etp > 1,
         lambda c, x: f"etp={x.etp}; {c.profile.name} shards experts over ep only",
         "torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py (no etp dimension); nanotron "
         "src/nanotron/config/parallelism_config.py (expert_parallel_size only); hf: none",
         fix=lambda c, x: "use --etp 1"),
]

# Last in the table: a layout is first told what in it is wrong, then what the trainer lacks.
PROFILE_RULES = [
    Rule("trainer_zero", ALL, "the trainer must support the ZeRO stage",
         lambda c, b: ~np.isin(b.zero, c.profile.allowed_zero),
         lambda c, x: f"zero={x.zero}, {c.profile.name} supports {list(c.profile.allowed_zero)}",
         PROFILES + " (allowed_zero)", fix=_fix_zero),
    Rule("trainer_zero_pp", ALL, "pipeline parallelism limits the ZeRO stage",
         lambda c, b: (b.pp > 1) & (b.zero > c.profile.max_zero_with_pp),
         lambda c, x: f"zero={x.zero} with pp={x.pp}; {c.profile.name} allows zero <= "
                      f"{c.profile.max_zero_with_pp} with pp > 1",
         PROFILES + " (max_zero_with_pp; DeepSpeed 0.19.8 deepspeed/runtime/pipe/engine.py)",
         fix=_fix_zero),
    Rule("trainer_vpp", ALL, "the trainer must have virtual pipeline stages for vpp > 1",
         lambda c, b: (b.vpp > 1) & (not c.profile.supports_vpp),
         lambda c, x: f"vpp={x.vpp}; {c.profile.name} has no interleaved schedule",
         PROFILES + " (supports_vpp)", fix=lambda c, x: "use --vpp 1"),
    Rule("trainer_cp", ALL, "the trainer must have context parallelism for cp > 1",
         lambda c, b: (b.cp > 1) & (not c.profile.supports_cp),
         lambda c, x: f"cp={x.cp}; {c.profile.name} has no context parallelism",
         PROFILES + " (supports_cp)", fix=lambda c, x: "use --cp 1"),
    Rule("trainer_ep", ALL, "the trainer must have expert parallelism for ep > 1",
         lambda c, b: (b.ep > 1) & (not c.profile.supports_ep),
         lambda c, x: f"ep={x.ep}; {c.profile.name} has no expert parallelism",
         PROFILES + " (supports_ep; nanotron src/nanotron/parallel/context.py cannot start with ep > 1)",
         fix=lambda c, x: "use --ep 1"),
]
