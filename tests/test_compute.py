"""trainmath.time.flops: FLOPs, peaks, MFU/HFU, time to train -- checked against published runs."""

import math
from fractions import Fraction

import pytest

from trainmath.hardware import GPUS, Peak, gpu, peak_flops
from trainmath.time.flops import (PUBLISHED_RUNS, flops_per_token, hfu, matmul_params, mfu, model_flops_per_token, scaling_efficiency, time_to_train, tokens_per_second, training_flops)
from trainmath.model.shape import shape
from trainmath.units import GB


def gpt(h, layers, heads, vocab=51200):
    return shape("gpt", layers=layers, hidden=h, heads=heads, ffn=4 * h, vocab=vocab, mlp="gelu",
                 norm="layernorm", bias=True, positions=2048, dropout=True)


# -- 6ND -----------------------------------------------------------------------------------------
def test_gpt3_training_compute():
    """Brown et al. 2020, Table D.1: GPT-3 175B (174,600M parameters, 300B tokens) took
    3.14E+23 FLOPs = 3.64E+03 PF-days."""
    c = training_flops(174_600_000_000, 300_000_000_000)
    assert c == 6 * 174_600 * 10**6 * 300 * 10**9
    assert f"{c:.2E}" == "3.14E+23"
    assert f"{c / (10**15 * 86400):.2E}" == "3.64E+03"


def test_training_flops_rejects_bad_input():
    with pytest.raises(ValueError, match="tokens .D. must be a positive whole number, got 0"):
        training_flops(10**9, 0)


# -- PaLM model FLOPs and MFU --------------------------------------------------------------------
def test_palm_540b_mfu_is_reproduced():
    """Chowdhery et al. 2022: 540.35B parameters, L = 118, H = 48 heads of Q = 256, T = 2048;
    238.3K tokens/s on 6144 TPU v4 chips (275 TFLOP/s bf16 each) is 46.2% MFU."""
    per_token = model_flops_per_token(540_350_000_000, 118, 2048, 48 * 256)
    assert per_token == 6 * 540_350_000_000 + 12 * 118 * 48 * 256 * 2048
    tpu_v4 = Peak("TPU v4", "bf16", 275e12, "Google TPU v4 documentation: 275 TFLOPS bf16")
    u = mfu(238_300, per_token, 6144, tpu_v4)
    assert round(u.fraction * 100, 1) == 46.2
    assert u.achieved == pytest.approx(238_300 * per_token / 6144)
    palm = next(r for r in PUBLISHED_RUNS if r.name == "PaLM 540B")
    assert round(u.fraction, 3) == palm.mfu


def test_matmul_params_gpt_and_llama():
    h, L, V = 12288, 96, 51200
    assert matmul_params(gpt(h, L, 96, V)) == 12 * L * h * h + V * h  # biases, norms, lookups out
    llama2_7b = shape("llama-2-7b", layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000)
    assert matmul_params(llama2_7b) == 32 * (4 * 4096**2 + 3 * 4096 * 11008) + 32000 * 4096


def test_flops_per_token_matches_megatron_formulas():
    """GPT-3 175B, s = 2048. Per token (divide the papers' per-batch formulas by B·s):
    model (Korthikanti et al. 2022)      72lh²(1 + s/(6h) + V/(12lh)) = 72lh² + 12lhs + 6Vh
    selective (Korthikanti et al. 2022)  72lh²(1 + s/(3h) + V/(12lh)) = 72lh² + 24lhs + 6Vh
    full (Narayanan et al. 2021, eq. 3)  96lh²(1 + s/(6h) + V/(16lh)) = 96lh² + 16lhs + 6Vh"""
    h, L, s, V = 12288, 96, 2048, 51200
    m = gpt(h, L, 96, V)
    none = flops_per_token(m, s)
    assert none.model == none.hardware == 72 * L * h * h + 12 * L * h * s + 6 * V * h
    assert Fraction(none.model) == 72 * L * h * h * (1 + Fraction(s, 6 * h) + Fraction(V, 12 * L * h))
    sel = flops_per_token(m, s, "selective")
    assert sel.model == none.model
    assert Fraction(sel.hardware) == 72 * L * h * h * (1 + Fraction(s, 3 * h) + Fraction(V, 12 * L * h))
    full = flops_per_token(m, s, "full")
    assert Fraction(full.hardware) == 96 * L * h * h * (1 + Fraction(s, 6 * h) + Fraction(V, 16 * L * h))
    assert full.recompute_overhead == Fraction(full.hardware, full.model) - 1


