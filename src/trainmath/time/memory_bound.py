"""The work of a training step that moves bytes rather than multiplying matrices: norms,
activation functions, rotary embeddings, residual adds, dropout, the loss's softmax over the
vocabulary and the optimizer's update. Each is timed as the bytes it reads and writes over the
GPU's memory bandwidth at :data:`trainmath.time.gemm.HBM_EFFICIENCY` (a streaming kernel's share
of the datasheet figure).

The byte counts follow each op's inputs and outputs in 16-bit activations (2 bytes), norm
statistics and the loss in fp32, as PyTorch's and Transformer Engine's kernels read and write
them; they are counts, not measurements:

- **norm** (RMSNorm or LayerNorm over h): forward reads x and writes y, 4h bytes per token;
  backward reads x and dy and writes dx, 6h.
- **residual add**: forward reads two and writes one, 6h; backward passes the gradient on
  (counted once with the norm's dx accumulation: 4h).
- **rotary** on q and k: read and write each, forward and backward, 4·(q + kv) bytes per token.
- **MLP activation**: SwiGLU reads gate and up and writes their product (6f forward) and reads
  three and writes two in the backward (10f); GeLU 4f and 6f. f is the local MLP width.
- **dropout**: reads and writes h and a 1-byte mask, forward and backward (5h each).
- **compiled** (``torch.compile``): a residual add fuses into the norm that follows it, one
  kernel reading both inputs and writing the sum and the normalised output (8h each way).
- **loss**: the logits cast to fp32, log-softmax and its backward, cast back: 32 bytes per
  logit (2 + 4, 4 + 4, 4 + 4 + 4, 4 + 2), over the local vocabulary V/tp.
- **optimizer**: AdamW reads and writes the fp32 master weight and both moments and reads the
  gradient (24 + g bytes per parameter: 28 for fp32 gradients, the fused kernel's count), the
  gradient norm reads the gradients and zeroing writes them (2g), and a 16-bit copy of the
  weight is written when the master is separate (+2).

>>> layer_bytes_per_token(hidden=4096, q_dim=4096, kv_dim=1024, ffn=14336, mlp="swiglu",
...                       dropout=False)
(188416.0, 245760.0)
"""

from __future__ import annotations

from ..units import choice

#: Bytes per logit the loss moves, forward and backward (module docstring).
LOSS_BYTES_PER_LOGIT = 32


def layer_bytes_per_token(*, hidden: int, q_dim: int, kv_dim: int, ffn: int, mlp: str,
                          dropout: bool, hidden_split: int = 1,
                          compiled: bool = False) -> tuple[float, float]:
    """(forward, backward) bytes one token moves through one layer's memory-bound ops (module
    docstring). ``q_dim``, ``kv_dim`` and ``ffn`` are the widths on this GPU (after tp);
    ``hidden_split`` divides the h-wide ops (tp with sequence parallelism, where each rank
    normalises its share of the tokens; without it every tensor-parallel rank repeats them)."""
    mlp = choice("mlp", mlp, ("swiglu", "gelu"))
    h = hidden / hidden_split
    act_f, act_b = (6 * ffn, 10 * ffn) if mlp == "swiglu" else (4 * ffn, 6 * ffn)
    drop = 2 * 5 * h if dropout else 0.0
    rotary = 4 * (q_dim + kv_dim)
    if compiled:  # each residual add fused into the norm after it: one pass of 8h each way
        return 2 * 8 * h + rotary + act_f + drop, 2 * 8 * h + rotary + act_b + drop
    forward = 2 * 4 * h + 2 * 6 * h + rotary + act_f + drop
    backward = 2 * 6 * h + 2 * 4 * h + rotary + act_b + drop
    return forward, backward


def loss_bytes_per_token(vocab_local: int) -> int:
    """Bytes one token's loss moves over ``vocab_local`` logits (V/tp), forward and backward."""
    return LOSS_BYTES_PER_LOGIT * vocab_local


def optimizer_bytes_per_param(*, grad_bytes: int, master: bool) -> int:
    """Bytes the optimizer step moves per parameter it updates: AdamW reads and writes the fp32
    weight and both moments (24) and reads the gradient (``grad_bytes``); the gradient norm for
    clipping reads it again and zeroing it writes it (2 × ``grad_bytes``); a 16-bit weight is
    written when the fp32 master is a separate copy (2)."""
    return 24 + 3 * grad_bytes + (2 if master else 0)
