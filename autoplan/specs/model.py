"""ModelSpec: the architecture of a decoder-only transformer, as plain frozen data.

Field names follow the convention of this package (``num_`` for counts, ``_size`` for widths);
presets in ``model_db/`` and user files use Hugging Face ``config.json`` field names and are
converted by :mod:`autoplan.specs.hf_config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoplan.errors import SpecError, shown

# relu2: squared ReLU, not gated (Nemotron; So et al. 2021, Primer; Megatron --squared-relu).
# geglu: gated GELU (tanh approximation), gate/up/down like SwiGLU (Gemma 2's Gemma2MLP; Shazeer 2020).
ACTIVATIONS = ("swiglu", "geglu", "gelu", "relu2")
GATED_ACTIVATIONS = ("swiglu", "geglu")  # three matrices gate, up, down (the others: two)
# layernorm1p: LayerNorm with a zero-centred gain (weight + 1; Megatron --apply-layernorm-1p), the same
# weight and bias as a LayerNorm.
NORMS = ("rmsnorm", "layernorm", "layernorm1p")
BIASED_NORMS = ("layernorm", "layernorm1p")
# Where a layer's norms sit: "pre" (Llama: before attention and MLP, 2 per layer), "post" (OLMo 2's
# Olmo2DecoderLayer: post_attention_layernorm and post_feedforward_layernorm on the sublayer outputs,
# 2 per layer), "sandwich" (Gemma 2's Gemma2DecoderLayer: both, 4 per layer).
NORM_PLACEMENTS = ("pre", "post", "sandwich")
NORMS_PER_LAYER = {"pre": 2, "post": 2, "sandwich": 4}
# Layers with a local attention span (see ModelSpec.local_attention): "sliding" (Mistral's
# sliding_window: query i attends keys i-w+1..i) or "chunked" (Llama 4's attention_chunk_size:
# query i attends the keys of its own chunk of w tokens, from w*floor(i/w) to i).
LOCAL_ATTENTIONS = ("sliding", "chunked")
# What a model_type's modeling code does that no config key says and no exporter writes.
IMPLIED_FEATURES = {
    "gemma2": ("the embedding output scaled by sqrt(hidden_size) (Gemma2Model)",
               "RMSNorm gains applied as 1 + weight (Gemma2RMSNorm)"),
    "llama4_text": ("every 4th layer without RoPE and with global attention (Llama4TextAttention)",),
}
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
    qk_norm_per_head: bool = True  # False: q/k norms over the whole projection (OLMo 2's q_norm, k_norm)
    norm_placement: str = "pre"  # NORM_PLACEMENTS
    qkv_bias: bool = False
    linear_bias: bool = False  # GPT-2 style: every linear layer has a bias
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    # Local attention (0: none): layers attend a span of ``attention_window`` keys, except that layer
    # i (0-based) attends the whole causal prefix when (i + 1) % full_attention_every == 0 (Gemma 2: 2,
    # Llama 4: 4; Megatron --window-attn-skip-freq N); full_attention_every = 0: every layer is local.
    attention_window: int = 0
    local_attention: str = "sliding"  # LOCAL_ATTENTIONS
    full_attention_every: int = 0
    # Fields the trainers take that size nothing (the cost model reads none of them):
    rope_theta: float = 10000.0
    rotary_percent: float = 1.0  # share of each head's dims rotated (Nemotron 0.5; Megatron --rotary-percent)
    rope_scaling: tuple[tuple[str, float | str], ...] = ()  # HF rope_scaling items, sorted; () = none
    norm_eps: float = 1e-5
    bos_token_id: int | None = None  # None: the config gives none (the trainer's default is used)
    eos_token_id: int | None = None
    # Architecture settings that size nothing and that no exporter writes: the HF (key, value) items,
    # sorted (e.g. Gemma 2's ('final_logit_softcapping', 30.0)); every export warns about each, and
    # about the model_type's IMPLIED_FEATURES (autoplan.export.common.feature_warnings).
    other_features: tuple[tuple[str, float | int | str | bool], ...] = ()
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
                              ("position_embedding", POSITION_EMBEDDINGS), ("norm_placement", NORM_PLACEMENTS),
                              ("local_attention", LOCAL_ATTENTIONS)):
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
        for name in ("attention_window", "full_attention_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(where, f"{name} must be an integer >= 0, got {shown(value)}")
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
    def num_local_attention_layers(self) -> int:
        """Layers whose attention spans ``attention_window`` keys (0 without a window)."""
        if self.attention_window == 0:
            return 0
        every = self.full_attention_every
        return self.num_layers - (self.num_layers // every if every else 0)

    @property
    def gated_mlp(self) -> bool:
        return self.activation in GATED_ACTIVATIONS

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
