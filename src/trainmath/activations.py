"""Activation memory: the tensors a transformer layer saves for its backward pass.

Korthikanti et al. 2022, *Reducing Activation Recomputation in Large Transformer Models*, §4.1,
eq. 1: with 16-bit activations and 1-byte dropout masks, one GPT-style layer (multi-head
attention that materialises the s×s scores, a GeLU MLP of width 4h, two LayerNorms, dropout)
saves

    sbh(34 + 5as/h)  bytes

for sequence length s, micro-batch b, hidden size h and a heads. :data:`KORTHIKANTI_LAYER` lists
the tensors behind the 34 and the 5, as §4.1 derives them; :func:`layer_activation_bytes` is eq. 1.

:func:`layer_activations` derives the same count tensor by tensor for any shape of
:mod:`trainmath.models` (GeLU or SwiGLU, MHA or GQA, LayerNorm or RMSNorm, dropout or not,
eager or FlashAttention) with tensor, sequence and context parallelism and selective or full
recomputation; for GPT shapes it reproduces every row of Korthikanti et al.'s Table 2, and
validate/test_saved_tensors.py checks it byte for byte against what PyTorch saves.
:func:`stage_activations` adds the pipeline schedule (§4.2.3) and the embedding and output
layer (§4.3).

Parallel sizes are named as :class:`trainmath.parallelism.Layout` names them: ``tp``, ``cp``,
``pp`` and ``v`` (model chunks per pipeline device); the papers write t and p. Each public
function checks its inputs and calls an unchecked core (``_layer``, ``_input``, ``_output``,
``_in_flight``, ``_stage``), which :func:`trainmath.runs.estimate` calls directly once
:class:`trainmath.runs.Run` has checked everything.
"""

from __future__ import annotations

from dataclasses import dataclass

from fractions import Fraction

from .models import ModelShape
from .units import Bytes, choice, positive_int


@dataclass(frozen=True)
class SavedTensor:
    """One tensor saved for backward: ``sbh`` bytes per s·b·h, ``as2b`` bytes per a·s²·b.

    ``autocast_fp32`` marks a tensor that PyTorch's autocast keeps in fp32 where a Megatron-style
    half-precision model keeps it in 16 bits: the output of an op on autocast's CUDA float32
    list (softmax), or the residual stream of a model whose parameters stay fp32 under autocast
    (what the LayerNorms take in). See :func:`trainmath.precision.activation_coefficients`.
    """

    block: str
    name: str
    sbh: int = 0
    as2b: int = 0
    autocast_fp32: bool = False


#: The tensors of one layer, Korthikanti et al. 2022, §4.1 (16-bit values, 1-byte masks).
#:
#: :meta hide-value:
KORTHIKANTI_LAYER: tuple[SavedTensor, ...] = (
    SavedTensor("attention", "input to the Q, K, V projections", sbh=2),
    SavedTensor("attention", "Q and K, inputs to QKᵀ", sbh=4),
    SavedTensor("attention", "softmax output", as2b=2, autocast_fp32=True),
    SavedTensor("attention", "softmax dropout mask", as2b=1),
    SavedTensor("attention", "dropout output, input to attention over V", as2b=2),
    SavedTensor("attention", "V, input to attention over V", sbh=2),
    SavedTensor("attention", "input to the output projection", sbh=2),
    SavedTensor("attention", "attention dropout mask", sbh=1),
    SavedTensor("MLP", "input to the first linear layer", sbh=2),
    SavedTensor("MLP", "input to GeLU (width 4h)", sbh=8),
    SavedTensor("MLP", "input to the second linear layer (width 4h)", sbh=8),
    SavedTensor("MLP", "MLP dropout mask", sbh=1),
    SavedTensor("LayerNorm", "input to the first LayerNorm", sbh=2, autocast_fp32=True),
    SavedTensor("LayerNorm", "input to the second LayerNorm", sbh=2, autocast_fp32=True),
)

#: The 34 of eq. 1: bytes per s·b·h summed over the tensors above.
SBH_COEFFICIENT = sum(t.sbh for t in KORTHIKANTI_LAYER)
#: The 5 of eq. 1: bytes per a·s²·b (the attention scores, their dropout mask and output).
AS2B_COEFFICIENT = sum(t.as2b for t in KORTHIKANTI_LAYER)


def block_coefficients(block: str) -> tuple[int, int]:
    """(bytes per sbh, bytes per as²b) of one block: "attention", "MLP" or "LayerNorm".

    Korthikanti et al. 2022, §4.1, block by block (:data:`KORTHIKANTI_LAYER`).
    """
    tensors = [t for t in KORTHIKANTI_LAYER if t.block == block]
    if not tensors:
        blocks = sorted({t.block for t in KORTHIKANTI_LAYER})
        raise ValueError(f"unknown block {block!r}; accepted: {', '.join(blocks)}")
    return sum(t.sbh for t in tensors), sum(t.as2b for t in tensors)


def layer_activation_bytes(s: int, b: int, h: int, a: int) -> Bytes:
    """Bytes one GPT-style layer saves for backward: sbh(34 + 5as/h).

    Korthikanti et al. 2022, §4.1, eq. 1.

    >>> layer_activation_bytes(s=2048, b=1, h=4096, a=32).n
    956301312
    """
    s = positive_int("s (sequence length)", s)
    b = positive_int("b (micro-batch size)", b)
    h = positive_int("h (hidden size)", h)
    a = positive_int("a (attention heads)", a)
    return Bytes(SBH_COEFFICIENT * s * b * h + AS2B_COEFFICIENT * a * s * s * b)


