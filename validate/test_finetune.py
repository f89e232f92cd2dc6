"""LoRA against peft: trainable parameters on a meta-device Llama, and the fake-tensor method.

The trainable count is peft's own (``get_peft_model(...).get_nb_trainable_parameters()``) for
Hugging Face's ``LlamaForCausalLM`` built on the meta device (no memory, no weights), for
several ranks and target sets; trainmath.memory.finetune.lora_params must equal it. The memory of
LoRA at full size is in docs/_data/measurements.json (kind "finetune", validate/measure/
finetune.py), re-measured by test_measurements.py and compared with the library by
tests/test_measured.py.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from trainmath.memory.finetune import lora_params  # noqa: E402
from trainmath.model.presets import preset  # noqa: E402
from validate.measure.finetune import measure_lora, trainable_on_meta  # noqa: E402

CASES = [
    ("llama-2-7b", 8, ("q", "v")),
    ("llama-2-7b", 16, ("q", "k", "v", "o")),
    ("llama-2-7b", 64, ("q", "k", "v", "o", "gate", "up", "down")),
    ("llama-2-7b", 4, ("down",)),
    ("llama-3-8b", 16, ("k", "v")),  # grouped-query attention: k and v are 1024 wide
    ("llama-3-8b", 32, ("q", "k", "v", "o", "gate", "up", "down")),
]


@pytest.mark.parametrize(("model", "rank", "targets"), CASES)
def test_trainable_count_equals_peft(model, rank, targets):
    trainable, total = trainable_on_meta(model, rank, targets)
    assert lora_params(preset(model), rank, targets) == trainable


def test_peft_counts_the_frozen_model_unchanged():
    from trainmath.model.shape import param_count
    trainable, total = trainable_on_meta("llama-2-7b", 8, ("q", "v"))
    assert total - trainable == param_count(preset("llama-2-7b")) == 6_738_415_616


def test_fake_tensors_measure_lora_as_real_tensors_do():
    tiny = {"name": "tiny", "family": "llama", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
            "ffn": 96, "vocab": 101, "mlp": "swiglu", "norm": "rmsnorm", "bias": False,
            "tied_embeddings": False, "positions": 0, "dropout": False, "dropout_p": 0.0,
            "norm_eps": 1e-5, "rope_theta": 10000.0, "sliding_window": 0, "source": ""}
    fake = measure_lora(tiny, 4, ("q", "v", "down"), 16)
    real = measure_lora(tiny, 4, ("q", "v", "down"), 16, fake=False)
    assert fake == real


# --- QLoRA's 4-bit storage: bitsandbytes' quantize_4bit on real CPU tensors -----------------------
# bitsandbytes' Linear4bit does not run under FakeTensorMode, so a full-size QLoRA step is not
# measured; the storage of the NF4 base is, matrix by matrix, on real tensors of the real shapes.

LLAMA_2_7B_MATRICES = [(4096, 4096), (11008, 4096), (4096, 11008)]


def _stored_bytes(weight, double_quant: bool) -> int:
    import bitsandbytes.functional as bnbf
    packed, state = bnbf.quantize_4bit(weight, blocksize=64, compress_statistics=double_quant,
                                       quant_type="nf4")
    out = packed.numel() * packed.element_size() + state.absmax.numel() * state.absmax.element_size()
    if double_quant:  # 8-bit absmax, its fp32 second-level constants and the fp32 offset
        out += state.state2.absmax.numel() * state.state2.absmax.element_size()
        out += state.offset.numel() * state.offset.element_size()
    return out


@pytest.mark.parametrize("double_quant", [True, False], ids=["double-quant", "fp32-absmax"])
@pytest.mark.parametrize("rows, cols", LLAMA_2_7B_MATRICES)
def test_nf4_storage_equals_bitsandbytes(rows, cols, double_quant):
    pytest.importorskip("bitsandbytes")
    from fractions import Fraction
    from trainmath.memory.finetune import nf4_bits_per_param, nf4_tensor_bytes

    weight = torch.randn(rows, cols, dtype=torch.bfloat16)
    stored = _stored_bytes(weight, double_quant)
    assert stored == nf4_tensor_bytes(rows * cols, double_quant)
    # per weight, the paper's 4 + 0.127 bits (4.5 without Double Quantization), less a 4-byte offset
    per_element = Fraction(8 * stored, rows * cols)
    assert abs(per_element - nf4_bits_per_param(double_quant)) <= Fraction(32, rows * cols)


def test_bitsandbytes_keeps_the_lm_head_in_16_bit():
    """transformers' bitsandbytes integration leaves the output layer unquantised."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.quantizers.base import get_keys_to_not_convert

    config = LlamaConfig(vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    assert get_keys_to_not_convert(model) == ["lm_head"]
