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

Today's models change more: heads wider than h / a (Gemma, Qwen3, Mistral-Small), norms of the
queries and keys (Qwen3, OLMo 2, Gemma 3), norms after each sublayer (OLMo 2) or both before and
after (Gemma 2 and 3), multi-head latent attention (DeepSeek-V2 §2.1.2: keys and values, and
DeepSeek-V3's queries, through low-rank compressions, with a decoupled rotary part), sliding-window
or chunked attention on some layers only, soft-capped logits, learned attention sinks (gpt-oss),
mixtures of experts whose first layers, or every other one, stay dense (DeepSeek-V3's
``first_k_dense_replace``, Llama 4's interleaving) and multi-token prediction modules
(DeepSeek-V3 §2.2). A shape holds each as a field; :func:`layer_kinds` says which layers are
dense or mixtures, local or global, and :func:`layer_shape` gives one kind of layer as a shape
of its own, so that what is computed per layer stays a function of one uniform shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from functools import lru_cache

from ..problems import Problem
from ..units import choice, positive_int


#: MLP kinds: GeLU, two matrices; SwiGLU and GeGLU (a GeLU-gated linear unit, Gemma), three
#: (Shazeer 2020, *GLU Variants Improve Transformer*, which defines both).
MLP_KINDS = ("gelu", "swiglu", "geglu")
#: The gated MLP kinds, which have a gate, an up and a down projection (Shazeer 2020).
GATED_MLPS = ("swiglu", "geglu")
#: Norm kinds: LayerNorm, a gain and a bias; RMSNorm, a gain only (Zhang & Sennrich 2019).
NORM_KINDS = ("layernorm", "rmsnorm")
#: Where a layer's norms sit: "pre", before attention and before the MLP (GPT-2, Llama: two);
#: "sandwich", before and after each (Gemma 2 and 3: ``input_layernorm``,
#: ``post_attention_layernorm``, ``pre_feedforward_layernorm``, ``post_feedforward_layernorm``);
#: "post", after each, on the sublayer's output before the residual add (OLMo 2: two).
NORM_PLACEMENTS = ("pre", "sandwich", "post")
#: Norms of the queries and keys: "" none; "head", an RMSNorm over each head (Qwen3's and
#: Gemma 3's ``q_norm`` and ``k_norm``, head_dim wide); "full", an RMSNorm over the whole query
#: and key projections (OLMo 2: a·d and kv·d wide); "l2", an L2 norm without parameters (Llama 4's
#: ``Llama4TextL2Norm``).
QK_NORMS = ("", "head", "full", "l2")


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
    #: where the norms sit (:data:`NORM_PLACEMENTS`)
    norm_placement: str = "pre"
    #: norms of the queries and keys (:data:`QK_NORMS`)
    qk_norm: str = ""
    #: multi-head latent attention (DeepSeek-V2 §2.1.2): the rank the keys and values are
    #: compressed to (``kv_lora_rank``); 0: ordinary attention. The heads are then
    #: ``head_width`` = nope + rope wide for queries and keys (``rotary_dim`` is the rope part,
    #: whose key is one head shared by all) and ``v_head_width`` wide for values
    kv_rank: int = 0
    #: the rank the queries are compressed to (``q_lora_rank``); 0: a full query projection
    q_rank: int = 0
    #: the width of one value head where it is not head_dim (MLA's ``v_head_dim``); 0: head_dim
    v_head_width: int = 0
    #: with ``sliding_window`` or ``attention_chunk``, every this-many-th layer attends to the
    #: whole sequence and the others locally (Gemma 2 and gpt-oss: 2, Gemma 3: 6, Llama 4: 4);
    #: 0: every layer attends locally
    global_every: int = 0
    #: chunked attention (Llama 4): a local layer's tokens attend within aligned chunks of this
    #: many; 0: none
    attention_chunk: int = 0
    #: logit soft-capping, cap·tanh(x / cap) (Gemma 2): of the attention scores and of the final
    #: logits; 0: none
    attention_softcap: float = 0.0
    final_softcap: float = 0.0
    #: a learned sink logit per head and layer that takes part in each softmax (gpt-oss)
    attention_sinks: bool = False
    #: a mixture of experts' first this-many layers are dense, ``ffn`` wide
    #: (``first_k_dense_replace``: DeepSeek-V3's 3)
    dense_layers: int = 0
    #: after them, every this-many-th layer is a mixture and the others dense (Llama 4's
    #: ``interleave_moe_layer_step``, Qwen3-MoE's ``decoder_sparse_step``): layer i is a mixture
    #: when (i + 1) is a multiple of it
    moe_every: int = 1
    #: multi-token prediction modules (DeepSeek-V3 §2.2): each one decoder layer of the last
    #: layer's kind, two norms and a 2h × h projection, with a final norm; they share the
    #: embedding and the LM head
    mtp_layers: int = 0
    #: the transformers family whose own code saves other tensors than Llama's
    #: (:data:`trainmath.memory.hf_families.HF_FAMILIES`: Gemma's, OLMo 2's, gpt-oss's norms,
    #: routers and experts); "" for Llama's code. Only the "hf" kernels read it
    hf_family: str = ""

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
                     "experts_per_token", "shared_experts", "expert_ffn", "kv_rank", "q_rank",
                     "v_head_width", "global_every", "attention_chunk", "dense_layers",
                     "mtp_layers"):
            if getattr(self, name) != 0:
                object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        object.__setattr__(self, "moe_every", positive_int("moe_every", self.moe_every))
        choice("norm_placement", self.norm_placement, NORM_PLACEMENTS)
        choice("qk_norm", self.qk_norm, QK_NORMS)
        if not isinstance(self.hf_family, str):
            raise ValueError(f"hf_family {self.hf_family!r} is not a name; accepted: a "
                             "transformers model_type, or \"\" for Llama's code")
        for name in ("attention_softcap", "final_softcap"):
            cap = getattr(self, name)
            if isinstance(cap, bool) or not isinstance(cap, (int, float)) or cap < 0:
                raise ValueError(f"{name} {cap!r} is not a cap; accepted: 0 (none) or a positive "
                                 "number")
            object.__setattr__(self, name, float(cap))
        if self.kv_rank:
            if self.kv_heads != self.heads:
                raise ValueError(f"kv_heads {self.kv_heads} with latent attention (kv_rank "
                                 f"{self.kv_rank}); accepted: kv_heads = heads {self.heads} (every "
                                 "head has its own key and value after decompression)")
            if not (self.head_width and self.rotary_dim and self.v_head_width):
                raise ValueError("latent attention (kv_rank) needs head_width (nope + rope), "
                                 "rotary_dim (the rope part) and v_head_width; accepted: all "
                                 "three positive")
        elif self.q_rank or self.v_head_width:
            raise ValueError("q_rank and v_head_width belong to latent attention; accepted: 0, "
                             "or give kv_rank")
        if self.global_every and not (self.sliding_window or self.attention_chunk):
            raise ValueError(f"global_every {self.global_every} needs local layers; accepted: 0, "
                             "or give sliding_window or attention_chunk")
        if (self.dense_layers or self.moe_every > 1) and not self.experts:
            raise ValueError("dense_layers and moe_every place a mixture's layers; accepted: 0 "
                             "and 1 for a dense model, or give experts")
        if self.dense_layers >= self.layers:
            raise ValueError(f"dense_layers {self.dense_layers} leaves no mixture among "
                             f"{self.layers} layers; accepted: fewer than {self.layers}")
        if self.rotary_dim > self.head_dim or self.rotary_dim % 2:
            raise ValueError(f"rotary_dim {self.rotary_dim} must be even and at most head_dim "
                             f"{self.head_dim}; accepted: an even number up to {self.head_dim}")
        if self.experts:
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

    def __hash__(self) -> int:
        # computed once: shapes key the many caches of the estimate and the planner
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", cached)
        return cached

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
        """Width of the keys: kv_heads × head_dim (and of the values, unless latent attention
        gives them their own width, :attr:`v_dim`)."""
        return self.kv_heads * self.head_dim

    @property
    def v_head_dim(self) -> int:
        """Width of one value head: :attr:`v_head_width`, or head_dim."""
        return self.v_head_width or self.head_dim

    @property
    def v_dim(self) -> int:
        """Width of the values: kv_heads × the value head's width."""
        return self.kv_heads * self.v_head_dim

    @property
    def o_dim(self) -> int:
        """Width of the attention's output, the output projection's input: a × the value head."""
        return self.heads * self.v_head_dim

    @property
    def latent(self) -> bool:
        """Whether attention is multi-head latent attention (DeepSeek-V2 §2.1.2)."""
        return self.kv_rank > 0

    @property
    def norms_per_layer(self) -> int:
        """The norms of one layer, h wide: 4 sandwiching both sublayers (Gemma 2), else 2."""
        return 4 if self.norm_placement == "sandwich" else 2

    @property
    def local_span(self) -> int:
        """The keys a local layer's token can attend to at most: the window or the chunk (0:
        no local attention)."""
        return self.sliding_window or self.attention_chunk


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
    **architecture: object,
) -> ModelShape:
    """A checked :class:`ModelShape`; ``kv_heads`` defaults to ``heads`` (multi-head attention)
    and ``max_positions`` to the learned ``positions`` (0, unknown, for rotary models).
    ``architecture`` takes the fields of today's architectures by name (``qk_norm``,
    ``norm_placement``, ``kv_rank``, ``q_rank``, ``v_head_width``, ``global_every``,
    ``attention_chunk``, ``attention_softcap``, ``final_softcap``, ``attention_sinks``,
    ``dense_layers``, ``moe_every``, ``mtp_layers``, ``hf_family``)."""
    unknown = [k for k in architecture if k not in _ARCHITECTURE_FIELDS]
    if unknown:
        raise ValueError(f"unknown shape field {unknown[0]!r}; accepted: "
                         + ", ".join(_ARCHITECTURE_FIELDS))
    return ModelShape(
        name=name, layers=layers, hidden=hidden, heads=heads, ffn=ffn, vocab=vocab,
        kv_heads=heads if kv_heads is None else kv_heads, mlp=mlp, norm=norm, bias=bias,
        tied_embeddings=tied_embeddings, positions=positions, dropout=dropout, source=source,
        max_positions=positions if max_positions is None else max_positions,
        sliding_window=sliding_window, head_width=head_width, qkv_bias=qkv_bias,
        rotary_dim=rotary_dim, experts=experts, experts_per_token=experts_per_token,
        shared_experts=shared_experts, expert_ffn=expert_ffn, **architecture,
    )


