"""The work one GPU does for one micro-batch in one transformer layer, and at the ends of the
model (embedding, LM head and loss), by kind: matrix multiplies, attention's core, and
memory-bound ops.

On a device of a layout with tensor parallelism tp, context parallelism cp and expert
parallelism ep, a micro-batch of b sequences of s tokens gives each GPU T = b·s/cp tokens, and
each of the layer's weight matrices a tp-th of its columns or rows (Shoeybi et al. 2019, §3).
The layer's GEMMs, as (m, n, k) of C[m×n] = A[m×k]·B[k×n], forward:

- QKV projection (T, (q + 2·kv)/tp, h); attention output (T, h, q/tp);
- MLP: up (T, 2f/tp, h) for SwiGLU's gate and up together, (T, f/tp, h) for GeLU; down
  (T, h, f/tp); a mixture routes each token to k experts, so each GPU's E/ep experts multiply
  T·k·etp/tp tokens between them (T·k·ep·etp/(tp·E) rows each, balanced; ``rows`` when a
  capacity or an imbalance says otherwise: :func:`trainmath.model.moe.dispatch`), each expert
  1/etp of its width, plus the router (T, E, h) and any shared experts;
- LM head on the last stage (T, V/tp, h).

The backward of each is two GEMMs of the same FLOPs: the input gradient (m, k, n) and the
weight gradient (k, n, m) (Narayanan et al. 2021, §3.2: backward = 2 × forward). Attention's
core runs at :mod:`trainmath.time.attention`'s rates; norms, activations, rotary, residuals and
dropout at :mod:`trainmath.time.memory_bound`'s bytes. In fp8 (Transformer Engine, torchao's
Float8 linears) each GEMM's inputs are cast first, 3 bytes an element moved (a 16-bit read, an
fp8 write), and attention stays in 16 bits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from ..hardware import gpu as accelerator
from ..model.shape import ModelShape
from .attention import eager_time, flash_time
from .gemm import HBM_EFFICIENCY, KERNEL_SECONDS, gemm_time
from .memory_bound import layer_bytes_per_token, loss_bytes_per_token
from ..memory.loss import FUSED_LOSS_LOADS_STORES, liger_chunk_size


@dataclass(frozen=True)
class Work:
    """Seconds of compute by kind on one GPU: GEMMs, attention's core, memory-bound ops."""

    gemm: float = 0.0
    attention: float = 0.0
    memory: float = 0.0

    @property
    def total(self) -> float:
        """All three."""
        return self.gemm + self.attention + self.memory

    def __add__(self, other: "Work") -> "Work":
        return Work(self.gemm + other.gemm, self.attention + other.attention,
                    self.memory + other.memory)

    def times(self, k: float) -> "Work":
        """This work done ``k`` times."""
        return Work(self.gemm * k, self.attention * k, self.memory * k)


@dataclass(frozen=True)
class LayerWork:
    """One layer's work for one micro-batch on one GPU: the forward, the backward, and what
    recomputation reruns (``recompute``: the forward under full recomputation, attention's
    forward under selective; under an op-level policy, ``"op:k+o+up"``, the GEMMs of the ops it
    reruns and every memory-bound op of the forward). ``gemms`` lists the forward GEMMs (name, m, n, k, seconds): the
    ones tensor-parallel communication can overlap with."""

    forward: Work
    backward: Work
    recompute: Work
    gemms: tuple = field(default=())

    @property
    def total(self) -> float:
        """Seconds of the layer's forward, backward and recomputation."""
        return self.forward.total + self.backward.total + self.recompute.total


@dataclass(frozen=True)
class Device:
    """How one GPU runs a layer: its kind, the precision of the GEMMs, the attention kernel
    ("eager", or a flash kernel of :data:`trainmath.time.attention.FLASH_KERNELS`), the kernel
    family of the eager ops ("hf" or "megatron"), and ``sustained``: the share of the
    microbenchmarks' tensor-core rates (GEMMs and attention) a training run keeps up
    (:mod:`trainmath.time.calibration`)."""

    gpu: str
    precision: str
    attention: str
    family: str
    sustained: float = 1.0
    #: under ``torch.compile``: residual adds fused into the norms (:mod:`trainmath.time.memory_bound`)
    compiled: bool = False


