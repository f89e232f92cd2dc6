import pytest

from trainmath.models import PRESETS, param_breakdown, param_count, preset, shape


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


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown model preset 'llama-9'; accepted: llama-2-7b"):
        preset("llama-9")
    assert "llama-2-7b" in PRESETS