_ARCHITECTURE_FIELDS = ("norm_placement", "qk_norm", "kv_rank", "q_rank", "v_head_width",
                        "global_every", "attention_chunk", "attention_softcap", "final_softcap",
                        "attention_sinks", "dense_layers", "moe_every", "mtp_layers",
                        "hf_family")


@dataclass(frozen=True)
class LayerKind:
    """What one decoder layer is: a mixture of experts or a dense MLP, local (sliding-window or
    chunked) or global attention."""

    moe: bool
    local: bool


def layer_kinds(m: ModelShape) -> tuple[LayerKind, ...]:
    """Each layer's kind, in order. Layer i is a mixture when the model has experts, i is past
    the first ``dense_layers`` and (i + 1) is a multiple of ``moe_every`` (DeepSeek-V3's
    ``first_k_dense_replace``, Llama 4's and Qwen3-MoE's ``(layer_idx + 1) % step == 0``); local
    when the model has a window or chunks and (i + 1) is not a multiple of ``global_every``
    (transformers' default ``layer_types`` for Gemma 2 and 3, gpt-oss's config, Llama 4's
    ``no_rope_layers``).

    >>> from trainmath.model.presets import preset
    >>> {k for k in layer_kinds(preset("llama-2-7b"))}
    {LayerKind(moe=False, local=False)}
    """
    return _kinds(m.layers, m.experts > 0, m.dense_layers, m.moe_every, m.local_span > 0,
                  m.global_every)


