"""trainmath.model.hfconfig: published config.json files read into shapes, and their exact parameter
counts from sources outside the code (each cited where it is asserted)."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from trainmath.report.data import estimate_dict, estimate_json
from trainmath.model.hfconfig import COMPOSITE, FAMILIES, family_of, load_config, shape_from_config
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
    read = set()
    for path in DATA.glob("*.json"):
        if path.name == "SOURCES.json":
            continue
        d = json.loads(path.read_text(encoding="utf-8"))
        family = family_of(d)
        read.add(family if family not in COMPOSITE else d["text_config"].get("model_type")
                 or COMPOSITE[family])
        read.add(family)
    assert set(FAMILIES) | set(COMPOSITE) <= read


# -- today's models: the published counts, each from tests/data/hf-configs/SOURCES.json ----------
SOURCES = json.loads((DATA / "SOURCES.json").read_text(encoding="utf-8"))["files"]
EXACT = {name: next(p["value"] for p in info["published"] if p.get("exact")
                    and isinstance(p["value"], int) and p.get("unit") is None)
         for name, info in SOURCES.items()
         if any(p.get("exact") and isinstance(p["value"], int) for p in info["published"])}


def _fp8_block_scales(m) -> int:
    """DeepSeek-V3's checkpoint keeps one fp32 scale per 128 × 128 block of every fp8 weight:
    the attention, MLP and expert matrices of all its layers and of the MTP layer
    (``weight_scale_inv``, quantization_config weight_block_size [128, 128])."""
    from trainmath.model.shape import param_shapes
    blocks = lambda o, i: -(-o // 128) * -(-i // 128)  # noqa: E731
    h, E = m.hidden, m.experts
    total = 0
    ps = param_shapes(m)
    mtp_layer = ps.per_layer[-1]
    for layer in (*ps.per_layer, mtp_layer):
        for t in layer:
            if len(t) == 2 and t != (E, h):  # every matrix but the router (bf16)
                total += blocks(*t)
            elif len(t) == 3:  # each expert's matrix: (E, out, in)
                total += t[0] * blocks(t[1], t[2])
    return total


@pytest.mark.parametrize("name", sorted(EXACT))
def test_todays_models_give_their_published_counts(name):
    """Each config's count equals the figure published for the model (SOURCES.json), once
    what that figure counts beyond the text model's parameters is added: a composite model's
    vision tower and projector (their counts recorded beside the figure), Qwen3-0.6B's stored
    copy of its tied LM head (the checkpoint holds lm_head.weight), and DeepSeek-V3's
    checkpoint extras (its multi-token prediction layer's own copies of the embedding and the
    head, the fp8 weights' 128 × 128 block scales and the routers' 256 correction biases per
    mixture layer, MTP's included)."""
    m = load_config(DATA / name)
    count = param_count(m)
    extra = SOURCES[name].get("outside_text", {}).get("params", 0)
    if name == "Qwen3-0.6B.json":
        extra = m.vocab * m.hidden
    if name == "DeepSeek-V3.json":
        moe_layers = param_breakdown(m).moe_layers + m.mtp_layers
        extra = 2 * m.vocab * m.hidden + _fp8_block_scales(m) + moe_layers * m.experts
    assert count + extra == EXACT[name]


def test_deepseek_v3_is_671b_without_its_prediction_module():
    """DeepSeek-V3's README: "671B" main model weights and "14B" of the multi-token prediction
    module (of which 11.5B unique, README_WEIGHTS.md); transformers builds the main model only,
    671,026,404,352 parameters (tests/data/hf-configs/SOURCES.json)."""
    m = load_config(DATA / "DeepSeek-V3.json")
    main = param_count(replace(m, mtp_layers=0))
    assert main == 671_026_404_352 and round(main / 1e9) == 671
    assert round((param_count(m) - main) / 1e8) == 116  # "11.5B unique": 11.61B with eh_proj


@pytest.mark.parametrize(("name", "published"), [
    ("Llama-4-Scout-17B-16E-Instruct.json", 17),  # "17B active"
    ("Llama-4-Maverick-17B-128E-Instruct.json", 17),  # "17B active"
])
def test_llama_4_active_parameters(name, published):
    assert round(param_breakdown(load_config(DATA / name)).active / 1e9) == published


def test_gpt_oss_active_parameters_are_the_model_cards_without_the_embedding():
    """OpenAI's model card: gpt-oss-20b 3.6B and gpt-oss-120b 5.1B active parameters, which
    count the unembedding but not the embedding (201,088 × 2,880)."""
    for name, published in (("gpt-oss-20b.json", 36), ("gpt-oss-120b.json", 51)):
        m = load_config(DATA / name)
        assert round((param_breakdown(m).active - m.vocab * m.hidden) / 1e8) == published


def test_deepseek_v3_active_parameters():
    """DeepSeek-V3's README: "37B activated" of the main model, counted as the gpt-oss card
    counts them: with the output head, without the embedding (its README_WEIGHTS.md says 36.7B,
    an earlier version 36.6B "including 0.9B for the output Head")."""
    m = replace(load_config(DATA / "DeepSeek-V3.json"), mtp_layers=0)
    active = param_breakdown(m).active - m.vocab * m.hidden
    assert round(active / 1e9) == 37 and round(active / 1e8) == 366


@pytest.mark.parametrize(("name", "preset_name"), [
    ("Qwen3-8B.json", "qwen3-8b"), ("Qwen3-30B-A3B.json", "qwen3-30b-a3b"),
    ("DeepSeek-V3.json", "deepseek-v3"), ("gemma-2-9b.json", "gemma-2-9b"),
    ("gpt-oss-20b.json", "gpt-oss-20b"),
])
def test_a_preset_and_its_config_give_the_same_json(name, preset_name):
    m = load_config(DATA / name)
    assert preset_like(m) == preset_name
    a = json.loads(estimate_json(estimate(run(m, seq_len=4096, dp=8, zero_stage=1,
                                              gpu="h100-sxm"))))
    b = json.loads(estimate_json(estimate(run(preset_name, seq_len=4096, dp=8, zero_stage=1,
                                              gpu="h100-sxm"))))
    assert a["inputs"].pop("model") == m.name and b["inputs"].pop("model") == preset_name
    assert a == b


def test_what_the_families_read():
    qwen = load_config(DATA / "Qwen3-0.6B.json")
    assert (qwen.head_dim, qwen.q_dim, qwen.qk_norm, qwen.tied_embeddings) == (128, 2048, "head", True)
    ds = load_config(DATA / "DeepSeek-V3.json")
    assert (ds.latent, ds.kv_rank, ds.q_rank, ds.head_dim, ds.rotary_dim, ds.v_head_dim) == \
        (True, 512, 1536, 192, 64, 128)
    assert (ds.dense_layers, ds.mtp_layers, ds.shared_experts, ds.expert_width) == (3, 1, 1, 2048)
    lite = load_config(DATA / "DeepSeek-V2-Lite.json")
    assert (lite.q_rank, lite.dense_layers, lite.shared_experts) == (0, 1, 2)
    g2 = load_config(DATA / "gemma-2-9b.json")
    assert (g2.norm_placement, g2.global_every, g2.sliding_window) == ("sandwich", 2, 4096)
    assert (g2.attention_softcap, g2.final_softcap) == (50.0, 30.0)
    g3 = load_config(DATA / "gemma-3-12b-it.json")
    assert (g3.qk_norm, g3.global_every, g3.sliding_window, g3.vocab) == ("head", 6, 1024, 262208)
    oss = load_config(DATA / "gpt-oss-20b.json")
    assert (oss.bias, oss.attention_sinks, oss.global_every, oss.sliding_window) == (True, True, 2, 128)
    olmo = load_config(DATA / "OLMo-2-1124-13B.json")
    assert (olmo.norm_placement, olmo.qk_norm) == ("post", "full")
    scout = load_config(DATA / "Llama-4-Scout-17B-16E-Instruct.json")
    assert (scout.qk_norm, scout.attention_chunk, scout.global_every, scout.moe_every) == ("l2", 8192, 4, 1)
    maverick = load_config(DATA / "Llama-4-Maverick-17B-128E-Instruct.json")
    assert (maverick.moe_every, maverick.qk_norm, maverick.ffn, maverick.expert_width) == (2, "", 16384, 8192)
    phi = load_config(DATA / "Phi-4-mini-instruct.json")
    assert (phi.rotary_width, phi.tied_embeddings) == (96, True)


@pytest.mark.parametrize(("name", "change", "message"), [
    ("Qwen3-8B", {"use_sliding_window": True}, "'use_sliding_window' is True for a 'qwen3' model"),
    ("Qwen3-30B-A3B", {"mlp_only_layers": [0, 1]}, "'mlp_only_layers' is \\[0, 1\\]"),
    ("DeepSeek-V3", {"moe_layer_freq": 2}, "'moe_layer_freq' is 2 for a 'deepseek_v3' model"),
    ("gpt-oss-20b", {"layer_types": ["sliding_attention", "sliding_attention", "full_attention",
                                     "sliding_attention"] + ["full_attention"] * 20},
     "not every 3th"),
    ("gemma-3-12b-it", {"text_config": "none"}, "has no 'text_config' object"),
])
def test_keys_that_change_the_arithmetic_are_refused_by_name(name, change, message):
    with pytest.raises(ValueError, match=message):
        shape_from_config({**config(name), **change})


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


def test_the_families_with_their_own_code_are_those_the_activations_count():
    """hfconfig names a shape's hf_family for exactly the families whose transformers code
    trainmath.memory.hf_families describes (the model layer cannot import the memory layer, so
    the list is written twice and held equal here)."""
    from trainmath.memory.hf_families import HF_FAMILIES
    from trainmath.model.hfconfig import FAMILIES, OWN_CODE
    assert set(OWN_CODE) == set(HF_FAMILIES) - {""}
    assert set(OWN_CODE) <= set(FAMILIES)