def activation_bytes(model: ModelShape, s: int, b: int) -> Bytes:
    """Korthikanti et al. 2022's eq. 1 (§4.1) times the layers, for ``model``'s h, a and L.

    Eq. 1 counts a GPT-style layer; for other architectures (SwiGLU, GQA, no dropout,
    FlashAttention) it is an estimate, not a count: :func:`layer_activations` counts them.
    """
    return layer_activation_bytes(s, b, model.hidden, model.heads) * model.layers


# ---------------------------------------------------------------------------------------
# Any shape, tensor by tensor
# ---------------------------------------------------------------------------------------

#: How attention runs: "eager" materialises the s×s scores; "flash" is FlashAttention (Dao et al.
#: 2022), which never stores them.
ATTENTION_KINDS = ("eager", "flash")
#: Activation recomputation, the one vocabulary of the library (Korthikanti et al. 2022, §5):
#: "none" keeps every saved tensor; "selective" recomputes the attention core (QKᵀ, softmax,
#: dropout, attention over V) in the backward pass; "full" keeps only each layer's input and
#: reruns the whole layer forward. :mod:`trainmath.compute` and :mod:`trainmath.parallelism`
#: use these names for the FLOPs and traffic recomputation adds.
RECOMPUTE_KINDS = ("none", "selective", "full")
#: How the MLP's activation runs: "eager" is separate PyTorch ops (SwiGLU saves the gate and
#: up outputs, the SiLU output and their product, four tensors ffn wide); "fused" is one kernel
#: that saves its input and recomputes in the backward (Megatron-LM's ``SwiGLUFunction`` in
#: ``megatron/core/fusions/fused_bias_swiglu.py``, Transformer Engine's ``LayerNormMLP``):
#: SwiGLU then saves the gate-and-up output and the down projection's input, three ffn wide.
#: A GeLU MLP saves two either way.
MLP_KERNELS = ("eager", "fused")
#: Bytes of one dropout-mask entry (a bool mask, as PyTorch keeps it).
MASK_BYTES = 1
#: Bytes of one norm statistic (fp32, as the CUDA LayerNorm and RMSNorm kernels keep them).
STAT_BYTES = 4
#: Kernel families: "megatron" is the kernel set Megatron-LM runs with Transformer Engine (fused
#: norms that save their 16-bit input and fp32 statistics, 1-byte dropout masks, softmax kept in
#: the compute format); "hf" is Hugging Face transformers' ``LlamaForCausalLM`` and
#: ``MistralForCausalLM`` (see :data:`IMPLEMENTATIONS`).
KERNEL_FAMILIES = ("megatron", "hf")
#: Bytes of an fp32 value: the residual stream under autocast, softmax in fp32, the loss's
#: log-softmax, FlashAttention's log-sum-exp.
FP32_BYTES = 4


@dataclass(frozen=True)
class Implementation:
    """A named set of kernels: which training code's saved tensors a count describes.

    ``family`` is one of :data:`KERNEL_FAMILIES` and ``attention`` one of
    :data:`ATTENTION_KINDS`. Every profile is checked against what that code saves in PyTorch
    (docs/_data/measurements.json, :mod:`trainmath.measured`), per layer and for the whole model.
    """

    name: str
    family: str
    attention: str
    description: str


#: The implementation profiles by name (``implementation=``; the command's ``--implementation``).
#:
#: :meta hide-value:
IMPLEMENTATIONS: dict[str, Implementation] = {
    i.name: i
    for i in (
        Implementation(
            "megatron-te", "megatron", "flash",
            "Megatron-LM with Transformer Engine, today's kernels: fused LayerNorm/RMSNorm that "
            "save their 16-bit input and fp32 statistics, FlashAttention (Q, K and V at their own "
            "widths, the output and an fp32 log-sum-exp; no s×s tensor), 1-byte dropout masks; "
            "SwiGLU eager or fused (mlp_kernel)",
        ),
        Implementation(
            "megatron-eager", "megatron", "eager",
            "the same kernels with unfused attention (Megatron-LM's core attention, Korthikanti "
            "et al. 2022 §4.1): K and V repeated to all heads, the softmax output kept in the "
            "compute format, its dropout mask and output",
        ),
        Implementation(
            "hf-sdpa", "hf", "flash",
            "Hugging Face transformers LlamaForCausalLM / MistralForCausalLM with "
            "attn_implementation='sdpa': LlamaRMSNorm keeps an fp32 copy of its input, a 16-bit "
            "copy of the normalised input and its output; SDPA runs a flash kernel with native "
            "grouped-query attention, except where Mistral's sliding-window mask is materialised "
            "(s at least the window): K and V repeated and a 16-bit s×s mask in every layer",
        ),
        Implementation(
            "hf-eager", "hf", "eager",
            "the same with attn_implementation='eager': K and V repeated to all heads, softmax in "
            "fp32 saved beside its 16-bit copy (eager_attention_forward in "
            "transformers/models/llama/modeling_llama.py)",
        ),
    )
}


def implementation(name: str) -> Implementation:
    """The implementation profile called ``name``; a ValueError lists the known ones."""
    return IMPLEMENTATIONS[choice("implementation", name, IMPLEMENTATIONS)]


@dataclass(frozen=True)
class Saved:
    """One tensor (one storage) saved for backward, with its bytes on one device.

    ``statistic`` marks the norms' per-token statistics (LayerNorm's mean and 1/σ, RMSNorm's
    1/rms): Korthikanti et al. 2022 §4.1 leave such small buffers out of their count.
    ``weight_copy`` marks the 16-bit copy of a weight that ``torch.autocast`` makes for a
    matrix multiply and saves for its backward: memory of the step, not an activation.
    """

    block: str
    name: str
    bytes: Bytes
    statistic: bool = False
    weight_copy: bool = False