@lru_cache(maxsize=256)
def _kinds(layers: int, moe: bool, dense: int, every: int, local: bool,
           global_every: int) -> tuple[LayerKind, ...]:
    return tuple(LayerKind(moe=moe and i >= dense and (i + 1) % every == 0,
                           local=local and not (global_every and (i + 1) % global_every == 0))
                 for i in range(layers))


@lru_cache(maxsize=1024)
def distinct_kinds(m: ModelShape) -> tuple[LayerKind, ...]:
    """The kinds of layer ``m`` has, each once, in the order they first appear."""
    return tuple(dict.fromkeys(layer_kinds(m)))


@lru_cache(maxsize=8192)
def kind_counts(m: ModelShape, indices: tuple[int, ...]) -> tuple[tuple[LayerKind, int], ...]:
    """How many of the layers at ``indices`` (a pipeline stage's) are of each kind, in the order
    each kind first appears."""
    counts: dict[LayerKind, int] = {}
    kinds = layer_kinds(m)
    for j in indices:
        counts[kinds[j]] = counts.get(kinds[j], 0) + 1
    return tuple(counts.items())


@lru_cache(maxsize=1024)
def layer_shape(m: ModelShape, kind: LayerKind) -> ModelShape:
    """``m`` with every layer of ``kind``: a dense layer of a mixture keeps ``ffn`` and no
    experts; a global layer of a locally attending model no window or chunk. What is computed
    for one layer (its activations, its time) is then a function of a uniform shape. With a
    single kind, ``m`` itself."""
    changes: dict[str, object] = {}
    if m.moe and not kind.moe:
        changes.update(experts=0, experts_per_token=0, shared_experts=0, expert_ffn=0,
                       dense_layers=0, moe_every=1)
    elif m.moe:
        changes.update(dense_layers=0, moe_every=1)
    if m.local_span and not kind.local:
        changes.update(sliding_window=0, attention_chunk=0, global_every=0)
        if m.attention_chunk and m.qk_norm == "l2":  # Llama 4: its global layers have no RoPE
            changes["qk_norm"] = ""  # and no L2 norm (Llama4TextAttention: use_rope only)
    elif m.local_span:
        changes.update(global_every=0)
    changes = {k: v for k, v in changes.items() if getattr(m, k) != v}
    return replace(m, **changes) if changes else m


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
    """Parameters of each part of a model.

    ``per_layer_*`` describe a typical layer: in a mixture of experts, a mixture layer; its
    ``dense_layers`` dense ones have ``dense_mlp`` in place of ``per_layer_mlp``
    (:func:`layer_kinds`). ``mtp`` counts the multi-token prediction modules."""

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
    #: a mixture's dense layers and the MLP of each (0 when every layer is a mixture)
    dense_layers: int = 0
    dense_mlp: int = 0
    #: multi-token prediction modules, all of them (DeepSeek-V3 §2.2); each a mixture layer
    #: when the model's last layer is one (``mtp_moe``)
    mtp: int = 0
    mtp_moe: int = 0

    @property
    def per_layer_routed(self) -> int:
        """Parameters of one mixture layer's routed experts, all of them (0 for a dense model)."""
        return self.routed_expert * self.routed_experts

    @property
    def moe_layers(self) -> int:
        """Layers that are mixtures of experts (0 for a dense model)."""
        return self.layers - self.dense_layers if self.routed_experts else 0

    @property
    def active(self) -> int:
        """Parameters one token uses: the total less the routed experts it is not sent to
        (all of them for a dense model)."""
        unused = self.routed_expert * (self.routed_experts - self.active_experts)
        return self.total - (self.moe_layers + self.mtp_moe) * unused

    @property
    def per_layer(self) -> int:
        """Parameters of one typical decoder layer: attention, MLP and norms."""
        return self.per_layer_attention + self.per_layer_mlp + self.per_layer_norms

    @property
    def dense_layer(self) -> int:
        """Parameters of one dense layer of a mixture (0 if it has none)."""
        return (self.per_layer_attention + self.dense_mlp + self.per_layer_norms
                if self.dense_layers else 0)

    def layer(self, moe: bool) -> int:
        """Parameters of one layer: a mixture layer, or a dense one."""
        return self.per_layer if moe or not self.dense_layers else self.dense_layer

    @property
    def all_layers(self) -> int:
        """Parameters of the L decoder layers together."""
        return ((self.layers - self.dense_layers) * self.per_layer
                + self.dense_layers * self.dense_layer)

    @property
    def total(self) -> int:
        """Parameters of the whole model: embeddings, L layers, final norm, LM head and any
        multi-token prediction modules."""
        return self.embedding + self.all_layers + self.final_norm + self.lm_head + self.mtp


