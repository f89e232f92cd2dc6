from fractions import Fraction

import pytest

from trainmath.memory.activations import (AS2B_COEFFICIENT, KORTHIKANTI_LAYER, SBH_COEFFICIENT, activation_bytes, block_coefficients, layer_activation_bytes, layer_activations)
from trainmath.parallel.schedules import in_flight
from trainmath.memory.embedding_and_loss import input_activations, output_activations
from trainmath.memory.stages import stage_activations
from trainmath.model.presets import gpt_shape, preset


def test_eq1_coefficients_and_their_derivation():
    """Korthikanti et al. 2022 §4.1: attention 11sbh + 5as²b, MLP 19sbh, LayerNorms 4sbh."""
    assert (SBH_COEFFICIENT, AS2B_COEFFICIENT) == (34, 5)
    assert block_coefficients("attention") == (11, 5)
    assert block_coefficients("MLP") == (19, 0)
    assert block_coefficients("LayerNorm") == (4, 0)
    with pytest.raises(ValueError, match="unknown block 'mlp'; accepted: LayerNorm, MLP, attention"):
        block_coefficients("mlp")


@pytest.mark.parametrize(("s", "b", "h", "a"), [(2048, 1, 4096, 32), (4096, 4, 12288, 96), (1, 1, 8, 2)])
def test_eq1(s, b, h, a):
    assert layer_activation_bytes(s, b, h, a).n == s * b * h * 34 + 5 * a * s * s * b


