"""Transformer shapes as data, and parameter counts computed from them.

Notation follows Korthikanti et al. 2022 and Narayanan et al. 2021: L layers (the papers' l),
hidden size h, a attention heads, vocabulary V. A decoder layer is attention (query, key, value
and output projections) plus an MLP plus two norms; the model adds token embeddings, a final
norm and an output projection (the "LM head"), which may share the embedding matrix.

Real models differ from the GPT shape the papers analyse: grouped-query attention (Ainslie et
al. 2023) gives keys and values kv_heads < a heads; SwiGLU (Shazeer 2020) has three MLP
matrices instead of two; RMSNorm (Zhang & Sennrich 2019) has a gain but no bias; rotary
positions (Su et al. 2021) have no parameters. Published shapes, each with its source, are the
presets of :mod:`trainmath.model.presets`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from ..units import choice, positive_int


#: MLP kinds: GeLU, two matrices; SwiGLU and GeGLU (a GeLU-gated linear unit, Gemma), three
#: (Shazeer 2020, *GLU Variants Improve Transformer*, which defines both).
MLP_KINDS = ("gelu", "swiglu", "geglu")
#: The gated MLP kinds, which have a gate, an up and a down projection (Shazeer 2020).
GATED_MLPS = ("swiglu", "geglu")
#: Norm kinds: LayerNorm, a gain and a bias; RMSNorm, a gain only (Zhang & Sennrich 2019).
NORM_KINDS = ("layernorm", "rmsnorm")


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's shape, checked when it is made (:func:`shape` fills defaults).

    Sizes must be whole and positive, h a multiple of the heads and the heads a multiple of the
    key-value heads; ``mlp`` one of :data:`MLP_KINDS`, ``norm`` one of :data:`NORM_KINDS`.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    kv_heads: int
    mlp: str = "swiglu"
    norm: str = "rmsnorm"
    bias: bool = False
    tied_embeddings: bool = False
    #: learned absolute position embeddings for this many positions (GPT); 0 for rotary
    positions: int = 0
    dropout: bool = False
    source: str = ""
    #: the longest sequence the model was trained for, which a run may not exceed: its learned
    #: positions, or for rotary models ``max_position_embeddings`` of the released config.json;
    #: 0 when unknown (not checked)
    max_positions: int = 0
    #: sliding-window attention: each token attends to at most this many (Mistral); 0 for full
    #: causal attention
    sliding_window: int = 0
    #: the width of one attention head where it is not h / a (Gemma-7B: 256 with h = 3072 and
    #: a = 16, config.json's ``head_dim``); 0: h / a, which h must then divide
    head_width: int = 0
    #: biases on the query, key and value projections only (Qwen2: ``q_proj``, ``k_proj`` and
    #: ``v_proj`` have ``bias=True``, ``o_proj`` and the MLP none); ``bias`` puts them everywhere
    qkv_bias: bool = False
    #: head dimensions that rotary positions rotate, where not all (GPT-NeoX and Pythia rotate
    #: ``rotary_pct`` = 25% of each head); 0: the whole head. No parameters: it sizes the
    #: rotary tables (:func:`trainmath.memory.embedding_and_loss.rotary_activations`)
    rotary_dim: int = 0
    #: mixture of experts (:mod:`trainmath.model.moe`): routed experts in every layer's MLP; 0: dense
    experts: int = 0
    #: experts each token is routed to (top-k); 0 for a dense model
    experts_per_token: int = 0
    #: experts every token goes through besides the routed ones (DeepSeekMoE's shared experts)
    shared_experts: int = 0
    #: the width of one expert's MLP; 0: ``ffn`` (Mixtral's ``intermediate_size`` is its
    #: experts' width)
    expert_ffn: int = 0

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "ffn", "vocab", "kv_heads"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        if self.head_width != 0:
            object.__setattr__(self, "head_width", positive_int("head_width", self.head_width))
        elif self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not divisible by heads {self.heads}; "
                             "h must be a multiple of a (or give head_width)")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not divisible by kv_heads {self.kv_heads}; "
                             f"accepted: a divisor of {self.heads}")
        for name in ("positions", "max_positions", "sliding_window", "rotary_dim", "experts",
                     "experts_per_token", "shared_experts", "expert_ffn"):
            if getattr(self, name) != 0:
                object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        if self.rotary_dim > self.head_dim or self.rotary_dim % 2:
            raise ValueError(f"rotary_dim {self.rotary_dim} must be even and at most head_dim "
                             f"{self.head_dim}; accepted: an even number up to {self.head_dim}")
        if self.experts:
            if self.bias:
                raise ValueError("bias with experts is not modelled; accepted: bias False for a "
                                 "mixture of experts (Mixtral has none)")
            if not 1 <= self.experts_per_token <= self.experts:
                raise ValueError(f"experts_per_token {self.experts_per_token} must be from 1 to "
                                 f"experts {self.experts}; accepted: 1 to {self.experts}")
        else:
            for name in ("experts_per_token", "shared_experts", "expert_ffn"):
                if getattr(self, name):
                    raise ValueError(f"{name} {getattr(self, name)} needs experts; accepted: 0 "
                                     "for a dense model, or give experts")
        if self.positions and self.max_positions > self.positions:
            raise ValueError(f"max_positions {self.max_positions} exceeds the {self.positions} "
                             "learned positions; accepted: at most positions")
        choice("mlp", self.mlp, MLP_KINDS)
        choice("norm", self.norm, NORM_KINDS)
        for name in ("bias", "tied_embeddings", "dropout", "qkv_bias"):
            object.__setattr__(self, name, bool(getattr(self, name)))

    @property
    def head_dim(self) -> int:
        """Width of one attention head: h / a, or :attr:`head_width` where it is given."""
        return self.head_width or self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        """Width of the query projection (and of the output projection's input): a × head_dim."""
        return self.heads * self.head_dim

    @property
    def rotary_width(self) -> int:
        """Head dimensions rotary positions rotate: :attr:`rotary_dim`, or the whole head."""
        return self.rotary_dim or self.head_dim

    @property
    def moe(self) -> bool:
        """Whether the MLP is a mixture of experts."""
        return self.experts > 0

    @property
    def expert_width(self) -> int:
        """Width of one expert's MLP: :attr:`expert_ffn`, or ``ffn``."""
        return self.expert_ffn or self.ffn

    @property
    def kv_dim(self) -> int:
        """Width of the key (and of the value) projection: kv_heads × head_dim."""
        return self.kv_heads * self.head_dim


def shape(
    name: str,
    *,
    layers: int,
    hidden: int,
    heads: int,
    ffn: int,
    vocab: int,
    kv_heads: int | None = None,
    mlp: str = "swiglu",
    norm: str = "rmsnorm",
    bias: bool = False,
    tied_embeddings: bool = False,
    positions: int = 0,
    dropout: bool = False,
    source: str = "",
    max_positions: int | None = None,
    sliding_window: int = 0,
    head_width: int = 0,
    qkv_bias: bool = False,
    rotary_dim: int = 0,
    experts: int = 0,
    experts_per_token: int = 0,
    shared_experts: int = 0,
    expert_ffn: int = 0,
) -> ModelShape:
    """A checked :class:`ModelShape`; ``kv_heads`` defaults to ``heads`` (multi-head attention)
    and ``max_positions`` to the learned ``positions`` (0, unknown, for rotary models)."""
    return ModelShape(
        name=name, layers=layers, hidden=hidden, heads=heads, ffn=ffn, vocab=vocab,
        kv_heads=heads if kv_heads is None else kv_heads, mlp=mlp, norm=norm, bias=bias,
        tied_embeddings=tied_embeddings, positions=positions, dropout=dropout, source=source,
        max_positions=positions if max_positions is None else max_positions,
        sliding_window=sliding_window, head_width=head_width, qkv_bias=qkv_bias,
        rotary_dim=rotary_dim, experts=experts, experts_per_token=experts_per_token,
        shared_experts=shared_experts, expert_ffn=expert_ffn,
    )


#: The fields of a shape that :func:`modified` can change.
SHAPE_FIELDS = tuple(f.name for f in fields(ModelShape) if f.name not in ("name", "source"))


def modified(base: ModelShape, **changes: object) -> ModelShape:
    """``base`` with ``changes`` (any of :data:`SHAPE_FIELDS`), checked, named "<name> (modified)".

    Changing ``heads`` of a multi-head shape keeps it multi-head (kv_heads follows) unless
    ``kv_heads`` changes too. With no changes, ``base`` itself.

    >>> from trainmath.model.presets import preset
    >>> modified(preset("llama-2-7b"), mlp="gelu", ffn=16384).name
    'llama-2-7b (modified)'
    """
    unknown = [k for k in changes if k not in SHAPE_FIELDS]
    if unknown:
        raise ValueError(f"unknown shape field {unknown[0]!r}; accepted: {', '.join(SHAPE_FIELDS)}")
    if not changes:
        return base
    if "heads" in changes and "kv_heads" not in changes and base.kv_heads == base.heads:
        changes = {**changes, "kv_heads": changes["heads"]}  # a multi-head shape stays multi-head
    if ("positions" in changes and "max_positions" not in changes
            and base.positions and base.max_positions == base.positions):
        changes = {**changes, "max_positions": changes["positions"]}  # learned positions bound s
    return replace(base, name=f"{base.name} (modified)", source="", **changes)


@dataclass(frozen=True)
class ParamBreakdown:
    """Parameters of each part of a model."""

    embedding: int
    per_layer_attention: int
    per_layer_mlp: int
    per_layer_norms: int
    layers: int
    final_norm: int
    lm_head: int
    #: mixture of experts: parameters of one routed expert (part of ``per_layer_mlp``), the
    #: routed experts per layer and those each token uses (top-k); 0 for a dense model
    routed_expert: int = 0
    routed_experts: int = 0
    active_experts: int = 0

    @property
    def per_layer_routed(self) -> int:
        """Parameters of one layer's routed experts, all of them (0 for a dense model)."""
        return self.routed_expert * self.routed_experts

    @property
    def active(self) -> int:
        """Parameters one token uses: the total less the routed experts it is not sent to
        (all of them for a dense model)."""
        unused = self.routed_expert * (self.routed_experts - self.active_experts)
        return self.total - self.layers * unused

    @property
    def per_layer(self) -> int:
        """Parameters of one decoder layer: attention, MLP and the two norms."""
        return self.per_layer_attention + self.per_layer_mlp + self.per_layer_norms

    @property
    def total(self) -> int:
        """Parameters of the whole model: embeddings, L layers, final norm and LM head."""
        return self.embedding + self.layers * self.per_layer + self.final_norm + self.lm_head


def param_breakdown(m: ModelShape) -> ParamBreakdown:
    """Parameters of each part of ``m``, counted from its weight matrices and vectors.

    Attention: the query, key, value and output projections (Vaswani et al. 2017, §3.2.2),
    with keys and values kv_heads × head_dim wide under grouped-query attention (Ainslie et al.
    2023). MLP: two matrices of h × ffn (Vaswani et al. 2017, §3.3), three for SwiGLU
    (Shazeer 2020). Norms: LayerNorm has a gain and a bias (Ba et al. 2016), RMSNorm a gain
    only (Zhang & Sennrich 2019). Embeddings: V × h, plus learned positions.

    The query and output projections are h × a·head_dim (h × h unless ``head_width`` is
    given); ``qkv_bias`` adds biases to the query, key and value projections only (Qwen2).
    A mixture of experts (:mod:`trainmath.model.moe`) replaces the MLP by a router, an h × E matrix
    without bias (Mixtral's ``gate``; Shazeer et al. 2017's gating network), E routed experts
    and any shared experts, each an MLP ``expert_ffn`` wide (Fedus et al. 2022, Switch
    Transformer, §2; Jiang et al. 2024, Mixtral of Experts, §2.1).
    """
    h, kv, q = m.hidden, m.kv_dim, m.q_dim
    attention = h * q + 2 * h * kv + q * h  # query, key, value, output projections
    if m.bias:
        attention += q + 2 * kv + h
    elif m.qkv_bias:
        attention += q + 2 * kv
    expert = 0
    if m.moe:
        expert = _mlp_params(m, m.expert_width)
        mlp = h * m.experts + (m.experts + m.shared_experts) * expert  # router, experts
    else:
        mlp = _mlp_params(m, m.ffn)
    norm = 2 * h if m.norm == "layernorm" else h  # LayerNorm has a gain and a bias
    return ParamBreakdown(
        embedding=m.vocab * h + m.positions * h,
        per_layer_attention=attention,
        per_layer_mlp=mlp,
        per_layer_norms=2 * norm,
        layers=m.layers,
        final_norm=norm,
        lm_head=0 if m.tied_embeddings else m.vocab * h,
        routed_expert=expert,
        routed_experts=m.experts,
        active_experts=m.experts_per_token,
    )


def _mlp_params(m: ModelShape, width: int) -> int:
    """One MLP ``width`` wide: up and down (GeLU), or gate, up and down (Shazeer 2020)."""
    h = m.hidden
    if m.mlp == "gelu":  # up (h -> width), down (width -> h)
        return 2 * h * width + ((width + h) if m.bias else 0)
    return 3 * h * width + ((2 * width + h) if m.bias else 0)  # gate, up, down


def param_count(m: ModelShape) -> int:
    """Total parameters of ``m``: the sum of :func:`param_breakdown`, which cites each part.

    >>> from trainmath.model.presets import preset
    >>> param_count(preset("llama-2-7b"))
    6738415616
    """
    return param_breakdown(m).total


@dataclass(frozen=True)
class ParamShapes:
    """The shape of every parameter tensor, grouped as FSDP wraps a model: one decoder layer
    (each layer is alike) and the root, which holds the rest (embeddings, final norm, LM head)."""

    layer: tuple[tuple[int, ...], ...]
    layers: int
    root: tuple[tuple[int, ...], ...]

    @property
    def tensors(self) -> int:
        """Parameter tensors in the model: what per-tensor optimizer state (Adam's step) counts."""
        return self.layers * len(self.layer) + len(self.root)

    @property
    def largest(self) -> int:
        """Elements of the largest tensor (the embedding or LM head, in every preset)."""
        return max(math.prod(t) for t in (*self.layer, *self.root))

    def units(self) -> list[list[tuple[int, ...]]]:
        """Each ``fully_shard`` unit's shapes, layers first and the root last, as
        :func:`trainmath.memory.fsdp2.fsdp2_rank` takes them."""
        return [list(self.layer) for _ in range(self.layers)] + [list(self.root)]


def param_shapes(m: ModelShape) -> ParamShapes:
    """The parameter tensors of ``m``, as :func:`param_breakdown` counts them.

    GPT-style shapes (GeLU MLP) keep Q, K and V in one matrix, as Megatron-LM's GPT and GPT-2's
    ``c_attn`` do; the others keep q, k, v, gate and up separate, as Llama's reference code and
    Hugging Face's ``LlamaForCausalLM`` do. The layout changes no byte count, only the number of
    tensors (Adam keeps one step counter per tensor) and how FSDP2 pads each tensor's dim 0.

    A mixture of experts keeps its router as one (E, h) matrix and its routed experts as 3-D
    tensors, (E, 2·width, h) for the gate and up projections together and (E, h, width) for
    the down projection, as ``MixtralExperts`` does in transformers 5; shared experts are
    ordinary MLPs.
    """
    h, kv, f, q = m.hidden, m.kv_dim, m.ffn, m.q_dim
    layer: list[tuple[int, ...]] = []
    norm = [(h,), (h,)] if m.norm == "layernorm" else [(h,)]
    bias = m.bias
    qkv_bias = bias or m.qkv_bias
    layer += norm
    if m.mlp == "gelu":
        layer += [(q + 2 * kv, h)] + ([(q + 2 * kv,)] if qkv_bias else [])
    else:
        layer += [(q, h), (kv, h), (kv, h)] + ([(q,), (kv,), (kv,)] if qkv_bias else [])
    layer += [(h, q)] + ([(h,)] if bias else [])
    layer += norm

    def mlp(width: int) -> list[tuple[int, ...]]:
        ups = [(width, h)] if m.mlp == "gelu" else [(width, h), (width, h)]
        return (ups + ([(width,)] * len(ups) if bias else [])
                + [(h, width)] + ([(h,)] if bias else []))

    if m.moe:
        w, e = m.expert_width, m.experts
        ups = 1 if m.mlp == "gelu" else 2
        layer += [(e, h), (e, ups * w, h)] + ([(e, ups * w)] if bias else [])
        layer += [(e, h, w)] + ([(e, h)] if bias else [])
        for _ in range(m.shared_experts):
            layer += mlp(w)
    else:
        layer += mlp(f)
    root: list[tuple[int, ...]] = [(m.vocab, h)]
    if m.positions:
        root.append((m.positions, h))
    root += norm
    if not m.tied_embeddings:
        root.append((m.vocab, h))
    return ParamShapes(tuple(layer), m.layers, tuple(root))
