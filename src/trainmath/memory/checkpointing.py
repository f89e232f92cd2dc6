"""Op-level selective activation checkpointing, and what ``torch.compile``'s partitioner saves.

**Op-level checkpointing** (``recompute="op"``): each layer runs under
``torch.utils.checkpoint.checkpoint`` with ``create_selective_checkpoint_contexts`` and a policy
that names, op by op, whose outputs are saved (``MUST_SAVE``); everything else is recomputed
in the backward pass. A layer then keeps its input (the checkpoint's) and the saved ops'
outputs, nothing else (PyTorch's ``torch/utils/checkpoint.py``: the cached outputs of
``MUST_SAVE`` ops, "a policy function that always returns ``PREFER_RECOMPUTE`` is equivalent
to vanilla checkpointing"). A policy is stated in the layer's op names, :data:`LAYER_OPS`
(``"q,v,attention,gate,down"``), or named: ``"torchtitan"``, :func:`torchtitan_saved`.

**torchtitan's policy** (``torchtitan/distributed/activation_checkpoint.py`` at commit
b5bcd76c66d0, ``_get_default_save_ops`` lines 31-94 and ``SelectiveAC._wrap_block`` lines
241-287): save the outputs of compute-intensive ops (``aten.mm``, ``addmm``, ``bmm``, the SDPA
kernels, ...) "except every second mm/linear", counting ``aten.mm`` and ``aten.linear`` calls
afresh in every checkpointed block. The original form (``torchtitan/models/llama/
parallelize_llama.py`` at e23bb707d, March 2025) saved ``aten.mm``, the flash and efficient
SDPA kernels and ``aten.max`` only: for a Llama block with FlashAttention the two save the same
tensors; they differ where a linear has a bias (``addmm``, saved every time at HEAD and
recomputed before) and for the cuDNN attention kernel (saved at HEAD, recomputed before).

**torch.compile** (``compiled=True``): AOTAutograd's ``min_cut_rematerialization_partition``
(Inductor's partitioner, ``torch/_functorch/partitioners.py``) never recomputes a
compute-intensive op or a reduction whose output is four times smaller than its input, and
recomputes cheap pointwise ops when that saves memory. For a Llama layer it keeps what the
eager kernels keep except SwiGLU's SiLU output, which it recomputes from the gate output: the
layer saves what a fused SwiGLU kernel saves (:data:`~trainmath.memory.kernels.MLP_KERNELS`),
and the output projection's output in place of the residual sum (the same bytes). Measured:
validate/measure/checkpointing.py, docs/_data/measurements.json (ids ``op-sac-`` and
``compile-``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from .activations import Kernels, LayerActivations, Saved, Split, _layer
from .kernels import FP32_BYTES
from ..model.shape import ModelShape
from ..problems import Problem
from ..units import Bytes

#: Every op name a policy can save, in a layer's forward order: the projections (``qkv`` for a
#: fused projection, the GPT shapes; ``q``, ``k``, ``v`` otherwise), the attention kernel (its
#: output and fp32 log-sum-exp), the output projection, the MLP's projections (``gate``,
#: ``up``, ``down`` for a gated MLP; ``up``, ``down`` for GeLU).
LAYER_OPS = ("qkv", "q", "k", "v", "attention", "o", "gate", "up", "down")
#: The named policies: torchtitan's (:func:`torchtitan_saved`).
NAMED_POLICIES = ("torchtitan",)
#: The commit of torchtitan whose policy :func:`torchtitan_saved` follows.
TORCHTITAN_COMMIT = "b5bcd76c66d0"


def layer_ops(model: ModelShape) -> tuple[str, ...]:
    """The ops of one of ``model``'s layers whose outputs a policy can save, in forward order:
    torchtitan's Llama (``QKVLinear.forward``: wq, wk, wv; then wo; ``FeedForward``:
    ``w2(F.silu(w1(x)) * w3(x))``, gate before up) and Megatron-LM's GPT (one QKV matrix)."""
    attention = ("qkv",) if model.mlp == "gelu" else ("q", "k", "v")
    mlp = ("up", "down") if model.mlp == "gelu" else ("gate", "up", "down")
    return (*attention, "attention", "o", *mlp)


