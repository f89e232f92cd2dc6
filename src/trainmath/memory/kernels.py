"""Whose kernels a count describes, and what they can run.

The vocabulary of how a layer runs (:data:`ATTENTION_KINDS`, :data:`RECOMPUTE_KINDS`,
:data:`MLP_KERNELS`), the implementation profiles (:data:`IMPLEMENTATIONS`: Megatron-LM with
Transformer Engine, Hugging Face transformers, each with eager or flash attention), and the rules
about them, each written once: :func:`context_parallel_problems` (ring attention is modelled
with flash attention only), :func:`attention_problems` (an attention kind that contradicts the
profile) and :func:`kernel_problems` (what Hugging Face's kernels cannot run). :mod:`trainmath.memory.activations` counts what these kernels save.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.shape import ModelShape
from ..problems import Problem, check
from ..units import choice


#: How attention runs: "eager" materialises the s×s scores; "flash" is FlashAttention (Dao et al.
#: 2022), which never stores them.
ATTENTION_KINDS = ("eager", "flash")
#: Activation recomputation, the one vocabulary of the library (Korthikanti et al. 2022, §5):
#: "none" keeps every saved tensor; "selective" recomputes the attention core (QKᵀ, softmax,
#: dropout, attention over V) in the backward pass; "full" keeps only each layer's input and
#: reruns the whole layer forward; "op" is op-level selective checkpointing, PyTorch's
#: ``create_selective_checkpoint_contexts`` with a policy naming the ops whose outputs are saved
#: (torchtitan's by default: :mod:`trainmath.memory.checkpointing`). :mod:`trainmath.time.flops`
#: and :mod:`trainmath.parallel.layout` use these names for the FLOPs and traffic recomputation adds.
RECOMPUTE_KINDS = ("none", "selective", "full", "op")
#: How the MLP's activation runs: "eager" is separate PyTorch ops (SwiGLU saves the gate and
#: up outputs, the SiLU output and their product, four tensors ffn wide); "fused" is one kernel
#: that saves its input and recomputes in the backward (Megatron-LM's ``SwiGLUFunction`` in
#: ``megatron/core/fusions/fused_bias_swiglu.py``, Transformer Engine's ``LayerNormMLP``):
#: SwiGLU then saves the gate-and-up output and the down projection's input, three ffn wide.
#: A GeLU MLP saves two either way.
MLP_KERNELS = ("eager", "fused")
#: How the loss over the vocabulary runs (:mod:`trainmath.memory.loss`): "standard" is
#: ``F.cross_entropy(logits.float(), targets)`` over the whole micro-batch's logits; "chunked"
#: projects and scores the tokens in chunks, one backward through all of them (torchtune's
#: ``LinearCrossEntropyLoss``); "fused" is Liger-Kernel's ``LigerFusedLinearCrossEntropyLoss``,
#: which computes the LM head's gradients inside its forward, chunk by chunk (CUDA only).
LOSS_KINDS = ("standard", "chunked", "fused")
#: Chunks of a "chunked" loss when none is given: torchtune's ``num_output_chunks=8`` (and
#: torchtitan's ``ChunkedLossWrapper`` ``num_chunks: int = 8``).
DEFAULT_LOSS_CHUNKS = 8
#: Activations offloaded to host memory (:mod:`trainmath.memory.act_offload`): "none"; "sync",
#: the copies on the compute stream (``torch.autograd.graph.save_on_cpu``, transformers'
#: ``gradient_checkpointing_kwargs={"offload": True}``); "overlap", on a side stream that
#: overlaps them with compute (torchtune's and TRL's ``OffloadActivations(use_streams=True)``).
ACTIVATION_OFFLOADS = ("none", "sync", "overlap")
#: Bytes of one dropout-mask entry (a bool mask, as PyTorch keeps it).
MASK_BYTES = 1
#: Bytes of one norm statistic (fp32, as the CUDA LayerNorm and RMSNorm kernels keep them).
STAT_BYTES = 4
#: Kernel families: "megatron" is the kernel set Megatron-LM runs with Transformer Engine (fused
#: norms that save their 16-bit input and fp32 statistics, 1-byte dropout masks, softmax kept in
#: the compute format); "hf" is Hugging Face transformers' ``LlamaForCausalLM`` and the
#: families whose code differs from it, :mod:`trainmath.memory.hf_families` (see :data:`IMPLEMENTATIONS`).
KERNEL_FAMILIES = ("megatron", "hf")
#: Bytes of an fp32 value: the residual stream under autocast, softmax in fp32, the loss's
#: log-softmax, FlashAttention's log-sum-exp.
FP32_BYTES = 4


@dataclass(frozen=True)
class Implementation:
    """A named set of kernels: which training code's saved tensors a count describes.

    ``family`` is one of :data:`KERNEL_FAMILIES` and ``attention`` one of
    :data:`ATTENTION_KINDS`. Every profile is checked against what that code saves in PyTorch
    (docs/_data/measurements.json, :mod:`trainmath.checks.measured`), per layer and for the whole model.
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


def context_parallel_problems(cp: int, attention: str) -> list[Problem]:
    """Context parallelism is modelled with FlashAttention only: ring attention never stores the
    s×s scores (Liu et al. 2023), so eager attention under cp is not a count this library makes."""
    if cp > 1 and attention != "flash":
        return [Problem(("cp", "attention"), f"context parallelism (cp = {cp}) is modelled with "
                        "attention='flash' only (ring attention never stores the s×s scores); got "
                        f"attention={attention!r}")]
    return []