@pytest.mark.parametrize(
    ("name", "h", "heads", "layers"),
    [("GPT 22B", 6144, 64, 48), ("GPT 175B", 12288, 96, 96), ("GPT 530B", 20480, 128, 105),
     ("GPT 1T", 25600, 160, 128)],
)
def test_korthikanti_hfu_over_mfu(name, h, heads, layers):
    """Korthikanti et al. 2022, Table 5 (s = 2048, V = 51200, selective recomputation): the
    published HFU is the published MFU times hardware/model FLOPs, within their rounding."""
    run = next(r for r in PUBLISHED_RUNS if r.name == name)
    f = flops_per_token(gpt(h, layers, heads), 2048, "selective")
    ratio = f.hardware / f.model
    low, high = (run.mfu - 0.0005) * ratio, (run.mfu + 0.0005) * ratio
    assert low <= run.hfu + 0.0005 and high >= run.hfu - 0.0005, (low, high, run.hfu)


def test_model_flops_bad_input():
    with pytest.raises(ValueError, match=r"attention_width \(H·Q\) must be a positive whole number"):
        model_flops_per_token(10**9, 12, 1024, 0)
    with pytest.raises(ValueError, match="unknown recompute 'half'; accepted: none, selective, full"):
        flops_per_token(gpt(768, 12, 12), 1024, "half")


# -- the GPU table -------------------------------------------------------------------------------
def test_gpu_table_dense_peaks():
    assert gpu("a100-sxm").dense_16bit == 312e12 and gpu("a100-sxm").dense_fp8 is None
    h100 = gpu("h100-sxm")
    assert (h100.dense_16bit, h100.dense_fp8) == (989.4e12, 1978.9e12)
    # the datasheet's sparse figures are twice the dense ones: 1,979 and 3,958 TFLOPS
    assert round(2 * h100.dense_16bit / 1e12) == 1979 and round(2 * h100.dense_fp8 / 1e12) == 3958
    assert gpu("h200").dense_16bit == h100.dense_16bit
    assert (gpu("b200").dense_16bit, gpu("b200").dense_fp8) == (2.25e15, 4.5e15)
    assert all(g.source.startswith("NVIDIA") for g in GPUS.values())


def test_gpu_memory_as_sold_as_built_and_as_nvidia_smi_reports_it():
    """Datasheet labels: A100 80GB HBM2e, A100 40GB HBM2, H100 SXM 80GB HBM3, H800 80GB HBM3,
    H200 141GB HBM3e, HGX B200 180GB HBM3E (192GB raw at Blackwell's launch). nvidia-smi's
    memory.total, as public outputs print it: 81920MiB, 40960MiB, 81559MiB, 143771MiB and
    183359MiB (the H800 taken as the H100's 81559MiB)."""
    MiB, GiB = 2**20, 2**30
    labels = {k: (g.memory.label, g.memory.marketed.n) for k, g in GPUS.items()}
    assert labels == {"a100-sxm": ("80GB HBM2e", 80 * GB), "a100-40gb": ("40GB HBM2", 40 * GB),
                      "h100-sxm": ("80GB HBM3", 80 * GB), "h800": ("80GB HBM3", 80 * GB),
                      "h200": ("141GB HBM3e", 141 * GB), "b200": ("180GB HBM3E", 180 * GB)}
    reported = {k: g.memory.reported.n for k, g in GPUS.items()}
    assert reported == {"a100-sxm": 81920 * MiB, "a100-40gb": 40960 * MiB,
                        "h100-sxm": 81559 * MiB, "h800": 81559 * MiB, "h200": 143771 * MiB,
                        "b200": 183359 * MiB}
    assert all(g.memory.usable == g.memory.reported for g in GPUS.values())
    # "80GB" is binary: the A100 reports exactly 80 GiB, about 85.9e9 bytes, not 80e9
    a100 = gpu("a100-sxm").memory
    assert a100.hbm.n == a100.usable.n == 80 * GiB
    assert round(gpu("h100-sxm").memory.usable.n / 1e9, 1) == 85.5  # "about 85.5 × 10^9 bytes"
    assert gpu("h100-sxm").memory.hbm.n == 5 * 16 * GiB  # five 16 GiB HBM3 stacks
    # B200: 192 GB raw vs 180 GB enabled is one part, raw and enabled HBM
    b200 = gpu("b200").memory
    assert (b200.hbm.n, b200.marketed.n) == (192 * GiB, 180 * GB)
    assert b200.marketed < b200.usable < b200.hbm
    # every card reports more than its label read in decimal GB
    assert all(g.memory.usable > g.memory.marketed for g in GPUS.values())