def _has_bias(model: ModelShape, op: str) -> bool:
    """Whether the projection ``op`` adds a bias: then it runs as ``aten.addmm``."""
    return model.bias or (model.qkv_bias and op in ("qkv", "q", "k", "v"))


def torchtitan_saved(model: ModelShape) -> tuple[str, ...]:
    """The ops whose outputs torchtitan's policy saves in one of ``model``'s layers.

    Each projection without a bias is an ``aten.mm`` (``nn.Linear`` on a 3-D input: a view and
    an ``mm``), counted from 1 in each block; the odd ones are saved, the even ones recomputed
    ("Save all compute/comm ops, except every second mm/linear"). A projection with a bias is
    an ``aten.addmm``, in the save set but not counted, so always saved. The attention kernel
    (flash, efficient or cuDNN SDPA) is saved. For Llama: q, v, attention, gate and down saved;
    k, o and up recomputed.

    >>> from trainmath.model.presets import preset
    >>> torchtitan_saved(preset("llama-3-8b"))
    ('q', 'v', 'attention', 'gate', 'down')
    """
    saved, count = [], 0
    for op in layer_ops(model):
        if op == "attention" or _has_bias(model, op):
            saved.append(op)
            continue
        count += 1
        if count % 2 == 1:
            saved.append(op)
    return tuple(saved)


def parse_policy(text: str) -> str:
    """A policy as the command takes it: a named policy, or op names joined by commas
    (``"q,v,attention"``), normalised (spaces dropped, each op once, in :data:`LAYER_OPS`'
    order); a ValueError names what is accepted."""
    raw = text.strip().lower()
    if raw in NAMED_POLICIES:
        return raw
    ops = [p.strip() for p in raw.split(",") if p.strip()]
    wrong = [p for p in ops if p not in LAYER_OPS]
    if not ops or wrong:
        raise ValueError(f"recompute policy {text!r}: accepted: {', '.join(NAMED_POLICIES)}, or "
                         f"the ops whose outputs are saved, comma-separated, from "
                         f"{', '.join(LAYER_OPS)}")
    return ",".join(op for op in LAYER_OPS if op in ops)


def saved_ops(model: ModelShape, policy: str) -> tuple[str, ...]:
    """The ops of ``model``'s layers whose outputs ``policy`` saves (a named policy resolved)."""
    if policy == "torchtitan":
        return torchtitan_saved(model)
    return tuple(op for op in policy.split(",") if op)


def recomputed_ops(model: ModelShape, policy: str) -> tuple[str, ...]:
    """The ops of ``model``'s layers that ``policy`` recomputes in the backward pass (the
    pointwise ops, norms, rotary and activations, are recomputed under every policy)."""
    kept = saved_ops(model, policy)
    return tuple(op for op in layer_ops(model) if op not in kept)


def recompute_policy_problems(recompute: str, policy: str | None) -> list[Problem]:
    """A policy goes with ``recompute="op"``."""
    if recompute != "op" and policy is not None:
        return [Problem(("recompute_policy", "recompute"), f"recompute policy {policy!r} goes "
                        f"with recompute 'op', got recompute {recompute!r}; accepted: recompute "
                        "op, or no policy")]
    return []