@dataclass(frozen=True)
class LayerActivations:
    """The tensors one layer saves for backward on one device, for one micro-batch."""

    tensors: tuple[Saved, ...]

    @property
    def total(self) -> Bytes:
        """Every saved tensor: what ``saved_tensors_hooks`` counts (validate/test_saved_tensors.py)."""
        return sum((t.bytes for t in self.tensors), Bytes(0))

    @property
    def korthikanti(self) -> Bytes:
        """The count as Korthikanti et al. 2022 make it: without the norms' statistics (and
        without autocast's weight copies, which are not activations)."""
        return sum((t.bytes for t in self.tensors if not (t.statistic or t.weight_copy)), Bytes(0))

    @property
    def statistics(self) -> Bytes:
        """The norms' per-token statistics alone."""
        return sum((t.bytes for t in self.tensors if t.statistic), Bytes(0))

    @property
    def weight_copies(self) -> Bytes:
        """The 16-bit weight copies ``torch.autocast`` saves (zero without autocast)."""
        return sum((t.bytes for t in self.tensors if t.weight_copy), Bytes(0))

    def by_block(self) -> dict[str, Bytes]:
        """Bytes per block ("norms", "attention", "MLP", ...), statistics included."""
        blocks: dict[str, Bytes] = {}
        for t in self.tensors:
            blocks[t.block] = blocks.get(t.block, Bytes(0)) + t.bytes
        return blocks


def _divides(what: str, n: int, k: int, by: str) -> None:
    if n % k:
        raise ValueError(f"{what} {n} is not divisible by {by} {k}; accepted: a multiple of {k}")


def check_context_parallel(cp: int, attention: str) -> None:
    """Context parallelism is modelled with FlashAttention only: a ValueError names the pair."""
    if cp > 1 and attention != "flash":
        raise ValueError(
            f"context parallelism (cp = {cp}) is modelled with attention='flash' only "
            f"(ring attention never stores the s×s scores); got attention={attention!r}"
        )


def kernels_problem(model: ModelShape, family: str, *, tp: int = 1, sequence_parallel: bool = False,
                    cp: int = 1, recompute: str = "none", mlp_kernel: str = "eager") -> str | None:
    """What the "hf" kernel family cannot run, as a sentence, or None.

    Hugging Face's ``LlamaForCausalLM``, ``MistralForCausalLM`` and ``MixtralForCausalLM`` (whose
    MoE block has no shared experts) have RMSNorm, a SwiGLU MLP
    (eager), rotary positions and no dropout, and their training loop has no tensor, sequence or
    context parallelism and no selective recomputation (``gradient_checkpointing`` recomputes
    whole layers: ``recompute="full"``). The "megatron" family runs every shape and layout.
    """
    if family != "hf":
        return None
    wrong = []
    if model.moe and model.shared_experts:
        wrong.append(f"{model.name!r}, whose shared experts Mixtral's MoE block has not")
    if model.norm != "rmsnorm" or model.mlp != "swiglu" or model.dropout or model.positions:
        wrong.append(f"{model.name!r} has norm={model.norm!r}, mlp={model.mlp!r}, "
                     f"dropout={model.dropout}, positions={model.positions} (Llama and Mistral "
                     "have rmsnorm, swiglu, no dropout, rotary positions)")
    if tp > 1 or cp > 1 or sequence_parallel:
        wrong.append(f"tp = {tp}, cp = {cp}, sequence_parallel = {bool(sequence_parallel)} "
                     "(accepted: tp = cp = 1, no sequence parallelism)")
    if recompute == "selective":
        wrong.append("recompute 'selective' (accepted: none, or full, its gradient checkpointing)")
    if mlp_kernel != "eager":
        wrong.append(f"mlp_kernel {mlp_kernel!r} (accepted: eager)")
    if not wrong:
        return None
    return "Hugging Face's Llama/Mistral kernels cannot run " + "; ".join(wrong)


def _kernels(implementation_name: str | None, attention: str | None) -> tuple[str, str]:
    """(family, attention) from an implementation profile or a bare attention kind."""
    if implementation_name is None:
        return "megatron", choice("attention", "eager" if attention is None else attention,
                                  ATTENTION_KINDS)
    impl = implementation(implementation_name)
    if attention is not None and attention != impl.attention:
        raise ValueError(f"attention {attention!r} contradicts implementation {impl.name!r}, whose "
                         f"attention is {impl.attention!r}; give one of them")
    return impl.family, impl.attention