def test_eq1_at_llama_2_7b_size_2048_tokens():
    """Eq. 1 with Llama-2-7B's h, a and L: a GPT model of that size, not Llama-2-7B."""
    act = activation_bytes(preset("llama-2-7b"), s=2048, b=1)
    assert act.n == 32 * 2048 * 4096 * (34 + 5 * 32 * 2048 // 4096)
    assert act.format("GB", 1) == "30.6 GB"


def test_llama_2_7b_as_trained_is_counted_tensor_by_tensor_not_by_eq1():
    """Llama-2-7B (LLaMA Table 2 and config.json: h 4096, a 32, L 32, SwiGLU 11008, V 32000, RMSNorm,
    no dropout) at its 4096-token context (Llama 2 Table 1) with attention that keeps no s×s
    tensor (LLaMA §2.4): counted by hand from the operations, not from eq. 1."""
    s, b, h, a, f, L, V = 4096, 1, 4096, 32, 11008, 32, 32000
    sb = s * b
    layer = (2 * 2 * sb * h      # two RMSNorm inputs
             + 4 * 2 * sb        # their fp32 1/rms per token
             + 2 * 2 * sb * h    # their outputs: the QKV input and the MLP input
             + 3 * 2 * sb * h    # Q, K, V (32 KV heads: K and V are h wide)
             + 4 * a * sb        # fp32 log-sum-exp per head and token
             + 2 * sb * h        # attention output O, the output projection's input
             + 4 * 2 * sb * f)   # SwiGLU: gate, up, SiLU(gate), their product
    embedding = 8 * sb           # int64 token ids
    output = 2 * sb * h + 4 * sb + 2 * sb * h + 4 * sb * V + 8 * sb + 4
    rotary = 2 * 2 * s * (h // a)  # bf16 cos and sin tables (s × head_dim), shared by the layers
    got = stage_activations(preset("llama-2-7b"), s, b, attention="flash")
    assert got.total.n == L * layer + embedding + output + rotary
    assert got.total.format("GB", 1) == "20.7 GB"
    # eq. 1 describes a GPT layer of this width, not this model: 3.25 GB a layer, not 0.6
    assert layer_activation_bytes(s, b, h, a).n > 5 * layer


@pytest.mark.parametrize("bad", [dict(s=0), dict(b=-1), dict(h=4096.5), dict(a="32")])
def test_bad_shapes_name_the_value(bad):
    args = dict(s=2048, b=1, h=4096, a=32) | bad
    (name, value), = bad.items()
    with pytest.raises(ValueError, match=rf"^{name} \(.*\) must be a positive whole number, got {value!r}"):
        layer_activation_bytes(**args)


# --- any shape, tensor by tensor: Korthikanti et al. 2022, Table 2, every row exactly --------

GPT_SHAPES = [  # (s, b, h, a, tp): GPT-3 175B at tp = 8, the paper's 22B model, and small ones
    (2048, 1, 12288, 96, 8),
    (2048, 4, 6144, 64, 8),
    (4096, 2, 4096, 32, 4),
    (1024, 3, 1536, 12, 2),
    (16, 2, 64, 4, 4),
]


def _gpt(h, a):
    return gpt_shape("gpt", layers=4, hidden=h, heads=a, vocab=51200, positions=2048)


def _table2(row, s, b, h, a, tp):
    """Korthikanti et al. 2022, Table 2, in bytes, as exact fractions (the paper's t is tp)."""
    sbh = s * b * h
    return {
        "none": sbh * (34 + Fraction(5 * a * s, h)),
        "tp": sbh * (10 + Fraction(24, tp) + Fraction(5 * a * s, h * tp)),
        "tp+sp": Fraction(sbh, tp) * (34 + Fraction(5 * a * s, h)),
        "tp+selective": sbh * (10 + Fraction(24, tp)),
        "tp+sp+selective": sbh * Fraction(34, tp),
        "full": 2 * sbh,
    }[row]


_ROWS = {
    "none": dict(),
    "tp": dict(tp="tp"),
    "tp+sp": dict(tp="tp", sequence_parallel=True),
    "tp+selective": dict(tp="tp", recompute="selective"),
    "tp+sp+selective": dict(tp="tp", sequence_parallel=True, recompute="selective"),
    "full": dict(tp="tp", recompute="full"),
}


@pytest.mark.parametrize("row", _ROWS)
@pytest.mark.parametrize(("s", "b", "h", "a", "tp"), GPT_SHAPES)
def test_korthikanti_table2_every_row(row, s, b, h, a, tp):
    kwargs = {k: (tp if v == "tp" else v) for k, v in _ROWS[row].items()}
    got = layer_activations(_gpt(h, a), s, b, **kwargs)
    assert Fraction(got.korthikanti.n) == _table2(row, s, b, h, a, tp)


def test_table2_rows_at_t_1_collapse_to_eq1():
    s, b, h, a = 2048, 1, 4096, 32
    for row in ("tp", "tp+sp"):
        kwargs = {k: (1 if v == "tp" else v) for k, v in _ROWS[row].items()}
        assert layer_activations(_gpt(h, a), s, b, **kwargs).korthikanti == layer_activation_bytes(s, b, h, a)


def test_gpt_blocks_are_the_papers_11_19_and_4():
    """§4.1: attention 11sbh + 5as²b, MLP 19sbh, LayerNorms 4sbh; plus 16 bytes a token of stats."""
    s, b, h, a = 512, 2, 1024, 16
    got = layer_activations(_gpt(h, a), s, b)
    blocks = got.by_block()
    assert blocks["attention"].n == 11 * s * b * h + 5 * a * s * s * b
    assert blocks["MLP"].n == 19 * s * b * h
    assert blocks["norms"].n == 4 * s * b * h + got.statistics.n
    assert got.statistics.n == 2 * 2 * 4 * s * b  # two LayerNorms × (mean, 1/σ) × fp32
    # the old table agrees tensor for tensor
    assert [t.sbh for t in KORTHIKANTI_LAYER if t.block == "MLP"] == [2, 8, 8, 1]
    assert [t.bytes.n for t in got.tensors if t.block == "MLP"] == [2 * s * b * h, 8 * s * b * h,
                                                                    8 * s * b * h, s * b * h]


def test_sequence_parallel_needs_s_divisible():
    with pytest.raises(ValueError, match=r"seq_len 100 is not divisible by tp × cp = 8 × 1 = 8"):
        layer_activations(_gpt(1024, 16), 100, 1, tp=8, sequence_parallel=True)


# --- what real models change ----------------------------------------------------------------

def test_llama_layer_swiglu_gqa_rmsnorm_no_dropout():
    """Llama-3-8B, eager attention, one device: the tensors below and nothing else."""
    m = preset("llama-3-8b")
    s, b, h, a, f, kv = 8192, 1, 4096, 32, 14336, 1024
    got = layer_activations(m, s, b)
    sb = s * b
    expected = (2 * sb * h * 2        # two RMSNorm inputs
                + 2 * sb * h * 2      # their outputs: the QKV input and the MLP input
                + 2 * sb * h * 3      # Q, and K, V repeated to all 32 heads
                + 2 * a * s * s * b   # softmax output; no dropout so nothing else s×s
                + 2 * sb * h          # context, input to the output projection
                + 2 * sb * f * 4)     # SwiGLU: gate, up, SiLU(gate), product
    assert got.korthikanti.n == expected
    assert got.statistics.n == 2 * 4 * sb  # one fp32 1/rms per token per RMSNorm
    assert not any("dropout" in t.name for t in got.tensors)


def test_fused_swiglu_saves_three_ffn_wide_tensors_not_four():
    """Megatron-LM's SwiGLUFunction (megatron/core/fusions/fused_bias_swiglu.py) saves only its
    input, the gate-and-up projection output (2 × ffn), and recomputes SiLU in the backward;
    the down projection saves the SwiGLU output (ffn). Eager PyTorch saves gate, up, SiLU(gate)
    and their product: 4 × ffn."""
    m = preset("llama-3-8b")
    s, b, f = 8192, 1, 14336
    eager = layer_activations(m, s, b).by_block()["MLP"]
    fused = layer_activations(m, s, b, mlp_kernel="fused").by_block()["MLP"]
    mlp_input = 2 * s * b * 4096
    assert eager.n == mlp_input + 4 * 2 * s * b * f
    assert fused.n == mlp_input + 3 * 2 * s * b * f
    # a GeLU MLP saves two ffn-wide tensors with either kernel
    gpt = _gpt(1024, 16)
    assert layer_activations(gpt, 2048, 1, mlp_kernel="fused") == layer_activations(gpt, 2048, 1)
    with pytest.raises(ValueError, match="unknown mlp_kernel 'triton'; accepted: eager, fused"):
        layer_activations(m, s, b, mlp_kernel="triton")


def test_flash_attention_drops_the_s2_term_and_keeps_the_lse():
    m = preset("llama-3-8b")
    s, b, h, a, kv = 8192, 2, 4096, 32, 1024
    eager = layer_activations(m, s, b)
    flash = layer_activations(m, s, b, attention="flash")
    diff = eager.total.n - flash.total.n
    # eager: softmax 2as²b, K and V at h wide; flash: K and V at kv wide, fp32 lse per head
    assert diff == 2 * a * s * s * b + 2 * 2 * s * b * (h - kv) - 4 * a * s * b
    lse = [t for t in flash.tensors if "log-sum-exp" in t.name]
    assert lse[0].bytes.n == 4 * a * s * b
    # selective recomputation has nothing left to drop once attention is flash
    assert layer_activations(m, s, b, attention="flash", recompute="selective") == flash


def test_gpt_with_flash_is_34sbh_plus_lse():
    s, b, h, a = 2048, 1, 12288, 96
    got = layer_activations(_gpt(h, a), s, b, attention="flash")
    assert got.korthikanti.n == 34 * s * b * h + 4 * a * s * b


def test_context_parallel_splits_the_sequence():
    m = preset("llama-3-70b")
    one = layer_activations(m, 32768, 1, tp=8, sequence_parallel=True, attention="flash")
    cp4 = layer_activations(m, 32768, 1, tp=8, sequence_parallel=True, cp=4, attention="flash")
    assert cp4.total * 4 == one.total
    with pytest.raises(ValueError, match=r"cp = 4\) is modelled with attention='flash' only"):
        layer_activations(m, 32768, 1, cp=4)


def test_full_recompute_keeps_the_input_split_only_by_sequence_parallelism():
    m = preset("llama-2-7b")
    assert layer_activations(m, 4096, 1, tp=4, recompute="full").total.n == 2 * 4096 * 4096
    assert layer_activations(m, 4096, 1, tp=4, sequence_parallel=True, recompute="full").total.n == 2 * 1024 * 4096


def test_tensor_parallel_must_divide_heads_kv_heads_and_ffn():
    with pytest.raises(ValueError, match=r"kv_heads 8 is not divisible by tp 16"):
        layer_activations(preset("llama-3-70b"), 4096, 1, tp=16)
    with pytest.raises(ValueError, match="unknown attention 'sdpa'; accepted: eager, flash"):
        layer_activations(preset("llama-3-70b"), 4096, 1, attention="sdpa")
    with pytest.raises(ValueError, match="unknown recompute 'some'; accepted: none, selective, full"):
        layer_activations(preset("llama-3-70b"), 4096, 1, recompute="some")


# --- pipeline stages, the embedding and the output layer ------------------------------------

def test_first_stage_holds_pp_microbatches_eq5():
    """Korthikanti §4.2.3: the first stage holds pp micro-batches of L/pp layers = L layers."""
    m = gpt_shape("gpt-3", layers=96, hidden=12288, heads=96, vocab=51200, positions=2048)
    kw = dict(tp=8, sequence_parallel=True, recompute="selective")
    stage = stage_activations(m, 2048, 1, pp=8, **kw)
    per_layer = layer_activations(m, 2048, 1, **kw).total
    assert stage.layers == per_layer * 96
    assert stage.layers_on_stage == 12 and stage.held == 8
    # interleaved: × (1 + (pp-1)/(pp·v)) with v chunks per device (the paper writes p and m)
    inter = stage_activations(m, 2048, 1, pp=8, v=4, **kw)
    assert inter.layers == per_layer * 96 * (1 + Fraction(7, 32))
    assert in_flight(8, v=3) == 8 + Fraction(7, 3)
    # later stages hold fewer: stage i holds pp - i
    assert [in_flight(4, stage=i) for i in range(4)] == [4, 3, 2, 1]
    assert in_flight(8, microbatches=3) == 3
    # Megatron's interleaved warm-up reproduces Korthikanti's factor on the first stage
    for pp, v in [(2, 2), (4, 5), (8, 3), (35, 3)]:
        assert in_flight(pp, v=v) == pp * (1 + Fraction(pp - 1, pp * v))
    assert [in_flight(4, v=2, stage=i) for i in range(4)] == [
        Fraction(2 * (3 - i) + 4 + 1, 2) for i in range(4)]
    with pytest.raises(ValueError, match=r"stage must be a whole number from 0 to pp - 1 = 3, got 4"):
        in_flight(4, stage=4)


def test_embedding_and_output_layer_section_4_3():
    m = gpt_shape("gpt", layers=4, hidden=1024, heads=16, vocab=51200, positions=2048)
    s, b, tp = 2048, 2, 4
    emb = input_activations(m, s, b, tp=tp, sequence_parallel=True)
    assert [x.bytes.n for x in emb.tensors] == [8 * s * b, 8 * s, s * b * 1024 // tp]
    out = output_activations(m, s, b, tp=tp, sequence_parallel=True)
    # 2sbh/tp (final LayerNorm input) + 2sbh/tp (LM head input) + 4sbV/tp (fp32 logits): §4.3
    assert out.korthikanti.n == 2 * s * b * 1024 // tp * 2 + 4 * s * b * 51200 // tp + 8 * s * b + 4
    # pp = 1: the only stage has the embedding (one micro-batch) and the output layer
    one = stage_activations(m, s, b, tp=tp, sequence_parallel=True)
    assert one.total == one.layers + emb.total + out.total
    last = stage_activations(m, s, b, tp=tp, sequence_parallel=True, pp=4, stage=3)
    assert last.inputs.n == 0 and last.outputs == out.total and last.held == 1
    first = stage_activations(m, s, b, tp=tp, sequence_parallel=True, pp=4)
    assert first.outputs.n == 0 and first.inputs == emb.total * 4


# -- implementation profiles ------------------------------------------------------------------
from trainmath.memory.kernels import IMPLEMENTATIONS, implementation, kernel_problems  # noqa: E402
from trainmath.memory.embedding_and_loss import rotary_activations  # noqa: E402
from trainmath.model.shape import modified  # noqa: E402
from trainmath.precision import activation_coefficients  # noqa: E402


def test_profiles():
    assert list(IMPLEMENTATIONS) == ["megatron-te", "megatron-eager", "hf-sdpa", "hf-eager"]
    assert [(i.family, i.attention) for i in IMPLEMENTATIONS.values()] == [
        ("megatron", "flash"), ("megatron", "eager"), ("hf", "flash"), ("hf", "eager")]
    with pytest.raises(ValueError, match="unknown implementation 'vllm'; accepted: megatron-te"):
        implementation("vllm")


def test_hugging_face_llama_layer_by_hand():
    """transformers' LlamaRMSNorm (modeling_llama.py): hidden_states.to(float32) saves an fp32
    copy of the input (4sbh), rsqrt an fp32 1/rms per token, weight * x.to(input_dtype) the
    16-bit normalised input (2sbh) and its output feeds the projections (2sbh). SDPA with
    is_causal and native GQA keeps Q, K, V at their widths, the output and an fp32 log-sum-exp;
    the MLP is eager SwiGLU (4 × 2sbf). Measured in PyTorch: 381,960,192 bytes for Llama-2-7B at
    s = 2048 (docs/_data/measurements.json, hf-sdpa bf16)."""
    s, b, h, a, f = 2048, 1, 4096, 32, 11008
    sb = s * b
    norm = 4 * sb * h + 4 * sb + 2 * sb * h + 2 * sb * h
    attention = 2 * sb * h * 4 + 4 * a * sb
    mlp = 4 * 2 * sb * f
    layer = layer_activations(preset("llama-2-7b"), s, b, implementation="hf-sdpa")
    assert layer.total.n == 2 * norm + attention + mlp == 381_960_192


def test_hugging_face_eager_softmax_is_fp32_beside_its_16_bit_copy():
    """eager_attention_forward: softmax(..., dtype=torch.float32).to(query.dtype): 4 + 2 bytes per
    score, where Megatron-style eager attention keeps 2."""
    s, a = 2048, 32
    hf = layer_activations(preset("llama-2-7b"), s, 1, implementation="hf-eager")
    hf_flash = layer_activations(preset("llama-2-7b"), s, 1, implementation="hf-sdpa")
    meg = layer_activations(preset("llama-2-7b"), s, 1, implementation="megatron-eager")
    meg_flash = layer_activations(preset("llama-2-7b"), s, 1, implementation="megatron-te")
    lse = 4 * a * s  # flash keeps this instead; eager's context is the size of flash's output
    assert (hf.total - hf_flash.total).n == (4 + 2) * a * s * s - lse
    assert (meg.total - meg_flash.total).n == 2 * a * s * s - lse


def test_mistral_window_mask_from_a_sequence_as_long_as_the_window():
    """transformers' _ignore_causal_mask_sdpa keeps a mask once kv_length >= the sliding window;
    use_gqa_in_sdpa then repeats K and V (no native GQA with a mask), and PyTorch's SDPA saves
    the additive 16-bit b·s² mask. Below the window, Llama-3-8B's layer."""
    mistral, llama3 = preset("mistral-7b"), preset("llama-3-8b")
    below = layer_activations(mistral, 2048, 1, implementation="hf-sdpa")
    assert below == layer_activations(llama3, 2048, 1, implementation="hf-sdpa")
    at = layer_activations(mistral, 4096, 1, implementation="hf-sdpa")
    plain = layer_activations(llama3, 4096, 1, implementation="hf-sdpa")
    kv = 1024
    assert (at.total - plain.total).n == 2 * 4096 * 4096 + 2 * 2 * 4096 * (4096 - kv)
    assert at.total.n == 906_526_720  # measured: mistral-7b hf-sdpa bf16 s4096, one layer


def test_autocast_gpt_layer_is_38_and_7():
    """Under torch.autocast a GPT layer keeps sbh(38 + 7as/h) bytes plus the norms' statistics
    and the weight copies: the tensors trainmath.precision.activation_coefficients derives from
    Korthikanti et al.'s list (the same rule, counted two ways)."""
    gpt = gpt_shape("g", layers=2, hidden=2048, heads=16, vocab=50257, positions=2048)
    s = 2048
    sbh, as2b = activation_coefficients(2, autocast=True)
    layer = layer_activations(gpt, s, 1, attention="eager", autocast=True)
    assert layer.korthikanti.n == sbh * s * 2048 + as2b * 16 * s * s
    assert layer.weight_copies.n == 2 * 12 * 2048 * 2048  # every Linear weight, 16 bits


def test_rotary_tables_are_shared_once_per_forward():
    """cos and sin, s × head_dim each, in the hidden states' format (fp32 under autocast)."""
    llama = preset("llama-2-7b")
    assert rotary_activations(llama, 2048).total.n == 2 * 2 * 2048 * 128
    assert rotary_activations(llama, 2048, autocast=True).total.n == 2 * 4 * 2048 * 128
    assert rotary_activations(gpt_shape("g", layers=1, hidden=64, heads=4, vocab=10,
                                        positions=16), 16).total.n == 0


def test_hugging_face_kernels_need_a_llama_shape_and_no_model_parallelism():
    gpt = modified(preset("llama-2-7b"), mlp="gelu", norm="layernorm", dropout=True)
    with pytest.raises(ValueError, match="Hugging Face's Llama/Mistral kernels cannot run"):
        layer_activations(gpt, 2048, 1, implementation="hf-sdpa")
    (problem,) = kernel_problems(preset("llama-2-7b"), "hf-sdpa", tp=2)
    assert "tp = 2" in problem.message and {"implementation", "tp"} <= set(problem.fields)
    assert kernel_problems(preset("llama-2-7b"), "megatron-te", tp=2) == []
    with pytest.raises(ValueError, match="attention 'eager' contradicts implementation 'hf-sdpa'"):
        layer_activations(preset("llama-2-7b"), 2048, 1, implementation="hf-sdpa",
                          attention="eager")
