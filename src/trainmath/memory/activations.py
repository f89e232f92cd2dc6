"""Activation memory: the tensors a transformer layer saves for its backward pass.

Korthikanti et al. 2022, *Reducing Activation Recomputation in Large Transformer Models*, §4.1,
eq. 1: with 16-bit activations and 1-byte dropout masks, one GPT-style layer (multi-head
attention that materialises the s×s scores, a GeLU MLP of width 4h, two LayerNorms, dropout)
saves

    sbh(34 + 5as/h)  bytes

for sequence length s, micro-batch b, hidden size h and a heads. :data:`KORTHIKANTI_LAYER` lists
the tensors behind the 34 and the 5, as §4.1 derives them; :func:`layer_activation_bytes` is eq. 1.

:func:`layer_activations` derives the same count tensor by tensor for any shape of
:mod:`trainmath.model.shape` (GeLU or SwiGLU, MHA or GQA, LayerNorm or RMSNorm, dropout or not,
eager or FlashAttention) with tensor, sequence and context parallelism and selective or full
recomputation; for GPT shapes it reproduces every row of Korthikanti et al.'s Table 2, and
validate/test_saved_tensors.py checks it byte for byte against what PyTorch saves.
:func:`~trainmath.memory.stages.stage_activations` adds the pipeline schedule (§4.2.3) and the embedding and output
layer (§4.3).

Parallel sizes are named as :class:`trainmath.parallel.layout.Layout` names them: ``tp``, ``cp``,
``pp`` and ``v`` (model chunks per pipeline device); the papers write t and p. Each public
function checks its inputs and calls an unchecked core (``_layer``, ``_input``, ``_output``,
``_in_flight``, ``_stage``), which :func:`trainmath.runs.estimates.estimate` calls directly once
:class:`trainmath.runs.description.Run` has checked everything.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property, lru_cache

from .kernels import (FP32_BYTES, MASK_BYTES, MLP_KERNELS, RECOMPUTE_KINDS, STAT_BYTES, _kernels,
                      context_parallel_problems, kernel_problems)
from .hf_families import hf_family, norm_keeps
from ..model.moe import Routing, dispatch, routing_problems
from ..model.shape import ModelShape
from ..parallel.layout import (Layout, context_split_problems, expert_problems, sequence_problems,
                               tensor_split_problems, ulysses_degree)
from ..problems import check
from ..units import Bytes, choice, positive_int


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


@dataclass(frozen=True)
class Split:
    """One micro-batch on one device: sequence length s, micro-batch b, and how tensor and
    context parallelism split it (``tp``, ``sequence_parallel``, ``cp``), and a mixture's
    experts (``ep``, and ``etp``: None for tp)."""

    seq_len: int
    micro_batch: int
    tp: int = 1
    sequence_parallel: bool = False
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    #: how context parallelism splits attention (:data:`~trainmath.parallel.layout.CP_KINDS`)
    cp_kind: str = "ring"

    @property
    def tokens(self) -> Fraction:
        """Tokens of this micro-batch on this device: s·b/cp."""
        return Fraction(self.seq_len * self.micro_batch, self.cp)

    @property
    def replicated(self) -> Fraction:
        """The share of a tensor-parallel-replicated tensor a device holds: 1/tp with sequence
        parallelism, else all of it."""
        return Fraction(1, self.tp) if self.sequence_parallel else Fraction(1)


@dataclass(frozen=True)
class Kernels:
    """How a layer runs: recomputation, attention, the kernel family and MLP kernel, and the
    bytes of its values, dropout-mask entries and norm statistics; ``autocast`` for
    ``torch.autocast`` over fp32 parameters (see :func:`layer_activations`); ``routing``, a
    mixture's capacity, padding and the expert load counted (:class:`trainmath.model.moe.Routing`)."""

    recompute: str = "none"
    attention: str = "eager"
    family: str = "megatron"
    mlp_kernel: str = "eager"
    value_bytes: int = 2
    mask_bytes: int = MASK_BYTES
    stat_bytes: int = STAT_BYTES
    autocast: bool = False
    routing: Routing = Routing()
    #: recompute "op": the policy (:mod:`trainmath.memory.checkpointing`; None: torchtitan's)
    policy: str | None = None
    #: under ``torch.compile``: its partitioner decides what is saved
    compiled: bool = False


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

    @cached_property  # computed once: an estimate asks for it for every pipeline stage
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
    ep: int = 1,
    etp: int | None = None,
    routing: Routing = Routing(),
    policy: str | None = None,
    compiled: bool = False,
    cp_kind: str = "ring",
) -> LayerActivations:
    """The tensors one layer of ``model`` saves for backward, on one device.

    Derived from what each operation keeps for its gradient (Korthikanti et al. 2022, §4.1,
    generalised to any shape of :mod:`trainmath.model.shape`), for sequence length ``s`` and
    micro-batch ``b``, with ``value_bytes`` per activation (2: bf16/fp16), ``mask_bytes`` per
    dropout-mask entry (1: a bool mask) and ``stat_bytes`` per norm statistic (4: fp32, as
    the CUDA LayerNorm/RMSNorm kernels keep them). ``implementation`` names a profile of
    :data:`~trainmath.memory.kernels.IMPLEMENTATIONS` (its kernels and its attention); without one, the Megatron-style
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
      output and the down projection's input (3 × ffn wide), see :data:`~trainmath.memory.kernels.MLP_KERNELS`.
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
    only, since ring attention never materialises the s×s scores. ``cp_kind`` "ulysses" (and
    the hybrid's Ulysses part, degree u = :func:`~trainmath.parallel.layout.ulysses_degree`):
    attention runs over all s tokens for heads/u heads, the same bytes of Q, K, V, O and
    log-sum-exp, but the output projection's input is the second all-to-all's output, a
    storage of its own beside O (DeepSpeed's ``DistributedAttention`` in
    ``deepspeed/sequence/layer.py``: ``_SeqAllToAll`` returns a new tensor; measured,
    validate/measure/context.py); where u exceeds the KV heads on a rank, each rank holds one
    KV head over all s tokens (DeepSpeed's ``UlyssesSPAttentionHF`` replicates them; not
    measured: ``DistributedAttention`` refuses it).

    A mixture of experts' dispatched tokens, expert intermediates and expert outputs are
    counted for the rows its device's experts process (:func:`trainmath.model.moe.dispatch`):
    expert parallelism ``ep``, expert tensor parallelism ``etp`` (None: tp) and ``routing``
    (capacity factor, padding, and the load counted: balanced unless it says otherwise).

    Recomputation (§5, :data:`~trainmath.memory.kernels.RECOMPUTE_KINDS`): ``"selective"`` recomputes the attention core
    and so drops the s×s tensors; ``"full"`` keeps only the layer's input (2sbh, split by tp
    only with sequence parallelism). For a GPT-style shape with eager attention,
    :attr:`LayerActivations.korthikanti` equals every row of Table 2 exactly
    (tests/test_activations.py). ``"op"`` with ``policy``, and ``compiled``: see
    :mod:`trainmath.memory.checkpointing`.
    """
    s, b, tp, cp = _check_split(s, b, tp, cp)
    value_bytes = positive_int("value_bytes", value_bytes)
    mask_bytes = positive_int("mask_bytes", mask_bytes)
    stat_bytes = positive_int("stat_bytes", stat_bytes)
    recompute = choice("recompute", recompute, RECOMPUTE_KINDS)
    family, attention = _kernels(implementation, attention)
    mlp_kernel = choice("mlp_kernel", mlp_kernel, MLP_KERNELS)
    lay = Layout(tp=tp, cp=cp, sequence_parallel=sequence_parallel, cp_kind=cp_kind)
    problems = [*tensor_split_problems(model, tp), *sequence_problems(s, lay),
                *context_split_problems(model, lay),
                *context_parallel_problems(cp, attention), *routing_problems(model, routing)]
    if ep > 1 or etp is not None:  # the experts' split, on an expert group of etp·ep GPUs
        folded = Layout(dp=ep * (tp if etp is None else etp), tp=tp, cp=cp, ep=ep, etp=etp)
        problems += expert_problems(model, folded)
    if implementation is not None:
        problems += kernel_problems(model, implementation, tp=tp, cp=cp, recompute=recompute,
                                    sequence_parallel=sequence_parallel, mlp_kernel=mlp_kernel)
    from .checkpointing import (compile_problems, parse_policy, policy_problems,
                                recompute_policy_problems)
    policy = None if policy is None else parse_policy(policy)
    problems += recompute_policy_problems(recompute, policy)
    impl = implementation or ("megatron-te" if attention == "flash" else "megatron-eager")
    problems += policy_problems(model, recompute=recompute, policy=policy, implementation=impl,
                                tp=tp, cp=cp, sequence_parallel=bool(sequence_parallel))
    problems += compile_problems(model, compiled=bool(compiled), recompute=recompute,
                                 implementation=impl, tp=tp)
    check(problems)
    return _layer(model, Split(s, b, tp, bool(sequence_parallel), cp, ep, etp, cp_kind),
                  Kernels(recompute=recompute, attention=attention, family=family,
                          mlp_kernel=mlp_kernel, value_bytes=value_bytes, mask_bytes=mask_bytes,
                          stat_bytes=stat_bytes, autocast=bool(autocast), routing=routing,
                          policy=policy, compiled=bool(compiled)))


