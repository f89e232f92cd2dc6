"""Adapter recipes as their authors run them, and bitsandbytes' optimizer states (issue 23).

Every expected value is a constant or a claim from a source: bitsandbytes' ``optimizer.py``
(release 0.50.1), QLoRA's ``qlora.py`` and Guanaco scripts (artidoro/qlora @7f4e95a), peft's
``LoraConfig``, torchtune's and axolotl's configs, and the QLoRA paper (Dettmers et al. 2023).
"""

from fractions import Fraction

import pytest

from trainmath.cli.command import execute as main_outcome
from trainmath.memory.bnb_optim import (BLOCK_8BIT, BLOCK_8BIT_BEFORE_044, MIN_8BIT_SIZE,
                                        PAGE_MIN_NUMEL, states_of, tensor_states)
from trainmath.memory.finetune import ALL_LINEAR, Adapter, adapter_states, headline
from trainmath.memory.finetune_presets import ADAPTER_PRESETS, adapter_preset
from trainmath.memory.recipes import bytes_per_param
from trainmath.model.presets import preset
from trainmath.runs.description import run
from trainmath.runs.estimates import estimate
from trainmath.units import GB, Bytes


def test_bitsandbytes_constants_are_its_source_code():
    # get_state_buffer: `p.numel() < 1e5`; Optimizer2State(min_8bit_size=4096);
    # init_state: blocksize = 256 (0.44.0, PR 1365), n // 2048 through 0.43
    assert (PAGE_MIN_NUMEL, MIN_8BIT_SIZE, BLOCK_8BIT, BLOCK_8BIT_BEFORE_044) == (
        100_000, 4096, 256, 2048)


def test_rank_16_on_4096_wide_matrices_pages_nothing():
    """The issue: with r = 16 adapters on 4096-wide matrices nothing is paged (16 × 4096 =
    65,536 elements, under 1e5); at r = 64 (262,144) the states are paged."""
    assert tensor_states(16 * 4096, bits=32, paged=True).paged == Bytes(0)
    assert tensor_states(64 * 4096, bits=32, paged=True).paged == Bytes(8 * 64 * 4096)
    assert states_of([16 * 4096] * 4, bits=32, paged=True).allocated == Bytes(4 * 8 * 16 * 4096)


