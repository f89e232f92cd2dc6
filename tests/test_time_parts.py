"""The step-time model's parts, each against published measurements of that part alone.

The expected values are microbenchmarks others published, recorded with their sources in
docs/_data/time-benchmarks.json: cuBLAS GEMM throughput by shape (NVIDIA's CUDA 11 figure;
Azure HPC's cuBLASLt runs), nccl-tests all-reduce bus bandwidth by message size (Azure's 8-GPU
nodes), and the FlashAttention-2 benchmark figures (Dao-AILab/flash-attention). Vendor figures
(SMs, HBM bandwidth) come from the datasheets cited in trainmath.hardware.
"""

import json
from pathlib import Path

import pytest

from trainmath.hardware import gpu
from trainmath.model.presets import preset
from trainmath.parallel.layout import Layout, parse_stages, stage_split
from trainmath.time.attention import FLASH_CURVES, eager_time, flash_rates, flash_time
from trainmath.time.gemm import curve_errors, gemm_time
from trainmath.time.memory_bound import layer_bytes_per_token, optimizer_bytes_per_param
from trainmath.time.network import Fabric, collective_time
from trainmath.time.step import Overlap, step_time

DATA = json.loads((Path(__file__).parents[1] / "docs/_data/time-benchmarks.json").read_text())


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


@pytest.mark.parametrize("curve", DATA["gemm"], ids=[f"{c['gpu']}-{c['precision']}" for c in DATA["gemm"]])
def test_gemm_time_against_published_cublas_curves(curve):
    """Tiles, waves and depth give a curve's shape: within 10% at the median of each published
    curve, and within 25% for every shape at least 2048 × 2048 (the training GEMMs' sizes)."""
    precision = "bf16" if curve["precision"] == "fp16" else curve["precision"]
    rows = curve_errors(curve["points_mnk_tflops"], gpu=curve["gpu"], precision=precision)
    errors = [abs(p / m - 1) for _, m, p in rows]
    assert _median(errors) <= 0.10, rows
    for (m, n, k), measured, predicted in rows:
        if m >= 2048 and n >= 2048:
            assert abs(predicted / measured - 1) <= 0.25, ((m, n, k), measured, predicted)


def test_wave_quantisation_makes_the_sawtooth():
    """NVIDIA's cuBLAS figure on the A100's 108 SMs drops from 1792³ to 2048³ (201 to 196
    TFLOP/s) although the larger GEMM has more work per tile: more tiles than one wave."""
    rate = {n: 2 * n**3 / gemm_time(n, n, n, gpu="a100-40gb", precision="bf16") for n in (1792, 2048)}
    assert rate[2048] < rate[1792]


@pytest.mark.parametrize("curve", DATA["all_reduce"], ids=[c["gpu"] for c in DATA["all_reduce"]])
def test_all_reduce_time_against_nccl_tests(curve):
    """NCCL's LL128 latency plus the measured plateau bus bandwidth (NVLS on Hopper): within 12%
    at the median of Azure's 8-GPU all-reduce curve from 64 KiB up, and within 40% at every size."""
    errors = []
    for size, busbw in curve["points_bytes_busbw_gbps"]:
        if size < 65536:
            continue
        t = collective_time("all_reduce", size, ranks=8, ranks_per_node=8, gpu=curve["gpu"])
        errors.append(abs(t / (2 * size * 7 / 8 / (busbw * 1e9)) - 1))
    assert _median(errors) <= 0.12 and max(errors) <= 0.40


def test_bus_bandwidth_across_nodes():
    """A ring crosses each node boundary once, through the NICs of the group's GPUs in that node
    (nccl#687): a DGX H100 group of 8 per node reaches 0.93 × 8 × 50 GB/s = 372 GB/s (nccl-tests
    measured 370-380), one GPU per node only its own NIC's 46.5."""
    f = Fabric.of("h100-sxm")
    assert f.busbw(64, 8) == pytest.approx(min(0.93 * 8 * 50e9, 365e9))
    assert f.busbw(64, 1) == pytest.approx(0.93 * 50e9)


@pytest.mark.parametrize(("kernel", "g"), [(k, g) for k, g in FLASH_CURVES if k != "fa2-forward"])
def test_flash_rates_return_the_published_points(kernel, g):
    """At the benchmark's own sequence lengths and head dimensions the rates are the figures'
    bar labels (forward and backward together for FA2, the forward for FA3 and cuDNN)."""
    curve = FLASH_CURVES[(kernel, g)]
    for (d, causal), values in curve.tflops.items():
        for s, tflops in zip((512, 1024, 2048, 4096, 8192, 16384), values):
            fwd, bwd = flash_rates(kernel, g, d, causal, s)
            both = 3.5 / (1 / fwd + 2.5 / bwd)
            got = both if curve.part == "both" else fwd
            assert got / 1e12 == pytest.approx(tflops, rel=1e-9)


def test_flash_time_at_the_benchmark_point():
    """FA2 on an A100, d 128, causal, s 8192 (batch 2, 16 heads): 182 TFLOP/s forward and
    backward together, as the figure prints."""
    t = flash_time(batch=2, seq_q=8192, seq_kv=8192, heads=16, head_dim=128, causal=True,
                   gpu="a100-sxm", kernel="fa2")
    assert 3.5 * t.flops_forward / (t.forward + t.backward) / 1e12 == pytest.approx(182, rel=1e-6)


