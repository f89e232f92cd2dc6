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


@dataclass(frozen=True)
class Saved:
    """One tensor (one storage) saved for backward, with its bytes on one device.

    ``statistic`` marks the norms' per-token statistics (LayerNorm's mean and 1/σ, RMSNorm's
    1/rms): Korthikanti et al. 2022 §4.1 leave such small buffers out of their count.
    """

    block: str
    name: str
    bytes: Bytes
    statistic: bool = False


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
        """The count as Korthikanti et al. 2022 make it: without the norms' statistics."""
        return sum((t.bytes for t in self.tensors if not t.statistic), Bytes(0))

    @property
    def statistics(self) -> Bytes:
        """The norms' per-token statistics alone (the difference of the two totals)."""
        return self.total - self.korthikanti

    def by_block(self) -> dict[str, Bytes]:
        """Bytes per block ("norms", "attention", "MLP"), statistics included."""
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


def layer_activations(
    model: ModelShape,
    s: int,
    b: int,
    *,
    tp: int = 1,
    sequence_parallel: bool = False,
    cp: int = 1,
    recompute: str = "none",
    attention: str = "eager",
    value_bytes: int = 2,
    mask_bytes: int = MASK_BYTES,
    stat_bytes: int = STAT_BYTES,
    mlp_kernel: str = "eager",
) -> LayerActivations:
    """The tensors one layer of ``model`` saves for backward, on one device.

    Derived from what each operation keeps for its gradient (Korthikanti et al. 2022, §4.1,
    generalised to any shape of :mod:`trainmath.models`), for sequence length ``s`` and
    micro-batch ``b``, with ``value_bytes`` per activation (2: bf16/fp16), ``mask_bytes`` per
    dropout-mask entry (1: a bool mask) and ``stat_bytes`` per norm statistic (4: fp32, as
    the CUDA LayerNorm/RMSNorm kernels keep them).

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
    attention = choice("attention", attention, ATTENTION_KINDS)
    mlp_kernel = choice("mlp_kernel", mlp_kernel, MLP_KERNELS)
    _divides("heads", model.heads, tp, "tp (tensor-parallel size)")
    _divides("kv_heads", model.kv_heads, tp, "tp (tensor-parallel size)")
    _divides("ffn", model.ffn, tp, "tp (tensor-parallel size)")
    if sequence_parallel:
        _divides("s (sequence length)", s, tp * cp, "tp × cp")
    elif cp > 1:
        _divides("s (sequence length)", s, cp, "cp (context-parallel size)")
    check_context_parallel(cp, attention)
    return _layer(model, s, b, tp, bool(sequence_parallel), cp, recompute, attention,
                  value_bytes, mask_bytes, stat_bytes, mlp_kernel)


def _layer(model: ModelShape, s: int, b: int, tp: int, sequence_parallel: bool, cp: int,
           recompute: str, attention: str, value_bytes: int, mask_bytes: int,
           stat_bytes: int, mlp_kernel: str = "eager") -> LayerActivations:
    """:func:`layer_activations` on inputs already checked (by it, or by ``estimate.Run``)."""
    h, a, f, kv = model.hidden, model.heads, model.ffn, model.kv_dim
    tokens = Fraction(s * b, cp)  # tokens of this micro-batch on this device
    split = Fraction(1, tp)  # share of a tensor-parallel-split tensor
    rep = split if sequence_parallel else Fraction(1)  # share of a replicated tensor
    v, m = value_bytes, mask_bytes

    def saved(block: str, name: str, n: Fraction, statistic: bool = False) -> Saved:
        return Saved(block, name, Bytes(n), statistic)

    if recompute == "full":
        return LayerActivations((saved("layer", "layer input (checkpoint)", v * tokens * h * rep),))

    stats_per_norm = 2 if model.norm == "layernorm" else 1
    stat_name = "mean and 1/σ" if model.norm == "layernorm" else "1/rms"
    norm_name = "LayerNorm" if model.norm == "layernorm" else "RMSNorm"
    out: list[Saved] = []
    for which in ("first", "second"):
        out.append(saved("norms", f"input to the {which} {norm_name}", v * tokens * h * rep))
        out.append(saved("norms", f"{stat_name} of the {which} {norm_name} (per token)",
                         stat_bytes * stats_per_norm * tokens * rep, statistic=True))

    # attention
    out.append(saved("attention", "input to the Q, K, V projections", v * tokens * h * rep))
    if attention == "eager":
        out.append(saved("attention", "Q, input to QKᵀ", v * tokens * h * split))
        rep_kv = " (repeated to all a heads)" if model.kv_heads < a else ""
        out.append(saved("attention", f"K{rep_kv}, input to QKᵀ", v * tokens * h * split))
        out.append(saved("attention", f"V{rep_kv}, input to attention over V", v * tokens * h * split))
        if recompute == "none":
            scores = Fraction(a * s * s * b) * split  # a·s² per sequence (cp = 1 here)
            out.append(saved("attention", "softmax output (s×s per head)", v * scores))
            if model.dropout:
                out.append(saved("attention", "softmax dropout mask (s×s per head)", m * scores))
                out.append(saved("attention", "dropout output, input to attention over V",
                                 v * scores))
        out.append(saved("attention", "context, input to the output projection", v * tokens * h * split))
    else:
        out.append(saved("attention", "Q", v * tokens * h * split))
        out.append(saved("attention", "K (kv_heads heads)", v * tokens * kv * split))
        out.append(saved("attention", "V (kv_heads heads)", v * tokens * kv * split))
        out.append(saved("attention", "log-sum-exp (fp32 per head and token)", 4 * tokens * a * split))
        out.append(saved("attention", "output O, input to the output projection", v * tokens * h * split))
    if model.dropout:
        out.append(saved("attention", "attention dropout mask", m * tokens * h * rep))

    # MLP
    out.append(saved("MLP", "input to the first projection(s)", v * tokens * h * rep))
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
    return LayerActivations(tuple(out))


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


def output_activations(model: ModelShape, s: int, b: int, *, tp: int = 1,
                       sequence_parallel: bool = False, cp: int = 1, value_bytes: int = 2,
                       stat_bytes: int = STAT_BYTES) -> LayerActivations:
    """What the final norm, the LM head and the loss save, on the last stage, per micro-batch.

    Korthikanti et al. 2022 §4.3: the final norm's input and the output projection's input
    (2sbh/tp each with sequence parallelism) and the logits that the cross entropy keeps in
    fp32, 4sbV/tp (the LM head is split over the vocabulary). Measured with PyTorch
    (``F.cross_entropy(logits.float(), targets)``; validate/test_saved_tensors.py), the loss
    saves exactly one fp32 tensor over the vocabulary, its log-softmax, plus the int64
    targets and a 4-byte fp32 count of them; the 16-bit logits and their fp32 copy are not
    saved. Transient peaks while the loss runs (logits, their fp32 copy and the log-softmax
    at once) are not included.
    """
    s, b, tp, cp = _check_split(s, b, tp, cp)
    return _output(model, s, b, tp, bool(sequence_parallel), cp,
                   positive_int("value_bytes", value_bytes), positive_int("stat_bytes", stat_bytes))


def _output(model: ModelShape, s: int, b: int, tp: int, sequence_parallel: bool, cp: int,
            value_bytes: int, stat_bytes: int) -> LayerActivations:
    """:func:`output_activations` on checked inputs."""
    tokens = Fraction(s * b, cp)
    rep = Fraction(1, tp) if sequence_parallel else Fraction(1)
    h, V = model.hidden, model.vocab
    stats = 2 if model.norm == "layernorm" else 1
    norm = "LayerNorm" if model.norm == "layernorm" else "RMSNorm"
    return LayerActivations((
        Saved("output", f"input to the final {norm}", Bytes(value_bytes * tokens * h * rep)),
        Saved("output", f"statistics of the final {norm} (per token)",
              Bytes(stat_bytes * stats * tokens * rep), statistic=True),
        Saved("output", "input to the output projection (LM head)", Bytes(value_bytes * tokens * h * rep)),
        Saved("output", "log-softmax of the logits, fp32 over the vocabulary", Bytes(4 * tokens * V / tp)),
        Saved("output", "targets (int64)", Bytes(8 * tokens)),
        Saved("output", "count of the targets (fp32 scalar)", Bytes(4)),
    ))


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
    def total(self) -> Bytes:
        """Everything this stage's device keeps for backward: its layers, inputs and outputs."""
        return self.layers + self.inputs + self.outputs


