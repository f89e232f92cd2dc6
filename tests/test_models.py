import math
import re
from dataclasses import replace

import pytest

from trainmath.model.presets import (PRESETS, gpt_shape, is_gpt_style, megatron_omissions, megatron_param_count, preset)
from trainmath.model.shape import ModelShape, modified, param_breakdown, param_count, shape


def test_llama_2_7b_parameter_count_is_exact():
    """Touvron et al. 2023; the published checkpoint has 6,738,415,616 parameters."""
    m = preset("llama-2-7b")
    assert (m.hidden, m.ffn, m.layers, m.heads, m.vocab) == (4096, 11008, 32, 32, 32000)
    assert not m.tied_embeddings
    assert param_count(m) == 6_738_415_616
    parts = param_breakdown(m)
    assert parts.embedding == parts.lm_head == 32000 * 4096
    assert parts.per_layer == 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096


def test_tied_embeddings_drop_the_lm_head():
    m = shape("tiny", layers=2, hidden=64, heads=4, ffn=256, vocab=100, tied_embeddings=True)
    assert param_breakdown(m).lm_head == 0


def test_gpt_style_layer_is_12h2_plus_13h():
    """Narayanan et al. 2021, eq. (parameter count): 12lh^2 + 13lh per layer stack."""
    h = 768
    m = shape("gpt", layers=12, hidden=h, heads=12, ffn=4 * h, vocab=50257, mlp="gelu",
              norm="layernorm", bias=True, positions=1024)
    assert param_breakdown(m).per_layer == 12 * h * h + 13 * h


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"layers": 32.5}, "layers must be a positive whole number, got 32.5"),
        ({"layers": 0}, "layers must be a positive whole number, got 0"),
        ({"hidden": -4096}, "hidden must be a positive whole number, got -4096"),
        ({"heads": 30}, "hidden 4096 is not divisible by heads 30"),
        ({"kv_heads": 5}, "heads 32 is not divisible by kv_heads 5"),
        ({"mlp": "relu"}, "unknown mlp 'relu'; accepted: gelu, swiglu"),
        ({"norm": "batchnorm"}, "unknown norm 'batchnorm'; accepted: layernorm, rmsnorm"),
    ],
)
def test_bad_shapes(kwargs, message):
    base = dict(layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000)
    with pytest.raises(ValueError, match=message):
        shape("bad", **{**base, **kwargs})


def test_a_shape_is_checked_however_it_is_made():
    with pytest.raises(ValueError, match="heads 32 is not divisible by kv_heads 5"):
        ModelShape("bad", layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000, kv_heads=5)
    with pytest.raises(ValueError, match="layers must be a positive whole number, got 0"):
        replace(preset("llama-2-7b"), layers=0)


def test_modified_preset():
    """Llama-2-7B (config.json; LLaMA 7B's h, a, L in Touvron et al. 2023a, Table 2) with a GPT MLP: 4h wide, two matrices."""
    base = preset("llama-2-7b")
    m = modified(base, mlp="gelu", ffn=4 * 4096)
    assert m.name == "llama-2-7b (modified)" and m.source == ""
    assert param_count(m) - param_count(base) == 32 * (2 * 4096 * 16384 - 3 * 4096 * 11008)
    assert modified(base) is base
    # a multi-head shape stays multi-head when its heads change; a GQA one keeps its kv_heads
    assert modified(base, heads=64).kv_heads == 64
    assert modified(preset("llama-3-8b"), heads=64).kv_heads == 8
    with pytest.raises(ValueError, match="unknown shape field 'width'; accepted: layers, hidden, "):
        modified(base, width=1)
    with pytest.raises(ValueError, match="hidden 4096 is not divisible by heads 30"):
        modified(base, heads=30)


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown model preset 'llama-9'; accepted: llama-2-7b, llama-2-70b, llama-3-8b, "
                       "llama-3-70b, llama-33b, llama-65b, mistral-7b, gpt3-175b, llama-3-405b, megatron-gpt-1.7b, "):
        preset("llama-9")
    assert "llama-2-7b" in PRESETS


# --- presets: published exact counts --------------------------------------------------------