def layer_activations(
    model: ModelShape,
    s: int,
    b: int,
    *,
    tp: int = 1,
    sequence_parallel: bool = False,
    cp: int = 1,
    recompute: str = "none",
    attention: str | None = None,
    value_bytes: int = 2,
    mask_bytes: int = MASK_BYTES,
    stat_bytes: int = STAT_BYTES,
    mlp_kernel: str = "eager",
    implementation: str | None = None,
    autocast: bool = False,
) -> LayerActivations:
    """The tensors one layer of ``model`` saves for backward, on one device.

    Derived from what each operation keeps for its gradient (Korthikanti et al. 2022, §4.1,
    generalised to any shape of :mod:`trainmath.models`), for sequence length ``s`` and
    micro-batch ``b``, with ``value_bytes`` per activation (2: bf16/fp16), ``mask_bytes`` per
    dropout-mask entry (1: a bool mask) and ``stat_bytes`` per norm statistic (4: fp32, as
    the CUDA LayerNorm/RMSNorm kernels keep them). ``implementation`` names a profile of
    :data:`IMPLEMENTATIONS` (its kernels and its attention); without one, the Megatron-style
    kernels with ``attention`` ("eager" unless given).

    - **norms** save their input and per-token statistics; their output is the saved input of
      the next projections (one storage, counted once).
    - **attention**, ``attention="eager"``: Q, K and V (K and V repeated to all a heads first,
      as Megatron-LM and Hugging Face do for grouped-query attention), the softmax output
      (a·s² per sequence) and, with dropout, its mask and the dropped-out probabilities.
      ``attention="flash"`` (Dao et al. 2022, §3.1; Dao 2023, FlashAttention-2, which PyTorch's
      kernels follow): Q, K and V at their own widths (kv_heads heads for K and V), the output
      O and one fp32 log-sum-exp per head and token; no s×s tensor. With dropout the kernel keeps only its RNG seed and offset,
      which are not counted. The output projection's input is O (or, eager, the re-laid-out
      context), counted once.
    - **MLP**: GeLU saves its input and the second projection's input (2 × ffn wide). SwiGLU
      in eager PyTorch (``mlp_kernel="eager"``, what validate/test_saved_tensors.py measures)
      saves the gate and up outputs, the SiLU output and their product (4 × ffn wide); a fused
      SwiGLU (``mlp_kernel="fused"``, Megatron-LM, Transformer Engine) saves the gate-and-up
      output and the down projection's input (3 × ffn wide), see :data:`MLP_KERNELS`.
    - dropout after attention and after the MLP saves a mask of ``mask_bytes`` per value.

    **Hugging Face's kernels** (family "hf": ``LlamaRMSNorm`` and ``eager_attention_forward``
    in ``transformers/models/llama/modeling_llama.py``, ``sdpa_attention_forward`` in
    ``transformers/integrations/sdpa_attention.py``): ``LlamaRMSNorm`` computes
    ``hidden_states.to(torch.float32)``, which saves an fp32 copy of its input for the
    multiply by 1/rms, then ``self.weight * hidden_states.to(input_dtype)``, which saves the
    16-bit normalised input (besides its output, the projections' input). Eager attention runs
    ``softmax(..., dtype=torch.float32).to(query.dtype)``: the fp32 probabilities and their
    16-bit copy are both saved. SDPA gets no mask for causal attention (``is_causal``) and runs
    a flash kernel with native grouped-query attention (``use_gqa_in_sdpa``: no mask); a
    sliding window as long as the sequence or shorter is a mask it must materialise
    (``_ignore_causal_mask_sdpa`` in ``transformers/masking_utils.py``: ``kv_length >=
    local_attention_size``), and then K and V are repeated to all heads and PyTorch's SDPA
    converts the boolean mask to an additive 16-bit one (``torch.where``) that its kernel saves,
    b·s² values in every layer.

    **torch.autocast** over fp32 parameters (``autocast=True``, the ``amp`` recipe): the
    residual stream is fp32, so the norms keep fp32 inputs (4 bytes); autocast casts the input
    of every Linear to 16 bits for that Linear alone, so the Q, K and V projections save three
    copies of the normed input and gate and up two (one each for a fused QKV or a GeLU MLP);
    softmax runs in fp32 (autocast's float32 list) and its 16-bit copy feeds attention over V;
    and every Linear's 16-bit weight copy is saved for backward (``weight_copy``). These are
    the tensors :class:`SavedTensor` marks ``autocast_fp32`` for eq. 1's layer
    (:func:`trainmath.precision.activation_coefficients`: 38 and 7 for a GPT layer).

    Parallelism (Korthikanti et al. 2022 §4.2, Table 2, where the tensor-parallel size is
    written t): with tensor-parallel size ``tp`` the tensors inside the column/row-parallel
    region are split tp ways; the norms, their outputs (the projections' inputs) and the
    dropout masks are replicated unless ``sequence_parallel`` splits them along the sequence.
    ``cp`` (context parallelism: Liu et al. 2023, Ring Attention; Megatron-Core's context
    parallel) splits every tensor along the sequence; it is modelled with ``attention="flash"``
    only, since ring attention never materialises the s×s scores.

    Recomputation (§5, :data:`RECOMPUTE_KINDS`): ``"selective"`` recomputes the attention core
    and so drops the s×s tensors; ``"full"`` keeps only the layer's input (2sbh, split by tp
    only with sequence parallelism). For a GPT-style shape with eager attention,
    :attr:`LayerActivations.korthikanti` equals every row of Table 2 exactly
    (tests/test_activations.py).
    """
    s, b, tp, cp = _check_split(s, b, tp, cp)
    value_bytes = positive_int("value_bytes", value_bytes)
    mask_bytes = positive_int("mask_bytes", mask_bytes)
    stat_bytes = positive_int("stat_bytes", stat_bytes)
    recompute = choice("recompute", recompute, RECOMPUTE_KINDS)
    family, attention = _kernels(implementation, attention)
    mlp_kernel = choice("mlp_kernel", mlp_kernel, MLP_KERNELS)
    _divides("heads", model.heads, tp, "tp (tensor-parallel size)")
    _divides("kv_heads", model.kv_heads, tp, "tp (tensor-parallel size)")
    _divides("ffn", model.ffn, tp, "tp (tensor-parallel size)")
    if sequence_parallel:
        _divides("s (sequence length)", s, tp * cp, "tp × cp")
    elif cp > 1:
        _divides("s (sequence length)", s, cp, "cp (context-parallel size)")
    check_context_parallel(cp, attention)
    problem = kernels_problem(model, family, tp=tp, sequence_parallel=sequence_parallel, cp=cp,
                              recompute=recompute, mlp_kernel=mlp_kernel)
    if problem:
        raise ValueError(problem)
    return _layer(model, s, b, tp, bool(sequence_parallel), cp, recompute, attention,
                  value_bytes, mask_bytes, stat_bytes, mlp_kernel, family, bool(autocast))


