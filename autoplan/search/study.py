"""The Optuna study a search runs on: what it was made for, its default name, opening it.

Kept apart from the package ``__init__`` so that :mod:`autoplan.search.parallel` (whose spawned
workers open the shared study themselves) and :func:`autoplan.search.search` both import it
without importing each other.
"""

from __future__ import annotations

from autoplan.cost.context import CostContext
from autoplan.space import SearchSpace


def study_meta(ctx: CostContext, space: SearchSpace) -> dict:
    """What a stored study was made for, resolved: every field of the model, the cluster (GPU,
    GPUs per node, NIC), the training setup (FLOP convention, batch tolerance), the trainer
    profile and its calibrated parameters, and the space; ``key`` hashes them all. A resumed
    study must have the same key (:func:`autoplan.search.storage.open_study`)."""
    import dataclasses
    import hashlib
    import json

    def plain(spec) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(spec), sort_keys=True, default=str))

    target = ctx.training
    inputs = {"model": plain(ctx.model), "cluster": plain(target.cluster),
              "training": {k: v for k, v in plain(target).items() if k != "cluster"},
              "profile": plain(ctx.profile), "parameters": plain(ctx.parameters),
              "space": json.loads(json.dumps(space.to_dict(), sort_keys=True, default=str))}
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    return {"key": key, **inputs}


def default_study_name(ctx: CostContext, space: SearchSpace) -> str:
    """Names every input, so a rerun of the same command resumes its own study: e.g.
    ``autoplan-llama3-70b-512gpus-h100-sxm-megatron-seq8192-gbs512-default-1a2b3c4d``."""
    digest = study_meta(ctx, space)["key"]
    target = ctx.training
    return (f"autoplan-{ctx.model.name}-{target.gpus}gpus-{ctx.cluster.gpu.name}-{ctx.profile.name}"
            f"-seq{target.seq_len}-gbs{target.gbs_seqs}-{space.name}-{digest[:8]}")


def open_store(ctx: CostContext, space: SearchSpace, options, sampler: str):
    """The ``StudyStore`` for ``sampler`` under ``options`` (a ``SearchOptions``): in memory, or
    the study ``options.study_name`` (default :func:`default_study_name`) in ``options.storage``."""
    from autoplan.search.optuna_search import OBJECTIVES, make_sampler
    from autoplan.search.storage import open_study

    name = options.study_name or (default_study_name(ctx, space) if options.storage else None)
    store = open_study(options.storage, name, OBJECTIVES[sampler], make_sampler(sampler, options.seed),
                       study_meta(ctx, space), load_trials=sampler != "exhaustive")
    store.resumed = resumed_line(store, space, options, sampler)
    return store


def resumed_line(store, space: SearchSpace, options, sampler: str) -> str:
    """What a resumed study brings (one line; '' for a new or in-memory study): its name and
    storage, the stored trials reused and what is left. Read with counts, not trials."""
    from autoplan.search import exhaustive
    from autoplan.search.storage import CLAIM_PREFIX, claims, num_trials

    if store.persistent is None or not (stored := num_trials(store.persistent)):
        return ""
    where = f"resumed study '{store.persistent.study_name}' in {options.storage}"
    if sampler == "exhaustive":
        size = exhaustive.CHUNK_SIZE
        total = exhaustive.num_chunks(space, size)
        held = sum(k.startswith(f"{CLAIM_PREFIX}chunk{size}:") for k in claims(store.persistent))
        unclaimed = " (stored without chunk claims: their knob values are read once)" if not held else ""
        return (f"{where}: {stored:,} stored layouts reused{unclaimed}; "
                f"{max(0, total - held)} of {total} chunks left to store")
    return f"{where}: {store.num_loaded:,} stored trials reused; {max(0, options.trials - store.num_loaded):,} left to run"