def policy_problems(model: ModelShape, *, recompute: str, policy: str | None, implementation: str,
                    tp: int, cp: int, sequence_parallel: bool = False) -> list[Problem]:
    """The rules of an op-level policy for ``model``: it names ops the layer has; it is
    modelled, as measured, for dense layers (no mixture of experts, no latent attention) with
    the megatron-te kernels (flash attention: eager attention's ``bmm`` outputs would be saved
    too), without context parallelism (its ring's collectives are not counted here), and with
    tensor parallelism only as torchtitan runs it (:func:`op_layer`): sequence parallelism on,
    torchtitan's policy, projections without biases (a rowwise bias is not measured)."""
    if recompute != "op":
        return []
    problems = []
    if policy is not None and policy not in NAMED_POLICIES:
        extra = [op for op in saved_ops(model, policy) if op not in layer_ops(model)]
        if extra:
            problems.append(Problem(("recompute_policy",), f"recompute policy {policy!r} names "
                                    f"{', '.join(extra)}, which {model.name!r}'s layers do not "
                                    f"run; accepted: {', '.join(layer_ops(model))}"))
    if model.moe or model.latent:
        problems.append(Problem(("recompute", "model"), f"recompute 'op' for {model.name!r} "
                                "(a mixture of experts or latent attention) is not modelled; "
                                "accepted: a dense model with multi-head or grouped-query "
                                "attention"))
    problems += _megatron_te_only("recompute", "recompute 'op'", implementation)
    if cp > 1:
        problems.append(Problem(("recompute", "cp"), f"recompute 'op' with cp = {cp} is not "
                                "modelled; accepted: cp = 1"))
    if tp > 1 and not sequence_parallel:
        problems.append(Problem(("recompute", "tp", "sequence_parallel"), f"recompute 'op' with "
                                f"tp = {tp} and no sequence parallelism is not modelled; accepted: "
                                "sequence parallelism on with tp > 1 (torchtitan's plan), or tp = 1"))
    if tp > 1 and policy not in (None, "torchtitan"):
        problems.append(Problem(("recompute_policy", "tp"), f"recompute policy {policy!r} with "
                                f"tp = {tp} is not modelled (which collectives it saves is not "
                                "stated); accepted: torchtitan with tp > 1, or tp = 1"))
    if tp > 1 and (model.bias or model.qkv_bias):
        problems.append(Problem(("recompute", "tp", "model"), f"recompute 'op' with tp = {tp} "
                                f"for {model.name!r} (linear layers with biases) is not modelled; "
                                "accepted: a model without biases, or tp = 1"))
    return problems


def _megatron_te_only(field: str, what: str, implementation: str) -> list[Problem]:
    """The rule both choices keep: ``what`` is modelled, as measured, with the megatron-te
    kernels only."""
    if implementation == "megatron-te":
        return []
    return [Problem((field, "implementation"), f"{what} is modelled with implementation "
                    f"'megatron-te', got {implementation!r}; accepted: megatron-te")]


def compile_problems(model: ModelShape, *, compiled: bool, recompute: str,
                     implementation: str, tp: int = 1) -> list[Problem]:
    """The rules of ``compiled``: what the partitioner saves is modelled, as measured, for a
    Llama-style layer (dense, RMSNorm before each block, a gated MLP, no dropout, no norms of
    Q and K, no latent attention) with the megatron-te kernels, and with no recomputation or
    full recomputation (an op-level or Korthikanti policy's tags are preferences the
    partitioner may override) or an op-level policy (its tags the partitioner keeps:
    :func:`op_layer`), the latter on one tensor-parallel rank, as measured."""
    if not compiled:
        return []
    problems = []
    if (model.moe or model.latent or model.norm != "rmsnorm" or model.mlp == "gelu"
            or model.dropout or model.qk_norm or model.norm_placement != "pre"):
        problems.append(Problem(("compile", "model"), f"compile for {model.name!r} is not "
                                "modelled; accepted: a dense model with RMSNorm before each "
                                "block, a gated MLP, no dropout, no query/key norms"))
    problems += _megatron_te_only("compile", "compile", implementation)
    if recompute not in ("none", "full", "op"):
        problems.append(Problem(("compile", "recompute"), f"compile with recompute {recompute!r} "
                                "is not modelled; accepted: recompute none, full or op"))
    if recompute == "op" and tp > 1:
        problems.append(Problem(("compile", "recompute", "tp"), f"compile with recompute 'op' and "
                                f"tp = {tp} is not modelled (measured on one rank); accepted: "
                                "tp = 1, or recompute op without compile"))
    return problems