@pytest.mark.parametrize(
    ("name", "published"),
    [
        ("llama-2-7b", 6_738_415_616),   # HF meta-llama/Llama-2-7b-hf
        ("llama-3-8b", 8_030_261_248),   # HF meta-llama/Meta-Llama-3-8B
        ("mistral-7b", 7_241_732_096),   # HF mistralai/Mistral-7B-v0.1
        ("llama-2-70b", 68_976_648_192),  # HF meta-llama/Llama-2-70b-hf
        ("llama-3-70b", 70_553_706_496),  # HF meta-llama/Meta-Llama-3-70B
        ("llama-3.1-8b", 8_030_261_248),  # HF meta-llama/Llama-3.1-8B
        ("qwen2-7b", 7_615_616_512),      # HF Qwen/Qwen2-7B, "7.62B" (safetensors total)
        ("qwen2.5-7b", 7_615_616_512),    # HF Qwen/Qwen2.5-7B, "7.61B"
        ("qwen2-72b", 72_706_203_648),    # HF Qwen/Qwen2-72B, "72.7B"
        ("qwen2.5-14b", 14_770_033_664),  # HF Qwen/Qwen2.5-14B, "14.7B"
        ("qwen2.5-1.5b", 1_543_714_304),  # HF Qwen/Qwen2.5-1.5B, "1.54B"
    ],
)
def test_preset_counts_are_the_published_ones(name, published):
    assert param_count(preset(name)) == published


def test_every_preset_names_its_source():
    assert set(PRESETS) == {"llama-2-7b", "llama-2-70b", "llama-3-8b", "llama-3-70b",
                            "llama-33b", "llama-65b",
                            "mistral-7b", "gpt3-175b", "llama-3-405b", "megatron-gpt-1.7b", "megatron-gpt-3.6b", "megatron-gpt-7.5b", "megatron-gpt-18.4b", "megatron-gpt-39.1b", "megatron-gpt-76.1b", "megatron-gpt-145.6b", "megatron-gpt-310.1b", "megatron-gpt-529.6b", "megatron-gpt-1t", "megatron-gpt-22b", "megatron-gpt-175b", "mixtral-8x7b",
                            "qwen3-8b", "qwen3-30b-a3b", "deepseek-v3", "gemma-2-9b",
                            "gpt-oss-20b", "llama-3.1-8b", "qwen2-7b", "qwen2.5-1.5b", "qwen2.5-7b", "qwen2.5-14b", "qwen2-72b"}
    for m in PRESETS.values():  # a paper or report, by its authors and year
        assert re.search(r"(et al\.|Team|DeepSeek-AI|OpenAI) 20\d\d", m.source), m.name


def test_gqa_shrinks_only_the_key_and_value_projections():
    """Llama-3-8B: 8 key-value heads of 128, so K and V are 4096 × 1024 each."""
    m = preset("llama-3-8b")
    assert (m.kv_heads, m.head_dim, m.kv_dim) == (8, 128, 1024)
    parts = param_breakdown(m)
    assert parts.per_layer_attention == 2 * 4096 * 4096 + 2 * 4096 * 1024
    assert parts.per_layer_mlp == 3 * 4096 * 14336
    assert parts.per_layer_norms == 2 * 4096  # two RMSNorm gains, no biases
    assert parts.embedding == parts.lm_head == 128256 * 4096
    # Mistral-7B is the same layer with Llama 2's 32000-token vocabulary
    mistral = preset("mistral-7b")
    assert param_breakdown(mistral).per_layer == parts.per_layer
    assert param_count(m) - param_count(mistral) == 2 * (128256 - 32000) * 4096


def test_gpt3_175b():
    m = preset("gpt3-175b")
    assert is_gpt_style(m) and m.tied_embeddings and m.positions == 2048
    assert param_count(m) == 174_604_259_328  # Brown et al. 2020 round this to 175.0B
    assert param_breakdown(m).lm_head == 0


# --- Megatron-LM's closed form and exactly what it leaves out --------------------------------

@pytest.mark.parametrize(
    ("l", "h", "a", "v", "s"),
    [(96, 12288, 96, 50257, 2048), (24, 1024, 16, 50257, 1024), (48, 6144, 64, 51200, 2048), (2, 8, 2, 11, 5)],
)
def test_megatron_formula_misses_only_the_final_layernorm(l, h, a, v, s):
    """Narayanan et al. 2021 §5.1: P = 12lh²(1 + 13/(12h) + (V+s)/(12lh)) = 12lh² + 13lh + (V+s)h."""
    m = gpt_shape("gpt", layers=l, hidden=h, heads=a, vocab=v, positions=s)
    assert megatron_param_count(m) == 12 * l * h * h + 13 * l * h + (v + s) * h
    assert megatron_omissions(m) == {"final LayerNorm (gain and bias)": 2 * h}
    assert param_count(m) - megatron_param_count(m) == 2 * h


