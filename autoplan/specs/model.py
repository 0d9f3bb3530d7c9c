"""ModelSpec: the architecture of a decoder-only transformer, as plain frozen data.

Field names follow the convention of this package (``num_`` for counts, ``_size`` for widths);
presets in ``model_db/`` and user files use Hugging Face ``config.json`` field names and are
converted by :mod:`autoplan.specs.hf_config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoplan.errors import SpecError, shown

# relu2: squared ReLU, not gated (Nemotron; So et al. 2021, Primer; Megatron --squared-relu).
ACTIVATIONS = ("swiglu", "gelu", "relu2")
# layernorm1p: LayerNorm with a zero-centred gain (weight + 1; Megatron --apply-layernorm-1p), the same
# weight and bias as a LayerNorm.
NORMS = ("rmsnorm", "layernorm", "layernorm1p")
BIASED_NORMS = ("layernorm", "layernorm1p")
POSITION_EMBEDDINGS = ("rope", "learned")
SCORE_FUNCTIONS = ("softmax", "sigmoid")


@dataclass(frozen=True)
class MoESpec:
    """Mixture-of-experts feed-forward (Mixtral, Qwen3-MoE, DeepSeek-V3).

    ``num_dense_layers`` leading layers use a dense MLP of ``ModelSpec.ffn_hidden_size``
    (DeepSeek-V3: ``first_k_dense_replace = 3``); the others route each token to
    ``num_experts_per_token`` of ``num_experts`` experts of width ``expert_ffn_hidden_size`` and
    also run ``num_shared_experts`` always-on experts of width ``shared_expert_ffn_hidden_size``.
    """

    num_experts: int
    num_experts_per_token: int
    expert_ffn_hidden_size: int
    num_shared_experts: int = 0
    shared_expert_ffn_hidden_size: int = 0
    num_dense_layers: int = 0
    router_bias: bool = False  # DeepSeek-V3's e_score_correction_bias (num_experts floats)
    # Routing (what the trainer's router computes; the cost model reads none of these):
    score_function: str = "softmax"  # DeepSeek-V3 'sigmoid' (scoring_func)
    normalize_topk: bool = True  # top-k weights renormalised to sum 1 (Mixtral; norm_topk_prob)
    routed_scaling_factor: float = 1.0  # DeepSeek-V3 2.5
    num_expert_groups: int = 1  # group-limited routing: n_group (DeepSeek-V3 8)
    num_limited_groups: int = 1  # groups each token may use: topk_group (DeepSeek-V3 4)
    aux_loss_coeff: float = 0.0  # load-balancing loss weight (router_aux_loss_coef, aux_loss_alpha)
    aux_loss_per_sequence: bool = False  # DeepSeek's seq_aux: the balance loss per sequence


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3). ``q_lora_rank = 0`` means a plain q_proj."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shape. All sizes are element counts (not bytes)."""

    name: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tied_embeddings: bool = False
    activation: str = "swiglu"
    norm: str = "rmsnorm"
    position_embedding: str = "rope"
    max_position_embeddings: int = 8192
    qk_norm: bool = False
    qkv_bias: bool = False
    linear_bias: bool = False  # GPT-2 style: every linear layer has a bias
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    # Fields the trainers take that size nothing (the cost model reads none of them):
    rope_theta: float = 10000.0
    rotary_percent: float = 1.0  # share of each head's dims rotated (Nemotron 0.5; Megatron --rotary-percent)
    rope_scaling: tuple[tuple[str, float | str], ...] = ()  # HF rope_scaling items, sorted; () = none
    norm_eps: float = 1e-5
    bos_token_id: int | None = None  # None: the config gives none (the trainer's default is used)
    eos_token_id: int | None = None
    num_mtp_layers: int = 0  # multi-token-prediction depths (DeepSeek-V3 Sec. 2.2; autoplan.cost.mtp), on the last stage
    seq_len: int = 4096  # default training sequence length
    model_type: str = "llama"
    aliases: tuple[str, ...] = ()
    sources: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        where = f"model '{self.name}'"
        for name in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                     "num_kv_heads", "head_dim", "vocab_size", "seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise SpecError(where, f"{name} must be a positive integer, got {shown(value)}")
        if self.num_attention_heads % self.num_kv_heads:
            raise SpecError(where, "num_attention_heads must be a multiple of num_kv_heads, got "
                                   f"({self.num_attention_heads}, {self.num_kv_heads})")
        for name, allowed in (("activation", ACTIVATIONS), ("norm", NORMS),
                              ("position_embedding", POSITION_EMBEDDINGS)):
            if getattr(self, name) not in allowed:
                raise SpecError(where, f"{name} must be one of {allowed}, got {shown(getattr(self, name))}")
        if self.moe is not None:
            moe = self.moe
            if not 0 < moe.num_experts_per_token <= moe.num_experts:
                raise SpecError(where, "0 < num_experts_per_token <= num_experts must hold, got "
                                       f"({moe.num_experts_per_token}, {moe.num_experts})")
            if not 0 <= moe.num_dense_layers <= self.num_layers:
                raise SpecError(where, f"num_dense_layers must be in [0, {self.num_layers}], "
                                       f"got {moe.num_dense_layers}")
            _check_routing(where, moe)
        if not 0 < self.rotary_percent <= 1:
            raise SpecError(where, f"0 < rotary_percent <= 1 must hold, got {shown(self.rotary_percent)}")
        if not (self.rope_theta > 0 and self.norm_eps > 0):
            raise SpecError(where, f"rope_theta > 0 and norm_eps > 0 must hold, got "
                                   f"({shown(self.rope_theta)}, {shown(self.norm_eps)})")

    @property
    def rope_scaling_dict(self) -> dict[str, float | str]:
        """The HF ``rope_scaling`` mapping ({} when the model has none)."""
        return dict(self.rope_scaling)

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def num_moe_layers(self) -> int:
        return 0 if self.moe is None else self.num_layers - self.moe.num_dense_layers

    @property
    def q_size(self) -> int:
        """Width of the attention output before o_proj (heads × value head dim)."""
        if self.mla is not None:
            return self.num_attention_heads * self.mla.v_head_dim
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of K (= of V) for GQA; for MLA the per-token latent kept for attention."""
        if self.mla is not None:
            return self.num_attention_heads * (self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim)
        return self.num_kv_heads * self.head_dim


def _check_routing(where: str, moe: MoESpec) -> None:
    if moe.score_function not in SCORE_FUNCTIONS:
        raise SpecError(where, f"score_function must be one of {SCORE_FUNCTIONS}, got {shown(moe.score_function)}")
    groups, limited = moe.num_expert_groups, moe.num_limited_groups
    if not (1 <= limited <= groups and moe.num_experts % groups == 0):
        raise SpecError(where, "1 <= num_limited_groups <= num_expert_groups and num_experts % "
                               f"num_expert_groups == 0 must hold, got ({limited}, {groups}, {moe.num_experts})")