def attention_problems(attention: str | None, implementation_name: str) -> list[Problem]:
    """An attention kind given beside an implementation profile must be the profile's own."""
    impl = implementation(implementation_name)
    if attention is not None and attention != impl.attention:
        return [Problem(("attention", "implementation"), f"attention {attention!r} contradicts "
                        f"implementation {impl.name!r}, whose attention is {impl.attention!r}; "
                        "give one of them")]
    return []


def kernel_problems(model: ModelShape, implementation_name: str, *, tp: int = 1,
                    sequence_parallel: bool = False, cp: int = 1, recompute: str = "none",
                    mlp_kernel: str = "eager") -> list[Problem]:
    """What an implementation's kernels cannot run: one problem, naming every mismatch, or none.

    Hugging Face's families counted (Llama's code, and those of
    :data:`~trainmath.memory.hf_families.HF_FAMILIES`) have RMSNorm, a SwiGLU or GeGLU MLP
    (eager), rotary positions and no dropout, and their training loop has no tensor, sequence
    or context parallelism and no selective recomputation (``gradient_checkpointing``
    recomputes whole layers: ``recompute="full"``). The "megatron" family runs every shape and
    layout.
    """
    impl = implementation(implementation_name)
    if impl.family != "hf":
        return []
    wrong, fields = [], ["implementation"]
    if model.norm != "rmsnorm" or model.mlp not in ("swiglu", "geglu") or model.dropout \
            or model.positions:
        wrong.append(f"{model.name!r} has norm={model.norm!r}, mlp={model.mlp!r}, "
                     f"dropout={model.dropout}, positions={model.positions} (the families "
                     "counted have rmsnorm, a swiglu or geglu MLP, no dropout, rotary positions)")
    if tp > 1 or cp > 1 or sequence_parallel:
        wrong.append(f"tp = {tp}, cp = {cp}, sequence_parallel = {bool(sequence_parallel)} "
                     "(accepted: tp = cp = 1, no sequence parallelism)")
        fields += ["tp", "cp", "sequence_parallel"]
    if recompute == "selective":
        wrong.append("recompute 'selective' (accepted: none, or full, its gradient checkpointing)")
        fields.append("recompute")
    if mlp_kernel != "eager":
        wrong.append(f"mlp_kernel {mlp_kernel!r} (accepted: eager)")
        fields.append("mlp_kernel")
    if not wrong:
        return []
    return [Problem(tuple(fields), f"implementation {impl.name!r}: Hugging Face's Llama/Mistral "
                    "kernels cannot run " + "; ".join(wrong))]


def _kernels(implementation_name: str | None, attention: str | None) -> tuple[str, str]:
    """(family, attention) from an implementation profile or a bare attention kind."""
    if implementation_name is None:
        return "megatron", choice("attention", "eager" if attention is None else attention,
                                  ATTENTION_KINDS)
    check(attention_problems(attention, implementation_name))
    impl = implementation(implementation_name)
    return impl.family, impl.attention


def loss_problems(loss: str, chunks: int | None, *, tp: int = 1,
                  seq_len: int | None = None) -> list[Problem]:
    """A loss as :data:`LOSS_KINDS` describes it: a chunk count only for "chunked" (Liger's
    fused kernel sizes its own chunks, the standard loss has one), at most the sequence's
    tokens (``tensor_split`` would leave chunks empty), and the chunked and fused losses with
    the whole vocabulary on a device (tp = 1: torchtune's and Liger's losses take the LM head
    whole; Megatron-LM's vocabulary-parallel cross entropy is the standard loss)."""
    problems = []
    if chunks is not None and loss != "chunked":
        problems.append(Problem(("loss_chunks", "loss"), f"loss_chunks {chunks} with loss "
                                f"{loss!r}: only a chunked loss takes a chunk count (Liger's "
                                "fused kernel sizes its own); accepted: loss 'chunked', or no "
                                "loss_chunks"))
    if loss != "standard" and tp > 1:
        problems.append(Problem(("loss", "tp"), f"loss {loss!r} with tp = {tp} is not modelled: "
                                "torchtune's chunked and Liger's fused losses take the whole "
                                "vocabulary on one device; accepted: tp = 1, or loss 'standard' "
                                "(Megatron-LM's vocabulary-parallel cross entropy)"))
    if loss == "chunked" and chunks is not None and seq_len is not None and chunks > seq_len:
        problems.append(Problem(("loss_chunks", "seq_len"), f"loss_chunks {chunks} is more than "
                                f"the {seq_len} tokens of a sequence (the chunks split it); "
                                f"accepted: 1 to {seq_len}"))
    return problems


def activation_offload_problems(offload: str, *, pp: int = 1) -> list[Problem]:
    """Activation offloading as the frameworks that ship it run it: on one pipeline stage
    (torchtune, TRL and transformers have no pipeline; Megatron-Bridge's activation offloading
    requires "PP must be 1")."""
    if offload != "none" and pp > 1:
        return [Problem(("activation_offload", "pp"), f"activation_offload {offload!r} with pp "
                        f"= {pp} is not modelled (torchtune, TRL and transformers offload without "
                        "a pipeline; Megatron-Bridge requires pp = 1); accepted: pp = 1")]
    return []
