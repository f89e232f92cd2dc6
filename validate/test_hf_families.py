"""The measurements of today's families (validate/measure/hfconfigs.py) checked as the others are:
fake tensors against real ones, per-layer scopes against one layer more, and what each record's
notes say transformers does (a refusal, an ignored argument, a CPU fallback, uneven routing).

The families are transformers' own implementations built from published config.json files; at
small widths (the overrides below, every other key as published) they run on real tensors in
a second, with the real router for the mixtures of experts.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from validate.measure.hfconfigs import CONFIG_FILES, ROOT, ConfigFile  # noqa: E402
from validate.measure.saved import measure_saved  # noqa: E402
from validate.measure.step import measure_step  # noqa: E402

_SMALL = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              intermediate_size=96, vocab_size=101, num_hidden_layers=2)
# Each family's structure (experts, top-k, groups, windows shorter than s = 16, sinks, NoPE
# layers) at widths a CPU runs in a second; eos/pad ids must fall inside the small vocabulary.
SMALL = {
    "qwen3-8b": dict(_SMALL, head_dim=32, eos_token_id=0, bos_token_id=0),  # head_dim ≠ h / a
    "qwen3-30b-a3b": dict(_SMALL, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                          eos_token_id=0, bos_token_id=0),
    "deepseek-v3": dict({k: v for k, v in _SMALL.items() if k != "head_dim"},  # MLA's own dims
                        num_key_value_heads=4, moe_intermediate_size=32,
                        n_routed_experts=16, n_group=4, topk_group=2, num_experts_per_tok=4,
                        q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
                        v_head_dim=16, num_hidden_layers=3, first_k_dense_replace=1),
    "gemma-2-9b": dict(_SMALL, query_pre_attn_scalar=16, sliding_window=8),
    "gpt-oss-20b": dict(_SMALL, intermediate_size=32, num_local_experts=8, num_experts_per_tok=2,
                        experts_per_token=2, sliding_window=8, pad_token_id=0, eos_token_id=0,
                        layer_types=["sliding_attention", "full_attention"]),
    "olmo-2-7b": dict(_SMALL),
    "gemma-3-12b": dict(_SMALL, sliding_window=8, sliding_window_pattern=2),
    "llama-4-scout": dict(_SMALL, intermediate_size=32, intermediate_size_mlp=64,
                          num_local_experts=4, num_hidden_layers=4, attention_chunk_size=8),
}
MOE = ("qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b")  # routed by top-k (Llama 4 runs all)


def small(name: str) -> ConfigFile:
    c = CONFIG_FILES[name]
    return ConfigFile(f"{name}-small", c.file, c.overrides | SMALL[name], c.text_config,
                      attentions=c.attentions)


def test_every_family_has_a_small_version():
    assert set(SMALL) == set(CONFIG_FILES)


CASES = [(name, a) for name, c in CONFIG_FILES.items() for a in c.attentions]


@pytest.mark.parametrize(("name", "attention"), CASES)
def test_fake_tensors_save_what_real_tensors_save(name, attention):
    """Forward and backward on fake and on real tensors: every saved storage, its op and its
    scope; for the mixtures of experts the real router's uneven choice included."""
    c = small(name)
    fake = measure_saved(c, f"hf-{attention}", 16, backward=True)
    real = measure_saved(c, f"hf-{attention}", 16, backward=True, fake=False)
    assert fake == real


@pytest.mark.parametrize("name", list(CONFIG_FILES))
def test_fake_tensors_track_what_real_tensors_allocate(name):
    c = small(name)
    impl = f"hf-{c.attentions[0]}"
    assert measure_step(c, impl, "zero-bf16", 16) == \
        measure_step(c, impl, "zero-bf16", 16, fake=False)


@pytest.mark.parametrize(("name", "attention", "s", "layers"), [
    ("deepseek-v3", "sdpa", 2048, 2),  # a dense layer (the third)
    ("deepseek-v3", "sdpa", 2048, 4),  # an MoE layer (the fifth)
    ("gemma-2-9b", "sdpa", 4096, 2),  # a sliding-window layer (the third)
    ("gemma-2-9b", "sdpa", 4096, 3),  # a global one (the fourth)
])
def test_per_layer_bytes_are_the_difference_of_one_more_layer(name, attention, s, layers):
    """Full width: hooks scoped to layer ``layers`` vs (layers + 1) minus ``layers`` layers."""
    fewer = measure_saved(name, f"hf-{attention}", s, layers=layers)
    more = measure_saved(name, f"hf-{attention}", s, layers=layers + 1)
    assert more["total"] - fewer["total"] == more["per_layer"][layers]


