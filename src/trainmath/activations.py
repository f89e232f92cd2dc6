"""Activation memory: the tensors a transformer layer saves for its backward pass.

Korthikanti et al. 2022, *Reducing Activation Recomputation in Large Transformer Models*, §4.1,
eq. 1: with 16-bit activations and 1-byte dropout masks, one GPT-style layer (multi-head
attention that materialises the s×s scores, a GeLU MLP of width 4h, two LayerNorms, dropout)
saves

    sbh(34 + 5as/h)  bytes

for sequence length s, micro-batch b, hidden size h and a heads. :data:`KORTHIKANTI_LAYER` lists
the tensors behind the 34 and the 5, as §4.1 derives them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .models import ModelShape
from .units import Bytes, positive_int


@dataclass(frozen=True)
class SavedTensor:
    """One tensor saved for backward: ``sbh`` bytes per s·b·h, ``as2b`` bytes per a·s²·b."""

    block: str
    name: str
    sbh: int = 0
    as2b: int = 0


#: The tensors of one layer, Korthikanti et al. 2022, §4.1 (16-bit values, 1-byte masks).
KORTHIKANTI_LAYER: tuple[SavedTensor, ...] = (
    SavedTensor("attention", "input to the Q, K, V projections", sbh=2),
    SavedTensor("attention", "Q and K, inputs to QKᵀ", sbh=4),
    SavedTensor("attention", "softmax output", as2b=2),
    SavedTensor("attention", "softmax dropout mask", as2b=1),
    SavedTensor("attention", "dropout output, input to attention over V", as2b=2),
    SavedTensor("attention", "V, input to attention over V", sbh=2),
    SavedTensor("attention", "input to the output projection", sbh=2),
    SavedTensor("attention", "attention dropout mask", sbh=1),
    SavedTensor("MLP", "input to the first linear layer", sbh=2),
    SavedTensor("MLP", "input to GeLU (width 4h)", sbh=8),
    SavedTensor("MLP", "input to the second linear layer (width 4h)", sbh=8),
    SavedTensor("MLP", "MLP dropout mask", sbh=1),
    SavedTensor("LayerNorm", "input to the first LayerNorm", sbh=2),
    SavedTensor("LayerNorm", "input to the second LayerNorm", sbh=2),
)

#: The 34 of eq. 1: bytes per s·b·h summed over the tensors above.
SBH_COEFFICIENT = sum(t.sbh for t in KORTHIKANTI_LAYER)
#: The 5 of eq. 1: bytes per a·s²·b (the attention scores, their dropout mask and output).
AS2B_COEFFICIENT = sum(t.as2b for t in KORTHIKANTI_LAYER)


def block_coefficients(block: str) -> tuple[int, int]:
    """(bytes per sbh, bytes per as²b) of one block: "attention", "MLP" or "LayerNorm"."""
    tensors = [t for t in KORTHIKANTI_LAYER if t.block == block]
    if not tensors:
        blocks = sorted({t.block for t in KORTHIKANTI_LAYER})
        raise ValueError(f"unknown block {block!r}; accepted: {', '.join(blocks)}")
    return sum(t.sbh for t in tensors), sum(t.as2b for t in tensors)


def layer_activation_bytes(s: int, b: int, h: int, a: int) -> Bytes:
    """Bytes one GPT-style layer saves for backward: sbh(34 + 5as/h) (Korthikanti eq. 1).

    >>> layer_activation_bytes(s=2048, b=1, h=4096, a=32).n
    956301312
    """
    s = positive_int("s (sequence length)", s)
    b = positive_int("b (micro-batch size)", b)
    h = positive_int("h (hidden size)", h)
    a = positive_int("a (attention heads)", a)
    return Bytes(SBH_COEFFICIENT * s * b * h + AS2B_COEFFICIENT * a * s * s * b)


def activation_bytes(model: ModelShape, s: int, b: int) -> Bytes:
    """Eq. 1 times the number of layers, for ``model``'s h, a and L.

    Eq. 1 counts a GPT-style layer; for other architectures (SwiGLU, GQA, no dropout,
    FlashAttention) it is an estimate, not a count.
    """
    return layer_activation_bytes(s, b, model.hidden, model.heads) * model.layers
