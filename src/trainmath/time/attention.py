"""How long attention's core (QKᵀ, softmax, attention over V) takes on one GPU, forward and
backward.

- **Flash kernels** (Dao et al. 2022; Dao 2023, FlashAttention-2; Shah et al. 2024,
  FlashAttention-3) never write the s×s scores, so their time is FLOPs over a throughput the
  kernels' authors measured. FLOPs count as flash-attention's own benchmark does
  (``benchmarks/benchmark_flash_attention.py``): forward 4·b·s_q·s_kv·a·d, halved when causal,
  backward 2.5 × the forward. The throughput, by GPU, head dimension d, causal or not, and
  sequence length, is read from the published figures (:data:`FLASH_CURVES`), interpolated in
  log s, and scaled down when the layer gives the GPU fewer thread blocks than the benchmark did
  (b · a_local · ⌈s/128⌉ blocks against the SMs: the kernel's own wave quantisation).
- **Eager attention** materialises the s×s scores: its two batched GEMMs run at
  :func:`trainmath.time.gemm.gemm_time`, and the softmax chain moves the bytes of each s×s
  element that the implementation's op sequence reads and writes (:data:`EAGER_BYTES`), over
  the HBM (:data:`trainmath.time.gemm.HBM_EFFICIENCY`).

The benchmark's own point (FA2 on an A100, d 128, causal, s 8192, batch 2 of 16 heads:
182 TFLOP/s forward and backward) comes back:

>>> t = flash_time(batch=2, seq_q=8192, seq_kv=8192, heads=16, head_dim=128, causal=True,
...                gpu="a100-sxm", kernel="fa2")
>>> round(3.5 * t.flops_forward / (t.forward + t.backward) / 1e12)
182
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ..hardware import gpu as accelerator
from ..units import choice, positive_int
from .gemm import HBM_EFFICIENCY, gemm_time

#: Flash kernels with published curves: "fa2" (FlashAttention-2, PyTorch SDPA's flash backend),
#: "fa3" (FlashAttention-3, Hopper) and "cudnn" (cuDNN's fused attention, which Transformer
#: Engine runs on Hopper), each by GPU kind.
FLASH_KERNELS = ("fa2", "fa3", "cudnn")

_FA2_A100 = ("Dao-AILab/flash-attention @ 0251105a, assets/flash2_a100_fwd_bwd_benchmark.png "
             "(= FlashAttention-2 paper's A100 figure): bar labels, forward + backward TFLOP/s")
_FA2_H100 = ("Dao-AILab/flash-attention @ 0251105a, assets/flash2_h100_fwd_bwd_benchmark.png: "
             "bar labels, forward + backward TFLOP/s")
_FA3_FWD = ("Dao-AILab/flash-attention @ 0251105a, assets/flash3_fp16_fwd.png (= FlashAttention-3 "
            "paper's forward figure): bar labels, forward TFLOP/s")
_SEQ = (512, 1024, 2048, 4096, 8192, 16384)


@dataclass(frozen=True)
class FlashCurve:
    """Measured TFLOP/s of one kernel on one GPU by sequence length (batch = 16k tokens / s,
    hidden 2048), for head dimensions 64 and 128, causal and not; ``part`` says whether the
    figure times the forward alone ("forward") or forward and backward together ("both")."""

    part: str
    #: (head_dim, causal) -> TFLOP/s at each of the benchmark's sequence lengths (512 … 16k)
    tflops: dict
    source: str


#: Published flash-attention throughput, fp16/bf16, by (kernel, GPU kind).
#:
#: :meta hide-value:
FLASH_CURVES: dict[tuple[str, str], FlashCurve] = {
    ("fa2", "a100-sxm"): FlashCurve("both", {
        (64, False): (132, 153, 162, 171, 175, 176), (128, False): (151, 173, 187, 196, 201, 203),
        (64, True): (88, 119, 140, 156, 165, 171), (128, True): (99, 133, 155, 173, 182, 189),
    }, _FA2_A100),
    ("fa2", "h100-sxm"): FlashCurve("both", {
        (64, False): (215, 254, 274, 288, 294, 296), (128, False): (248, 294, 320, 326, 335, 338),
        (64, True): (141, 192, 232, 257, 273, 284), (128, True): (163, 221, 265, 294, 308, 328),
    }, _FA2_H100),
    # forward alone, on the same figure as FA3: the FA2 series (the backward's share below)
    ("fa2-forward", "h100-sxm"): FlashCurve("forward", {
        (64, False): (282, 306, 318, 321, 322, 324), (128, False): (309, 350, 362, 368, 370, 370),
        (64, True): (180, 229, 262, 284, 295, 299), (128, True): (191, 260, 298, 319, 333, 335),
    }, _FA3_FWD + ", the FlashAttention-2 series"),
    ("fa3", "h100-sxm"): FlashCurve("forward", {
        (64, False): (333, 392, 460, 476, 496, 497), (128, False): (467, 565, 625, 638, 646, 648),
        (64, True): (197, 265, 371, 420, 460, 473), (128, True): (292, 423, 521, 579, 602, 616),
    }, _FA3_FWD + ", the FlashAttention-3 series"),
    ("cudnn", "h100-sxm"): FlashCurve("forward", {
        (64, False): (335, 373, 395, 408, 412, 413), (128, False): (497, 574, 617, 609, 600, 595),
        (64, True): (225, 288, 334, 363, 379, 388), (128, True): (315, 410, 484, 518, 529, 539),
    }, _FA3_FWD + ", the cuDNN series"),
}

#: GPU kinds without curves of their own, and the kind whose curves they use, as the same
#: share of their own peak: an assumption, stated here. H200 and H800 have the H100's GH100 compute; the
#: A100 40GB the A100's; no B200 figure is published for these kernels (FA2 and FA3 do not
#: target Blackwell), so its flash attention is taken at the H100's share of peak.
CURVE_OF: dict[str, str] = {"a100-40gb": "a100-sxm", "h200": "h100-sxm", "h800": "h100-sxm",
                            "b200": "h100-sxm"}

#: Bytes each s×s score element moves per layer in eager attention, (forward, backward), by
#: kernel family: "hf" is transformers' ``eager_attention_forward`` (QKᵀ written in 16 bits, the
#: scaling and the mask each a read and a write, softmax in fp32 then cast back, attention over V
#: reading it; the backward reverses each); "megatron" is Megatron-LM's fused
#: scale-mask-softmax in 16 bits with a 1-byte dropout mask. Counted from the op sequences, not
#: measured; held against the PyTorch series of the FlashAttention-2 figure in the tests.
EAGER_BYTES: dict[str, tuple[int, int]] = {"hf": (24, 30), "megatron": (13, 19)}


@dataclass(frozen=True)
class AttentionTime:
    """Seconds of attention's core in one layer on one GPU, forward and backward."""

    forward: float
    backward: float
    flops_forward: float


