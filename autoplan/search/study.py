"""The Optuna study a search runs on: what it was made for, its default name, opening it.

Kept apart from the package ``__init__`` so that :mod:`autoplan.search.parallel` (whose spawned
workers open the shared study themselves) and :func:`autoplan.search.search` both import it
without importing each other.
"""

from __future__ import annotations

from autoplan.cost.context import CostContext
from autoplan.space import SearchSpace


def study_meta(ctx: CostContext, space: SearchSpace) -> dict:
    """What a stored study was made for; a resumed study must match it."""
    target = ctx.training
    return {"model": ctx.model.name, "gpu": ctx.cluster.gpu.name, "gpus": target.gpus,
            "trainer": ctx.profile.name, "seq_len": target.seq_len, "gbs_seqs": target.gbs_seqs,
            "gbs_tolerance": target.gbs_tolerance, "space": space.to_dict()}


def default_study_name(ctx: CostContext, space: SearchSpace) -> str:
    """Names every input, so a rerun of the same command resumes its own study: e.g.
    ``autoplan-llama3-70b-512gpus-h100-sxm-megatron-seq8192-gbs512-default-1a2b3c4d``."""
    import hashlib
    import json

    digest = hashlib.sha256(json.dumps(study_meta(ctx, space), sort_keys=True).encode()).hexdigest()
    target = ctx.training
    return (f"autoplan-{ctx.model.name}-{target.gpus}gpus-{ctx.cluster.gpu.name}-{ctx.profile.name}"
            f"-seq{target.seq_len}-gbs{target.gbs_seqs}-{space.name}-{digest[:8]}")


def open_store(ctx: CostContext, space: SearchSpace, options, sampler: str):
    """The ``StudyStore`` for ``sampler`` under ``options`` (a ``SearchOptions``): in memory, or
    the study ``options.study_name`` (default :func:`default_study_name`) in ``options.storage``."""
    from autoplan.search.optuna_search import OBJECTIVES, make_sampler
    from autoplan.search.storage import open_study

    name = options.study_name or (default_study_name(ctx, space) if options.storage else None)
    return open_study(options.storage, name, OBJECTIVES[sampler], make_sampler(sampler, options.seed),
                      study_meta(ctx, space), load_trials=sampler != "exhaustive")