def _attention_params(m: ModelShape) -> int:
    """One layer's attention: projections, their biases, q/k norms and sinks.

    Ordinary attention: the query, key, value and output projections (Vaswani et al. 2017,
    §3.2.2), keys and values kv_heads × head_dim wide under grouped-query attention (Ainslie et
    al. 2023), heads head_dim wide (h / a unless given). Latent attention (DeepSeek-V2 §2.1.2,
    eq. 9-14; transformers' ``DeepseekV3Attention``): queries through ``q_a_proj`` (h → q_rank),
    an RMSNorm and ``q_b_proj`` (q_rank → a·(nope + rope)), or one ``q_proj`` without q_rank;
    ``kv_a_proj_with_mqa`` (h → kv_rank + rope: the compressed keys and values, and the one
    shared rotary key), an RMSNorm, ``kv_b_proj`` (kv_rank → a·(nope + v)), and ``o_proj``
    (a·v → h). ``bias`` puts biases on every projection (gpt-oss; for latent attention, on the
    two down-projections, as ``attention_bias`` does); ``qkv_bias`` on q, k and v only (Qwen2).
    """
    h, a, d = m.hidden, m.heads, m.head_dim
    if m.latent:
        rope, rank = m.rotary_dim, m.kv_rank
        if m.q_rank:
            q = h * m.q_rank + m.q_rank + m.q_rank * a * d + (m.q_rank if m.bias else 0)
        else:
            q = h * a * d
        kv = h * (rank + rope) + rank + rank * a * (d - rope + m.v_head_dim)
        kv += (rank + rope) if m.bias else 0
        return q + kv + m.o_dim * h
    q, kv, vd, o = m.q_dim, m.kv_dim, m.v_dim, m.o_dim
    attention = h * q + h * kv + h * vd + o * h
    if m.bias:
        attention += q + kv + vd + h
    elif m.qkv_bias:
        attention += q + kv + vd
    if m.qk_norm == "head":
        attention += 2 * d
    elif m.qk_norm == "full":
        attention += q + kv
    if m.attention_sinks:
        attention += a
    return attention


