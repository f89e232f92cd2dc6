"""The loss over the vocabulary, three ways: what it holds beyond the tensors it saves, at the
two moments of a step where it peaks (:data:`trainmath.memory.kernels.LOSS_KINDS`).

With ``T`` tokens on the device, ``V`` the vocabulary, ``h`` the hidden size and ``c`` the
compute format's bytes, one fp32 tensor over the vocabulary is ``4TV`` and the 16-bit logits
``cTV``:

- **standard** (``F.cross_entropy(logits.float(), targets)``): while the loss's forward runs,
  the 16-bit logits and their fp32 copy, ``(c + 4)TV``; in its backward, the gradients of the
  log-softmax and of the fp32 logits, ``8TV`` (``nll_loss_backward``,
  ``_log_softmax_backward_data``). The log-softmax itself is saved
  (:func:`trainmath.memory.embedding_and_loss.output_activations`).
- **chunked** into ``N`` chunks of ``⌈T/N⌉`` tokens (torchtune's ``LinearCrossEntropyLoss``,
  ``torchtune/modules/loss/cross_entropy_loss.py``: the hidden states ``tensor_split`` along the
  sequence, each chunk projected by the LM head and put through ``F.cross_entropy(
  logits.float(), reduction="sum")``, one backward through all of them). Every chunk's
  log-softmax is saved, so the saved bytes do not change; the transients shrink N-fold. The
  forward holds the last chunk's logits and their copy, ``(c + 4)·⌈T/N⌉·V``. The backward
  holds the larger of the first chunk's two fp32 gradients, ``8·⌈T/N⌉·V``, and the second
  chunk's weight gradient: the LM head's weight is used by every chunk, so autograd's input
  buffer holds its gradient from the first chunk while the second one's is computed, and adds
  them out of place (``old_var + var`` in ``accumulate``, ``torch/csrc/autograd/
  input_buffer.cpp``): three ``cVh`` tensors at once, beside two chunks' gradients of the hidden
  states ``2c·⌈T/N⌉·h``, with two chunks' log-softmax already freed (``−8·⌈T/N⌉·V``). Measured
  so with real tensors and under ``FakeTensorMode`` alike (validate/test_techniques.py).
- **fused** (Liger-Kernel's ``LigerFusedLinearCrossEntropyFunction``,
  ``src/liger_kernel/ops/fused_linear_cross_entropy.py``; CUDA only: its softmax is a Triton
  kernel): the gradients of the LM head's input and weight are computed in the forward, chunk
  by chunk, and saved for the backward (``ctx.save_for_backward(grad_input, grad_weight,
  ...)``: :func:`~trainmath.memory.embedding_and_loss.output_activations` counts them in place
  of the log-softmax); the forward's transients are one chunk of logits, which the kernel
  overwrites with their gradient ("we calculate the gradient of logits_chunk in place"),
  ``c × chunk × V``, the fp32 per-token loss ``loss_1d`` (``4T``) and the ignore mask (``T``
  bools); the backward only rescales the saved gradients (0). The chunk is
  :func:`liger_chunk_size`.

The chunked and standard losses are measured in a whole step of Llama-3-8B at s 8192
(docs/_data/measurements.json, ``chunked-loss-step/``); the fused one is modelled from its code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from .kernels import DEFAULT_LOSS_CHUNKS, FP32_BYTES, LOSS_KINDS
from ..units import Bytes, choice, positive_int

#: Bytes per logit Liger's cross-entropy kernel moves, forward and backward in one: its online
#: softmax reads the 16-bit logits twice and writes their gradient once ("Online softmax: 2
#: loads + 1 store", ``liger_cross_entropy_kernel`` in ``src/liger_kernel/ops/cross_entropy.py``).
FUSED_LOSS_LOADS_STORES = 3


@dataclass(frozen=True)
class LossMemory:
    """What the loss holds on one device beyond what it saves for backward, while its forward
    runs and while its backward runs (module docstring), and in words when."""

    kind: str
    #: chunks the tokens are scored in (1: standard; Liger's count for "fused")
    chunks: int
    forward: Bytes
    backward: Bytes
    forward_when: str
    backward_when: str


def liger_chunk_size(tokens: int, hidden: int, vocab: int) -> int:
    """Rows per chunk of Liger-Kernel's fused linear cross entropy
    (``fused_linear_cross_entropy_forward``): ``inc_factor = ⌈V/h⌉``, chunk =
    ``min(next_power_of_2(⌈BT / inc_factor⌉), BT)``, so that a chunk's logits are about the size
    of the hidden states (``chunk_mem_const = 1``).

    >>> liger_chunk_size(16384, 4096, 32000)   # the example in Liger's comment
    2048
    >>> liger_chunk_size(8192, 4096, 128256)   # Llama-3-8B at s 8192
    256
    """
    T = positive_int("tokens (BT)", tokens)
    h = positive_int("hidden (H)", hidden)
    V = positive_int("vocab (V)", vocab)
    inc = -(-V // h)
    rows = -(-T // inc)
    return min(1 << (rows - 1).bit_length(), T)


def loss_memory(kind: str, *, tokens: int, vocab: int, hidden: int, compute_bytes: int = 2,
                chunks: int | None = None) -> LossMemory:
    """:class:`LossMemory` of the loss ``kind`` (one of
    :data:`~trainmath.memory.kernels.LOSS_KINDS`) for ``tokens`` tokens on one device, the
    whole vocabulary ``vocab`` there (module docstring). ``chunks`` is a chunked loss's count
    (default :data:`~trainmath.memory.kernels.DEFAULT_LOSS_CHUNKS`).

    >>> m = loss_memory("chunked", tokens=8192, vocab=128256, hidden=4096)
    >>> m.chunks, m.forward.n == 6 * 1024 * 128256
    (8, True)
    """
    kind = choice("loss", kind, LOSS_KINDS)
    if chunks is not None and kind != "chunked":
        raise ValueError(f"chunks {chunks} with loss {kind!r}; accepted: chunks only with "
                         "loss 'chunked'")
    n = positive_int("chunks", chunks if chunks is not None else (
        DEFAULT_LOSS_CHUNKS if kind == "chunked" else 1))
    return _loss_memory(kind, positive_int("tokens", tokens), positive_int("vocab", vocab),
                        positive_int("hidden", hidden), positive_int("compute_bytes", compute_bytes),
                        n)


def _loss_memory(kind: str, tokens: int | Fraction, vocab: int, hidden: int, c: int,
                 chunks: int) -> LossMemory:
    """:func:`loss_memory` on checked inputs (``tokens`` may be a fraction under cp)."""
    V, h = vocab, hidden
    if kind == "fused":
        T = math.ceil(tokens)
        rows = liger_chunk_size(T, h, V)
        return LossMemory(
            kind, -(-T // rows), Bytes(c * rows * V + FP32_BYTES * tokens + tokens), Bytes(0),
            f"the loss (Liger's fused kernel): one chunk of {rows} tokens' logits, overwritten by "
            "their gradient, and the fp32 per-token loss",
            "the loss's backward: the gradients Liger computed in the forward, already saved")
    if kind == "standard" or chunks == 1:
        return LossMemory(kind, 1, Bytes((c + FP32_BYTES) * tokens * V),
                          Bytes(2 * FP32_BYTES * tokens * V),
                          "the loss: the logits and their fp32 copy",
                          "the loss's gradient: two fp32 tensors over the vocabulary")
    rows = math.ceil(Fraction(tokens) / chunks)
    first = Bytes(2 * FP32_BYTES * rows * V)
    second = Bytes(max(0, 3 * c * V * h + 2 * c * rows * h - 2 * FP32_BYTES * rows * V))
    if second.n > first.n:
        back, when = second, (f"the loss's second chunk (of {chunks}): two gradients of the LM "
                              "head's weight and their sum")
    else:
        back, when = first, (f"the loss's first chunk (of {chunks}): two fp32 tensors over the "
                             "vocabulary for its tokens")
    return LossMemory(kind, chunks, Bytes((c + FP32_BYTES) * rows * V), back,
                      f"the loss's last chunk (of {chunks}): its logits and their fp32 copy", when)
