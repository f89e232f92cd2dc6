"""A vLLM rollout engine's memory on one GPU (one tensor-parallel rank), by vLLM's start-up rule.

vLLM claims ``gpu_memory_utilization`` × the GPU's TOTAL memory (not its free memory:
``vllm/v1/worker/gpu_worker.py`` ``Worker.init_device``, ``requested_memory =
init_snapshot.total_memory * gpu_memory_utilization``; commit 35d5cda), profiles one dummy
forward, and gives the KV cache what is left (``Worker.determine_available_memory``):

    available = requested − (weights + torch_peak_increase + non_torch_increase)

(``vllm/utils/mem_utils.py`` ``memory_profiling``: ``non_kv_cache_memory``). This module
implements that rule, which holds from v0.6 (``worker.py``'s log "model weights take …;
non_torch_memory takes …; PyTorch activation peak memory takes …") through v0.20. From v0.21
``determine_available_memory`` also subtracts ``profile_cudagraph_memory()`` ("CUDA graph memory
profiling is enabled (default since v0.21.0)", ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``);
``Engine(graphs_in_budget=True)`` applies that rule instead. Before it, graphs are captured after
the KV cache is allocated, outside the requested budget.

The KV cache is then cut into blocks of ``block_size`` tokens, every layer's page the same
(``vllm/v1/core/kv_cache_utils.py`` ``get_num_blocks``: ``available // page_size //
num_layers``); the log's "GPU KV cache size: N tokens" is blocks × block_size (v0.10's
``num_blocks // len(grouped_layers) * block_size``, one group for a uniform model) and "Maximum
concurrency for L tokens per request: X x" is blocks / cdiv(L, block_size)
(``get_max_concurrency_for_kv_cache_config``). Newer versions' ``_report_kv_cache_config`` logs
int(concurrency × L) tokens, the same when block_size divides L. With tp > 1 every rank
profiles its own memory and the engine keeps the fewest blocks of all
(``unify_kv_cache_configs``): the capacity is the poorest rank's.

>>> from trainmath.model.presets import preset
>>> kv_bytes_per_token(preset("llama-3-8b")).n, kv_bytes_per_token(preset("llama-3-8b"), tp=2).n
(131072, 65536)
>>> kv_capacity(available=Bytes(1952 * 2**21), per_token=Bytes(131072), block_size=16,
...             max_model_len=20000).tokens
31232
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..model.shape import ModelShape, param_breakdown
from ..units import GiB, Bytes, choice, positive_int

#: the weights' format (``vllm serve --quantization`` or the checkpoint's): bytes per weight of
#: the decoder layers' matrices. Embeddings, LM head and norms stay 16-bit: compressed-tensors
#: and FP8 checkpoints list ``lm_head`` under ``ignore``.
ENGINE_WEIGHTS = ("bf16", "fp16", "fp8", "int8", "int4")
#: bytes per quantised weight, with the scales each format adds: fp8 one fp32 scale per 128×128
#: block (``weight_block_size`` [128, 128] of DeepSeek-V3's and Qwen3's FP8 configs); int8
#: (w8a8, compressed-tensors channel strategy) one fp32 scale per output channel, taken as one
#: per ``hidden`` weights; int4 (GPTQ/AWQ, group_size 128) one fp16 scale per 128 weights (AWQ's
#: 4-bit zero points, 0.5/128 more, left out).
WEIGHT_BYTES: dict[str, Fraction] = {"bf16": Fraction(2), "fp16": Fraction(2),
                                     "fp8": 1 + Fraction(4, 128 * 128), "int4": Fraction(1, 2)
                                     + Fraction(2, 128)}
#: ``--kv-cache-dtype``: "auto" is the model's 16-bit dtype, "fp8" one byte (fp8_e4m3/e5m2)
KV_DTYPES = ("auto", "fp8")
#: bytes per cached value of each :data:`KV_DTYPES` (``get_dtype_size`` of the cache dtype)
KV_BYTES = {"auto": 2, "fp8": 1}
#: 0: awake; 1: ``LLM.sleep(level=1)`` offloads the weights to CPU and discards the KV cache;
#: 2: discards both (``vllm/device_allocator/cumem.py`` ``CuMemAllocator.sleep``; the worker
#: passes ``offload_tags=("weights",)`` at level 1 and ``()`` at level 2)
SLEEP_LEVELS = (0, 1, 2)

#: non-torch memory (CUDA context, cuBLAS workspaces, NCCL) when not given: 0.35 GiB, the
#: ``non_torch_memory=0.35GiB`` of vllm issue #10517 (Llama-3.1-8B, RTX 3090, TP 1). An
#: assumption: published logs range from 0.04 GiB (TP 1) to 2.10 GiB (DeepSeek-Coder-V2-Lite, TP 8).
NON_TORCH_ASSUMED = Bytes(35 * GiB // 100)
#: CUDA graphs when not given: 1 GiB, an assumption within the "Graph capturing finished in N secs,
#: took X GiB" of published logs (0.11 to 1.29 GiB; ``GPUModelRunner.capture_model``)
CUDA_GRAPHS_ASSUMED = Bytes(GiB)


def _positive(name: str, value: object) -> int | None:
    return None if value is None else positive_int(name, value)


@dataclass(frozen=True)
class Engine:
    """A vLLM engine's settings (``vllm.LLM`` / ``vllm serve`` arguments of the same names)."""

    gpu_memory_utilization: float = 0.9
    tp: int = 1
    weights: str = "bf16"
    kv_dtype: str = "auto"
    block_size: int = 16
    #: None: the model's ``max_positions`` (or learned ``positions``)
    max_model_len: int | None = None
    max_num_seqs: int = 256
    #: None: v0.10's default for ``vllm.LLM`` (``EngineArgs.get_batch_defaults``, LLM_CLASS):
    #: 16384 on a GPU of 70 GiB or more, else 8192 (vLLM also gives an A100 8192, by its name)
    max_num_batched_tokens: int | None = None
    #: False: ``enforce_eager=True``
    cuda_graphs: bool = True
    sleep_level: int = 0
    #: True: v0.21+'s rule, the CUDA-graph estimate subtracted from the KV cache's share
    graphs_in_budget: bool = False

    def __post_init__(self) -> None:
        u = self.gpu_memory_utilization
        if isinstance(u, bool) or not isinstance(u, (int, float, Fraction)) or not 0 < u <= 1:
            raise ValueError(f"gpu_memory_utilization {u!r} is not a fraction of the GPU; "
                             "accepted: a number in (0, 1]")
        object.__setattr__(self, "tp", positive_int("tp", self.tp))
        choice("weights", self.weights, ENGINE_WEIGHTS)
        choice("kv_dtype", self.kv_dtype, KV_DTYPES)
        object.__setattr__(self, "block_size", positive_int("block_size", self.block_size))
        object.__setattr__(self, "max_num_seqs", positive_int("max_num_seqs", self.max_num_seqs))
        object.__setattr__(self, "max_model_len", _positive("max_model_len", self.max_model_len))
        object.__setattr__(self, "max_num_batched_tokens",
                           _positive("max_num_batched_tokens", self.max_num_batched_tokens))
        for name in ("cuda_graphs", "graphs_in_budget"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} {getattr(self, name)!r} is not a bool; accepted: True, "
                                 "False")
        choice("sleep_level", self.sleep_level, SLEEP_LEVELS)


