"""trainmath.model.hfconfig: published config.json files read into shapes, and their exact parameter
counts from sources outside the code (each cited where it is asserted)."""

import json
from pathlib import Path

import pytest

from trainmath.report.data import estimate_dict, estimate_json
from trainmath.model.hfconfig import FAMILIES, family_of, load_config, shape_from_config
from trainmath.model.shape import param_breakdown, param_count
from trainmath.model.presets import preset, preset_like
from trainmath.runs.estimates import estimate
from trainmath.runs.description import run

DATA = Path(__file__).parent / "data" / "hf-configs"


def config(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


# Each count from outside the code:
# - Meta-Llama-3-8B: model.safetensors.index.json metadata.total_size 16,060,522,496 bytes of
#   bf16 weights (2 bytes each) = 8,030,261,248 parameters.
# - Mistral-7B-v0.1: its index's total_size 14,483,464,192 bytes (bf16) / 2.
# - Qwen2-7B: 15,231,233,024 bytes (bf16) / 2, the total_size of Qwen/Qwen2.5-7B-Instruct's
#   model.safetensors.index.json (the hub's safetensors metadata: 7,615,616,512 parameters).
#   Qwen2.5-7B has Qwen2-7B's config.json sizes key for key (hidden 3584, 28 layers, 28 heads, 4
#   key-value heads, intermediate 18944, vocabulary 152064, untied, q/k/v biases); the source is
#   for that shape, and validate/test_hf_configs.py counts this very file in transformers.
# - gemma-7b: 8,537,680,896, the parameter count the Hugging Face hub reads from the safetensors
#   metadata of google/gemma-7b (its model card's "8.54B").
# - Mixtral-8x7B-v0.1: its index's total_size 93,405,585,408 bytes (bf16) / 2 = 46,702,792,704.
# - gpt2: 124,439,808; the checkpoint's model.safetensors holds 137,022,720 values, which include
#   twelve 1×1×1024×1024 causal-mask buffers (attn.bias, 12,582,912 values) that are not
#   parameters: 137,022,720 - 12,582,912.
# - pythia-160m: its model.safetensors holds 162,323,040 fp16 values (the hub's safetensors
#   metadata, besides 50,331,648 uint8 causal-mask values), of which twelve rotary inv_freq
#   buffers of 8 values (rotary_pct 0.25 of a 64-wide head, halved) are not parameters:
#   162,323,040 - 96. The Pythia README's table gives its 85,056,000 non-embedding parameters
#   (asserted below).
PUBLISHED = {
    "Meta-Llama-3-8B": 16_060_522_496 // 2,
    "Mistral-7B-v0.1": 14_483_464_192 // 2,
    "Qwen2-7B": 15_231_233_024 // 2,
    "gemma-7b": 8_537_680_896,
    "Mixtral-8x7B-v0.1": 93_405_585_408 // 2,
    "gpt2": 137_022_720 - 12 * 1024 * 1024,
    "pythia-160m": 162_323_040 - 12 * 8,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_each_published_config_gives_its_published_parameter_count(name):
    assert param_count(load_config(DATA / f"{name}.json")) == PUBLISHED[name]


def test_the_test_data_covers_every_family():
    assert {family_of(config(n)) for n in PUBLISHED} == set(FAMILIES)


def test_pythia_non_embedding_count_is_the_model_cards():
    """The Pythia README's table: 160M has 85,056,000 non-embedding parameters (EleutherAI/pythia,
    "Non-Embedding Params"): the total less embed_in and embed_out."""
    b = param_breakdown(load_config(DATA / "pythia-160m.json"))
    assert b.total - b.embedding - b.lm_head == 85_056_000


def test_mixtral_active_parameters_round_to_the_published_12_9b():
    """Mistral AI's announcement: "12.9B parameters per token"; Jiang et al. 2024 say 13B."""
    active = param_breakdown(load_config(DATA / "Mixtral-8x7B-v0.1.json")).active
    assert round(active / 1e8) == 129 and round(active / 1e9) == 13


def test_llama_3_8b_config_is_the_preset_field_for_field():
    m = load_config(DATA / "Meta-Llama-3-8B.json")
    assert preset_like(m) == "llama-3-8b"
    assert m.name == str(DATA / "Meta-Llama-3-8B.json")
    a = estimate_dict(estimate(run(m, seq_len=8192, dp=8, zero_stage=3, gpu="h100-sxm")))
    b = estimate_dict(estimate(run("llama-3-8b", seq_len=8192, dp=8, zero_stage=3, gpu="h100-sxm")))
    assert a["inputs"].pop("model") == m.name and b["inputs"].pop("model") == "llama-3-8b"
    assert a == b


def test_mistral_and_mixtral_configs_are_their_presets():
    assert preset_like(load_config(DATA / "Mistral-7B-v0.1.json")) == "mistral-7b"
    assert preset_like(load_config(DATA / "Mixtral-8x7B-v0.1.json")) == "mixtral-8x7b"


def test_family_specific_fields():
    gemma = load_config(DATA / "gemma-7b.json")
    assert (gemma.head_dim, gemma.q_dim, gemma.mlp, gemma.tied_embeddings) == (256, 4096, "geglu", True)
    qwen = load_config(DATA / "Qwen2-7B.json")
    assert (qwen.qkv_bias, qwen.bias, qwen.sliding_window) == (True, False, 0)
    gpt2 = load_config(DATA / "gpt2.json")
    assert (gpt2.positions, gpt2.ffn, gpt2.mlp, gpt2.norm, gpt2.dropout) == (1024, 3072, "gelu", "layernorm", True)
    pythia = load_config(DATA / "pythia-160m.json")
    assert (pythia.rotary_width, pythia.tied_embeddings, pythia.bias) == (16, False, True)


def test_qwen2_biases_are_on_q_k_v_only():
    """Qwen2-7B: q 3584 + k 512 + v 512 bias values per layer, no output or MLP bias."""
    m = load_config(DATA / "Qwen2-7B.json")
    no_bias = shape_from_config({**config("Qwen2-7B"), "model_type": "llama",
                                 "architectures": ["LlamaForCausalLM"]})
    assert param_count(m) - param_count(no_bias) == 28 * (3584 + 512 + 512)


def test_model_type_may_come_from_architectures():
    d = config("Mistral-7B-v0.1")
    del d["model_type"]
    assert preset_like(shape_from_config(d)) == "mistral-7b"


@pytest.mark.parametrize(("change", "message"), [
    ({"model_type": "bert"}, "'model_type' 'bert' is not a family this library reads; accepted: llama"),
    ({"hidden_size": None}, "no 'hidden_size'; accepted: a positive whole number"),
    ({"num_key_value_heads": 5}, "'num_key_value_heads' 5 does not divide 'num_attention_heads' 32"),
    ({"hidden_act": "relu"}, "'hidden_act' is 'relu' for a 'llama' model; accepted: silu, swish"),
    ({"vocab_size": -3}, "'vocab_size' is -3; accepted: a positive whole number"),
    ({"architectures": ["GPT2LMHeadModel"]}, "lists 'GPT2LMHeadModel', a 'gpt2' model, but 'model_type' is 'llama'"),
])
def test_bad_configs_name_the_key_and_what_is_accepted(change, message):
    d = {**config("Meta-Llama-3-8B"), **change}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        shape_from_config(d)


def test_contradictory_sizes_name_both_keys():
    with pytest.raises(ValueError, match="'hidden_size' 770 is not divisible by 'num_attention_heads' 12"):
        shape_from_config({**config("pythia-160m"), "hidden_size": 770})
    with pytest.raises(ValueError, match="'n_embd' 770 is not divisible by 'n_head' 12"):
        shape_from_config({**config("gpt2"), "n_embd": 770})
    with pytest.raises(ValueError, match="'hidden_size' 4100 is not divisible by 'num_attention_heads' 32 "
                                         "and there is no 'head_dim'"):
        shape_from_config({**config("Meta-Llama-3-8B"), "hidden_size": 4100})


def test_a_llama_head_dim_other_than_h_over_a_is_a_head_width():
    """LlamaConfig takes head_dim (q_proj is h × a·head_dim), as Gemma does."""
    m = shape_from_config({**config("Meta-Llama-3-8B"), "head_dim": 64})
    assert (m.head_dim, m.q_dim, m.kv_dim) == (64, 2048, 512)


def test_mixtral_top_k_beyond_the_experts_is_refused():
    with pytest.raises(ValueError, match="'num_experts_per_tok' 9 exceeds 'num_local_experts' 8"):
        shape_from_config({**config("Mixtral-8x7B-v0.1"), "num_experts_per_tok": 9})


def test_unreadable_files(tmp_path):
    with pytest.raises(ValueError, match="cannot read config"):
        load_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match="is not JSON"):
        load_config(bad)


def test_existing_presets_keep_their_counts_and_gain_no_new_field_values():
    for name in ("llama-2-7b", "llama-3-8b", "mistral-7b", "gpt3-175b"):
        m = preset(name)
        assert (m.head_width, m.qkv_bias, m.rotary_dim, m.experts) == (0, False, 0, 0)
        assert m.q_dim == m.hidden and param_breakdown(m).active == param_count(m)