def _projections(model: ModelShape, block: str) -> int:
    """Linear layers that read one norm's output: Q, K and V (one fused matrix for GPT-style
    shapes, :func:`trainmath.models.param_shapes`), or the MLP's first one (gate and up: two)."""
    if model.mlp == "gelu":
        return 1
    return 3 if block == "attention" else 2


def _layer(model: ModelShape, s: int, b: int, tp: int, sequence_parallel: bool, cp: int,
           recompute: str, attention: str, value_bytes: int, mask_bytes: int,
           stat_bytes: int, mlp_kernel: str = "eager", family: str = "megatron",
           autocast: bool = False) -> LayerActivations:
    """:func:`layer_activations` on inputs already checked (by it, or by ``estimate.Run``)."""
    h, a, f, kv = model.hidden, model.heads, model.ffn, model.kv_dim
    q = model.q_dim  # a · head_dim: h, unless the shape gives its head width (Gemma)
    tokens = Fraction(s * b, cp)  # tokens of this micro-batch on this device
    split = Fraction(1, tp)  # share of a tensor-parallel-split tensor
    rep = split if sequence_parallel else Fraction(1)  # share of a replicated tensor
    v, m = value_bytes, mask_bytes
    r = FP32_BYTES if autocast else v  # the residual stream: fp32 parameters under autocast
    hf = family == "hf"

    def saved(block: str, name: str, n: Fraction, statistic: bool = False) -> Saved:
        return Saved(block, name, Bytes(n), statistic)

    if recompute == "full":
        return LayerActivations((saved("layer", "layer input (checkpoint)", r * tokens * h * rep),))

    stats_per_norm = 2 if model.norm == "layernorm" else 1
    stat_name = "mean and 1/σ" if model.norm == "layernorm" else "1/rms"
    norm_name = "LayerNorm" if model.norm == "layernorm" else "RMSNorm"
    out: list[Saved] = []

    def norm(which: str, block: str, reads: str) -> None:
        """A norm's saved tensors and its output as the next projections' input(s)."""
        width = tokens * h * rep
        if hf:
            kept = "the fp32 input" if autocast else "fp32 copy of the input (.to(torch.float32))"
            out.append(saved("norms", f"{kept} of the {which} {norm_name}", FP32_BYTES * width))
        else:
            out.append(saved("norms", f"input to the {which} {norm_name}", r * width))
        out.append(saved("norms", f"{stat_name} of the {which} {norm_name} (per token)",
                         stat_bytes * stats_per_norm * tokens * rep, statistic=True))
        if hf:  # self.weight * hidden_states.to(input_dtype) saves the normalised input
            normed = "fp32 normalised input" if autocast else "16-bit normalised input (.to(input_dtype))"
            out.append(saved("norms", f"{normed} of the {which} {norm_name}, for its weight",
                             (FP32_BYTES if autocast else v) * width))
        if autocast:  # each Linear casts its own input
            n = _projections(model, block)
            out.append(saved(block, f"16-bit copies of the {which} {norm_name}'s output, one per "
                                    f"projection that reads it ({n})", n * v * width))
        else:
            out.append(saved(block, f"input to {reads}", v * width))

    def weights(block: str, params: int) -> None:
        if autocast:
            out.append(Saved(block, "16-bit copies of its Linear weights (autocast)",
                             Bytes(Fraction(2 * params, tp)), weight_copy=True))

    # attention
    norm("first", "attention", "the Q, K, V projections")
    window_mask = (hf and attention == "flash" and model.sliding_window
                   and s >= model.sliding_window)
    if attention == "eager":
        out.append(saved("attention", "Q, input to QKᵀ", v * tokens * q * split))
        rep_kv = " (repeated to all a heads)" if model.kv_heads < a else ""
        out.append(saved("attention", f"K{rep_kv}, input to QKᵀ", v * tokens * q * split))
        out.append(saved("attention", f"V{rep_kv}, input to attention over V", v * tokens * q * split))
        if recompute == "none":
            scores = Fraction(a * s * s * b) * split  # a·s² per sequence (cp = 1 here)
            fp32_softmax = hf or autocast  # softmax(dtype=float32), or autocast's float32 list
            if fp32_softmax:
                out.append(saved("attention", "softmax output in fp32 (s×s per head)",
                                 FP32_BYTES * scores))
            else:
                out.append(saved("attention", "softmax output (s×s per head)", v * scores))
            if model.dropout:
                out.append(saved("attention", "softmax dropout mask (s×s per head)", m * scores))
                out.append(saved("attention", "dropout output, input to attention over V"
                                 + (" (its 16-bit copy)" if fp32_softmax else ""), v * scores))
            elif fp32_softmax:
                out.append(saved("attention", "16-bit copy of the probabilities, input to "
                                              "attention over V", v * scores))
        out.append(saved("attention", "context, input to the output projection", v * tokens * q * split))
    else:
        kv_width = q if window_mask else kv
        rep_kv = " repeated to all a heads" if window_mask and model.kv_heads < a else " (kv_heads heads)"
        out.append(saved("attention", "Q", v * tokens * q * split))
        out.append(saved("attention", f"K{rep_kv}", v * tokens * kv_width * split))
        out.append(saved("attention", f"V{rep_kv}", v * tokens * kv_width * split))
        if window_mask:
            out.append(saved("attention", "sliding-window mask, additive, 16-bit (b·s×s)",
                             v * b * s * s))
        out.append(saved("attention", "log-sum-exp (fp32 per head and token)",
                         FP32_BYTES * tokens * a * split))
        out.append(saved("attention", "output O, input to the output projection", v * tokens * q * split))
    if model.dropout:
        out.append(saved("attention", "attention dropout mask", m * tokens * h * rep))
    weights("attention", 2 * h * q + 2 * h * kv)

    # MLP
    if model.moe:
        norm("second", "MLP", "the router and the experts' dispatch")
        out.extend(_moe_block(model, tokens, tp, rep, split, v, mlp_kernel, hf))
        return LayerActivations(tuple(out))
    norm("second", "MLP", "the first projection(s)")
    if model.mlp == "gelu":
        out.append(saved("MLP", "input to GeLU (ffn wide)", v * tokens * f * split))
        out.append(saved("MLP", "input to the second projection (ffn wide)", v * tokens * f * split))
    elif mlp_kernel == "fused":  # one kernel saves its input, recomputes SiLU in the backward
        out.append(saved("MLP", "gate and up outputs, input to the fused SwiGLU (2 × ffn wide)",
                         v * tokens * 2 * f * split))
        out.append(saved("MLP", "SwiGLU output, input to the down projection (ffn wide)",
                         v * tokens * f * split))
    else:
        out.append(saved("MLP", "gate projection output, input to SiLU (ffn wide)", v * tokens * f * split))
        out.append(saved("MLP", "up projection output (ffn wide)", v * tokens * f * split))
        out.append(saved("MLP", "SiLU output (ffn wide)", v * tokens * f * split))
        out.append(saved("MLP", "SiLU(gate) × up, input to the down projection (ffn wide)",
                         v * tokens * f * split))
    if model.dropout:
        out.append(saved("MLP", "MLP dropout mask", m * tokens * h * rep))
    weights("MLP", (2 if model.mlp == "gelu" else 3) * h * f)
    return LayerActivations(tuple(out))


