"""What is saved for backward outside the decoder layers: the embedding's token ids (first
pipeline stage), the rotary tables every layer shares, and the final norm, LM head and loss
(last stage), tensor by tensor (Korthikanti et al. 2022, §4.3, generalised as
:mod:`trainmath.memory.activations` generalises §4.1).

>>> from trainmath.model.presets import preset
>>> output_activations(preset("llama-2-7b"), 2048, 1).total.n > 0
True
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

from .activations import Kernels, LayerActivations, Saved, Split, _check_split
from .kernels import FP32_BYTES, MASK_BYTES, STAT_BYTES, _kernels
from ..model.shape import ModelShape
from ..units import Bytes, positive_int


def input_activations(model: ModelShape, s: int, b: int, *, tp: int = 1,
                      sequence_parallel: bool = False, cp: int = 1, mask_bytes: int = MASK_BYTES) -> LayerActivations:
    """What the embedding saves, on the first pipeline stage, for one micro-batch.

    The token ids (int64, 8 bytes each: the lookup's backward scatters by them), the position
    ids when positions are learned (8 bytes per position, one row shared by the batch), and
    with dropout the embedding dropout mask: sbh/tp with sequence parallelism, Korthikanti et
    al. 2022 §4.3 (who count only the mask).
    """
    s, b, tp, cp = _check_split(s, b, tp, cp)
    return _input(model, Split(s, b, tp, bool(sequence_parallel), cp),
                  Kernels(mask_bytes=positive_int("mask_bytes", mask_bytes)))


@lru_cache(maxsize=4096)  # pure; the planner asks again for each ZeRO stage
def _input(model: ModelShape, sp: Split, k: Kernels) -> LayerActivations:
    """:func:`input_activations` on checked inputs."""
    tokens, rep = sp.tokens, sp.replicated
    out = [Saved("embedding", "token ids (int64)", Bytes(8 * tokens))]
    if model.positions:
        out.append(Saved("embedding", "position ids (int64, shared by the batch)",
                         Bytes(Fraction(8 * sp.seq_len, sp.cp))))
    if model.dropout:
        out.append(Saved("embedding", "embedding dropout mask",
                         Bytes(k.mask_bytes * tokens * model.hidden * rep)))
    return LayerActivations(tuple(out))


def rotary_activations(model: ModelShape, s: int, *, cp: int = 1, value_bytes: int = 2,
                       autocast: bool = False) -> LayerActivations:
    """The rotary embedding's cos and sin tables, saved once per forward pass and shared by
    every layer (empty for learned positions).

    Each is s × head_dim in the residual stream's format (the reference model and Hugging
    Face's ``LlamaRotaryEmbedding`` cast them to the hidden states' dtype: fp32 under
    autocast); the multiplies by them save only the tables (Su et al. 2021's rotation).
    """
    s = positive_int("s (sequence length)", s)
    cp = positive_int("cp (context-parallel size)", cp)
    return _rotary(model, Split(s, 1, cp=cp),
                   Kernels(value_bytes=positive_int("value_bytes", value_bytes),
                           autocast=bool(autocast)))


@lru_cache(maxsize=4096)  # pure; the planner asks again for each ZeRO stage
def _rotary(model: ModelShape, sp: Split, k: Kernels) -> LayerActivations:
    """:func:`rotary_activations` on checked inputs (the micro-batch does not matter: one pair
    of tables per forward pass)."""
    if model.positions:
        return LayerActivations(())
    r = FP32_BYTES if k.autocast else k.value_bytes
    table = Bytes(r * Fraction(sp.seq_len, sp.cp) * model.rotary_width)  # partial rotary
    return LayerActivations((Saved("rotary", "cos table (s × head_dim)", table),
                             Saved("rotary", "sin table (s × head_dim)", table)))


def output_activations(model: ModelShape, s: int, b: int, *, tp: int = 1,
                       sequence_parallel: bool = False, cp: int = 1, value_bytes: int = 2,
                       stat_bytes: int = STAT_BYTES, implementation: str | None = None,
                       autocast: bool = False) -> LayerActivations:
    """What the final norm, the LM head and the loss save, on the last stage, per micro-batch.

    Korthikanti et al. 2022 §4.3: the final norm's input and the output projection's input
    (2sbh/tp each with sequence parallelism) and the logits that the cross entropy keeps in
    fp32, 4sbV/tp (the LM head is split over the vocabulary). Measured with PyTorch
    (``F.cross_entropy(logits.float(), targets)``; validate/test_saved_tensors.py), the loss
    saves exactly one fp32 tensor over the vocabulary, its log-softmax, plus the int64
    targets and a 4-byte fp32 count of them; the 16-bit logits and their fp32 copy are not
    saved (they exist while the loss runs: :mod:`trainmath.memory.peak` counts them).

    Hugging Face's kernels (``implementation`` "hf-sdpa" or "hf-eager") save their final
    ``LlamaRMSNorm`` as its layers' norms do, and its loss (``ForCausalLMLoss`` in
    ``transformers/loss/loss_utils.py``) pads the labels by one position (``F.pad``) and takes
    ``labels[..., 1:].contiguous()``, which is the padded tensor itself when b = 1 (8(s + 1)
    bytes saved) and a copy otherwise (8bs). Under autocast the final norm keeps its fp32
    input, the LM head's input is autocast's 16-bit copy and its weight's 16-bit copy is saved.
    """
    s, b, tp, cp = _check_split(s, b, tp, cp)
    family, _ = _kernels(implementation, None)
    return _output(model, Split(s, b, tp, bool(sequence_parallel), cp),
                   Kernels(family=family, value_bytes=positive_int("value_bytes", value_bytes),
                           stat_bytes=positive_int("stat_bytes", stat_bytes),
                           autocast=bool(autocast)))


@lru_cache(maxsize=4096)  # pure; the planner asks again for each ZeRO stage
def _output(model: ModelShape, sp: Split, k: Kernels) -> LayerActivations:
    """:func:`output_activations` on checked inputs."""
    tokens, rep, tp = sp.tokens, sp.replicated, sp.tp
    s, b = sp.seq_len, sp.micro_batch
    family, autocast, stat_bytes = k.family, k.autocast, k.stat_bytes
    h, V, v = model.hidden, model.vocab, k.value_bytes
    r = FP32_BYTES if autocast else v
    stats = 2 if model.norm == "layernorm" else 1
    norm = "LayerNorm" if model.norm == "layernorm" else "RMSNorm"
    width = tokens * h * rep
    out = []
    if family == "hf":
        kept = "the fp32 input" if autocast else "fp32 copy of the input"
        out.append(Saved("output", f"{kept} of the final {norm}", Bytes(FP32_BYTES * width)))
    else:
        out.append(Saved("output", f"input to the final {norm}", Bytes(r * width)))
    out.append(Saved("output", f"statistics of the final {norm} (per token)",
                     Bytes(stat_bytes * stats * tokens * rep), statistic=True))
    if family == "hf":
        out.append(Saved("output", f"normalised input of the final {norm}, for its weight",
                         Bytes((FP32_BYTES if autocast else v) * width)))
    out.append(Saved("output", "input to the output projection (LM head)"
                     + (", autocast's 16-bit copy" if autocast else ""), Bytes(v * width)))
    if autocast:
        out.append(Saved("output", "16-bit copy of the LM head's weight (autocast)",
                         Bytes(Fraction(2 * V * h, tp)), weight_copy=True))
    if model.final_softcap:  # cap·tanh(logits / cap) (Gemma 2): tanh keeps its output
        out.append(Saved("output", "tanh of the logits, soft-capped (16-bit over the vocabulary)",
                         Bytes(v * tokens * V / tp)))
    out.append(Saved("output", "log-softmax of the logits, fp32 over the vocabulary",
                     Bytes(FP32_BYTES * tokens * V / tp)))
    if family == "hf":
        labels = 8 * b * (s + 1) if b == 1 else 8 * b * s
        out.append(Saved("output", "labels padded by one (int64), or their shifted copy when b > 1",
                         Bytes(labels)))
    else:
        out.append(Saved("output", "targets (int64)", Bytes(8 * tokens)))
    out.append(Saved("output", "count of the targets (fp32 scalar)", Bytes(4)))
    return LayerActivations(tuple(out))