def op_params(model: ModelShape, op: str) -> int:
    """Weights of the projection ``op`` of one layer (0 for the attention kernel), biases apart."""
    h, q, kv, f = model.hidden, model.q_dim, model.kv_dim, model.ffn
    return {"qkv": h * (q + 2 * kv), "q": h * q, "k": h * kv, "v": h * kv, "o": q * h,
            "gate": h * f, "up": h * f, "down": f * h}.get(op, 0)


def _op_bytes(model: ModelShape, op: str, v: int, tokens: Fraction) -> list[Saved]:
    """What op ``op`` returns for ``tokens`` tokens: its output (the attention kernel's output
    O and its fp32 log-sum-exp per head)."""
    h, q, kv, f = model.hidden, model.q_dim, model.kv_dim, model.ffn
    widths = {"qkv": q + 2 * kv, "q": q, "k": kv, "v": kv, "o": h, "gate": f, "up": f, "down": h}
    if op == "attention":
        return [Saved("attention", "attention output O (saved op)", Bytes(v * tokens * q)),
                Saved("attention", "attention log-sum-exp, fp32 per head (saved op)",
                      Bytes(FP32_BYTES * tokens * model.heads))]
    block = "MLP" if op in ("gate", "up", "down") else "attention"
    return [Saved(block, f"{op} projection output (saved op)", Bytes(v * tokens * widths[op]))]


#: The projections torchtitan's plan splits by rows (``RowwiseParallel``): their inputs are
#: sharded by columns, their outputs partial sums reduce-scattered to sequence shards.
ROWWISE_OPS = ("o", "down")


def op_layer(model: ModelShape, sp: Split, k: Kernels) -> LayerActivations:
    """What one layer keeps under the op-level policy ``k.policy`` (module docstring): its input,
    kept by the checkpoint, and the saved ops' outputs, on one device (cp = 1).

    With tensor parallelism (``sp.tp`` > 1, sequence parallelism on), per rank, as torchtitan
    runs it (``apply_tp`` in ``torchtitan/models/llama3/infra/parallelize.py`` at 238fa9953e4a,
    lines 217-248: ``SequenceParallel`` norms, ``PrepareModuleInput`` all-gathers of the
    attention's and the MLP's inputs, ``ColwiseParallel`` wq, wk, wv, w1, w3,
    ``RowwiseParallel(output_layouts=Shard(1))`` wo, w2): the layer input is a 1/tp sequence
    shard; a column-parallel projection's output and the attention kernel's outputs hold 1/tp
    of the heads or columns; a row-parallel projection's ``aten.mm`` output is the full-size
    partial sum before its reduce-scatter; and the policy's save set holds
    ``_c10d_functional.reduce_scatter_tensor``, so both reduce-scatters' outputs (a 1/tp
    sequence shard each) are saved whatever the mm count decides. The count is the one-rank
    count: PyTorch's dispatch modes see an op before a tensor subclass does, so the policy
    decides on each ``aten.mm`` with DTensor arguments once, before DTensor runs the local mm
    (measured: the same seven decisions, validate/test_checkpointing.py). The all-gathered
    inputs are recomputed: both all-gathers run again in the backward (measured: 4 all-gathers
    in the backward against 2 without checkpointing). Measured at tp = 2, 4, 8:
    validate/measure/tensor_parallel.py, records ``op-sac-tp-saved``.

    Compiled (``k.compiled``: torch.compile over the checkpointed layer, torchtitan's order; one
    rank only, :func:`compile_problems`), the partitioner saves a ``MUST_SAVE`` node only where
    the backward graph uses it. The down projection's output feeds the residual sum alone,
    whose gradient needs neither operand, so it is not kept; eager checkpointing caches every
    ``MUST_SAVE`` output for the recompute, used or not. Measured: ``compile-op-saved``
    records in docs/_data/measurements.json."""
    tokens, v, tp = sp.tokens, k.value_bytes, sp.tp
    share = sp.replicated  # 1/tp with sequence parallelism (the rules require it with tp > 1)
    out = [Saved("layer", "layer input (checkpoint)", Bytes(v * tokens * share * model.hidden))]
    for op in saved_ops(model, k.policy or "torchtitan"):
        if k.compiled and op == "down":
            continue
        if tp == 1:
            out += _op_bytes(model, op, v, tokens)
        elif op in ROWWISE_OPS:
            block = "MLP" if op == "down" else "attention"
            out.append(Saved(block, f"{op} projection output, the full partial sum before its "
                             "reduce-scatter (saved op)", Bytes(v * tokens * model.hidden)))
        else:
            out += [replace(t, bytes=Bytes(Fraction(t.bytes.n) / tp)) for t in _op_bytes(model, op, v, tokens)]
    if tp > 1:
        for op in ROWWISE_OPS:
            block = "MLP" if op == "down" else "attention"
            out.append(Saved(block, f"{op} projection's reduce-scatter output, a sequence shard "
                             "(saved collective)", Bytes(v * tokens * share * model.hidden)))
    return LayerActivations(tuple(out))