def _interp(seq: int, values: tuple) -> float:
    """The curve at ``seq``, linear in log2(s) between the benchmark's lengths, flat outside."""
    x = math.log2(seq)
    xs = [math.log2(s) for s in _SEQ]
    if x <= xs[0]:
        return float(values[0]) * seq / _SEQ[0] if seq < _SEQ[0] else float(values[0])
    if x >= xs[-1]:
        return float(values[-1])
    i = next(j for j in range(1, len(xs)) if x <= xs[j])
    f = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return values[i - 1] + f * (values[i] - values[i - 1])


def _curve_tflops(curve: FlashCurve, head_dim: int, causal: bool, seq: int) -> float:
    """TFLOP/s at ``head_dim`` (linear between 64 and 128, flat beyond) and ``seq``."""
    lo, hi = _interp(seq, curve.tflops[(64, causal)]), _interp(seq, curve.tflops[(128, causal)])
    if head_dim <= 64:
        return lo * head_dim / 64 if head_dim < 64 else lo
    if head_dim >= 128:
        return hi
    return lo + (head_dim - 64) / 64 * (hi - lo)


def _scale_to(gpu: str) -> tuple[str, float]:
    """The GPU kind whose curves ``gpu`` uses, and its peak over that kind's."""
    key = accelerator(gpu).key
    source = CURVE_OF.get(key, key)
    return source, accelerator(key).peak("bf16").flops / accelerator(source).peak("bf16").flops