def stage_activations(
    model: ModelShape, s: int, b: int, *, tp: int = 1, sequence_parallel: bool = False,
    cp: int = 1, pp: int = 1, v: int = 1, microbatches: int | None = None,
    stage: int = 0, recompute: str = "none", attention: str = "eager", value_bytes: int = 2,
    mask_bytes: int = MASK_BYTES, stat_bytes: int = STAT_BYTES, mlp_kernel: str = "eager",
) -> StageActivations:
    """Activations on one device of pipeline stage ``stage`` (0, the first, holds the most).

    Its L/pp layers times :func:`in_flight` micro-batches; on the first stage the embedding's
    tensors for its pp micro-batches in flight (Korthikanti et al. 2022 §4.3: sbhp/t for the
    embedding dropout mask, their p and t being pp and tp); on the last stage the output
    layer's for one micro-batch (in 1F1B the last stage runs each backward right after its
    forward). With pp = 1 the one stage has both. ``v`` is the interleaved schedule's model
    chunks per device.
    """
    L = model.layers
    pp = positive_int("pp (pipeline-parallel size)", pp)
    _divides("layers", L, pp, "pp (pipeline-parallel size)")
    if v != 1:
        _divides("layers per stage", L // pp, positive_int("v (model chunks per pipeline device)", v),
                 "v (model chunks per pipeline device)")
    held = in_flight(pp, v=v, microbatches=microbatches, stage=stage)
    common = dict(tp=tp, sequence_parallel=sequence_parallel, cp=cp)
    per_layer = layer_activations(model, s, b, **common, recompute=recompute, attention=attention,
                                  value_bytes=value_bytes, mask_bytes=mask_bytes, stat_bytes=stat_bytes,
                                  mlp_kernel=mlp_kernel)
    embedding = input_activations(model, s, b, **common, mask_bytes=mask_bytes) if stage == 0 else None
    output = (output_activations(model, s, b, **common, value_bytes=value_bytes, stat_bytes=stat_bytes)
              if stage == pp - 1 else None)
    return _stage(model, per_layer, embedding, output, pp, microbatches, held)


def _stage(model: ModelShape, per_layer: LayerActivations, embedding: LayerActivations | None,
           output: LayerActivations | None, pp: int, microbatches: int | None,
           held: Fraction) -> StageActivations:
    """One stage's activations from its parts: the one place they are put together."""
    embedding_held = pp if microbatches is None else min(pp, microbatches)
    return StageActivations(per_layer, model.layers // pp, held, embedding, embedding_held, output)
