"""How layers and in-flight micro-batches fall on pipeline stages (vectorised over layouts).

Three stages are costed for every layout: the *first* (embedding, the most micro-batches in
flight), a *middle* one standing for the interior ranks (``StageLayers``; none where pp < 3)
and the *last* (final norm, LM head, logits and loss); the peak and the pace are the heaviest
of the three (``heaviest_stage``). What is in flight under each schedule is
``autoplan.cost.schedule``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoplan.cost.arrays import ones_like, select, stacked, zeros_like
from autoplan.specs.model import ModelSpec


@dataclass(frozen=True)
class StageLayers:
    """Layer counts on the first, a middle and the last stage; dense vs MoE split (DeepSeek-V3's
    dense-first).

    ``first_chunks`` / ``middle_chunks`` / ``last_chunks`` are (max vpp, layouts): the layers of
    each model chunk (virtual stage) of rank 0, ``middle_rank`` and rank pp − 1, 0 past a
    layout's vpp. The middle stage (only where pp >= 3; 0 layers otherwise) stands for the
    interior ranks: no embedding and no head, and of the interior ranks the most MoE layers, then
    the most layers and in-flight micro-batches (rank 1 unless dense layers spill past rank 0,
    ``_middle_rank``), so it is where the peak lands when the ends hold fewer layers (Llama 3's
    embed-loss split) or fewer MoE layers (DeepSeek-V3's three dense layers on the first stage).
    """

    first: np.ndarray
    last: np.ndarray
    first_dense: np.ndarray
    last_dense: np.ndarray
    first_chunks: np.ndarray
    last_chunks: np.ndarray
    middle: np.ndarray
    middle_dense: np.ndarray
    middle_chunks: np.ndarray
    middle_rank: np.ndarray

    @property
    def first_moe(self) -> np.ndarray:
        return self.first - self.first_dense

    @property
    def last_moe(self) -> np.ndarray:
        return self.last - self.last_dense

    @property
    def middle_moe(self) -> np.ndarray:
        return self.middle - self.middle_dense

    @property
    def most(self) -> np.ndarray:
        """Layers of the rank that holds the most."""
        return np.maximum(np.maximum(self.first, self.middle), self.last)


def heaviest_stage(first: np.ndarray, middle: np.ndarray, last: np.ndarray) -> np.ndarray:
    """0, 1 or 2 where the first, the middle or the last stage weighs the most (ties to the
    earlier), for ``choose_stage`` over the three stages' values."""
    return select([first >= np.maximum(middle, last), middle >= last], [0, 1], 2)


def choose_stage(pick: np.ndarray, first, middle, last) -> np.ndarray:
    """``np.choose(pick, [first, middle, last])`` (``pick`` from ``heaviest_stage``) by two masked
    copies: the same values, about 10x faster where most layouts pick the same stage."""
    shape = np.broadcast(pick, first, middle, last).shape  # (np.broadcast_shapes of their shapes, in C)
    out = np.empty(shape, dtype=np.result_type(first, middle, last))
    np.copyto(out, last)  # (broadcast: np.broadcast_to costs ~2 µs a call more)
    np.copyto(out, middle, where=pick == 1)
    np.copyto(out, first, where=pick == 0)
    return out


def rank_chunk_layers(num_layers: int, pp: np.ndarray, vpp: np.ndarray, embed_loss: np.ndarray,
                      rank: np.ndarray) -> np.ndarray:
    """Layers of each chunk of pipeline rank ``rank``: a (max vpp, layouts) array, or (max vpp,
    ranks, layouts) for ``rank`` of shape (ranks, layouts).

    The ``U`` units (L layers, plus the embedding and the loss as one unit each where
    ``embed_loss``) are split over the p·v virtual stages as evenly as possible, the extra units
    to the early stages; virtual stage k·p + r runs on rank r (Megatron's and torchtitan's
    interleaving). Under ``embed_loss`` the first virtual stage gives one unit to the embedding
    and the last one to the loss (Megatron ``--account-for-embedding-in-pipeline-split
    --account-for-loss-in-pipeline-split``, ``megatron/core/transformer/transformer_block.py``
    ``get_num_layers_to_build``; Llama 3's "one Transformer layer fewer on the first and the last
    stages", Llama Team 2024, Sec. 3.3.2).
    """
    ends = np.where(embed_loss & (pp > 1), 1.0, 0.0)
    stages = pp * vpp
    units = num_layers + 2.0 * ends
    base = np.floor(units / stages)
    extra = units - base * stages
    # The loss is the last unit: on the last virtual stage, or with fewer units than virtual
    # stages (base 0; an illegal layout, rules.stages pp_layers) on the last one that has a unit.
    loss_stage = np.where(base > 0, stages - 1, extra - 1)
    k = _chunk_axis(int(np.max(vpp, initial=1.0)), max(np.ndim(pp), np.ndim(rank)))
    stage = k * pp + rank
    layers = base + (stage < extra) - ends * ((stage == 0) + (stage == loss_stage))
    return np.where(k < vpp, np.maximum(layers, 0.0), 0.0)


def _chunk_axis(num_chunks: int, ndim: int) -> np.ndarray:
    """0, 1, ..., num_chunks − 1 on a leading axis before ``ndim`` others: a rank's model chunks."""
    return np.arange(float(num_chunks)).reshape(-1, *([1] * ndim))


def stage_layers(model: ModelSpec, pp: np.ndarray, vpp: np.ndarray | None = None,
                 pp_split: np.ndarray | None = None) -> StageLayers:
    """Layers on the first, the middle (``_middle_rank``) and the last rank, from ``rank_chunk_layers``
    (``pp_split`` code 1 = embed-loss). Trainers require L divisible by pp·vpp unless uneven stages are configured
    (legal by default where the trainer can run them, ``autoplan.rules.stages``); a balanced
    uneven split puts ceil(L/pp) on the first rank and floor(L/pp) on the last, the split the
    exporters write (``virtual_stage_layers``). With pp = 1 the one stage is both first and last.
    """
    pp = np.asarray(pp, dtype=np.float64)
    vpp = ones_like(pp) if vpp is None else vpp
    embed_loss = zeros_like(pp, dtype=bool) if pp_split is None else pp_split == 1
    num_layers = float(model.num_layers)
    num_dense = float(model.num_layers - model.num_moe_layers)
    middle_rank = _middle_rank(num_layers, num_dense, pp, vpp, embed_loss)
    # The three ranks (first, middle, last) at once, a leading axis of 3: one evaluation of each
    # formula instead of three (a batch of one pays per numpy call, not per layout). The middle
    # rank exists only where pp >= 3.
    ranks = stacked(zeros_like(pp), middle_rank, pp - 1.0)
    exists = np.array([True, False, True]).reshape(3, *([1] * np.ndim(pp))) | (pp >= 3)
    chunks = np.where(exists, rank_chunk_layers(model.num_layers, pp, vpp, embed_loss, ranks), 0.0)
    dense = _dense_on_rank(model.num_layers, num_dense, pp, vpp, embed_loss, ranks, chunks)
    (first_chunks, middle_chunks, last_chunks), layers = chunks.swapaxes(0, 1), chunks.sum(axis=0)
    first, middle, last = layers
    first_dense, middle_dense, last_dense = dense
    if model.num_mtp_layers:
        last_chunks, last, last_dense = _with_mtp(model, vpp, last_chunks, last, last_dense)
    return StageLayers(first=first, last=last, first_dense=first_dense, last_dense=last_dense,
                       first_chunks=first_chunks, last_chunks=last_chunks, middle=middle,
                       middle_dense=middle_dense, middle_chunks=middle_chunks, middle_rank=middle_rank)


def _dense_on_rank(num_layers: int, num_dense: float, pp: np.ndarray, vpp: np.ndarray,
                   embed_loss: np.ndarray, rank: np.ndarray, chunks: np.ndarray) -> np.ndarray:
    """Dense layers on pipeline rank ``rank`` when the model's D dense layers come first
    (DeepSeek-V3's ``first_k_dense_replace``; every layer of a dense model): over the rank's
    chunks (virtual stages s = k·pp + rank, ``rank_chunk_layers``), the part of each chunk's
    layers [start(s), start(s) + layers(s)) below D, with start(s) = s·base + min(s, extra) − e
    for s > 0 (e = 1 under the embed-loss split: the embedding's unit on virtual stage 0);
    ``chunks`` is the rank's ``rank_chunk_layers`` (0 where the rank does not exist; ranks may
    stand on an axis of their own, as in ``rank_chunk_layers``)."""
    ends = np.where(embed_loss & (pp > 1), 1.0, 0.0)
    stages = pp * vpp
    units = num_layers + 2.0 * ends
    base = np.floor(units / stages)
    extra = units - base * stages
    stage = _chunk_axis(chunks.shape[0], chunks.ndim - 1) * pp + rank
    start = stage * base + np.minimum(stage, extra) - ends * (stage > 0)
    return np.minimum(np.maximum(num_dense - start, 0.0), chunks).sum(axis=0)  # (np.clip, without its overhead)


def _middle_rank(num_layers: float, num_dense: float, pp: np.ndarray, vpp: np.ndarray,
                 embed_loss: np.ndarray) -> np.ndarray:
    """The interior rank that stands for the middle stage: the first rank past the dense layers
    (the most MoE layers of the interior ranks, the most in flight of those), rank 1 when the
    first rank holds every dense layer, with vpp > 1 (interleaved chunks), or for a model without
    dense-first layers; at most pp − 2. With one chunk per rank, rank r holds base + (r < extra)
    units, so the layers before r reach the dense count D at r = ceil((D + e)/(base + 1)) while
    r <= extra, else at ceil((D + e − extra)/base) (e = 1 under the embed-loss split)."""
    if num_dense <= 0 or num_dense >= num_layers:  # no dense-first layers: rank 1 (what the last where says)
        return np.ones(np.broadcast(pp, vpp, embed_loss).shape)
    ends = np.where(embed_loss & (pp > 1), 1.0, 0.0)
    units = num_layers + 2.0 * ends
    base = np.floor(units / pp)
    extra = units - base * pp
    with np.errstate(divide="ignore", invalid="ignore"):
        early = np.ceil((num_dense + ends) / (base + 1.0))
        late = np.where(base > 0, np.ceil((num_dense + ends - extra) / base), 1.0)
    rank = np.where(early <= extra, early, late)
    rank = np.where((vpp > 1) | (num_dense <= 0) | (num_dense >= num_layers), 1.0, rank)
    return np.clip(rank, 1.0, np.maximum(pp - 2.0, 1.0))


def _with_mtp(model: ModelSpec, vpp: np.ndarray, last_chunks: np.ndarray, last: np.ndarray,
              last_dense: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The last rank's layers with the multi-token-prediction blocks: one transformer block per
    MTP depth on the last virtual stage (Megatron-Core builds the MTP block on the last pipeline
    stage, megatron/core/transformer/multi_token_prediction.py ``mtp_on_this_rank``), MoE where
    the model's layers end in MoE (DeepSeek-V3), else dense. Its projection, norms and extra
    logits are added where the stage's parameters, logits and head are costed."""
    mtp = float(model.num_mtp_layers)
    chunk = np.arange(last_chunks.shape[0]).reshape(-1, *([1] * (last_chunks.ndim - 1)))
    last_chunks = last_chunks + np.where(chunk == vpp - 1.0, mtp, 0.0)
    dense_block = model.num_moe_layers == 0
    return last_chunks, last + mtp, last_dense + (mtp if dense_block else 0.0)


def virtual_stage_layers(num_layers: int, pp: int, vpp: int = 1, embed_loss: bool = False) -> list[int]:
    """Transformer layers on each of the pp·vpp virtual stages in model order, extra units to
    early ones, the embedding and the loss counted as one unit each where ``embed_loss``.

    Virtual stage ``k·pp + r`` runs on rank ``r`` (Megatron's and torchtitan's interleaving), so
    (balanced) rank r holds ceil(L/pp) layers for r < L mod pp and floor(L/pp) after: the split
    ``stage_layers`` costs (``rank_chunk_layers``). Exporters write this split (autoplan.rules.stages).
    """
    num_stages = pp * vpp
    ends = 1 if embed_loss and pp > 1 else 0
    base, extra = divmod(num_layers + 2 * ends, num_stages)
    units = [base + (1 if k < extra else 0) for k in range(num_stages)]
    units[0] -= ends
    units[-1] -= ends
    return [max(u, 0) for u in units]


def compute_cost_rank_layers(model: ModelSpec, pp: np.ndarray) -> np.ndarray:
    """Layers on each pipeline rank under nanotron's own assignment: a (max pp, layouts) array.

    nanotron (``src/nanotron/models/base.py``, ``build_model``) walks its pipeline blocks in
    order (embedding, the L decoder layers, final norm, LM head, fp32 cast, loss), gives each to
    the current rank, and moves to the next rank after a block whose cumulative compute cost
    exceeds ``total·(rank + 1)/pp``; the costs are ``get_block_compute_costs`` of
    ``LlamaForTraining`` and ``Qwen2ForTraining`` (``src/nanotron/models/llama.py``, ``qwen.py``,
    the MoE models' class): 4·a·(h/a)·h + 3·f·h per decoder layer with f the config's
    ``intermediate_size`` (an MoE layer weighs as a dense one: its experts are not counted), V·h
    for the LM head, 0 for the rest. The head weighs V·h/(4·h² + 3·f·h) layers (4.0 for the
    playbook's 1B, 2.2 for its 8B, 0.54 for Mixtral 8x7B), so the early ranks hold more than
    L/pp layers (1B on pp 2: 11 and 5; Mixtral on pp 16: 3, 2, ..., 2, 1) and the last one fewer.
    """
    pp = np.asarray(pp, dtype=np.float64)
    h = float(model.hidden_size)
    layer_cost = 4.0 * model.num_attention_heads * (model.hidden_size // model.num_attention_heads) * h \
        + 3.0 * model.ffn_hidden_size * h
    head_cost = float(model.vocab_size) * h
    total = model.num_layers * layer_cost + head_cost
    costs = [0.0] + [layer_cost] * model.num_layers + [0.0, head_cost, 0.0, 0.0]
    max_pp = int(np.max(pp, initial=1.0))
    counts = np.zeros((max_pp, pp.size))
    rank = np.zeros(pp.size)
    cumulative = 0.0
    columns = np.arange(pp.size)
    for i, cost in enumerate(costs):
        cumulative += cost
        if 1 <= i <= model.num_layers:
            counts[rank.astype(int), columns] += 1.0
        rank = np.minimum(np.where(cumulative > total * (rank + 1.0) / pp.ravel(), rank + 1.0, rank), pp.ravel() - 1.0)
    return counts.reshape(max_pp, *np.shape(pp))


def _compute_cost_stage_layers(model: ModelSpec, pp: np.ndarray) -> StageLayers:
    """``StageLayers`` of nanotron's assignment (``compute_cost_rank_layers``; one chunk per rank):
    rank 0, rank pp − 1, and of the interior ranks the one with the most MoE layers, then the most
    layers (as ``_middle_rank`` picks)."""
    counts = compute_cost_rank_layers(model, pp)
    # the dense layers lead (an MoE model's first num_layers - num_moe_layers): a rank holds those
    # not on the ranks before it, at most its own count
    before = np.cumsum(counts, axis=0) - counts
    dense = np.clip(float(model.num_layers - model.num_moe_layers) - before, 0.0, counts)
    pp = np.asarray(pp, dtype=np.float64)
    ranks = np.arange(counts.shape[0]).reshape(-1, *([1] * pp.ndim))
    last_index = (pp - 1.0).astype(int)[None]
    first, last = counts[0], np.take_along_axis(counts, last_index, axis=0)[0]
    interior = (ranks >= 1) & (ranks <= pp - 2.0)
    order = np.where(interior, (counts - dense) * (model.num_layers + 1.0) + counts, -1.0)
    middle_rank = np.where(pp >= 3, np.argmax(order, axis=0), 1)
    held = np.minimum(middle_rank, counts.shape[0] - 1)[None]  # (pp < 3: no middle stage)
    middle = np.where(pp >= 3, np.take_along_axis(counts, held, axis=0)[0], 0.0)
    middle_dense = np.where(pp >= 3, np.take_along_axis(dense, held, axis=0)[0], 0.0)
    return StageLayers(first=first, last=last, first_dense=dense[0],
                       last_dense=np.take_along_axis(dense, last_index, axis=0)[0],
                       first_chunks=first[None], last_chunks=last[None], middle=middle,
                       middle_dense=middle_dense, middle_chunks=middle[None], middle_rank=middle_rank.astype(float))


def trainer_stage_layers(model: ModelSpec, split_rule: str, pp: np.ndarray, vpp: np.ndarray | None = None,
                         pp_split: np.ndarray | None = None) -> StageLayers:
    """The stages as the trainer builds them: ``stage_layers`` (the layout's ``pp_split``), or
    for a profile whose ``pp_split_rule`` is 'compute_cost' (nanotron, which has no option for
    the split) its own cost-balanced assignment, for models without MTP or MLA (nanotron builds
    DeepSeek-V3's layers with another cost)."""
    if split_rule == "compute_cost" and not model.num_mtp_layers and model.mla is None:
        return _compute_cost_stage_layers(model, pp)
    return stage_layers(model, pp, vpp, pp_split)