@lru_cache(maxsize=8192)
def flash_rates(kernel: str, gpu: str, head_dim: int, causal: bool, seq: int) -> tuple[float, float]:
    """(forward, backward) FLOP/s of a flash ``kernel`` on ``gpu`` at full occupancy.

    "fa2" on Ampere and Hopper comes from the forward+backward figures; the backward on its own
    is what remains after the forward (Hopper's FA2 forward series). "fa3" and "cudnn" publish
    forward curves only: their backward is assumed to keep FA2's backward-to-forward rate on the
    same GPU (the FlashAttention-3 paper's backward figure is not recorded here).
    """
    kernel = choice("attention kernel", kernel, FLASH_KERNELS)
    source, scale = _scale_to(gpu)
    if (kernel, source) not in FLASH_CURVES:
        have = sorted({k for k, g in FLASH_CURVES if g == source and k in FLASH_KERNELS})
        raise ValueError(f"no published {kernel} curve for {gpu}; accepted kernels on this GPU: "
                         + ", ".join(have))
    both_fa2 = _curve_tflops(FLASH_CURVES[("fa2", source)], head_dim, causal, seq)
    if source == "a100-sxm":  # no A100 forward-alone series recorded: the backward at the same rate
        return (both_fa2 * 1e12 * scale,) * 2
    fwd_fa2 = _curve_tflops(FLASH_CURVES[("fa2-forward", source)], head_dim, causal, seq)
    bwd_fa2 = 2.5 / (3.5 / both_fa2 - 1 / fwd_fa2)
    if kernel == "fa2":
        return fwd_fa2 * 1e12 * scale, bwd_fa2 * 1e12 * scale
    fwd = _curve_tflops(FLASH_CURVES[(kernel, source)], head_dim, causal, seq)
    return fwd * 1e12 * scale, fwd * bwd_fa2 / fwd_fa2 * 1e12 * scale


def _occupancy(blocks: int, sms: int, reference: int) -> float:
    """The share of the benchmark's wave efficiency a layer's ``blocks`` thread blocks reach."""
    def waves(n: int) -> float:
        return n / (-(-n // sms) * sms)
    return min(1.0, waves(blocks) / waves(reference))


def flash_time(*, batch: int, seq_q: int, seq_kv: int, heads: int, head_dim: int, causal: bool,
               gpu: str, kernel: str, scale: float = 1.0) -> AttentionTime:
    """Seconds of a flash kernel's forward and backward for ``batch`` sequences of ``seq_q``
    queries over ``seq_kv`` keys in ``heads`` heads on one GPU (module docstring); ``scale``
    multiplies the benchmark's rates (a training run's sustained share of them)."""
    b, sq, skv = (positive_int(n, v) for n, v in (("batch", batch), ("seq_q", seq_q),
                                                   ("seq_kv", seq_kv)))
    a, d = positive_int("heads", heads), positive_int("head_dim", head_dim)
    flops = 4 * b * sq * skv * a * d * (0.5 if causal else 1.0)
    fwd_rate, bwd_rate = flash_rates(kernel, gpu, d, causal, max(sq, 512))
    # the benchmark: 16k tokens in 2048 / d heads, blocks of 128 queries
    reference = (16384 // max(sq, 1) or 1) * max(2048 // d, 1) * -(-sq // 128)
    occ = _occupancy(b * a * -(-sq // 128), accelerator(gpu).sms, reference) * scale
    return AttentionTime(flops / (fwd_rate * occ), 2.5 * flops / (bwd_rate * occ), flops)


def eager_time(*, batch: int, seq_q: int, seq_kv: int, heads: int, head_dim: int, gpu: str,
               precision: str, family: str, scale: float = 1.0) -> AttentionTime:
    """Seconds of eager attention: QKᵀ and attention over V as batched GEMMs (forward one each,
    backward two each) over every s×s element, and :data:`EAGER_BYTES` per element of softmax
    chain over the HBM. No causal saving: eager attention computes the whole square."""
    b, sq, skv = batch, seq_q, seq_kv
    a, d = heads, head_dim
    per_forward, per_backward = EAGER_BYTES[choice("kernel family", family, EAGER_BYTES)]
    elements = b * a * sq * skv
    # a batched GEMM over b·a heads has the tiles of one GEMM with the heads stacked along m
    qk = gemm_time(b * a * sq, skv, d, gpu=gpu, precision=precision, scale=scale)
    pv = gemm_time(b * a * sq, d, skv, gpu=gpu, precision=precision, scale=scale)
    bw = HBM_EFFICIENCY * accelerator(gpu).hbm_bandwidth
    forward = qk + pv + elements * per_forward / bw
    backward = 2 * (qk + pv) + elements * per_backward / bw
    return AttentionTime(forward, backward, 4.0 * elements * d)