#: Bytes of a routing index (int64, as ``torch.topk`` returns it).
INDEX_BYTES = 8


def _mlp_intermediates(model: ModelShape, copies: Fraction, width: int, split: Fraction, v: int,
                       mlp_kernel: str, who: str) -> list[Saved]:
    """The ffn-wide tensors an MLP of ``width`` saves for ``copies`` token copies."""
    n = 2 if model.mlp == "gelu" else (3 if mlp_kernel == "fused" else 4)
    kind = "GeLU" if model.mlp == "gelu" else ("fused gated" if mlp_kernel == "fused" else "gated")
    return [Saved("MLP", f"{who}: {kind} MLP intermediates ({n} × expert ffn wide)",
                  Bytes(n * v * copies * width * split))]


def _moe_block(model: ModelShape, tokens: Fraction, tp: int, rep: Fraction, split: Fraction,
               v: int, mlp_kernel: str, hf: bool = False) -> list[Saved]:
    """What a mixture-of-experts MLP saves for backward, after the norm (Megatron-Core's
    ``MoELayer``: router, token dispatcher, grouped experts), assuming balanced routing.

    The router's softmax output (fp32, E per token; Megatron-Core keeps routing in fp32 with
    ``--moe-router-dtype fp32``, Hugging Face's ``MixtralTopKRouter`` runs ``softmax(...float())``),
    the top-k indices (int64) and routing weights (fp32, k per token); the dispatched copies of
    the tokens, k per token, the experts' input (b·s·k·h); each copy's expert MLP intermediates
    at the expert width (as a dense MLP's, :data:`MLP_KERNELS`), split by tp (expert tensor
    parallelism = tp); the experts' outputs, which the weighted combine multiplies by the
    routing weights (b·s·k·h); shared experts as a dense MLP on every token. With balanced
    routing a device's experts see b·s·k token copies whatever ep is
    (:func:`trainmath.moe.expert_tokens`). The router and dispatch tensors are split by tp only
    with sequence parallelism; the dispatched tokens are whole on each tensor-parallel rank.

    Hugging Face's ``MixtralForCausalLM`` (transformers 5: ``MixtralTopKRouter`` in
    ``transformers/models/mixtral/modeling_mixtral.py`` and its default experts implementation,
    ``grouped_mm_experts_forward`` in ``transformers/integrations/moe.py``) saves more: the sum
    of each token's top-k weights that normalises them (fp32) beside the top-k weights
    themselves (the in-place division keeps a copy); the sort of the token copies by expert and
    the index of each copy's token (int64, one each per copy), the per-expert offsets of the
    grouped matrix multiply (int32, E), each copy's routing weight gathered (fp32) and the
    inverse permutation that restores the order (int64 per copy). Every tensor is per token,
    per token copy or per expert, so the total does not depend on how the router spreads the
    tokens (validate/test_moe_saved.py measures it with real routing).
    """
    h, k, E, w = model.hidden, model.experts_per_token, model.experts, model.expert_width
    copies = tokens * k
    out = [
        Saved("MLP", "router probabilities, fp32 (E per token)", Bytes(FP32_BYTES * tokens * E * rep)),
        Saved("MLP", "top-k expert indices, int64 (k per token)", Bytes(INDEX_BYTES * copies * rep)),
        Saved("MLP", "top-k routing weights, fp32 (k per token)", Bytes(FP32_BYTES * copies * rep)),
        Saved("MLP", "dispatched token copies, the experts' input (k × h per token)",
              Bytes(v * copies * h)),
    ]
    out += _mlp_intermediates(model, copies, w, split, v, mlp_kernel, "routed experts")
    out.append(Saved("MLP", "expert outputs, input to the weighted combine (k × h per token)",
                     Bytes(v * copies * h)))
    if hf:
        out += [
            Saved("MLP", "sum of each token's top-k weights, fp32 (their normalisation)",
                  Bytes(FP32_BYTES * tokens * rep)),
            Saved("MLP", "sort of the token copies by expert, and each copy's token, int64",
                  Bytes(2 * INDEX_BYTES * copies)),
            Saved("MLP", "offsets of the grouped matrix multiply, int32 (one per expert)",
                  Bytes(4 * E)),
            Saved("MLP", "routing weight of each copy, gathered, fp32", Bytes(FP32_BYTES * copies)),
            Saved("MLP", "inverse permutation back to token order, int64 (per copy)",
                  Bytes(INDEX_BYTES * copies)),
        ]
    if model.shared_experts:
        out += _mlp_intermediates(model, tokens, model.shared_experts * w, split, v, mlp_kernel,
                                  "shared experts")
    return out


