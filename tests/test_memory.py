from fractions import Fraction

import pytest

from trainmath.memory.recipes import OPTIMIZERS, RECIPES, bytes_per_param, training_state
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
        "megatron", "deepspeed", "bf16-master", "bf16-master-free", "amp", "fsdp2", "fp8-te"]
    assert set(OPTIMIZERS) == {"adam", "adamw", "sgd", "sgd-momentum", "adam-8bit", "adamw-8bit",
                               "paged-adamw-8bit", "paged-adamw-32bit"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"precision": "fp8-mixed"}, "unknown recipe 'fp8-mixed'; accepted: fp32, fp16-mixed, bf16-mixed, bf16, megatron, deepspeed, bf16-master, bf16-master-free, amp, fsdp2, fp8-te, zero-paper"),
        ({"optimizer_name": "lion"}, "unknown optimizer 'lion'; accepted: adam, adamw, sgd, sgd-momentum, adam-8bit, adamw-8bit, paged-adamw-8bit, paged-adamw-32bit"),
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

    from trainmath.memory.recipes import (ADAM_8BIT_BLOCK, BITSANDBYTES_8BIT_BLOCK, blockwise_overhead)

    assert (ADAM_8BIT_BLOCK, BITSANDBYTES_8BIT_BLOCK) == (2048, 256)
    assert blockwise_overhead(256) == Fraction(2 * 4, 256)
    paper = bytes_per_param("bf16-mixed", "adam-8bit")
    assert paper.optimizer_states == 2 + Fraction(2 * 4, 2048)


# -- what frameworks keep ---------------------------------------------------------------------
from fractions import Fraction  # noqa: E402

from trainmath.memory.recipes import RECIPE_ALIASES, recipe  # noqa: E402
from trainmath.memory.sharding import zero_states  # noqa: E402


@pytest.mark.parametrize(
    ("name", "split", "total"),
    [
        # ZeRO §3.1: 2 + 2 + 4 + 8
        ("bf16-mixed", (2, 2, 4, 8), 16),
        # Megatron-LM docs/source/api-guide/dist_optimizer.md: bf16 params, fp32 grads: 18
        ("megatron", (2, 4, 4, 8), 18),
        # DeepSpeed estimate_zero2_model_states_mem_needs at N = 1: 2 + 18 (2 16-bit grads,
        # 4 fp32 grads, 4 fp32 params, 8 optimizer states)
        ("deepspeed", (2, 6, 4, 8), 20),
        # bf16 params and grads, p.grad.float() kept on the fp32 masters: 2 + (2 + 4) + 4 + 8
        ("bf16-master", (2, 6, 4, 8), 20),
        ("bf16-master-free", (2, 4, 4, 8), 18),
        # torch.amp: fp32 params (their own master), fp32 grads, Adam's fp32 m and v
        ("amp", (4, 4, 0, 8), 16),
        ("fsdp2", (4, 4, 0, 8), 16),
    ],
)
def test_framework_recipes_per_parameter(name, split, total):
    b = bytes_per_param(name, "adamw")
    assert (b.weights, b.all_gradients, b.master_weights, b.optimizer_states) == split
    assert b.total == total


def test_zero_paper_is_bf16_mixed():
    assert RECIPE_ALIASES == {"zero-paper": "bf16-mixed"}
    assert recipe("zero-paper") is recipe("bf16-mixed")
    assert bytes_per_param("zero-paper").total == 16


def test_megatron_distributed_optimizer_is_6_plus_12_over_d():
    """Megatron-LM's distributed-optimizer guide: 6 + 12/d bytes per parameter (bf16 params, fp32
    grads), which is ZeRO stage 1 over d ranks."""
    for d in (1, 8, 64):
        s = zero_states(10**9, d, 1, "megatron")
        assert s.total.n == 10**9 * (6 + Fraction(12, d))


def test_deepspeed_zero2_is_2_plus_18_over_n():
    """DeepSpeed's own estimate (stage_1_and_2.py, estimate_zero2_model_states_mem_needs):
    gpu_mem = 2 * total_params + 18 * total_params / total_gpus."""
    for n in (1, 8, 64):
        s = zero_states(7 * 10**9, n, 2, "deepspeed")
        assert s.total.n == 2 * 7 * 10**9 + Fraction(18 * 7 * 10**9, n)
    # ZeRO-1: the 16-bit gradients stay whole, the fp32 partition is sharded with the optimizer
    assert zero_states(10**9, 8, 1, "deepspeed").total.n == 10**9 * (4 + Fraction(16, 8))


def test_when_each_gradient_exists():
    """The recipes' gradients at the step: ZeRO §3.1's fp32 masters step from fp32 gradients."""
    assert recipe("bf16-mixed").step_copy == 4 and recipe("bf16-mixed").after_step == 2
    assert recipe("bf16-master").after_step == 6
    assert recipe("bf16-master-free").after_step == 4
    assert recipe("megatron").persistent_gradients and recipe("megatron").after_step == 4
    assert recipe("fsdp2").default_stage == 3 and recipe("fsdp2").reduce_bytes == 4
    assert recipe("amp").autocast and recipe("amp").compute == 2
    assert recipe("fp32").compute == 4
