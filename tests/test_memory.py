from fractions import Fraction

import pytest

from trainmath.memory import (OPTIMIZERS, RECIPES, bytes_per_param, training_state)
from trainmath.units import GB, Bytes


def test_mixed_precision_adam_is_zero_paper_16_bytes():
    """ZeRO §3.1: 2Ψ + 2Ψ + KΨ with K = 12."""
    for precision in ("bf16-mixed", "fp16-mixed"):
        b = bytes_per_param(precision, "adam")
        assert (b.weights, b.gradients, b.master_weights, b.optimizer_states) == (2, 2, 4, 8)
        assert b.optimizer_side == 12
        assert b.total == 16


@pytest.mark.parametrize(
    ("precision", "optimizer", "total"),
    [
        ("fp32", "adamw", 16),  # 4 + 4 + 0 + 8: no saving from mixed precision on model state
        ("fp32", "sgd", 8),
        ("fp32", "sgd-momentum", 12),
        ("bf16-mixed", "sgd", 8),
        ("bf16-mixed", "sgd-momentum", 12),
        ("bf16", "adamw", 8),  # pure bf16: moments in bf16 too
        ("bf16", "sgd", 4),
        ("bf16-mixed", "adam-8bit", 10 + Fraction(8, 2048)),  # Dettmers et al. 2022
    ],
)
def test_recipe_totals(precision, optimizer, total):
    assert bytes_per_param(precision, optimizer).total == total


def test_seven_billion_walkthrough():
    s = training_state(7e9)
    assert s.weights == s.gradients == Bytes(14 * GB)
    assert s.master_weights == Bytes(28 * GB)
    assert s.optimizer_states == Bytes(56 * GB)
    assert s.optimizer_side == Bytes(84 * GB)
    assert s.total == Bytes(112 * GB)
    assert list(s.parts()) == ["weights", "gradients", "master weights", "optimizer states"]


def test_every_combination_is_known():
    assert [name for name, r in RECIPES.items() if not r.framework] == [
        "fp32", "fp16-mixed", "bf16-mixed", "bf16"]
    assert [name for name, r in RECIPES.items() if r.framework] == [
        "megatron", "deepspeed", "bf16-master", "bf16-master-free", "amp", "fsdp2"]
    assert set(OPTIMIZERS) == {"adam", "adamw", "sgd", "sgd-momentum", "adam-8bit"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"precision": "fp8-mixed"}, "unknown recipe 'fp8-mixed'; accepted: fp32, fp16-mixed, bf16-mixed, bf16, megatron, deepspeed, bf16-master, bf16-master-free, amp, fsdp2, zero-paper"),
        ({"optimizer_name": "lion"}, "unknown optimizer 'lion'; accepted: adam, adamw, sgd, sgd-momentum, adam-8bit"),
    ],
)
def test_unknown_names(kwargs, message):
    with pytest.raises(ValueError, match=message):
        training_state(7e9, **kwargs)


@pytest.mark.parametrize("params", [0, -1, 7.5e9 + 0.5, "7B"])
def test_bad_param_counts(params):
    with pytest.raises(ValueError, match=r"params must be a positive whole number, got"):
        training_state(params)


def test_8bit_adam_block_sizes_of_the_paper_and_of_bitsandbytes():
    """Dettmers et al. 2022 §2.1 quantise in blocks of 2048; bitsandbytes has used blocks of 256
    since v0.44.0 (Optimizer2State.init_state: one float32 absmax1 and absmax2 per block)."""
    from fractions import Fraction

    from trainmath.memory import ADAM_8BIT_BLOCK, BITSANDBYTES_8BIT_BLOCK, blockwise_overhead

    assert (ADAM_8BIT_BLOCK, BITSANDBYTES_8BIT_BLOCK) == (2048, 256)
    assert blockwise_overhead(256) == Fraction(2 * 4, 256)
    paper = bytes_per_param("bf16-mixed", "adam-8bit")
    assert paper.optimizer_states == 2 + Fraction(2 * 4, 2048)