_COMPILED_NAMES = {
    "gate and up outputs, input to the fused SwiGLU (2 × ffn wide)":
        "gate and up projection outputs (2 × ffn wide; SiLU recomputed)",
    "SwiGLU output, input to the down projection (ffn wide)":
        "SiLU(gate) × up, input to the down projection (ffn wide)",
    "input to the second RMSNorm": "output projection's output (the residual sum recomputed)",
}


def compiled_layer(model: ModelShape, sp: Split, k: Kernels) -> LayerActivations:
    """What one layer saves when ``torch.compile``'s partitioner splits it (module docstring):
    the eager kernels' tensors with SwiGLU's SiLU output recomputed, which is the count of a
    fused SwiGLU kernel; the output projection's output saved in place of the residual sum."""
    eager = _layer(model, sp, replace(k, mlp_kernel="fused", compiled=False))
    return LayerActivations(tuple(replace(t, name=_COMPILED_NAMES.get(t.name, t.name))
                                  for t in eager.tensors))


def checkpointed_layer(model: ModelShape, sp: Split, k: Kernels) -> LayerActivations:
    """:func:`op_layer` under ``recompute="op"``, :func:`compiled_layer` when compiled (full
    recomputation keeps the layer input either way)."""
    if k.recompute == "op":
        return op_layer(model, sp, k)
    if k.recompute == "full":
        return _layer(model, sp, replace(k, compiled=False))
    return compiled_layer(model, sp, k)


@dataclass(frozen=True)
class Checkpointing:
    """How a run's layers trade memory for recomputation, in words a report shows: the
    recomputation, the op-level policy and the ops it saves and recomputes, and whether the
    compiler's partitioner decides what is saved."""

    recompute: str
    policy: str | None
    saved: tuple[str, ...]
    recomputed: tuple[str, ...]
    compiled: bool

    def describe(self) -> str:
        """``"op (torchtitan): saves q, v, attention, gate, down; recomputes k, o, up"``."""
        if self.recompute != "op":
            text = self.recompute
        else:
            text = (f"op ({self.policy}): saves {', '.join(self.saved) or 'nothing'}; "
                    f"recomputes {', '.join(self.recomputed) or 'nothing'}")
        return text + (", compiled (torch.compile's min-cut partitioner)" if self.compiled else "")


def checkpointing(model: ModelShape, *, recompute: str, policy: str | None,
                  compiled: bool) -> Checkpointing:
    """The :class:`Checkpointing` of a run of ``model`` (compiled, the down projection's output
    is not saved: :func:`op_layer`)."""
    if recompute != "op":
        return Checkpointing(recompute, None, (), (), compiled)
    name = policy or "torchtitan"
    saved = tuple(op for op in saved_ops(model, name) if not (compiled and op == "down"))
    return Checkpointing(recompute, name, saved, recomputed_ops(model, name), compiled)


def timed_recompute(model: ModelShape, *, recompute: str, policy: str | None) -> str:
    """The recomputation as the step-time model takes it: ``"op:k+o+up"`` names the ops an
    op-level policy reruns (:func:`trainmath.time.layer.layer_work`); other kinds as they are."""
    if recompute != "op":
        return recompute
    return "op:" + "+".join(recomputed_ops(model, policy or "torchtitan"))
