"""Which trainer runs which pipeline schedule (``Layout.pp_schedule``) and stage split (``pp_split``).

* Megatron-LM core_v0.15.3: 1F1B (``forward_backward_pipelining_without_interleaving``) and
  interleaved 1F1B (``..._with_interleaving``, vpp > 1) in
  ``megatron/core/pipeline_parallel/schedules.py`` (``get_forward_backward_func``); no AFAB,
  zero-bubble or DualPipe schedule. It counts the embedding and the loss as pipeline layers
  (``--pipeline-model-parallel-layout`` 'E...L', or ``--account-for-embedding-in-pipeline-split``
  / ``--account-for-loss-in-pipeline-split``).
* torchtitan (``parallelism.pipeline_parallel_schedule``, passed to torch's
  ``torch/distributed/pipelining/schedules.py`` ``get_schedule_class``): 1F1B, GPipe (AFAB),
  Interleaved1F1B, InterleavedZeroBubble (ZB-H1, a multi-stage schedule), ZBVZeroBubble (ZB-V)
  and DualPipeV, the last two with exactly two stages per rank (V shape).
* nanotron: ``parallelism.pp_engine`` '1f1b' or 'afab' (``src/nanotron/parallel/pipeline_parallel/
  engine.py``: ``OneForwardOneBackwardPipelineEngine``, ``AllForwardAllBackwardPipelineEngine``).
* DeepSpeed 0.19.8: its pipeline engine runs ``TrainSchedule`` (1F1B) only
  (``deepspeed/runtime/pipe/schedule.py``).
* DualPipe (bidirectional, two parameter copies) exists as DeepSeek's standalone library
  (``deepseek-ai/DualPipe``, ``dualpipe/dualpipe.py``), integrated in none of these trainers.
"""

from __future__ import annotations

import numpy as np

from autoplan.cost.schedule import CODE, V_SHAPED, is_schedule, resolved_schedule
from autoplan.rules.table import ALL, Rule

SOURCES = ("Megatron-LM core_v0.15.3 megatron/core/pipeline_parallel/schedules.py (get_forward_backward_func); "
           "torch/distributed/pipelining/schedules.py (get_schedule_class, used by torchtitan's "
           "pipeline_parallel_schedule); nanotron parallel/pipeline_parallel/engine.py (pp_engine); "
           "deepspeed/runtime/pipe/schedule.py (TrainSchedule); deepseek-ai/DualPipe (standalone)")
# The vpp each schedule runs, [least, most] by schedule code (PP_SCHEDULES order): interleaved
# needs vpp > 1; the V-shaped ones exactly 2; 1F1B, AFAB and DualPipe one chunk per rank; ZB-H1
# and 'default' (interleaved where vpp > 1, else the trainer's single-chunk schedule) any.
_VPP_RANGE = {"interleaved": (2.0, np.inf), **{name: (2.0, 2.0) for name in V_SHAPED},
              "1f1b": (1.0, 1.0), "afab": (1.0, 1.0), "dualpipe": (1.0, 1.0)}
_LEAST_VPP, _MOST_VPP = np.array([_VPP_RANGE.get(name, (-np.inf, np.inf))
                                   for name in sorted(CODE, key=CODE.get)]).T  # row i: the schedule of code i


def _vpp_broken(b) -> np.ndarray:
    """vpp that the schedule cannot run (outside its _VPP_RANGE): two table look-ups and two
    comparisons, where a comparison per schedule took ~10 µs on a batch of one."""
    codes = b.pp_schedule.astype(np.intp)
    return (b.vpp < _LEAST_VPP[codes]) | (b.vpp > _MOST_VPP[codes])


def _dualpipe_broken(b) -> np.ndarray:
    """DualPipe: an even pp and at least 2·pp micro-batches (deepseek-ai/DualPipe dualpipe.py,
    ``step``: 'num_chunks >= num_ranks * 2' and an even number of ranks); DualPipeV at least
    2·pp micro-batches (dualpipev.py)."""
    either = is_schedule(b.pp_schedule, "dualpipe", "dualpipev")
    if not np.count_nonzero(either):  # (no layout runs either: the same result, faster)
        return either
    dual = is_schedule(b.pp_schedule, "dualpipe")
    return (dual & (b.pp % 2 != 0)) | (either & (b.grad_acc < 2 * b.pp))


RULES = [
    Rule("pp_schedule_needs_pp", ALL, "a pipeline schedule other than the default needs pp > 1",
         lambda c, b: (b.pp_schedule != CODE["default"]) & (b.pp == 1),
         lambda c, x: f"pp_schedule={x.pp_schedule}, pp={x.pp}", SOURCES,
         fix=lambda c, x: "try --pp-schedule default or --pp > 1"),
    Rule("pp_schedule_vpp", ALL,
         "the schedule's chunks per rank must match vpp (interleaved > 1; zb-v, dualpipev 2; 1f1b, afab, dualpipe 1)",
         lambda c, b: _vpp_broken(b), lambda c, x: f"pp_schedule={x.pp_schedule}, vpp={x.vpp}", SOURCES,
         fix=lambda c, x: "try --vpp 2" if x.pp_schedule in V_SHAPED + ("interleaved",) else "try --vpp 1"),
    Rule("pp_schedule_dualpipe", ALL,
         "DualPipe needs an even pp, DualPipe and DualPipeV at least 2·pp micro-batches (grad_acc)",
         lambda c, b: _dualpipe_broken(b), lambda c, x: f"pp_schedule={x.pp_schedule}, pp={x.pp}, "
                                                        f"grad_acc={x.grad_acc}",
         "deepseek-ai/DualPipe dualpipe/dualpipe.py, dualpipev.py (step)"),
    Rule("torchtitan_multi_stage", ("torchtitan",),
         "torchtitan's multi-stage schedules (Interleaved1F1B, InterleavedZeroBubble) need at least 2 stages per rank",
         lambda c, b: is_schedule(b.pp_schedule, "interleaved", "zb-h1") & (b.vpp < 2) & (b.pp > 1),
         lambda c, x: f"pp_schedule={x.pp_schedule}, vpp={x.vpp}",
         "torchtitan torchtitan/distributed/pipeline_parallel.py (stages per rank of a multi-stage schedule)",
         fix=lambda c, x: "try --vpp 2"),
    Rule("torchtitan_1f1b_microbatches", ("torchtitan",),
         "torch's single-stage 1F1B needs at least pp micro-batches (grad_acc)",
         lambda c, b: (b.pp > 1) & (b.vpp == 1) & (b.grad_acc < b.pp)
         & is_schedule(resolved_schedule(b.pp_schedule, b.vpp, c.profile.pipeline.schedule), "1f1b"),
         lambda c, x: f"grad_acc={x.grad_acc}, pp={x.pp}",
         "torch 2.13.0 torch/distributed/pipelining/schedules.py (Schedule1F1B: 'Number of microbatches "
         "must be greater than or equal to the number of stages')",
         fix=lambda c, x: f"try a global batch of at least {x.pp} micro-batches per replica, or a smaller --pp"),
]