def test_peak_names_its_denominator():
    p = peak_flops("h100-sxm", "fp8")
    assert p.flops == 1978.9e12
    assert p.describe() == "dense fp8 peak of one H100 SXM, 1,978.9 TFLOP/s"
    assert peak_flops("a100-sxm", "fp16").flops == 312e12


def test_gpu_bad_input():
    with pytest.raises(ValueError, match="unknown GPU 'v100'; accepted: a100-sxm, a100-40gb, h100-sxm, h800, h200, b200, a100-80gb"):
        gpu("v100")
    with pytest.raises(ValueError, match="A100 SXM 80GB has no fp8 tensor cores"):
        peak_flops("a100-sxm", "fp8")
    with pytest.raises(ValueError, match="unknown precision 'int8'; accepted: bf16, fp16, fp8"):
        peak_flops("h100-sxm", "int8")


# -- MFU, HFU, time to train, scaling --------------------------------------------------------------
def test_mfu_and_hfu_by_hand():
    llama = shape("llama-3-70b", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256)
    f = flops_per_token(llama, 8192, "full")
    n = 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672) + 128256 * 8192
    assert f.model == 6 * n + 12 * 80 * 8192 * 8192
    peak = peak_flops("h100-sxm")
    u = mfu(400_000, f, 1024, peak)
    assert u.fraction == pytest.approx(400_000 * f.model / (1024 * 989.4e12))
    assert u.describe().startswith("MFU ") and "dense bf16 peak of one H100 SXM, 989.4 TFLOP/s" in u.describe()
    v = hfu(400_000, f, 1024, peak)
    assert v.fraction == pytest.approx(400_000 * f.hardware / (1024 * 989.4e12))
    assert v.fraction > u.fraction


def test_time_to_train_and_throughput_by_hand():
    """7B-class model, 2T tokens, 1024 H100s at 40% MFU: D·F / (0.4 · 1024 · 989.4e12) seconds."""
    flops = 6 * 7 * 10**9 + 12 * 32 * 4096 * 4096
    peak = peak_flops("h100-sxm")
    seconds = time_to_train(2 * 10**12, flops, 1024, peak, 0.4)
    assert seconds == pytest.approx(2e12 * flops / (0.4 * 1024 * 989.4e12))
    assert 2.7 < seconds / 86400 < 2.8  # 9.69e22 FLOP at 4.05e17 FLOP/s: about 2.77 days
    assert tokens_per_second(0.4, flops, 1024, peak) == pytest.approx(0.4 * 1024 * 989.4e12 / flops)
    with pytest.raises(ValueError, match="mfu must be a fraction in .0, 1., got 40"):
        time_to_train(10**12, flops, 8, peak, 40)


def test_scaling_efficiency():
    # 8 GPUs: 10,000 tokens/s; 64 GPUs: 72,000 tokens/s -> 9,000 vs 10,000 per 8 GPUs = 90%
    assert scaling_efficiency(10_000, 8, 72_000, 64) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="tokens_per_second must be a positive number, got -1"):
        scaling_efficiency(10_000, 8, -1, 64)


def test_utilization_bad_input():
    peak = peak_flops("h100-sxm")
    with pytest.raises(ValueError, match="gpus must be a positive whole number, got 0"):
        mfu(1000, 10**9, 0, peak)
    with pytest.raises(ValueError, match="peak must be a Peak"):
        mfu(1000, 10**9, 8, 989.4e12)
    with pytest.raises(ValueError, match="hfu needs a FlopsPerToken"):
        hfu(1000, 10**9, 8, peak)
    assert math.isclose(mfu(1000, 10**9, 1, Peak("x", "bf16", 1e12, "")).fraction, 1.0)
    with pytest.raises(ValueError, match=r"1001 tokens/s on 1 GPUs is 1.0 TFLOP/s per GPU, 100% of the "
                                         r"dense bf16 peak of one x, 1.0 TFLOP/s: above the peak"):
        mfu(1001, 10**9, 1, Peak("x", "bf16", 1e12, ""))



def test_the_flops_coefficients_are_kaplan_s_and_palm_s():
    """Kaplan et al. 2020 §2.1: 6N per token (2N forward, 4N backward); Chowdhery et al. 2022,
    Appendix B: 12·L·H·Q·T for the attention scores."""
    from trainmath.time.flops import ATTENTION_FLOPS_COEFFICIENT, PARAM_FLOPS_PER_TOKEN

    assert (PARAM_FLOPS_PER_TOKEN, ATTENTION_FLOPS_COEFFICIENT) == (6, 12)
