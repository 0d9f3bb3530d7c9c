"""One capacity point: a GPU type and a rented GPU count, each batch phase searched for its best
layout with the layout search (:func:`autoplan.search.search`), the same recipe as
``autoplan search``.

A rented count may run the job on fewer GPUs (:func:`autoplan.capacity.grid.job_gpu_counts`);
each phase takes the job size whose best layout trains the most tokens per second on the whole
rented cluster. The result is one row per (point, phase), the input of
:mod:`autoplan.capacity.front`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autoplan.capacity.grid import job_gpu_counts
from autoplan.capacity.schedule import BatchPhase
from autoplan.cost.context import CostContext
from autoplan.errors import AutoplanError
from autoplan.search import SearchOptions, SearchResult, search
from autoplan.space import SearchSpace
from autoplan.specs.hardware import GPUSpec, make_cluster
from autoplan.specs.model import ModelSpec
from autoplan.specs.training import DEFAULT_FLOPS_CONVENTION, TrainingSpec, resolve_batch


@dataclass(frozen=True)
class CapacitySetup:
    """What stays the same at every point: the model, trainer, sequence length, batch tolerance,
    FLOP convention, the setup's trainer settings, the search space and search options."""

    model: ModelSpec
    space: SearchSpace
    trainer: str = "megatron"
    profile_path: str | None = None
    seq_len: int | None = None  # None: the model's
    gbs_tolerance: float = 0.0
    flops_convention: str = DEFAULT_FLOPS_CONVENTION
    settings: dict[str, Any] = field(default_factory=dict)
    options: SearchOptions = field(default_factory=SearchOptions)

    @property
    def train_seq_len(self) -> int:
        return self.seq_len or self.model.seq_len

    def gbs_seqs(self, phase: BatchPhase) -> int:
        """The phase's global batch in sequences (a whole number of sequences, else an error)."""
        return resolve_batch(self.train_seq_len, None, phase.gbs_tokens, self.model.seq_len)[1]


@dataclass(frozen=True)
class PhaseBest:
    """The best layout of one batch phase on one rented cluster (``result`` None: no layout is
    feasible, ``reason`` says why)."""

    gpu: str
    rented_gpus: int
    phase: int  # 1-based
    phase_tokens: float
    gbs_seqs: int
    job_gpus: int
    tokens_per_s_per_gpu: float  # per GPU of the job (the search's figure); NaN when infeasible
    mfu: float
    layout: str
    reason: str
    result: SearchResult | None

    @property
    def tokens_per_s_per_rented_gpu(self) -> float:
        """Throughput spread over every rented GPU: idle ones are paid for too."""
        return self.tokens_per_s_per_gpu * self.job_gpus / self.rented_gpus


def training_for(setup: CapacitySetup, gpu: GPUSpec, job_gpus: int, gbs_seqs: int) -> TrainingSpec:
    """The training setup of a job on ``job_gpus`` GPUs. A job using part of each rack sees an
    NVLink domain of its GPUs per rack (64 of 72), not the whole rack."""
    domain = gpu.scale_up_domain_size
    if domain > gpu.gpus_per_node and job_gpus % domain:  # part of each rack: its power of two
        domain = 1 << (domain.bit_length() - 1)
    cluster = make_cluster(gpu, job_gpus, scale_up_domain_size=domain)
    return TrainingSpec(cluster=cluster, seq_len=setup.train_seq_len, gbs_seqs=gbs_seqs,
                        gbs_tolerance=setup.gbs_tolerance, flops_convention=setup.flops_convention,
                        **setup.settings)


def context_for(setup: CapacitySetup, gpu: GPUSpec, job_gpus: int, gbs_seqs: int) -> CostContext:
    """The cost context of one job (model, GPUs, batch): :func:`training_for` with the setup's
    trainer profile."""
    from autoplan.api import build_context

    return build_context(setup.model, training_for(setup, gpu, job_gpus, gbs_seqs), trainer=setup.trainer,
                         profile_path=setup.profile_path)


def search_job(setup: CapacitySetup, gpu: GPUSpec, job_gpus: int, gbs_seqs: int) -> SearchResult:
    """The layout search of one job (model, GPUs, batch) with the setup's space and options."""
    return search(context_for(setup, gpu, job_gpus, gbs_seqs), setup.space, setup.options)


