"""trainmath.memory.finetune and LoRA/QLoRA runs: expected values from the papers, peft and bitsandbytes.

Sources of the expected values: Hu et al. 2021 §7.1 (the 18M-parameter budget on GPT-3 175B),
Dettmers et al. 2023 §3 (0.127 bits of constants with Double Quantization, 0.5 without),
peft 0.21.0's ``get_nb_trainable_parameters`` and the bytes PyTorch kept in a real LoRA step
under fake tensors (docs/_data/measurements.json, kind "finetune"), and bitsandbytes 0.50.2's
``quantize_4bit`` output for a 4096 × 4096 matrix (validate/test_finetune.py).
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from trainmath.report.data import estimate_dict, estimate_json
from trainmath.cli.command import main
from trainmath.memory.finetune import (ALL_LINEAR, TARGETS, Adapter, adapter_states, lora_params, nf4_bits_per_param, nf4_tensor_bytes, parse_targets, quantized_params)
from trainmath.model.shape import modified, param_count
from trainmath.model.presets import preset
from trainmath.runs.estimates import estimate
from trainmath.runs.description import run

LLAMA = preset("llama-2-7b")
MEASURED = json.loads((Path(__file__).resolve().parents[1] / "docs" / "_data" /
                       "measurements.json").read_text(encoding="utf-8"))
LORA = {c["id"]: c for c in MEASURED["configurations"] if c["kind"] == "finetune"}


# -- trainable parameters ---------------------------------------------------------------------
@pytest.mark.parametrize(("model", "rank", "targets", "peft"), [
    ("llama-2-7b", 8, ("q", "v"), 4_194_304),  # peft on a meta-device Llama-2-7B
    ("llama-2-7b", 16, ("q", "v"), 8_388_608),
    ("llama-2-7b", 16, ALL_LINEAR, 39_976_960),
    ("llama-2-7b", 64, ALL_LINEAR, 159_907_840),
    ("llama-3-8b", 16, ALL_LINEAR, 41_943_040),  # GQA: k and v are 1024 wide
])
def test_trainable_parameters_are_peft_s(model, rank, targets, peft):
    assert lora_params(preset(model), rank, targets) == peft


def test_the_lora_paper_s_budget_on_gpt3():
    """Hu et al. 2021 §7.1: 18M parameters, r = 4 on Wq and Wv of GPT-3 175B's 96 layers."""
    gpt3 = modified(preset("gpt3-175b"), mlp="swiglu")  # the attention matrices are the same
    n = lora_params(gpt3, 4, ("q", "v"))
    assert 18_000_000 <= n < 19_000_000
    assert lora_params(gpt3, 8, ("q",)) == n  # "r = 8 if we adapt one type"


def test_targets_read_short_and_peft_names_in_the_layer_s_order():
    assert parse_targets("v_proj,q") == ("q", "v")
    assert parse_targets(["down", "gate"]) == ("gate", "down")
    assert parse_targets("all") == TARGETS
    with pytest.raises(ValueError, match=r"unknown LoRA target 'qkv'; accepted: q, k, v"):
        parse_targets("qkv")
    with pytest.raises(ValueError, match="one or more"):
        parse_targets("")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"method": "full"}, "unknown fine-tuning method for an adapter 'full'; accepted: lora, qlora"),
    ({"rank": 0}, "LoRA rank r must be a positive whole number, got 0"),
    ({"dropout": 1.0}, "LoRA dropout must be a probability"),
    ({"dropout": True}, "LoRA dropout must be a probability"),
])
def test_a_bad_adapter_names_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Adapter(**kwargs)


def test_an_adapter_needs_a_llama_style_model():
    with pytest.raises(ValueError, match="gpt3-175b has mlp 'gelu'; accepted: mlp 'swiglu'"):
        lora_params(preset("gpt3-175b"), 8)


# -- QLoRA's storage ---------------------------------------------------------------------------
def test_double_quantization_costs_the_paper_s_bits():
    """Dettmers et al. 2023 §3: 32/64 = 0.5 bits per parameter, 0.127 with Double Quantization."""
    assert nf4_bits_per_param(False) - 4 == Fraction(1, 2)
    assert round(float(nf4_bits_per_param(True) - 4), 3) == 0.127


def test_nf4_bytes_are_what_bitsandbytes_stores():
    """quantize_4bit(4096 × 4096, blocksize 64): 8,388,608 packed bytes, 262,144 uint8 absmax,
    1,024 fp32 second-level absmax, one fp32 offset (validate/test_finetune.py runs it)."""
    assert nf4_tensor_bytes(4096 * 4096) == 8_388_608 + 262_144 + 4 * 1_024 + 4
    assert nf4_tensor_bytes(4096 * 4096, double_quant=False) == 8_388_608 + 4 * 262_144


def test_qlora_keeps_the_embedding_and_lm_head_in_16_bit():
    q = quantized_params(LLAMA)
    assert param_count(LLAMA) - q == 2 * 32_000 * 4096 + 65 * 4096  # embeddings and norms
    st = adapter_states(LLAMA, Adapter("qlora", 64, ALL_LINEAR))
    assert st.frozen_weights.n == q * nf4_bits_per_param(True) / 8 + 2 * (param_count(LLAMA) - q)