def _moe_params(m: ModelShape) -> tuple[int, int]:
    """(one routed expert, the whole MLP of a mixture layer): a router, an h × E matrix (with a
    bias when the model has biases: gpt-oss's ``router.bias``), E routed experts and any shared
    ones, each an MLP ``expert_ffn`` wide (Fedus et al. 2022, Switch Transformer, §2; Jiang et al.
    2024, Mixtral of Experts, §2.1; DeepSeekMoE's shared experts)."""
    h = m.hidden
    expert = _mlp_params(m, m.expert_width)
    router = h * m.experts + (m.experts if m.bias else 0)
    return expert, router + (m.experts + m.shared_experts) * expert


@lru_cache(maxsize=1024)
def param_breakdown(m: ModelShape) -> ParamBreakdown:
    """Parameters of each part of ``m``, counted from its weight matrices and vectors.

    Attention: ``_attention_params``. MLP: two matrices of h × ffn (Vaswani et al. 2017,
    §3.3), three for SwiGLU (Shazeer 2020); a mixture of experts, ``_moe_params``, with its
    dense layers ``ffn`` wide. Norms: LayerNorm has a gain and a bias (Ba et al. 2016), RMSNorm
    a gain only (Zhang & Sennrich 2019); two per layer, four sandwiching (Gemma 2). Embeddings:
    V × h, plus learned positions. A multi-token prediction module (DeepSeek-V3 §2.2; its
    checkpoint's layer 61: ``enorm``, ``hnorm``, ``eh_proj`` 2h → h, one decoder layer and a
    final norm) shares the embedding and the LM head.
    """
    h = m.hidden
    attention = _attention_params(m)
    norm = 2 * h if m.norm == "layernorm" else h  # LayerNorm has a gain and a bias
    norms = m.norms_per_layer * norm
    dense_mlp = _mlp_params(m, m.ffn)
    expert, mlp = _moe_params(m) if m.moe else (0, dense_mlp)
    kinds = layer_kinds(m)
    dense = sum(1 for k in kinds if not k.moe) if m.moe else 0
    last_moe = m.moe and kinds[-1].moe
    mtp_layer = attention + norms + (mlp if last_moe or not m.moe else dense_mlp)
    return ParamBreakdown(
        embedding=m.vocab * h + m.positions * h,
        per_layer_attention=attention,
        per_layer_mlp=mlp,
        per_layer_norms=norms,
        layers=m.layers,
        final_norm=norm,
        lm_head=0 if m.tied_embeddings else m.vocab * h,
        routed_expert=expert,
        routed_experts=m.experts,
        active_experts=m.experts_per_token,
        dense_layers=dense,
        dense_mlp=dense_mlp if dense else 0,
        mtp=m.mtp_layers * (mtp_layer + 2 * h * h + 3 * norm),
        mtp_moe=m.mtp_layers if last_moe else 0,
    )