def test_eager_attention_bytes_against_the_pytorch_series():
    """The FlashAttention-2 figure's PyTorch attention (16-bit scores, mask, softmax, dropout)
    moves what Megatron's fused 16-bit sequence does: within 10% from s = 2048 up."""
    series = DATA["eager_attention"][0]
    for s, tflops in series["seq_tflops"]:
        if s < 2048:
            continue
        b = series["tokens"] // s
        heads = series["hidden"] // series["head_dim"]
        t = eager_time(batch=b, seq_q=s, seq_kv=s, heads=heads, head_dim=128, gpu="a100-sxm",
                       precision="bf16", family="megatron")
        counted = 3.5 * 4 * b * s * s * heads * 128 / 2
        assert counted / (t.forward + t.backward) / 1e12 == pytest.approx(tflops, rel=0.10)


def test_memory_bound_bytes_are_the_ops_reads_and_writes():
    """Per token, h = 4096, one layer: two norms (4h forward, 6h backward each), two residual
    adds (6h and 4h), rotary on q and k (4 bytes an element each way), SwiGLU (6f and 10f)."""
    h, q, kv, f = 4096, 4096, 1024, 14336
    fwd, bwd = layer_bytes_per_token(hidden=h, q_dim=q, kv_dim=kv, ffn=f, mlp="swiglu",
                                     dropout=False)
    assert fwd == 2 * 4 * h + 2 * 6 * h + 4 * (q + kv) + 6 * f
    assert bwd == 2 * 6 * h + 2 * 4 * h + 4 * (q + kv) + 10 * f
    assert optimizer_bytes_per_param(grad_bytes=4, master=False) == 28 + 8  # AdamW's 28, norm, zero


def test_uneven_stages_follow_meta():
    """Dubey et al. 2024 §3.3.2: Llama 3 405B's 126 layers on 16 stages, one fewer on the first
    and the last; with one layer a chunk (v = 8) the first chunk holds only the embedding."""
    assert stage_split(126, 16) == (7,) + (8,) * 14 + (7,)
    assert stage_split(126, 16, 8)[0] == 0 and stage_split(126, 16, 8)[-1] == 0
    assert Layout(pp=16, v=8).device_layers(126) == stage_split(126, 16)
    assert parse_stages("7/8*14/7") == stage_split(126, 16)


def test_the_pipeline_is_paced_by_its_slowest_stage():
    """1F1B over m micro-batches: m × the slowest stage plus the others once (Narayanan et al.
    2021 §2.2: (pp - 1)/m of the ideal when the stages are equal)."""
    m = preset("llama-3-70b")
    kw = dict(seq_len=4096, global_batch=64, micro_batch=1, zero_stage=1, recompute="none",
              recipe="bf16-mixed", implementation="megatron-te", fabric=Fabric.of("h100-sxm"))
    even = step_time(m, Layout(pp=4, dp=1, tp=8, sequence_parallel=True), **kw)
    t = even.stages
    assert even.bubble == pytest.approx(sum(t) - max(t))
    uneven = step_time(m, Layout(pp=4, dp=1, tp=8, sequence_parallel=True,
                                 stages=(17, 21, 21, 21)), **kw)
    assert max(uneven.stages) > max(even.stages)  # 21 layers on the slowest: a slower step
    assert uneven.total > even.total


def test_fsdp_gathers_are_exposed_only_past_the_previous_layers_compute():
    """FSDP2 prefetches layer j+1's all-gather under layer j: with links fast enough that a
    gather fits under a layer, only the first gather and the last reduce-scatter of each
    micro-batch (and the root's) are exposed; slow them 100 times and every layer's excess shows."""
    m = preset("llama-3-8b")
    kw = dict(seq_len=8192, global_batch=64, micro_batch=1, zero_stage=3, recompute="none",
              recipe="fsdp2", implementation="hf-sdpa")
    lay = Layout(dp=64)
    fast = step_time(m, lay, fabric=Fabric.of("h100-sxm"), **kw)
    slow = step_time(m, lay, fabric=Fabric.of("h100-sxm", nvlink=450e7, network=50e7), **kw)
    waits = step_time(m, lay, fabric=Fabric.of("h100-sxm"), overlap=Overlap(parameters=False), **kw)
    per_layer_compute = fast.compute / m.layers
    assert fast.dp < 0.05 * fast.total  # hidden but for the ends
    assert fast.dp < 4 * per_layer_compute
    assert slow.dp > 10 * fast.dp
    assert waits.dp > fast.dp  # nothing prefetched: every gather waits


def test_tensor_parallel_overlap_hides_under_its_gemm():
    """Transformer Engine's --tp-comm-overlap: each gather or reduce-scatter hides under the GEMM
    beside it, so the exposed tensor-parallel time falls."""
    m = preset("llama-3-70b")
    kw = dict(seq_len=8192, global_batch=64, micro_batch=1, zero_stage=1, recompute="none",
              recipe="bf16-mixed", implementation="megatron-te", fabric=Fabric.of("h100-sxm"))
    lay = Layout(dp=8, tp=8, sequence_parallel=True)
    exposed = step_time(m, lay, **kw)
    hidden = step_time(m, lay, overlap=Overlap(tensor=True), **kw)
    assert hidden.tp < exposed.tp and exposed.gemm == hidden.gemm


def test_every_gpu_has_its_datasheet_figures():
    """SMs and HBM bandwidth from the datasheets and whitepapers: A100 108 SMs, 2,039 GB/s (80GB)
    and 1,555 GB/s (40GB); H100 SXM 132 SMs, 3.35 TB/s; H200 4.8 TB/s; B200 8 TB/s."""
    figures = {k: (gpu(k).sms, gpu(k).hbm_bandwidth) for k in
               ("a100-sxm", "a100-40gb", "h100-sxm", "h200", "b200")}
    assert figures == {"a100-sxm": (108, 2039e9), "a100-40gb": (108, 1555e9),
                       "h100-sxm": (132, 3350e9), "h200": (132, 4800e9), "b200": (148, 8000e9)}
