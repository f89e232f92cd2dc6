import pytest

from trainmath.activations import (AS2B_COEFFICIENT, SBH_COEFFICIENT, activation_bytes,
                                   block_coefficients, layer_activation_bytes)
from trainmath.models import preset


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


def test_llama_2_7b_at_2048_tokens():
    act = activation_bytes(preset("llama-2-7b"), s=2048, b=1)
    assert act.n == 32 * 2048 * 4096 * (34 + 5 * 32 * 2048 // 4096)
    assert act.format("GB", 1) == "30.6 GB"


@pytest.mark.parametrize("bad", [dict(s=0), dict(b=-1), dict(h=4096.5), dict(a="32")])
def test_bad_shapes_name_the_value(bad):
    args = dict(s=2048, b=1, h=4096, a=32) | bad
    (name, value), = bad.items()
    with pytest.raises(ValueError, match=rf"^{name} \(.*\) must be a positive whole number, got {value!r}"):
        layer_activation_bytes(**args)