def _check_split(s: int, b: int, tp: int, cp: int) -> tuple[int, int, int, int]:
    """s, b, tp and cp checked to be positive whole numbers."""
    return (positive_int("s (sequence length)", s), positive_int("b (micro-batch size)", b),
            positive_int("tp (tensor-parallel size)", tp),
            positive_int("cp (context-parallel size)", cp))


def input_activations(model: ModelShape, s: int, b: int, *, tp: int = 1,
                      sequence_parallel: bool = False, cp: int = 1, mask_bytes: int = MASK_BYTES) -> LayerActivations:
    """What the embedding saves, on the first pipeline stage, for one micro-batch.

    The token ids (int64, 8 bytes each: the lookup's backward scatters by them), the position
    ids when positions are learned (8 bytes per position, one row shared by the batch), and
    with dropout the embedding dropout mask: sbh/tp with sequence parallelism, Korthikanti et
    al. 2022 §4.3 (who count only the mask).
    """
    s, b, tp, cp = _check_split(s, b, tp, cp)
    return _input(model, s, b, tp, bool(sequence_parallel), cp, positive_int("mask_bytes", mask_bytes))


def _input(model: ModelShape, s: int, b: int, tp: int, sequence_parallel: bool, cp: int,
           mask_bytes: int) -> LayerActivations:
    """:func:`input_activations` on checked inputs."""
    tokens = Fraction(s * b, cp)
    rep = Fraction(1, tp) if sequence_parallel else Fraction(1)
    out = [Saved("embedding", "token ids (int64)", Bytes(8 * tokens))]
    if model.positions:
        out.append(Saved("embedding", "position ids (int64, shared by the batch)", Bytes(Fraction(8 * s, cp))))
    if model.dropout:
        out.append(Saved("embedding", "embedding dropout mask", Bytes(mask_bytes * tokens * model.hidden * rep)))
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
    return _rotary(model, s, cp, positive_int("value_bytes", value_bytes), bool(autocast))


def _rotary(model: ModelShape, s: int, cp: int, value_bytes: int, autocast: bool) -> LayerActivations:
    """:func:`rotary_activations` on checked inputs."""
    if model.positions:
        return LayerActivations(())
    r = FP32_BYTES if autocast else value_bytes
    table = Bytes(r * Fraction(s, cp) * model.rotary_width)  # partial rotary: fewer dims
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
    saved (they exist while the loss runs: :mod:`trainmath.peak` counts them).

    Hugging Face's kernels (``implementation`` "hf-sdpa" or "hf-eager") save their final
    ``LlamaRMSNorm`` as its layers' norms do, and its loss (``ForCausalLMLoss`` in
    ``transformers/loss/loss_utils.py``) pads the labels by one position (``F.pad``) and takes
    ``labels[..., 1:].contiguous()``, which is the padded tensor itself when b = 1 (8(s + 1)
    bytes saved) and a copy otherwise (8bs). Under autocast the final norm keeps its fp32
    input, the LM head's input is autocast's 16-bit copy and its weight's 16-bit copy is saved.
    """
    s, b, tp, cp = _check_split(s, b, tp, cp)
    family, _ = _kernels(implementation, None)
    return _output(model, s, b, tp, bool(sequence_parallel), cp,
                   positive_int("value_bytes", value_bytes), positive_int("stat_bytes", stat_bytes),
                   family, bool(autocast))


def _output(model: ModelShape, s: int, b: int, tp: int, sequence_parallel: bool, cp: int,
            value_bytes: int, stat_bytes: int, family: str = "megatron",
            autocast: bool = False) -> LayerActivations:
    """:func:`output_activations` on checked inputs."""
    tokens = Fraction(s * b, cp)
    rep = Fraction(1, tp) if sequence_parallel else Fraction(1)
    h, V, v = model.hidden, model.vocab, value_bytes
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


def in_flight(pp: int, *, v: int = 1, microbatches: int | None = None, stage: int = 0) -> Fraction:
    """Micro-batches' worth of activations a pipeline stage holds for each of its L/pp layers.

    1F1B (Narayanan et al. 2021 §2.2, who write p for pp): stage i of pp (counting from 0) runs
    pp - i forward passes before its first backward, so the first stage holds pp micro-batches
    of its L/pp layers, L layers' worth in all (Korthikanti et al. 2022 §4.2.3, eq. 5).
    Interleaved, with v chunks of L/(pp·v) layers per device, Megatron-LM warms up
    2(pp - i - 1) + (v - 1)pp chunk-micro-batches (``megatron/core/pipeline_parallel/schedules.py``),
    so stage i holds (2(pp - i - 1) + (v - 1)pp + 1)/v micro-batches' worth; for the first
    stage that is pp(1 + (pp-1)/(pp·v)), Korthikanti et al.'s interleaving factor (§4.2.3, their
    m is v). With fewer micro-batches per step (``microbatches`` = m), a stage holds at most m.
    """
    pp = positive_int("pp (pipeline-parallel size)", pp)
    v = positive_int("v (model chunks per pipeline device)", v)
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < pp:
        raise ValueError(f"stage must be a whole number from 0 to pp - 1 = {pp - 1}, got {stage!r}")
    if microbatches is not None:
        microbatches = positive_int("microbatches (m)", microbatches)
    return _in_flight(pp, v, microbatches, stage)


def _in_flight(pp: int, v: int, microbatches: int | None, stage: int) -> Fraction:
    """:func:`in_flight` on checked inputs."""
    if v == 1:
        held = Fraction(pp - stage)
    else:
        held = Fraction(2 * (pp - stage - 1) + (v - 1) * pp + 1, v)
    if microbatches is not None:
        held = min(held, Fraction(microbatches))
    return held


@dataclass(frozen=True)
class StageActivations:
    """Activation bytes on one device of one pipeline stage."""

    per_layer: LayerActivations
    layers_on_stage: int
    held: Fraction
    embedding: LayerActivations | None
    embedding_held: int
    output: LayerActivations | None
    #: the rotary tables each forward pass saves once and every layer shares
    rotary: LayerActivations = LayerActivations(())
    #: model chunks per device (interleaved schedule): each chunk's forward makes its own tables
    chunks: int = 1

    @property
    def layers(self) -> Bytes:
        """The stage's L/pp layers times the micro-batches in flight."""
        return self.per_layer.total * self.layers_on_stage * self.held

    @property
    def inputs(self) -> Bytes:
        """The embedding's tensors for the micro-batches in flight (first stage only)."""
        return self.embedding.total * self.embedding_held if self.embedding else Bytes(0)

    @property
    def outputs(self) -> Bytes:
        """The final norm, LM head and loss, for one micro-batch (last stage only)."""
        return self.output.total if self.output else Bytes(0)

    @property
    def shared(self) -> Bytes:
        """The rotary tables, one pair per forward pass in flight (per chunk, interleaved)."""
        return self.rotary.total * self.held * self.chunks

    @property
    def weight_copies(self) -> Bytes:
        """The part of :attr:`total` that is autocast's 16-bit weight copies."""
        out = self.output.weight_copies if self.output else Bytes(0)
        return self.per_layer.weight_copies * self.layers_on_stage * self.held + out

    @property
    def total(self) -> Bytes:
        """Everything this stage's device keeps for backward: its layers, inputs, outputs and
        the shared rotary tables."""
        return self.layers + self.inputs + self.outputs + self.shared