def best_phase(setup: CapacitySetup, gpu: GPUSpec, rented: int, index: int, phase: BatchPhase) -> PhaseBest:
    """The best layout of ``phase`` over the job sizes ``rented`` GPUs allow."""
    gbs_seqs = setup.gbs_seqs(phase)
    best: PhaseBest | None = None
    reasons = []
    for job_gpus in job_gpu_counts(gpu, rented):
        try:
            result = search_job(setup, gpu, job_gpus, gbs_seqs)
        except AutoplanError as exc:  # e.g. a batch smaller than the data-parallel degree
            reasons.append(f"{job_gpus} GPUs: {exc}")
            continue
        rows = result.plan_rows(1)
        if len(rows) == 0:
            reasons.append(_why_not(result, job_gpus, rented))
            continue
        row = int(rows[0])
        columns = result.table.columns
        candidate = PhaseBest(gpu=gpu.name, rented_gpus=rented, phase=index, phase_tokens=phase.tokens,
                              gbs_seqs=gbs_seqs, job_gpus=job_gpus,
                              tokens_per_s_per_gpu=float(columns["tokens_per_s_per_gpu"][row]),
                              mfu=float(columns["mfu"][row]), layout=result.table.batch.layout(row).describe(),
                              reason="", result=result)
        if best is None or candidate.tokens_per_s_per_rented_gpu > best.tokens_per_s_per_rented_gpu:
            best = candidate
    if best is not None:
        return best
    return PhaseBest(gpu=gpu.name, rented_gpus=rented, phase=index, phase_tokens=phase.tokens,
                     gbs_seqs=gbs_seqs, job_gpus=rented, tokens_per_s_per_gpu=float("nan"), mfu=float("nan"),
                     layout="", reason="; ".join(reasons), result=None)


def _why_not(result: SearchResult, job_gpus: int, rented: int) -> str:
    """The search's one-line infeasibility message, prefixed with the job size when it is not
    the whole rented cluster."""
    from autoplan.errors import NoFeasiblePlanError

    try:
        result.check_feasible()
    except NoFeasiblePlanError as exc:
        text = str(exc)
    else:  # pragma: no cover - only called without feasible rows
        text = "no feasible layout"
    return text if job_gpus == rented else f"on {job_gpus} of {rented} GPUs: {text}"


def fixed_layout_phase(setup: CapacitySetup, gpu: GPUSpec, job_gpus: int, index: int, phase: BatchPhase,
                       knobs: dict[str, Any]) -> PhaseBest:
    """One phase trained with a given layout (a published run's ``knobs``: tp, pp, vpp, zero, ...)
    instead of the searched best: the cost model's throughput of that layout on ``job_gpus``
    GPUs, whether or not it is predicted to fit in memory (the run did fit). A layout that
    breaks the trainer's rules raises ``LayoutError``."""
    from autoplan.cost.evaluate import evaluate
    from autoplan.layout import LayoutBatch, resolve_layout

    gbs_seqs = setup.gbs_seqs(phase)
    ctx = context_for(setup, gpu, job_gpus, gbs_seqs)
    layout = resolve_layout(knobs, ctx.training)
    columns = evaluate(ctx, LayoutBatch.from_layouts([layout]), allow_uneven=setup.options.allow_uneven_pp).columns
    return PhaseBest(gpu=gpu.name, rented_gpus=job_gpus, phase=index, phase_tokens=phase.tokens, gbs_seqs=gbs_seqs,
                     job_gpus=job_gpus, tokens_per_s_per_gpu=float(columns["tokens_per_s_per_gpu"][0]),
                     mfu=float(columns["mfu"][0]), layout=layout.describe(), reason="", result=None)


def evaluate_point(setup: CapacitySetup, gpu: GPUSpec, rented: int,
                   phases: tuple[BatchPhase, ...]) -> list[PhaseBest]:
    """Every phase's best layout on ``rented`` ``gpu``s."""
    return [best_phase(setup, gpu, rented, i, phase) for i, phase in enumerate(phases, start=1)]
