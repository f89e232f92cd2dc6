"""The key-value cache: what generation keeps per token, and what GQA, MLA and windows save.

A decoder generating text keeps, for every layer, the keys and values of every token so far
(Pope et al. 2022, *Efficiently Scaling Transformer Inference*, §2). Per token and layer that
is 2·a·d values with multi-head attention (a heads of d), 2·kv·d with grouped-query attention
(Ainslie et al. 2023: kv < a key-value heads), and with multi-head latent attention only the
compressed latent and the shared rotary key, kv_rank + rope values (DeepSeek-AI 2024,
DeepSeek-V2, §2.1.2 and Table 1: "(d_c + d_h^R)·l" against MHA's "2·n_h·d_h·l"). A local
layer keeps at most its window (Jiang et al. 2023, Mistral 7B, §2: a rolling buffer of W
tokens) or its chunk. This is also what a training step's attention reads, and why the three
designs differ in memory at inference far more than in training.

>>> from trainmath.model.presets import preset
>>> kv_cache(preset("llama-2-7b"), seq_len=4096, batch=1).per_token
Bytes(n=524288)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.shape import ModelShape, layer_kinds
from ..units import Bytes, positive_int


@dataclass(frozen=True)
class KVCache:
    """A model's key-value cache for ``batch`` sequences of ``seq_len`` tokens."""

    #: bytes per token of the whole model, every layer keeping the token
    per_token: Bytes
    #: bytes of the whole cache: local layers keep at most their window
    total: Bytes
    #: what one layer keeps per token, in values: "2·a·d", "2·kv·d" or "kv_rank + rope"
    per_layer_values: int
    kind: str


def kv_cache(model: ModelShape, *, seq_len: int, batch: int, value_bytes: int = 2) -> KVCache:
    """The cache of ``model`` (module docstring) in ``value_bytes`` per value (2: bf16)."""
    s = positive_int("seq_len (s)", seq_len)
    b = positive_int("batch (b)", batch)
    v = positive_int("value_bytes", value_bytes)
    if model.latent:
        values, kind = model.kv_rank + model.rotary_dim, "MLA: the latent and the rotary key"
    elif model.kv_heads < model.heads:
        values, kind = model.kv_dim + model.v_dim, "GQA: kv_heads keys and values"
    else:
        values, kind = model.kv_dim + model.v_dim, "MHA: every head's key and value"
    kept = sum(min(s, model.local_span) if k.local else s for k in layer_kinds(model))
    return KVCache(per_token=Bytes(v * values * model.layers), total=Bytes(v * values * kept * b),
                   per_layer_values=values, kind=kind)