@dataclass(frozen=True)
class KVCapacity:
    """The KV cache vLLM allocates from ``available`` bytes."""

    per_token: Bytes    # KV bytes per token, all layers, on one rank
    per_block: Bytes    # per_token × block_size
    available: Bytes    # memory left for the KV cache
    blocks: int
    tokens: int         # "GPU KV cache size: N tokens"
    concurrency: float  # "Maximum concurrency for L tokens per request: X x"

    @property
    def allocated(self) -> Bytes:
        """What the blocks take: at most ``available`` (less its remainder)."""
        return self.per_block * self.blocks


@dataclass(frozen=True)
class EngineMemory:
    """One rank of a vLLM engine: the budget vLLM claims and what fills it."""

    requested: Bytes    # gpu_memory_utilization × the GPU's total memory
    weights: Bytes      # per rank
    activations: Bytes  # the profiled forward's peak (:func:`profile_activations`)
    non_torch: Bytes    # CUDA context, NCCL etc. outside torch's allocator
    cuda_graphs: Bytes  # 0 with cuda_graphs False
    kv: KVCapacity
    sleep_level: int = 0
    batched_tokens: int = 0  # the profile run's tokens (max_num_batched_tokens resolved)

    def awake(self) -> Bytes:
        """What the process holds while generating: weights, the activations' reserve, non-torch
        memory, the KV blocks and the graphs' pool."""
        return (self.weights + self.activations + self.non_torch + self.kv.allocated
                + self.cuda_graphs)

    def asleep(self, level: int) -> Bytes:
        """What stays on the GPU at sleep ``level``. At 1 and 2 only the CuMem pool's tagged
        allocations ("weights", "kv_cache") leave the GPU (to CPU or discarded; level 1 keeps a
        CPU copy of the weights, level 2 none): CUDA graphs, NCCL and the context stay. The
        activations' cached blocks are taken as freed (the allocator empties torch's cache)."""
        choice("sleep level", level, SLEEP_LEVELS)
        return self.awake() if level == 0 else self.non_torch + self.cuda_graphs

    def idle(self) -> Bytes:
        """What stays between rollouts at the engine's own ``sleep_level``."""
        return self.asleep(self.sleep_level)