def test_8bit_states_are_two_bytes_and_an_fp32_absmax_per_256():
    n = 1 << 20
    got = tensor_states(n, bits=8, paged=False)
    assert got.allocated == Bytes(2 * n + 2 * 4 * n // 256)
    # absmax is never paged (plain torch.zeros on p.device)
    paged = tensor_states(n, bits=8, paged=True)
    assert (paged.paged, paged.allocated) == (Bytes(2 * n), Bytes(2 * 4 * n // 256))
    # under min_8bit_size the 8-bit optimizer keeps 32-bit states
    assert tensor_states(MIN_8BIT_SIZE - 1, bits=8, paged=False).allocated == Bytes(8 * 4095)
    # bitsandbytes <= 0.43 (QLoRA's pin, 0.40.0): one absmax per 2048
    assert tensor_states(n, bits=8, paged=False, block=2048).allocated == Bytes(2 * n + 8 * n // 2048)


def test_8bit_adamw_for_full_fine_tuning():
    """bf16-mixed with AdamW8bit: 2 + 2 + 4 bytes, and m, v in 1 byte each plus 8/256."""
    assert bytes_per_param("bf16-mixed", "adamw-8bit").total == 2 + 2 + 4 + 2 + Fraction(8, 256)
    assert bytes_per_param("bf16-mixed", "paged-adamw-32bit").total == 16


def test_qlora_recipe_is_qlora_py():
    p = adapter_preset("qlora")
    # qlora.py: lora_r 64, every Linear4bit but lm_head, --lora_dropout 0.05 (33B, 65B scripts),
    # --bf16 (LoraLayer -> bf16, norms -> fp32), paged_adamw_32bit, --gradient_checkpointing,
    # --per_device_train_batch_size 1, --source_max_len 16 --target_max_len 512
    assert (p.method, p.rank, p.targets, p.dropout) == ("qlora", 64, ALL_LINEAR, 0.05)
    assert (p.recipe, p.norm_dtype, p.optimizer) == ("bf16", "fp32", "paged-adamw-32bit")
    assert (p.recompute, p.micro_batch, p.seq_len) == ("full", 1, 528)


def test_other_recipes_are_their_files():
    peft, tt, ax = (ADAPTER_PRESETS[k] for k in ("peft", "torchtune", "axolotl"))
    assert (peft.rank, peft.targets, peft.dropout, peft.recipe) == (8, ("q", "v"), 0.0, "fp32")
    assert (tt.rank, tt.targets, tt.recipe, tt.micro_batch) == (
        8, ("q", "v", "o", "gate", "up", "down"), "bf16", 2)
    assert (ax.rank, ax.dropout, ax.optimizer, ax.seq_len, ax.micro_batch) == (
        32, 0.05, "paged-adamw-32bit", 4096, 2)


def test_bf16_adapters_with_paged_adamw_cost_12_bytes():
    """qlora.py's bf16 adapters: 2 (weight) + 2 (gradient) + 8 (fp32 m and v), no master copy."""
    m = preset("llama-65b")
    a = adapter_preset("qlora").adapter()
    s = adapter_states(m, a, "bf16", "paged-adamw-32bit")
    assert (s.adapter_weights + s.gradients + s.master_weights + s.optimizer_states) == Bytes(12 * s.trainable)
    # every A and B of LLaMA-65B at r = 64 has at least 64 × 8192 elements: all paged
    assert s.paged_states == s.optimizer_states


def test_headline_names_what_is_trained_and_frozen():
    a = Adapter("qlora", 64, ALL_LINEAR, norm_dtype="fp32")
    assert headline(a, "bf16", "paged-adamw-32bit") == (
        "frozen base NF4, norms fp32, adapters bf16, paged AdamW 32-bit")
    out = main_outcome(["estimate", "--model", "llama-3-70b", "--finetune", "qlora",
                        "--seq-len", "2048"])
    first = out.stdout.splitlines()[0]
    assert "recipe fp32" not in first and "frozen base NF4, adapters fp32, AdamW" in first


def _guanaco(model: str, memory: str):
    return estimate(run(model, gpu_memory=memory, **adapter_preset("qlora").run_keywords()))


@pytest.mark.parametrize(("model", "memory"), [("llama-65b", "48GB"), ("llama-33b", "24GB")])
def test_qlora_guanaco_fits_as_the_paper_says(model, memory):
    """Dettmers et al. 2023: "finetune a 65B parameter model on a single 48GB GPU"; "our 33B
    Guanaco can be trained on 24 GB consumer GPUs"; paged optimizers "are critical to do 33B/65B
    QLORA tuning on a single 24/48GB GPU"."""
    assert _guanaco(model, memory).fits


def test_paged_states_are_not_in_max_memory_allocated():
    e = _guanaco("llama-65b", "48GB")
    d = e.on_device
    assert d.paged == e.adapter_states.paged_states > Bytes(0)
    assert d.allocated == e.peak.bytes - d.paged
    assert d.process.typical > d.reserved.typical + d.paged


def test_peft_fp32_adapters_do_not_fit_65b_on_48gb():
    """The issue's figure: peft's fp32 adapters (16 bytes each) put 65B over a 48 GB card."""
    e = estimate(run("llama-65b", gpu_memory=Bytes(48 * GB), recipe="fp32", optimizer="adamw",
                     **{k: v for k, v in adapter_preset("qlora").run_keywords().items()
                        if k not in ("recipe", "optimizer")}))
    assert not e.fits


def test_cli_adapter_recipe_and_explicit_flags():
    out = main_outcome(["estimate", "--model", "llama-65b", "--adapter-recipe", "qlora",
                        "--gpu-memory", "48GB", "--lora-dropout", "0.1"])
    assert out.status == 0, out.stderr
    text = out.stdout
    assert "frozen base NF4, norms fp32, adapters bf16, paged AdamW 32-bit" in text.splitlines()[0]
    assert "dropout 0.1" in text and "fits in 48 GB: yes" in text
    bad = main_outcome(["estimate", "--model", "llama-65b", "--adapter-recipe", "nope"])
    assert bad.status != 0 and "adapter recipe" in bad.stderr