def _projections(model: ModelShape, block: str) -> int:
    """Linear layers that read one norm's output: Q, K and V (one fused matrix for GPT-style
    shapes, :func:`trainmath.model.shape.param_shapes`), or the MLP's first one (gate and up: two)."""
    if model.mlp == "gelu":
        return 1
    return 3 if block == "attention" else 2


@lru_cache(maxsize=4096)  # pure; the planner asks again for each ZeRO stage
def _layer(model: ModelShape, sp: Split, k: Kernels) -> LayerActivations:
    """:func:`layer_activations` on inputs already checked (by it, or by a
    :class:`~trainmath.runs.description.Run`)."""
    h, a, f, kv = model.hidden, model.heads, model.ffn, model.kv_dim
    q = model.q_dim  # a · head_dim: h, unless the shape gives its head width (Gemma)
    s, b, tp = sp.seq_len, sp.micro_batch, sp.tp
    recompute, attention, mlp_kernel = k.recompute, k.attention, k.mlp_kernel
    stat_bytes, autocast = k.stat_bytes, k.autocast
    if recompute == "op" or k.compiled:  # the op-level policy, the compiler's partitioner
        from .checkpointing import checkpointed_layer
        return checkpointed_layer(model, sp, k)
    tokens = sp.tokens  # tokens of this micro-batch on this device
    split = Fraction(1, tp)  # share of a tensor-parallel-split tensor
    rep = sp.replicated  # share of a replicated tensor
    v, m = k.value_bytes, k.mask_bytes
    r = FP32_BYTES if autocast else v  # the residual stream: fp32 parameters under autocast
    hf = k.family == "hf"
    fam = hf_family(model.hf_family if hf else "")

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
            kept_for_weight("norms", width, h, "input", f"of the {which} {norm_name}, for its "
                            "weight", " (.to(input_dtype))")
        if autocast:  # each Linear casts its own input
            n = _projections(model, block)
            out.append(saved(block, f"16-bit copies of the {which} {norm_name}'s output, one per "
                                    f"projection that reads it ({n})", n * v * width))
        else:
            out.append(saved(block, f"input to {reads}", v * width))

    def kept_for_weight(block: str, width: Fraction, channels: int, thing: str, what: str,
                        cast: str = "") -> None:
        """What an HF RMSNorm keeps for its weight (:func:`~trainmath.memory.hf_families.norm_keeps`)."""
        size, offset = norm_keeps(fam, autocast)
        if size is None:
            out.append(saved(block, f"16-bit normalised {thing}{cast} {what}", v * width))
        else:
            out.append(saved(block, f"fp32 normalised {thing} {what}", size * width))
        if offset:
            out.append(saved(block, f"1 + weight in fp32 {what} (GemmaRMSNorm)",
                             Fraction(FP32_BYTES * channels)))

    def weights(block: str, params: int) -> None:
        if autocast:
            out.append(Saved(block, "16-bit copies of its Linear weights (autocast)",
                             Bytes(Fraction(2 * params, tp)), weight_copy=True))

    def after(which: str, block: str) -> None:
        """A norm on a sublayer's output, before the residual add (Gemma 2's post-attention and
        post-feedforward norms, OLMo 2's): its input and statistics; its output is added, not
        saved."""
        width = tokens * h * rep
        if hf:
            out.append(saved("norms", f"fp32 copy of the input of the {which} {norm_name}",
                             FP32_BYTES * width))
        else:
            out.append(saved("norms", f"input to the {which} {norm_name}", r * width))
        out.append(saved("norms", f"{stat_name} of the {which} {norm_name} (per token)",
                         stat_bytes * stats_per_norm * tokens * rep, statistic=True))
        if hf:
            kept_for_weight("norms", width, h, "input", f"of the {which} {norm_name}, for its "
                            "weight")

    def head_norms() -> None:
        """Norms of the queries and keys (:data:`~trainmath.model.shape.QK_NORMS`): each saves
        its input (the projection's output) and per-head (or per-token) statistics; the
        normalised Q and K are attention's own inputs."""
        if not model.qk_norm:
            return
        width = tokens * (q + kv) * split
        heads = (a + model.kv_heads) if model.qk_norm in ("head", "l2") else 2
        what = {"head": "per-head RMSNorms", "full": "RMSNorms", "l2": "L2 norms"}[model.qk_norm]
        if hf or model.qk_norm == "l2":  # .to(torch.float32) first, as LlamaRMSNorm does
            out.append(saved("attention", f"fp32 copies of Q and K, inputs to their {what}",
                             FP32_BYTES * width))
        else:
            out.append(saved("attention", f"Q and K, inputs to their {what}", v * width))
        out.append(saved("attention", f"statistics of the Q and K {what}",
                         FP32_BYTES * tokens * heads * (split if heads > 2 else rep),
                         statistic=True))
        if hf and model.qk_norm != "l2":
            channels = 2 * model.head_dim if model.qk_norm == "head" else q + kv
            kept_for_weight("attention", width, channels, "Q and K",
                            f"of their {what}, for their weights")

    # attention
    if model.norm_placement == "post":  # OLMo 2: the projections read the residual stream
        out.append(saved("attention", "residual stream, input to the Q, K, V projections",
                         r * tokens * h * rep))
    else:
        norm("first", "attention", "the Q, K, V projections")
    window_mask = (hf and attention == "flash" and model.sliding_window
                   and s >= model.sliding_window)
    if hf and fam.name == "llama4_text" and not model.qk_norm:
        # Llama 4's global layers (no RoPE, no L2 norm: layer_shape) scale their queries by a
        # temperature per position, log1p(floor((pos + 1) / floor_scale))·attn_scale + 1, fp32
        out.append(saved("attention", "query temperature per position, fp32 (global layers)",
                         FP32_BYTES * Fraction(s)))
    if model.latent:
        out.extend(_latent(model, tokens, split=split, rep=rep, v=v, stat_bytes=stat_bytes, hf=hf))
        q = model.q_dim  # Q and K at a·(nope + rope); V and O at a·d_v
    else:
        head_norms()
    o_width = model.o_dim if model.latent else q
    if attention == "eager":
        out.append(saved("attention", "Q, input to QKᵀ", v * tokens * q * split))
        rep_kv = " (repeated to all a heads)" if model.kv_heads < a else ""
        out.append(saved("attention", f"K{rep_kv}, input to QKᵀ", v * tokens * q * split))
        if not model.latent:  # latent attention's V is kv_b's output, counted with it
            out.append(saved("attention", f"V{rep_kv}, input to attention over V",
                             v * tokens * q * split))
        if recompute == "none":
            scores = Fraction(a * s * s * b) * split  # a·s² per sequence (cp = 1 here)
            if model.attention_softcap:  # cap·tanh(scores / cap): tanh keeps its output
                out.append(saved("attention", "tanh of the scores, soft-capped (s×s per head)",
                                 v * scores))
            if model.attention_sinks:  # gpt-oss: a sink logit per head joins every softmax
                scores = Fraction(a * s * (s + 1) * b) * split
            # softmax(dtype=float32), or autocast's float32 list; Llama 4's and gpt-oss's code
            # runs it in the model's dtype
            fp32_softmax = (hf and fam.eager_softmax == "fp32") or autocast
            if hf and fam.max_index:  # gpt-oss: the max over scores and sink, before softmax
                out.append(saved("attention", "index of each score row's maximum, int64 (per "
                                              "head and token)", 8 * tokens * a * split))
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
        out.append(saved("attention", "context, input to the output projection",
                         v * tokens * o_width * split))
    else:
        kv_width = q if window_mask else kv
        rep_kv = " repeated to all a heads" if window_mask and model.kv_heads < a else " (kv_heads heads)"
        u = 1 if sp.cp == 1 else ulysses_degree(model, Layout(tp=tp, cp=sp.cp, cp_kind=sp.cp_kind))
        kv_local = max(model.kv_heads // tp, 1)
        if u > kv_local and not window_mask:  # one KV head per rank, replicated, over all s
            kv_width = u * model.head_dim * tp
            rep_kv = f" (one KV head per rank, kv_heads replicated to {u}: UlyssesSPAttentionHF)"
        out.append(saved("attention", "Q", v * tokens * q * split))
        out.append(saved("attention", f"K{rep_kv}", v * tokens * kv_width * split))
        if not model.latent:
            out.append(saved("attention", f"V{rep_kv}", v * tokens * kv_width * split))
        if window_mask:
            out.append(saved("attention", "sliding-window mask, additive, 16-bit (b·s×s)",
                             v * b * s * s))
        out.append(saved("attention", "log-sum-exp (fp32 per head and token)",
                         FP32_BYTES * tokens * a * split))
        if u > 1:  # Ulysses: the all-to-all lays O back out over s/cp tokens, a new storage
            out.append(saved("attention", "output O (the Ulysses group's tokens, heads/u heads)",
                             v * tokens * o_width * split))
            out.append(saved("attention", "the output all-to-all's result, input to the output "
                                          "projection (Ulysses)", v * tokens * o_width * split))
        else:
            out.append(saved("attention", "output O, input to the output projection",
                             v * tokens * o_width * split))
    if model.dropout:
        out.append(saved("attention", "attention dropout mask", m * tokens * h * rep))
    weights("attention", 2 * h * q + 2 * h * kv)
    if model.norm_placement in ("sandwich", "post"):
        after("post-attention", "norms")

    # MLP
    def mlp_input(reads: str) -> None:
        if model.norm_placement == "post":
            out.append(saved("MLP", f"residual stream, input to {reads}", r * tokens * h * rep))
        else:
            norm("second", "MLP", reads)

    if model.moe:
        mlp_input("the router and the experts' dispatch")
        rows = dispatch(model, tokens=tokens, tp=tp, ep=sp.ep, etp=sp.etp,
                        routing=k.routing).rows(k.routing.load)
        etp = tp if sp.etp is None else sp.etp
        out.extend(_moe_block(model, tokens, rep=rep, rows=rows, width_split=Fraction(1, etp),
                              split=split, v=v, mlp_kernel=mlp_kernel, hf=hf))
        if model.norm_placement in ("sandwich", "post"):
            after("post-feedforward", "norms")
        return LayerActivations(tuple(out))
    mlp_input("the first projection(s)")
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
    if model.norm_placement in ("sandwich", "post"):
        after("post-feedforward", "norms")
    return LayerActivations(tuple(out))


def _latent(model: ModelShape, tokens: Fraction, *, split: Fraction, rep: Fraction, v: int,
            stat_bytes: int, hf: bool) -> list[Saved]:
    """What multi-head latent attention saves before its core (DeepSeek-V2 §2.1.2, eq. 9-14;
    Megatron-Core's ``MLASelfAttention``): the compressed query (q_rank wide) as its RMSNorm's
    input and, normalised, as the up-projection's input; the compressed key-value latent with
    the rotary key (kv_rank + rope), its RMSNorm's statistics and the normalised latent
    (kv_rank), the up-projection's output, whose slices are the keys without rotary and the
    values (a·(nope + d_v)); the queries after rotary and the keys, the per-head keys joined to
    the one shared rotary key (a·(nope + rope) each). The down-projections are not split by tp
    (Megatron-Core keeps them whole), the up-projections are. Hugging Face's RMSNorms
    (``DeepseekV3RMSNorm``) keep an fp32 copy of the input and the normalised 16-bit input
    beside their output, and its rotary key is not kept apart (its product with the cos and sin
    tables keeps only the tables); measured: validate/measure, DeepSeek-V3's layers."""
    a, d, rope, rank = model.heads, model.head_dim, model.rotary_dim, model.kv_rank
    nope, dv = d - rope, model.v_head_dim
    out: list[Saved] = []

    def rms(name: str, width: int) -> None:
        if hf:
            out.append(Saved("attention", f"fp32 copy of the {name}, input to its RMSNorm",
                             Bytes(FP32_BYTES * tokens * width * rep)))
        else:
            out.append(Saved("attention", f"{name}, input to its RMSNorm",
                             Bytes(v * tokens * width * rep)))
        out.append(Saved("attention", f"1/rms of the {name}'s RMSNorm (per token)",
                         Bytes(stat_bytes * tokens * rep), statistic=True))
        if hf:  # DeepseekV3RMSNorm: weight * x.to(input_dtype), as LlamaRMSNorm
            out.append(Saved("attention", f"16-bit normalised {name}, for its norm's weight",
                             Bytes(v * tokens * width * rep)))
        out.append(Saved("attention", f"normalised {name}, input to its up-projection",
                         Bytes(v * tokens * width * rep)))

    if model.q_rank:
        rms("compressed query (q_rank)", model.q_rank)
    if hf:  # the rotary key's product with the cos/sin tables keeps only the tables
        rms("compressed key-value latent (kv_rank)", rank)
    else:  # the latent's slice is a view of kv_a's output, which the norm keeps whole
        out.append(Saved("attention", "kv_a's output: the latent (kv_rank) and the rotary key",
                         Bytes(v * tokens * (rank + rope) * rep)))
        out.append(Saved("attention", "1/rms of the latent's RMSNorm (per token)",
                         Bytes(stat_bytes * tokens * rep), statistic=True))
        out.append(Saved("attention", "normalised latent, input to kv_b",
                         Bytes(v * tokens * rank * rep)))
    out.append(Saved("attention", "kv_b's output: keys without rotary and the values "
                                  "(a·(nope + d_v))", Bytes(v * tokens * a * (nope + dv) * split)))
    return out


#: Bytes of a routing index (int64, as ``torch.topk`` returns it).
INDEX_BYTES = 8


def _mlp_intermediates(model: ModelShape, copies: Fraction, width: int, *, split: Fraction,
                       v: int, mlp_kernel: str, who: str) -> list[Saved]:
    """The ffn-wide tensors an MLP of ``width`` saves for ``copies`` token copies."""
    n = 2 if model.mlp == "gelu" else (3 if mlp_kernel == "fused" else 4)
    kind = "GeLU" if model.mlp == "gelu" else ("fused gated" if mlp_kernel == "fused" else "gated")
    return [Saved("MLP", f"{who}: {kind} MLP intermediates ({n} × expert ffn wide)",
                  Bytes(n * v * copies * width * split))]


def _moe_block(model: ModelShape, tokens: Fraction, *, rep: Fraction, rows: Fraction,
               width_split: Fraction, split: Fraction, v: int, mlp_kernel: str,
               hf: bool = False) -> list[Saved]:
    """What a mixture-of-experts MLP saves for backward, after the norm (Megatron-Core's
    ``MoELayer``: router, token dispatcher, grouped experts).

    The router's softmax output (fp32, E per token; Megatron-Core keeps routing in fp32 with
    ``--moe-router-dtype fp32``, Hugging Face's ``MixtralTopKRouter`` runs ``softmax(...float())``),
    the top-k indices (int64) and routing weights (fp32, k per token); the dispatched token
    copies this device's experts process, the experts' input (``rows`` × h,
    :func:`trainmath.model.moe.dispatch`: b·s·k/cp when routing is balanced and etp = tp,
    whatever ep is); each row's expert MLP intermediates at the expert width (as a dense MLP's,
    :data:`~trainmath.memory.kernels.MLP_KERNELS`), split etp ways (``width_split``); the
    experts' outputs, which the weighted combine multiplies by the routing weights (``rows`` ×
    h); shared experts as a dense MLP on every token, split tp ways. The router tensors are
    split by tp only with sequence parallelism.

    Hugging Face's ``MixtralForCausalLM`` (transformers 5: ``MixtralTopKRouter`` in
    ``transformers/models/mixtral/modeling_mixtral.py`` and its default experts implementation,
    ``grouped_mm_experts_forward`` in ``transformers/integrations/moe.py``) saves more: the sum
    of each token's top-k weights that normalises them (fp32) beside the top-k weights
    themselves (the in-place division keeps a copy); the sort of the token copies by expert and
    the index of each copy's token (int64, one each per copy), the per-expert offsets of the
    grouped matrix multiply (int32, E), each copy's routing weight gathered (fp32) and the
    inverse permutation that restores the order (int64 per copy). Every tensor is per token,
    per token copy or per expert, so the total does not depend on how the router spreads the
    tokens (validate/test_moe_saved.py measures it with real routing). Qwen3-MoE's, DeepSeek's,
    gpt-oss's and Llama 4's code differ from Mixtral's in their routers and experts
    (:mod:`trainmath.memory.hf_families`).
    """
    h, k, E, w = model.hidden, model.experts_per_token, model.experts, model.expert_width
    copies = tokens * k
    fam = hf_family(model.hf_family if hf else "")
    if hf and fam.experts == "every-token":
        return _moe_every_token(model, tokens, rep=rep, split=split, v=v)
    out = []
    if hf and fam.router == "fp32-input":  # F.linear(x.type(float32), weight.type(float32))
        out += [Saved("MLP", "fp32 copy of the router's input", Bytes(FP32_BYTES * tokens * h * rep)),
                Saved("MLP", "fp32 copy of the router's weight", Bytes(FP32_BYTES * E * h),
                      weight_copy=True)]
    if not (hf and fam.router == "topk-softmax"):  # gpt-oss: a softmax over the top k only
        out.append(Saved("MLP", "router probabilities, fp32 (E per token)",
                         Bytes(FP32_BYTES * tokens * E * rep)))
    out.append(Saved("MLP", "top-k expert indices, int64 (k per token)", Bytes(INDEX_BYTES * copies * rep)))
    if hf and fam.router == "topk-softmax":
        out.append(Saved("MLP", "softmax over the top-k logits, 16-bit (k per token)",
                         Bytes(v * copies * rep)))
    else:
        out.append(Saved("MLP", "top-k routing weights, fp32 (k per token)",
                         Bytes(FP32_BYTES * copies * rep)))
    out.append(Saved("MLP", "dispatched token copies, the experts' input (k × h per token)",
                     Bytes(v * rows * h)))
    if hf and fam.expert_widths != 4:  # gpt-oss: clamps, sigmoid, (up + 1) · glu
        out.append(Saved("MLP", f"routed experts: clamped gated MLP intermediates "
                                f"({fam.expert_widths} × expert ffn wide)",
                         Bytes(fam.expert_widths * v * rows * w * width_split)))
    else:
        out += _mlp_intermediates(model, rows, w, split=width_split, v=v, mlp_kernel=mlp_kernel,
                                  who="routed experts")
    out.append(Saved("MLP", "expert outputs, input to the weighted combine (k × h per token)",
                     Bytes(v * rows * h)))
    if hf:
        if fam.router != "topk-softmax":
            out.append(Saved("MLP", "sum of each token's top-k weights, fp32 (their normalisation)",
                             Bytes(FP32_BYTES * tokens * rep)))
        weight = "fp32" if fam.gathered_weight_bytes == 4 else "16-bit"
        out += [
            Saved("MLP", "sort of the token copies by expert, and each copy's token, int64",
                  Bytes(2 * INDEX_BYTES * copies)),
            Saved("MLP", "offsets of the grouped matrix multiply, int32 (one per expert)",
                  Bytes(4 * E)),
            Saved("MLP", f"routing weight of each copy, gathered, {weight}",
                  Bytes(fam.gathered_weight_bytes * copies)),
            Saved("MLP", "inverse permutation back to token order, int64 (per copy)",
                  Bytes(INDEX_BYTES * copies)),
        ]
        if model.bias:  # gate_up_proj_bias[expert_ids_g]: the gather keeps the sorted ids
            out.append(Saved("MLP", "each copy's expert id, sorted, int64 (the experts' bias "
                                    "gather)", Bytes(INDEX_BYTES * copies)))
    if model.shared_experts:
        out += _mlp_intermediates(model, tokens, model.shared_experts * w, split=split, v=v,
                                  mlp_kernel=mlp_kernel, who="shared experts")
    return out


def _moe_every_token(model: ModelShape, tokens: Fraction, *, rep: Fraction, split: Fraction,
                     v: int) -> list[Saved]:
    """Llama 4's mixture as transformers runs it (``Llama4TextMoe``, ``Llama4Router``): the
    top-1 index, a sigmoid over the E router scores in fp32 and its 16-bit copy, every token
    repeated to every expert (``hidden_states.repeat(num_experts, 1)``) and scaled by its
    score, and every expert's SwiGLU (gate and up in one ``bmm``, SiLU, the product) on all
    E·T copies; the shared expert as a dense MLP on every token."""
    h, k, E, w = model.hidden, model.experts_per_token, model.experts, model.expert_width
    every = tokens * E
    out = [
        Saved("MLP", "top-k expert indices, int64 (k per token)", Bytes(INDEX_BYTES * tokens * k * rep)),
        Saved("MLP", "router probabilities, fp32 (E per token)", Bytes(FP32_BYTES * every * rep)),
        Saved("MLP", "router scores, 16-bit (E per token)", Bytes(v * every * rep)),
        Saved("MLP", "every token repeated to every expert (E × h per token)", Bytes(v * every * h)),
        Saved("MLP", "the repeated tokens scaled by their scores, the experts' input",
              Bytes(v * every * h)),
        Saved("MLP", "every expert's gate and up outputs, SiLU and product (4 × expert ffn wide, "
                     "E per token)", Bytes(4 * v * every * w * split)),
    ]
    if model.shared_experts:
        out += _mlp_intermediates(model, tokens, model.shared_experts * w, split=split, v=v,
                                  mlp_kernel="eager", who="shared experts")
    return out


def _check_split(s: int, b: int, tp: int, cp: int) -> tuple[int, int, int, int]:
    """s, b, tp and cp checked to be positive whole numbers."""
    return (positive_int("s (sequence length)", s), positive_int("b (micro-batch size)", b),
            positive_int("tp (tensor-parallel size)", tp),
            positive_int("cp (context-parallel size)", cp))