def _mlp_params(m: ModelShape, width: int) -> int:
    """One MLP ``width`` wide: up and down (GeLU), or gate, up and down (Shazeer 2020)."""
    h = m.hidden
    if m.mlp == "gelu":  # up (h -> width), down (width -> h)
        return 2 * h * width + ((width + h) if m.bias else 0)
    return 3 * h * width + ((2 * width + h) if m.bias else 0)  # gate, up, down


#: The most parameters of a published trained model: Switch-C, 1571B (Fedus et al. 2022,
#: Table 9). :func:`scale_problems` warns a hundred times beyond it.
LARGEST_TRAINED_PARAMS = 1_571_000_000_000
#: How far past the largest published figure an input may go before it is called implausible.
IMPLAUSIBLE_FACTOR = 100


def scale_problems(params: int) -> list[Problem]:
    """A model a hundred times larger than any published one (:data:`LARGEST_TRAINED_PARAMS`)
    is accepted and computed, with this warning: a mistyped size (hidden 10^12, 10^30 layers)
    more likely than a plan. The fields are those that make a model's size.

    >>> scale_problems(70_000_000_000)
    []
    >>> scale_problems(10**15)[0].message[:60]
    'the model has 1,000,000,000,000,000 parameters, over a hundr'
    """
    if params > IMPLAUSIBLE_FACTOR * LARGEST_TRAINED_PARAMS:
        return [Problem(("params", "hidden", "layers", "ffn", "vocab", "experts"),
                        f"the model has {params:,} parameters, over a hundred times the largest "
                        f"published trained model ({LARGEST_TRAINED_PARAMS:,}, Switch-C): check "
                        "its size")]
    return []


def param_count(m: ModelShape) -> int:
    """Total parameters of ``m``: the sum of :func:`param_breakdown`, which cites each part.

    >>> from trainmath.model.presets import preset
    >>> param_count(preset("llama-2-7b"))
    6738415616
    """
    return param_breakdown(m).total


@dataclass(frozen=True)
class ParamShapes:
    """The shape of every parameter tensor, grouped as FSDP wraps a model: each decoder layer
    (``per_layer``, in order) and the root, which holds the rest (embeddings, final norm, LM
    head, any multi-token prediction module)."""

    per_layer: tuple[tuple[tuple[int, ...], ...], ...]
    root: tuple[tuple[int, ...], ...]

    @property
    def layers(self) -> int:
        """Decoder layers."""
        return len(self.per_layer)

    @property
    def layer(self) -> tuple[tuple[int, ...], ...]:
        """The tensors of a typical layer: the last one (a mixture layer in a mixture of
        experts, whose first layers may be dense)."""
        return self.per_layer[-1]

    @property
    def tensors(self) -> int:
        """Parameter tensors in the model: what per-tensor optimizer state (Adam's step) counts."""
        return sum(len(t) for t in self.per_layer) + len(self.root)

    @property
    def largest(self) -> int:
        """Elements of the largest tensor (the embedding or LM head, in every preset)."""
        return max(math.prod(t) for t in (*(x for lay in self.per_layer for x in lay), *self.root))

    def units(self) -> list[list[tuple[int, ...]]]:
        """Each ``fully_shard`` unit's shapes, layers first and the root last, as
        :func:`trainmath.memory.fsdp2.fsdp2_rank` takes them."""
        return [list(layer) for layer in self.per_layer] + [list(self.root)]