def test_megatron_formula_untied_misses_the_lm_head_too():
    h, v = 768, 50257
    m = gpt_shape("gpt", layers=12, hidden=h, heads=12, vocab=v, positions=1024, tied_embeddings=False)
    assert megatron_omissions(m) == {"final LayerNorm (gain and bias)": 2 * h,
                                     "untied output projection (LM head)": v * h}
    assert param_count(m) - megatron_param_count(m) == 2 * h + v * h


def test_megatron_formula_refuses_llama_shapes():
    with pytest.raises(ValueError, match=r"GPT-style shapes only .* 'llama-2-7b' has mlp='swiglu', ffn=11008"):
        megatron_param_count(preset("llama-2-7b"))
    with pytest.raises(ValueError, match="'gpt' has no learned positions"):
        megatron_param_count(replace(gpt_shape("gpt", layers=2, hidden=8, heads=2, vocab=11, positions=5),
                                     positions=0))


def test_the_coefficients_the_pages_state_are_the_papers():
    """Narayanan et al. 2021 §5.1: 12lh² weights and 13lh biases and LayerNorm parameters per
    GPT layer; a GPT MLP is 4h wide (Vaswani et al. 2017, §3.3: d_ff = 4 d_model)."""
    from trainmath.model.presets import (GPT_FFN_MULTIPLIER, MEGATRON_VECTORS_PER_H, MEGATRON_WEIGHTS_PER_H2)

    assert (MEGATRON_WEIGHTS_PER_H2, MEGATRON_VECTORS_PER_H, GPT_FFN_MULTIPLIER) == (12, 13, 4)
    m = gpt_shape("gpt", layers=1, hidden=64, heads=4, vocab=10, positions=8)
    parts = param_breakdown(m)
    h = 64
    weights = parts.per_layer - parts.per_layer_norms - (4 * h + 5 * h)  # minus the biases
    assert weights == MEGATRON_WEIGHTS_PER_H2 * h * h
    assert parts.per_layer - weights == MEGATRON_VECTORS_PER_H * h


# -- positions, layouts and how the presets are trained ----------------------------------------
from trainmath.memory.kernels import IMPLEMENTATIONS  # noqa: E402
from trainmath.memory.recipes import RECIPES  # noqa: E402
from trainmath.model.presets import CUSTOM_DEFAULTS, TRAINING_DEFAULTS, trained_with  # noqa: E402
from trainmath.model.shape import param_shapes  # noqa: E402


def test_presets_know_their_positions():
    """max_position_embeddings of each config.json (Llama-2: 4096, Llama-3: 8192, Mistral-7B-v0.1:
    32768 with a 4096 sliding window); GPT-3: n_ctx 2048, its learned positions."""
    expect = {"llama-2-7b": 4096, "llama-2-70b": 4096, "llama-3-8b": 8192, "llama-3-70b": 8192,
              "mistral-7b": 32768, "gpt3-175b": 2048}
    assert {k: preset(k).max_positions for k in expect} == expect
    assert preset("mistral-7b").sliding_window == 4096
    assert preset("gpt3-175b").positions == 2048


def test_param_shapes_count_the_tensors_adam_steps():
    """torch.optim.AdamW keeps one step counter per tensor: 291 for Llama-2-7B and Llama-3-8B
    (9 per layer, the embedding, the final norm and the LM head) and 292 for a 24-layer GPT
    with fused QKV (12 per layer, token and position embeddings, the final LayerNorm's gain and
    bias), as counted in PyTorch (docs/_data/measurements.json, step counters)."""
    assert param_shapes(preset("llama-2-7b")).tensors == 291
    assert param_shapes(preset("llama-3-8b")).tensors == 291
    xl = gpt_shape("gpt3-xl", layers=24, hidden=2048, heads=16, vocab=50257, positions=2048)
    assert param_shapes(xl).tensors == 292
    for m in (*PRESETS.values(), xl):
        ps = param_shapes(m)
        size = lambda shapes: sum(math.prod(t) for t in shapes)  # noqa: E731
        assert sum(size(layer) for layer in ps.per_layer) + size(ps.root) == param_count(m)
    assert param_shapes(preset("llama-3-8b")).largest == 128256 * 4096


def test_training_defaults_name_known_recipes_and_kernels():
    assert set(TRAINING_DEFAULTS) == set(PRESETS)
    for d in (*TRAINING_DEFAULTS.values(), CUSTOM_DEFAULTS):
        assert d.recipe in RECIPES and d.implementation in IMPLEMENTATIONS and d.source
    assert trained_with(preset("llama-3-8b")).implementation == "megatron-te"
    assert trained_with(modified(preset("llama-3-8b"), layers=2)) is CUSTOM_DEFAULTS