# -- the estimate against the measured LoRA steps ------------------------------------------------
def test_lora_model_states_are_the_measured_bytes():
    m = LORA["finetune/llama-2-7b/hf-sdpa/lora-r16-q+v/s2048-b1"]["measured"]["states"]
    e = estimate(run(LLAMA, seq_len=2048, adapter=Adapter("lora", 16, ("q", "v"))))
    assert e.adapter_states.frozen_weights.n == m["frozen_parameters"] == 2 * param_count(LLAMA)
    assert (e.device.gradients.n, e.device.optimizer_states.n) == (m["gradients"],
                                                                   m["optimizer_states"])
    assert e.device.master_weights.n == 0 == m["master_weights"]


def test_lora_layer_saves_what_peft_saves():
    m = LORA["finetune/llama-2-7b/hf-sdpa/lora-r64-q+k+v+o+gate+up+down/s2048-b1"]["measured"]
    e = estimate(run(LLAMA, seq_len=2048, adapter=Adapter("lora", 64, ALL_LINEAR)))
    assert e.layer.total.n == m["saved"]["per_layer"][1]
    assert e.saved[0].outputs.n == m["saved"]["output"]
    assert e.saved[0].inputs.n == m["saved"]["embedding"] == 0  # a frozen embedding saves nothing


def test_bf16_adapters_share_the_frozen_layer_s_input():
    """Without the fp32 cast A reads the tensor the frozen layer was given: one copy, not one
    per targeted matrix; dropout brings a copy and a mask back."""
    fp32 = estimate(run(LLAMA, seq_len=2048, adapter=Adapter("lora", 16, ALL_LINEAR)))
    bf16 = estimate(run(LLAMA, seq_len=2048, recipe="bf16-mixed",
                        adapter=Adapter("lora", 16, ALL_LINEAR)))
    dropout = estimate(run(LLAMA, seq_len=2048, recipe="bf16-mixed",
                           adapter=Adapter("lora", 16, ALL_LINEAR, dropout=0.05)))
    assert bf16.activations < fp32.activations and bf16.activations < dropout.activations
    masks = [t for t in dropout.layer.tensors if "mask" in t.name]
    assert len(masks) == len(ALL_LINEAR)
    assert bf16.device.master_weights.n == 4 * lora_params(LLAMA, 16, ALL_LINEAR)


def test_alpha_is_not_an_input():
    with pytest.raises(TypeError):
        Adapter("lora", 16, ("q", "v"), alpha=32)  # type: ignore[call-arg]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"tp": 2}, "got tp 2; accepted: tp = pp = cp = v = 1"),
    ({"zero_stage": 2}, "ZeRO stage 2 with an adapter is not modelled; accepted: 0"),
    ({"recipe": "megatron"}, "recipe 'megatron' for the adapter's weights is not modelled"),
    ({"offload": "optimizer", "zero_stage": 2}, "ZeRO stage 2 with an adapter"),
    ({"offload": "parameters"}, "offload 'parameters' with an adapter is not modelled"),
    ({"tokens": 10**12, "mfu": 0.4, "gpu": "h100-sxm"}, "a time to train with an adapter"),
])
def test_an_adapter_run_refuses_what_is_not_modelled(kwargs, message):
    with pytest.raises(ValueError, match=message):
        run(LLAMA, adapter=Adapter(), **kwargs)


def test_an_adapter_run_needs_a_shape():
    with pytest.raises(ValueError, match="needs a model shape"):
        run(7_000_000_000, adapter=Adapter())


def test_an_adapter_run_assumes_peft_s_defaults():
    r = run("llama-2-7b", seq_len=2048, adapter=Adapter())
    assert (r.training.recipe, r.training.implementation) == ("fp32", "hf-sdpa")
    assert r.assumed == ("recipe", "implementation", "optimizer_impl")


def test_the_json_says_the_adapter_and_its_split():
    d = estimate_dict(estimate(run("llama-2-7b", seq_len=2048, adapter=Adapter("qlora", 64, "all"))))
    assert d["inputs"]["adapter"] == {"method": "qlora", "rank": 64, "targets": list(ALL_LINEAR),
                                      "dropout": 0.0, "double_quant": True, "norm_dtype": "16-bit",
                                      "headline": "frozen base NF4, adapters fp32, AdamW"}
    assert d["finetune"]["trainable_params"] == 159_907_840
    assert d["per_device"]["weights"] == d["finetune"]["frozen_weights"] + d["finetune"]["adapter_weights"]
    assert estimate_dict(estimate(run("llama-2-7b")))["finetune"] is None


# -- the command --------------------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "message"), [
    (["--finetune", "lora", "--lora-targets", "q,x"], "unknown LoRA target 'x'"),
    (["--finetune", "lora", "--lora-rank", "0"], "'0' is not a positive whole number"),
    (["--finetune", "lora", "--lora-dropout", "1"], "'1' is not a dropout probability"),
    (["--lora-rank", "8"], "--lora-rank needs --finetune lora or qlora"),
    (["--finetune", "lora", "--no-double-quant"], "--no-double-quant needs --finetune qlora"),
    (["--finetune", "dora"], "unknown fine-tuning method 'dora'; accepted: full, lora, qlora"),
])
def test_bad_fine_tuning_flags_exit_2_naming_the_value(argv, message, capsys):
    assert main(["estimate", "--model", "llama-2-7b", *argv]) == 2
    assert message in capsys.readouterr().err


def test_the_command_prints_the_adapter(capsys):
    assert main(["estimate", "--model", "llama-2-7b", "--finetune", "qlora", "--lora-rank", "64",
                 "--lora-targets", "all", "--no-double-quant", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["inputs"]["adapter"]["double_quant"] is False
    assert d["finetune"]["trainable_params"] == 159_907_840
