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
from .hf_families import hf_family, norm_keeps
from .kernels import (DEFAULT_LOSS_CHUNKS, FP32_BYTES, LOSS_KINDS, MASK_BYTES, STAT_BYTES,
                      _kernels, loss_problems)
from ..model.shape import ModelShape
from ..problems import check
from ..units import Bytes, choice, positive_int


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
                       autocast: bool = False, implementation: str | None = None) -> LayerActivations:
    """The rotary embedding's cos and sin tables, saved once per forward pass and shared by
    every layer (empty for learned positions).

    Each is s × head_dim in the residual stream's format (the reference model and Hugging
    Face's ``LlamaRotaryEmbedding`` cast them to the hidden states' dtype: fp32 under
    autocast); the multiplies by them save only the tables (Su et al. 2021's rotation).
    Hugging Face's code for some families keeps them otherwise
    (:data:`~trainmath.memory.hf_families.HF_FAMILIES`' ``rotary``).
    """
    s = positive_int("s (sequence length)", s)
    cp = positive_int("cp (context-parallel size)", cp)
    family, _ = _kernels(implementation, None)
    return _rotary(model, Split(s, 1, cp=cp),
                   Kernels(family=family, value_bytes=positive_int("value_bytes", value_bytes),
                           autocast=bool(autocast)))


@lru_cache(maxsize=4096)  # pure; the planner asks again for each ZeRO stage
def _rotary(model: ModelShape, sp: Split, k: Kernels) -> LayerActivations:
    """:func:`rotary_activations` on checked inputs (the micro-batch does not matter: one pair
    of tables per forward pass)."""
    if model.positions:
        return LayerActivations(())
    r = FP32_BYTES if k.autocast else k.value_bytes
    width, pairs = model.rotary_width, 1  # partial rotary: its width
    if k.family == "hf":
        fam = hf_family(model.hf_family)
        r = FP32_BYTES if fam.rotary == "fp32" else r
        width = width // 2 if fam.rotary == "half" else width
        pairs = fam.rotary_pairs if model.local_span and model.global_every else 1
    table = Bytes(r * Fraction(sp.seq_len, sp.cp) * width)
    both = (Saved("rotary", "cos table (s × head_dim)", table),
            Saved("rotary", "sin table (s × head_dim)", table))
    if pairs == 1:
        return LayerActivations(both)
    return LayerActivations(both + (Saved("rotary", "cos table of the local layers", table),
                                    Saved("rotary", "sin table of the local layers", table)))


def output_activations(model: ModelShape, s: int, b: int, *, tp: int = 1,
                       sequence_parallel: bool = False, cp: int = 1, value_bytes: int = 2,
                       stat_bytes: int = STAT_BYTES, implementation: str | None = None,
                       autocast: bool = False, loss: str = "standard",
                       loss_chunks: int | None = None) -> LayerActivations:
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

    ``loss`` is one of :data:`~trainmath.memory.kernels.LOSS_KINDS` (:mod:`trainmath.memory.loss`):
    a "chunked" loss saves the same tensors, its log-softmax in ``loss_chunks`` pieces, and
    one count of the targets per chunk (``nll_loss`` keeps its ``total_weight``); Liger's
    "fused" loss saves neither the LM head's input nor the log-softmax nor the targets, but the
    gradients it computed in the forward (``ctx.save_for_backward(grad_input, grad_weight,
    ...)``): the LM head input's, in the input's format, and its weight's, in the weight's
    (``torch.zeros_like(weight)``; Liger's default ``accum_dtype=None``).
    """
    s, b, tp, cp = _check_split(s, b, tp, cp)
    family, _ = _kernels(implementation, None)
    check(loss_problems(choice("loss", loss, LOSS_KINDS), loss_chunks, tp=tp, seq_len=s))
    chunks = loss_chunks or (DEFAULT_LOSS_CHUNKS if loss == "chunked" else 1)
    return _output(model, Split(s, b, tp, bool(sequence_parallel), cp),
                   Kernels(family=family, value_bytes=positive_int("value_bytes", value_bytes),
                           stat_bytes=positive_int("stat_bytes", stat_bytes),
                           autocast=bool(autocast)), loss, chunks)


@lru_cache(maxsize=4096)  # pure; the planner asks again for each ZeRO stage
def _output(model: ModelShape, sp: Split, k: Kernels, loss: str = "standard", chunks: int = 1,
            weight_bytes: int | None = None) -> LayerActivations:
    """:func:`output_activations` on checked inputs (``weight_bytes``: the LM head weight's
    format, for Liger's saved weight gradient; default the compute format)."""
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
    if family == "hf":  # as its layers' norms keep it (trainmath.memory.hf_families)
        size, offset = norm_keeps(hf_family(model.hf_family), autocast)
        out.append(Saved("output", f"normalised input of the final {norm}, for its weight",
                         Bytes((size or v) * width)))
        if offset:
            out.append(Saved("output", f"1 + weight of the final {norm} in fp32 (GemmaRMSNorm)",
                             Bytes(FP32_BYTES * h)))
    if loss == "fused":  # Liger: the LM head's gradients, computed in the forward, saved
        out.append(Saved("output", "gradient of the LM head's input, computed in the forward "
                         "(Liger)", Bytes(v * width)))
        out.append(Saved("output", "gradient of the LM head's weight, computed in the forward "
                         "(Liger)", Bytes((weight_bytes or v) * V * h)))
        return LayerActivations(tuple(out))
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
    if chunks > 1:
        out.append(Saved("output", f"count of the targets (fp32 scalar), one per chunk "
                         f"({chunks})", Bytes(4 * chunks)))
    else:
        out.append(Saved("output", "count of the targets (fp32 scalar)", Bytes(4)))
    return LayerActivations(tuple(out))