def kv_bytes_per_token(model: ModelShape, *, tp: int = 1, kv_dtype: str = "auto") -> Bytes:
    """KV bytes per token, all layers, on one rank: per layer 2 × max(1, kv_heads // tp) ×
    head_dim × dtype bytes (``vllm/v1/kv_cache_interface.py`` ``AttentionSpec.page_size_bytes``;
    ``ModelConfig.get_num_kv_heads`` replicates heads when tp exceeds them). Latent attention
    keeps one latent of kv_lora_rank + qk_rope_head_dim values, NOT split by tp
    (``MLAAttentionSpec``; ``get_num_kv_heads`` returns 1 with MLA). Sliding-window layers are
    counted as full: what vLLM does with the hybrid KV cache manager disabled (FullAttentionSpec:
    "blocks are allocated for all tokens"); with it, a windowed model's capacity is larger."""
    t = positive_int("tp", tp)
    b = KV_BYTES[choice("kv_dtype", kv_dtype, KV_DTYPES)]
    if model.latent:
        values = model.kv_rank + model.rotary_dim
    else:
        values = max(1, model.kv_heads // t) * (model.head_dim + model.v_head_dim)
    return Bytes(model.layers * values * b)


def kv_capacity(*, available: Bytes, per_token: Bytes, block_size: int,
                max_model_len: int) -> KVCapacity:
    """Blocks, tokens and concurrency as vLLM logs them (module docstring)."""
    bs = positive_int("block_size", block_size)
    length = positive_int("max_model_len", max_model_len)
    if per_token.n <= 0:
        raise ValueError(f"per_token {per_token.n} bytes; accepted: a positive amount")
    per_block = per_token * bs
    blocks = int(Fraction(available.n) // per_block.n)
    per_request = -(-length // bs)
    return KVCapacity(per_token=per_token, per_block=per_block, available=available,
                      blocks=blocks, tokens=blocks * bs, concurrency=blocks / per_request)


def engine_weights(model: ModelShape, *, weights: str = "bf16", tp: int = 1) -> Bytes:
    """One rank's weights: the layers' matrices in ``weights`` (:data:`WEIGHT_BYTES`), the rest
    16-bit, split over tp (vocabulary-parallel embedding and LM head; norms, replicated, are
    counted once), plus the rotary cos/sin cache, max_positions × rotary dims in 16 bits
    (``vllm/model_executor/layers/rotary_embedding.py`` ``RotaryEmbedding.__init__`` registers
    ``cos_sin_cache`` of (max_position_embeddings, rotary_dim), ``cache.to(dtype)``). vLLM
    loads no multi-token-prediction module without speculative decoding. Llama-3.1-8B this way:
    16,094,076,928 bytes, 14.9889 GiB; vLLM logs "Loading model weights took 14.9888 GB" (GiB)."""
    per = WEIGHT_BYTES.get(choice("weights", weights, ENGINE_WEIGHTS))
    if per is None:  # int8: one scale per output channel, rows ~hidden long
        per = 1 + Fraction(4, model.hidden)
    p = param_breakdown(model)
    plain = p.embedding + p.lm_head + p.per_layer_norms * p.layers + p.final_norm
    quantised = p.total - p.mtp - plain
    rotary = model.max_positions * model.rotary_width * 2
    return Bytes((quantised * per + 2 * plain) / positive_int("tp", tp) + rotary)


def profile_activations(model: ModelShape, *, tokens: int, seqs: int, tp: int = 1) -> Bytes:
    """An estimate of the profile run's torch peak above the weights (``GPUModelRunner.
    profile_run``: a dummy forward of ``tokens`` = max_num_batched_tokens, then the sampler on
    min(max_num_seqs, tokens) rows). The forward's peak is the widest layer's live tensors per
    token, 16-bit: a dense MLP holds the residual, its input and output (3h) with gate_up (2f/tp)
    and the SiLU product (f/tp), vLLM's ``LlamaMLP.forward``; a mixture its top-k's fused-MoE
    caches k(3w/tp + h); attention 3h with qkv and its output. The sampler holds fp32 logits and
    probabilities, rows × V × 8, with the hidden states. Checked against vllm issue #10517
    (Llama-3.1-8B): peak_torch_memory − weights = 2.07 GiB at 20,000 tokens and 2.99 GiB at
    29,000; this gives 2.06 and 2.99 GiB. Tolerance: the profile varies with kernels and
    versions; take it as within ~5% for dense Llama-like models, coarser for others."""
    t = positive_int("tokens", tokens)
    rows = min(positive_int("seqs", seqs), t)
    tp = positive_int("tp", tp)
    h = model.hidden
    attention = 3 * h + Fraction(model.q_dim + model.kv_dim + model.v_dim + model.o_dim, tp)
    mlp = 3 * h + Fraction(3 * model.ffn, tp)
    if model.moe:
        w = model.expert_width
        mlp = max(mlp, 3 * h + model.experts_per_token * (Fraction(3 * w, tp) + h)
                  + model.shared_experts * Fraction(3 * w, tp))
    forward = t * 2 * max(attention, mlp)
    sampler = rows * model.vocab * 8 + t * h * 2
    return Bytes(max(forward, sampler))


def engine_memory(model: ModelShape, engine: Engine, *, gpu_total: Bytes,
                  non_torch: Bytes | None = None, activations: Bytes | None = None,
                  cuda_graphs: Bytes | None = None, weights: Bytes | None = None) -> EngineMemory:
    """One rank of ``engine`` serving ``model`` on a GPU of ``gpu_total`` bytes (module
    docstring). Each of non_torch, activations, cuda_graphs and weights, given (from a log),
    replaces its estimate."""
    length = engine.max_model_len or model.max_positions or model.positions
    if not length:
        raise ValueError(f"model {model.name!r} has no max_positions; accepted: give "
                         "Engine(max_model_len=...)")
    tokens = engine.max_num_batched_tokens or (16384 if gpu_total.n >= 70 * GiB else 8192)
    requested = gpu_total * Fraction(str(engine.gpu_memory_utilization))
    w = weights if weights is not None else engine_weights(model, weights=engine.weights,
                                                           tp=engine.tp)
    act = activations if activations is not None else profile_activations(
        model, tokens=tokens, seqs=engine.max_num_seqs, tp=engine.tp)
    nt = NON_TORCH_ASSUMED if non_torch is None else non_torch
    graphs = Bytes(0) if not engine.cuda_graphs else (
        CUDA_GRAPHS_ASSUMED if cuda_graphs is None else cuda_graphs)
    used = w + act + nt + (graphs if engine.graphs_in_budget else Bytes(0))
    if used.n >= requested.n:
        raise ValueError(f"weights, activations and non-torch memory take {used.gib:.2f} GiB, "
                         f"not less than the {requested.gib:.2f} GiB requested "
                         f"(gpu_memory_utilization {engine.gpu_memory_utilization}); accepted: "
                         "a larger utilization or GPU, more tp, or smaller weights")
    kv = kv_capacity(available=requested - used,
                     per_token=kv_bytes_per_token(model, tp=engine.tp, kv_dtype=engine.kv_dtype),
                     block_size=engine.block_size, max_model_len=length)
    return EngineMemory(requested=requested, weights=w, activations=act, non_torch=nt,
                        cuda_graphs=graphs, kv=kv, sleep_level=engine.sleep_level,
                        batched_tokens=tokens)
