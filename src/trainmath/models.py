"""Transformer shapes as data, and parameter counts computed from them.

Notation follows Korthikanti et al. 2022 and Narayanan et al. 2021: L layers (the papers' l),
hidden size h, a attention heads, vocabulary V. A decoder layer is attention (query, key, value
and output projections) plus an MLP plus two norms; the model adds token embeddings, a final
norm and an output projection (the "LM head"), which may share the embedding matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

from .units import choice, positive_int

MLP_KINDS = ("gelu", "swiglu")
NORM_KINDS = ("layernorm", "rmsnorm")


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's shape. Build one with :func:`shape` to have it checked."""

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

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

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
) -> ModelShape:
    """A checked :class:`ModelShape`: whole positive sizes, heads that divide h, known kinds."""
    layers = positive_int("layers", layers)
    hidden = positive_int("hidden", hidden)
    heads = positive_int("heads", heads)
    ffn = positive_int("ffn", ffn)
    vocab = positive_int("vocab", vocab)
    kv_heads = heads if kv_heads is None else positive_int("kv_heads", kv_heads)
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not divisible by heads {heads}; h must be a multiple of a")
    if heads % kv_heads:
        raise ValueError(f"heads {heads} is not divisible by kv_heads {kv_heads}; accepted: a divisor of {heads}")
    if positions != 0:
        positions = positive_int("positions", positions)
    return ModelShape(
        name=name, layers=layers, hidden=hidden, heads=heads, ffn=ffn, vocab=vocab,
        kv_heads=kv_heads, mlp=choice("mlp", mlp, MLP_KINDS), norm=choice("norm", norm, NORM_KINDS),
        bias=bool(bias), tied_embeddings=bool(tied_embeddings), positions=positions,
        dropout=bool(dropout), source=source,
    )


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

    @property
    def per_layer(self) -> int:
        return self.per_layer_attention + self.per_layer_mlp + self.per_layer_norms

    @property
    def total(self) -> int:
        return self.embedding + self.layers * self.per_layer + self.final_norm + self.lm_head


def param_breakdown(m: ModelShape) -> ParamBreakdown:
    """Parameters of each part of ``m``, counted from its weight matrices and vectors."""
    h, kv = m.hidden, m.kv_dim
    attention = h * h + 2 * h * kv + h * h  # query, key, value, output projections
    if m.bias:
        attention += h + 2 * kv + h
    if m.mlp == "gelu":  # up (h -> ffn), down (ffn -> h)
        mlp = 2 * h * m.ffn + ((m.ffn + h) if m.bias else 0)
    else:  # SwiGLU: gate and up (h -> ffn), down (ffn -> h); Shazeer 2020
        mlp = 3 * h * m.ffn + ((2 * m.ffn + h) if m.bias else 0)
    norm = 2 * h if m.norm == "layernorm" else h  # LayerNorm has a gain and a bias
    return ParamBreakdown(
        embedding=m.vocab * h + m.positions * h,
        per_layer_attention=attention,
        per_layer_mlp=mlp,
        per_layer_norms=2 * norm,
        layers=m.layers,
        final_norm=norm,
        lm_head=0 if m.tied_embeddings else m.vocab * h,
    )


def param_count(m: ModelShape) -> int:
    """Total parameters of ``m``.

    >>> param_count(preset("llama-2-7b"))
    6738415616
    """
    return param_breakdown(m).total


PRESETS: dict[str, ModelShape] = {
    p.name: p
    for p in (
        shape(
            "llama-2-7b", layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000,
            source="Touvron et al. 2023, Llama 2, Table 1; config.json of meta-llama/Llama-2-7b-hf",
        ),
    )
}


def preset(name: str) -> ModelShape:
    """The preset shape called ``name``; a ValueError lists the known ones."""
    return PRESETS[choice("model preset", name, PRESETS)]