def _gemm(name: str, m: int, n: int, k: int, d: Device) -> tuple:
    t = gemm_time(m, n, k, gpu=d.gpu, precision=d.precision, scale=d.sustained)
    return (name, m, n, k, t)


def _backward(m: int, n: int, k: int, d: Device) -> float:
    """The input-gradient and weight-gradient GEMMs of a forward (m, n, k)."""
    return (gemm_time(m, k, n, gpu=d.gpu, precision=d.precision, scale=d.sustained)
            + gemm_time(k, n, m, gpu=d.gpu, precision=d.precision, scale=d.sustained))


@lru_cache(maxsize=4096)
def layer_work(model: ModelShape, *, tokens: int, batch: int, seq_q: int, seq_kv: int, tp: int,
               ep: int, sequence_parallel: bool, recompute: str, device: Device,
               etp: int | None = None, rows: int | None = None) -> LayerWork:
    """One layer's :class:`LayerWork` for ``tokens`` = b·s/cp tokens of ``batch`` sequences on
    one GPU, attention over ``seq_q`` queries and ``seq_kv`` keys per sequence (module
    docstring); a mixture's experts split etp ways (None: tp), each taking ``rows`` token
    copies (None: its balanced share)."""
    h, T = model.hidden, tokens
    q, kv = model.q_dim // tp, model.kv_dim // tp
    gemms = [_gemm("qkv", T, q + 2 * kv, h, device), _gemm("attention out", T, h, q, device)]
    experts = []
    if model.moe:
        etp = tp if etp is None else etp
        width = model.expert_width // etp
        up = 2 * width if model.mlp == "swiglu" else width
        local = model.experts // ep
        if rows is None:
            rows = T * model.experts_per_token * ep * etp // (tp * model.experts)
        rows = max(1, rows)
        experts = [_gemm("router", T, model.experts, h, device)]
        experts += [_gemm("expert up", rows, up, h, device),
                    _gemm("expert down", rows, h, width, device)] * local
        if model.shared_experts:
            shared = model.shared_experts * (model.expert_width // tp)
            sup = 2 * shared if model.mlp == "swiglu" else shared
            experts += [_gemm("shared up", T, sup, h, device), _gemm("shared down", T, h, shared, device)]
        mlp_width = (model.experts_per_token + model.shared_experts) * (model.expert_width // tp)
    else:
        f = model.ffn // tp
        up = 2 * f if model.mlp == "swiglu" else f
        gemms += [_gemm("mlp up", T, up, h, device), _gemm("mlp down", T, h, f, device)]
        mlp_width = f
    every = gemms + experts
    g_fwd = sum(g[4] for g in every)
    g_bwd = sum(_backward(g[1], g[2], g[3], device) for g in every)

    heads = model.heads // tp
    if device.attention == "eager":
        a = eager_time(batch=batch, seq_q=seq_q, seq_kv=seq_kv, heads=heads,
                       head_dim=model.head_dim, gpu=device.gpu, precision="bf16",
                       family=device.family, scale=device.sustained)
    else:
        window = model.sliding_window or seq_kv
        a = flash_time(batch=batch, seq_q=seq_q, seq_kv=min(seq_kv, window), heads=heads,
                       head_dim=model.head_dim, causal=True, gpu=device.gpu,
                       kernel=device.attention, scale=device.sustained)
    split = tp if sequence_parallel else 1
    fwd_bytes, bwd_bytes = layer_bytes_per_token(hidden=h, q_dim=q, kv_dim=kv, ffn=mlp_width,
                                                 mlp=model.mlp, dropout=model.dropout,
                                                 hidden_split=split, compiled=device.compiled)
    cast_f = cast_b = 0.0
    if device.precision == "fp8":  # every GEMM input cast to fp8 first: read 2 bytes, write 1
        cast_f = 3.0 * sum(m * k + k * n for _, m, n, k, _ in every)  # activations and weights
        cast_b = 3.0 * sum(m * n for _, m, n, k, _ in every)  # the output gradients
    bw = HBM_EFFICIENCY * accelerator(device.gpu).hbm_bandwidth
    # norms, residual adds, rotary, activation, dropout: a kernel each per pass (fused: fewer)
    kernels = (5 if device.compiled else 9) * KERNEL_SECONDS
    forward = Work(g_fwd, a.forward, (T * fwd_bytes + cast_f) / bw + kernels)
    backward = Work(g_bwd, a.backward, (T * bwd_bytes + cast_b) / bw + kernels)
    if recompute == "full":
        again = forward
    elif recompute == "selective":
        again = Work(0.0, a.forward, 0.0)
    elif recompute.startswith("op:"):  # an op-level policy: the ops it reruns, every pointwise op
        ops = recompute[3:].split("+")
        again = Work(sum(_op_gemm(model, op, T, tp, device) for op in ops),
                     a.forward if "attention" in ops else 0.0, forward.memory)
    elif recompute == "op-selective":  # torchtitan's per-op policy: every other matmul, no attention
        again = Work(g_fwd / 2, 0.0, forward.memory)
    elif recompute == "layer-selective":  # torchtitan's per-layer policy: every second layer
        again = forward.times(0.5)
    else:
        again = Work()
    return LayerWork(forward, backward, again, tuple(gemms))


def _op_gemm(model: ModelShape, op: str, T: int, tp: int, d: Device) -> float:
    """Seconds of the forward GEMM of one projection of a layer named as
    :data:`trainmath.memory.checkpointing.LAYER_OPS` names them (0 for the attention kernel)."""
    h, q, kv, f = model.hidden, model.q_dim // tp, model.kv_dim // tp, model.ffn // tp
    shapes = {"qkv": (T, q + 2 * kv, h), "q": (T, q, h), "k": (T, kv, h), "v": (T, kv, h),
              "o": (T, h, q), "gate": (T, f, h), "up": (T, f, h), "down": (T, h, f)}
    if op not in shapes:
        return 0.0
    m, n, k = shapes[op]
    return gemm_time(m, n, k, gpu=d.gpu, precision=d.precision, scale=d.sustained)


@lru_cache(maxsize=1024)
def head_work(model: ModelShape, *, tokens: int, tp: int, device: Device,
              loss: str = "standard", chunks: int = 1) -> Work:
    """The last stage's LM head (forward and both backward GEMMs) and loss for ``tokens`` tokens
    on one GPU: the vocabulary split tp ways (Megatron's vocabulary-parallel cross-entropy).

    ``loss`` (:data:`trainmath.memory.kernels.LOSS_KINDS`): a "chunked" loss runs the same
    GEMMs and element-wise ops in ``chunks`` pieces (four kernels each); Liger's "fused" kernel
    runs the three GEMMs in its forward, chunk by chunk, and its online softmax moves 3 × 2
    bytes per logit instead of :data:`~trainmath.time.memory_bound.LOSS_BYTES_PER_LOGIT`
    (:data:`trainmath.memory.loss.FUSED_LOSS_LOADS_STORES` 16-bit loads and stores)."""
    v = -(-model.vocab // tp)
    T, h = tokens, model.hidden
    fwd = gemm_time(T, v, h, gpu=device.gpu, precision=device.precision, scale=device.sustained)
    bwd = _backward(T, v, h, device)
    bw = HBM_EFFICIENCY * accelerator(device.gpu).hbm_bandwidth
    if loss == "fused":
        rows = liger_chunk_size(T, h, v)
        pieces = -(-T // rows)
        return Work(fwd + bwd, 0.0, T * v * FUSED_LOSS_LOADS_STORES * 2 / bw
                    + 4 * pieces * KERNEL_SECONDS)
    return Work(fwd + bwd, 0.0, T * loss_bytes_per_token(v) / bw + 4 * chunks * KERNEL_SECONDS)


@lru_cache(maxsize=1024)
def embedding_work(model: ModelShape, *, tokens: int, tp: int, device: Device) -> Work:
    """The first stage's embedding lookup and its backward: the rows read and written (2h bytes
    each way per token), the gradient's zeroed fp32 table of V/tp rows and its scatter-add."""
    v = -(-model.vocab // tp)
    h = model.hidden
    bw = HBM_EFFICIENCY * accelerator(device.gpu).hbm_bandwidth
    moved = tokens * h * (2 + 2 + 4) + v * h * 4
    return Work(0.0, 0.0, moved / bw + 3 * KERNEL_SECONDS)