def stage_activations(
    model: ModelShape, s: int, b: int, *, tp: int = 1, sequence_parallel: bool = False,
    cp: int = 1, pp: int = 1, v: int = 1, microbatches: int | None = None,
    stage: int = 0, recompute: str = "none", attention: str | None = None, value_bytes: int = 2,
    mask_bytes: int = MASK_BYTES, stat_bytes: int = STAT_BYTES, mlp_kernel: str = "eager",
    implementation: str | None = None, autocast: bool = False,
) -> StageActivations:
    """Activations on one device of pipeline stage ``stage`` (0, the first, holds the most).

    Its L/pp layers times :func:`in_flight` micro-batches; on the first stage the embedding's
    tensors for its pp micro-batches in flight (Korthikanti et al. 2022 §4.3: sbhp/t for the
    embedding dropout mask, their p and t being pp and tp); on the last stage the output
    layer's for one micro-batch (in 1F1B the last stage runs each backward right after its
    forward). With pp = 1 the one stage has both. ``v`` is the interleaved schedule's model
    chunks per device. ``implementation`` and ``autocast`` as in :func:`layer_activations`.
    """
    L = model.layers
    pp = positive_int("pp (pipeline-parallel size)", pp)
    _divides("layers", L, pp, "pp (pipeline-parallel size)")
    if v != 1:
        _divides("layers per stage", L // pp, positive_int("v (model chunks per pipeline device)", v),
                 "v (model chunks per pipeline device)")
    held = in_flight(pp, v=v, microbatches=microbatches, stage=stage)
    common = dict(tp=tp, sequence_parallel=sequence_parallel, cp=cp)
    kernels = dict(implementation=implementation, autocast=autocast)
    per_layer = layer_activations(model, s, b, **common, recompute=recompute, attention=attention,
                                  value_bytes=value_bytes, mask_bytes=mask_bytes, stat_bytes=stat_bytes,
                                  mlp_kernel=mlp_kernel, **kernels)
    embedding = input_activations(model, s, b, **common, mask_bytes=mask_bytes) if stage == 0 else None
    output = (output_activations(model, s, b, **common, value_bytes=value_bytes, stat_bytes=stat_bytes,
                                 **kernels)
              if stage == pp - 1 else None)
    rotary = rotary_activations(model, s, cp=cp, value_bytes=value_bytes, autocast=autocast)
    return _stage(model, per_layer, embedding, output, pp, microbatches, held, rotary, v)


def _stage(model: ModelShape, per_layer: LayerActivations, embedding: LayerActivations | None,
           output: LayerActivations | None, pp: int, microbatches: int | None,
           held: Fraction, rotary: LayerActivations = LayerActivations(()),
           v: int = 1) -> StageActivations:
    """One stage's activations from its parts: the one place they are put together."""
    embedding_held = pp if microbatches is None else min(pp, microbatches)
    return StageActivations(per_layer, model.layers // pp, held, embedding, embedding_held, output,
                            rotary, v)