@pytest.mark.parametrize("name", MOE)
def test_the_routing_is_really_uneven(name):
    """The fake == real check above holds whatever the router picks: in those real runs the
    experts get different numbers of token copies."""
    from transformers import AutoModelForCausalLM

    c = small(name)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(c.transformers_config(c.attentions[0]),
                                             dtype=torch.bfloat16,
                                             attn_implementation=c.attentions[0])
    seen = []
    for module in model.modules():
        if type(module).__name__.endswith("Experts"):
            module.register_forward_pre_hook(lambda m, args: seen.append((m, args[1])))
    model(input_ids=torch.randint(0, c.vocab, (1, 64)))
    assert seen
    for module, index in seen:
        counts = torch.bincount(index.flatten(), minlength=module.num_experts)
        assert counts.max() > counts.min()


def test_gpt_oss_refuses_sdpa():
    """What gpt-oss-20b's records say: transformers will not build it with SDPA."""
    c = small("gpt-oss-20b")
    assert c.attentions == ("eager",)
    with pytest.raises(ValueError, match="scaled_dot_product_attention"):
        c.build("sdpa", torch.float32)


def test_gemma2_sdpa_drops_the_attention_soft_capping():
    """What gemma-2-9b's hf-sdpa records say: with SDPA, transformers computes Gemma 2's
    attention as if attn_logit_softcapping were unset; eager caps the scores."""
    from transformers import AutoModelForCausalLM

    c = small("gemma-2-9b")

    def build(attention: str):
        config = c.transformers_config(attention)
        config.attn_logit_softcapping = 0.5  # small, so that capping changes the scores visibly
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                                attn_implementation=attention).eval()

    torch.manual_seed(0)
    eager, sdpa = build("eager"), build("sdpa")
    for layer in eager.model.layers:  # scores of order one, which a cap of 0.5 bends
        for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
            torch.nn.init.normal_(proj.weight, std=0.5)
    sdpa.load_state_dict(eager.state_dict())
    tokens = torch.randint(0, c.vocab, (1, 16))
    with torch.no_grad():
        capped = eager(input_ids=tokens).logits
        by_sdpa = sdpa(input_ids=tokens).logits
        eager.config.attn_logit_softcapping = None
        for layer in eager.model.layers:
            layer.self_attn.attn_logit_softcapping = None
        uncapped = eager(input_ids=tokens).logits
    assert not torch.allclose(capped, uncapped, atol=1e-4)
    torch.testing.assert_close(by_sdpa, uncapped)


def test_deepseek_sdpa_takes_the_math_fallback_on_the_cpu():
    """What deepseek-v3's hf-sdpa records say: MLA's value head dim (128) differs from its
    query/key head dim (192), which PyTorch's CPU flash kernel does not accept."""
    from torch.nn.attention import SDPBackend

    q = k = torch.zeros(1, 2, 8, 192, dtype=torch.bfloat16)
    v = torch.zeros(1, 2, 8, 128, dtype=torch.bfloat16)
    assert torch._fused_sdp_choice(q, k, v, is_causal=True) == SDPBackend.MATH.value
    assert torch._fused_sdp_choice(q, k, k, is_causal=True) == SDPBackend.FLASH_ATTENTION.value
    recorded = json.loads((ROOT / "docs" / "_data" / "measurements.json").read_text())
    ops = [c["measured"]["attention_ops"] for c in recorded["configurations"]
           if c["model"] == "deepseek-v3" and c["id"].startswith("saved/deepseek-v3/hf-sdpa")]
    assert ops and all("_safe_softmax.default" in o and not any("flash" in x for x in o)
                       for o in ops)


# Published parameter counts of the unchanged models: SOURCES.json, each exact figure with its
# source (the Hugging Face Hub's safetensors totals, index total_size / 2).
SOURCES = json.loads((ROOT / "tests" / "data" / "hf-configs" / "SOURCES.json").read_text())["files"]


@pytest.mark.parametrize("name", [n for n, c in CONFIG_FILES.items()
                                  if not c.overrides and not c.text_config])
def test_parameter_counts_are_the_published_ones(name):
    recorded = json.loads((ROOT / "docs" / "_data" / "measurements.json").read_text())
    counts = {c["measured"]["parameters_count"] for c in recorded["configurations"]
              if c["model"] == name and c["kind"] == "step"}
    file = CONFIG_FILES[name].file.rsplit("/", 1)[1]
    published = {p["value"] for p in SOURCES[file]["published"] if p.get("exact")}
    assert len(counts) == 1 and counts <= published, (name, counts, published)