@lru_cache(maxsize=1024)
def param_shapes(m: ModelShape) -> ParamShapes:
    """The parameter tensors of ``m``, as :func:`param_breakdown` counts them.

    GPT-style shapes (GeLU MLP) keep Q, K and V in one matrix, as Megatron-LM's GPT and GPT-2's
    ``c_attn`` do; the others keep q, k, v, gate and up separate, as Llama's reference code and
    Hugging Face's ``LlamaForCausalLM`` do. The layout changes no byte count, only the number of
    tensors (Adam keeps one step counter per tensor) and how FSDP2 pads each tensor's dim 0.

    A mixture of experts keeps its router as one (E, h) matrix and its routed experts as 3-D
    tensors, (E, 2·width, h) for the gate and up projections together and (E, h, width) for
    the down projection, as ``MixtralExperts`` does in transformers 5; shared experts are
    ordinary MLPs. Latent attention keeps the matrices ``_attention_params`` names.
    """
    kinds = layer_kinds(m)
    cache: dict[LayerKind, tuple[tuple[int, ...], ...]] = {}
    for k in kinds:
        if k not in cache:
            cache[k] = _layer_tensors(m, k.moe)
    h = m.hidden
    norm = [(h,), (h,)] if m.norm == "layernorm" else [(h,)]
    root: list[tuple[int, ...]] = [(m.vocab, h)]
    if m.positions:
        root.append((m.positions, h))
    root += norm
    if not m.tied_embeddings:
        root.append((m.vocab, h))
    for _ in range(m.mtp_layers):  # enorm, hnorm, eh_proj, a layer of the last kind, final norm
        root += norm + norm + [(h, 2 * h)] + list(cache[kinds[-1]]) + norm
    return ParamShapes(tuple(cache[k] for k in kinds), tuple(root))


def _layer_tensors(m: ModelShape, moe: bool) -> tuple[tuple[int, ...], ...]:
    """One decoder layer's tensors (a mixture layer when ``moe``)."""
    h, kv, vd, f, q, a = m.hidden, m.kv_dim, m.v_dim, m.ffn, m.q_dim, m.heads
    layer: list[tuple[int, ...]] = []
    norm = [(h,), (h,)] if m.norm == "layernorm" else [(h,)]
    bias = m.bias
    qkv_bias = bias or m.qkv_bias
    layer += norm
    if m.latent:
        rope, rank, d = m.rotary_dim, m.kv_rank, m.head_dim
        if m.q_rank:
            layer += [(m.q_rank, h)] + ([(m.q_rank,)] if bias else []) + [(m.q_rank,)]
            layer += [(a * d, m.q_rank)]
        else:
            layer += [(a * d, h)]
        layer += [(rank + rope, h)] + ([(rank + rope,)] if bias else []) + [(rank,)]
        layer += [(a * (d - rope + m.v_head_dim), rank), (h, m.o_dim)]
    else:
        if m.mlp == "gelu":
            layer += [(q + kv + vd, h)] + ([(q + kv + vd,)] if qkv_bias else [])
        else:
            layer += [(q, h), (kv, h), (vd, h)] + ([(q,), (kv,), (vd,)] if qkv_bias else [])
        if m.qk_norm == "head":
            layer += [(m.head_dim,), (m.head_dim,)]
        elif m.qk_norm == "full":
            layer += [(q,), (kv,)]
        if m.attention_sinks:
            layer += [(a,)]
        layer += [(h, m.o_dim)] + ([(h,)] if bias else [])
    layer += norm
    if m.norm_placement == "sandwich":
        layer += norm + norm

    def mlp(width: int) -> list[tuple[int, ...]]:
        ups = [(width, h)] if m.mlp == "gelu" else [(width, h), (width, h)]
        return (ups + ([(width,)] * len(ups) if bias else [])
                + [(h, width)] + ([(h,)] if bias else []))

    if moe:
        w, e = m.expert_width, m.experts
        ups = 1 if m.mlp == "gelu" else 2
        layer += [(e, h)] + ([(e,)] if bias else [])
        layer += [(e, ups * w, h)] + ([(e, ups * w)] if bias else [])
        layer += [(e, h, w)] + ([(e, h)] if bias else [])
        for _ in range(m.shared_experts):
            layer += mlp(w)
    else:
        layer += mlp(f)
    return tuple(layer)
