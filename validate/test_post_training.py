"""Post-training's trainer side (validate/measure/post_training.py): a DPO step with a frozen
reference model and the GRPO/PPO log-prob pass, measured under fake tensors at full size.

1. The method: fake tensors track what real tensors allocate, for both kinds, both
   implementations, both orders of the DPO step and both logits dtypes (tiny shapes).
2. The quick records are re-measured and must equal the file, with the invariants below.
3. The recorded figures against what is known from outside: the published parameter count,
   the ZeRO paper's bytes per parameter, Llama-3's vocabulary, and the tensors TRL's code
   holds at the reference pass (its outputs kept as locals, one log_softmax row per sequence).
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from validate.measure import configs, shapes  # noqa: E402
from validate.measure.post_training import (ORDERS, measure_dpo_step,  # noqa: E402
                                            measure_logprob_pass)

POST = [c for c in configs.configurations() if c.kind in configs.POST_TRAINING]
FAST = [c for c in POST if c.fast]
TINY = dict(shapes.SHAPES["llama-3-8b"], layers=2, hidden=64, heads=4, kv_heads=2, ffn=96,
            vocab=101)

# meta-llama/Meta-Llama-3-8B: 8,030,261,248 parameters (its model card / safetensors metadata);
# config.json: vocab_size 128256, hidden_size 4096, num_hidden_layers 32
LLAMA_3_8B = 8_030_261_248
V, H, L = 128_256, 4096, 32
# Rajbhandari et al. 2020 (ZeRO) §3.1: 2 + 2 + 12 bytes per parameter (bf16 weights and
# gradients; fp32 master, m and v); autocast keeps fp32 parameters and gradients (4 + 4 + 8)
ZERO = (2, 2, 4, 8)
AUTOCAST = (4, 4, 0, 8)


@pytest.fixture(scope="module")
def recorded() -> dict:
    doc = json.loads(configs.OUTPUT.read_text())
    return {c["id"]: c for c in doc["configurations"] if c["kind"] in configs.POST_TRAINING}


# --- 1. the method --------------------------------------------------------------------------

@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("recipe", ["zero-bf16", "autocast-fp32"])
@pytest.mark.parametrize("impl", ["hf-sdpa", "reference-sdpa"])
def test_fake_tensors_measure_a_dpo_step_as_real_tensors_do(impl, recipe, order):
    fake = measure_dpo_step(TINY, impl, recipe, 16, 2, order=order)
    real = measure_dpo_step(TINY, impl, recipe, 16, 2, order=order, fake=False)
    assert fake == real


@pytest.mark.parametrize("logits", ["fp32", "bf16"])
@pytest.mark.parametrize("recipe", ["zero-bf16", "autocast-fp32"])
@pytest.mark.parametrize("impl", ["hf-sdpa", "reference-sdpa"])
def test_fake_tensors_measure_a_logprob_pass_as_real_tensors_do(impl, recipe, logits):
    fake = measure_logprob_pass(TINY, impl, recipe, 16, 2, logits=logits)
    real = measure_logprob_pass(TINY, impl, recipe, 16, 2, logits=logits, fake=False)
    assert fake == real


def test_selective_log_softmax_is_log_softmax_then_gather():
    from validate.measure.post_training import selective_log_softmax
    logits = torch.randn(3, 7, 11)
    index = torch.randint(0, 11, (3, 7))
    naive = logits.log_softmax(-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(selective_log_softmax(logits, index), naive, atol=1e-6)
    half = logits.bfloat16()
    naive = half.log_softmax(-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
    assert torch.equal(selective_log_softmax(half, index), naive)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="order 'policy-first'"):
        measure_dpo_step(TINY, "hf-sdpa", "zero-bf16", 16, order="policy-first")
    with pytest.raises(ValueError, match="recipe 'fsdp2-bf16'"):
        measure_logprob_pass(TINY, "hf-sdpa", "fsdp2-bf16", 16)
    with pytest.raises(ValueError, match="logits 'fp8'"):
        measure_logprob_pass(TINY, "hf-sdpa", "zero-bf16", 16, logits="fp8")


# --- 2. the quick records, measured again ----------------------------------------------------

@pytest.mark.parametrize("config", FAST, ids=[c.id for c in FAST])
def test_quick_record_is_current_and_holds_its_invariants(recorded, config):
    entry = recorded[config.id]
    fresh = configs.normalise(config.measure())
    assert fresh == entry["measured"], f"{config.id}: re-measured differs from the file"
    n = fresh["parameters_count"]
    assert n == shapes.param_count(shapes.SHAPES[config.model])
    ref = fresh["reference"]
    assert ref["parameters_count"] == n and ref["weights"] == 2 * n and ref["dtype"] == ["bf16"]
    _holds_invariants(entry)


def _holds_invariants(entry: dict) -> None:
    m, n = entry["measured"], entry["measured"]["parameters_count"]
    st = m["states"]
    p, g, ma, o = ZERO if entry["recipe"].startswith("zero") else AUTOCAST
    if entry["kind"] == "logprob-pass":
        g = 0  # zero_grad(set_to_none=True) after the step: no gradients resident
    assert (st["parameters"], st["gradients"], st["master_weights"], st["optimizer_states"]) == (
        p * n, g * n, ma * n, o * n), entry["id"]
    assert st["step_counters"]["bytes"] == 4 * st["step_counters"]["count"]
    peak = m["peak"]
    assert peak["bytes"] == max(m["phase_peaks"].values())
    assert m["phase_peaks"][peak["phase"]] == peak["bytes"]
    assert peak["alive"]["reference weights"] == m["reference"]["weights"] + m["reference"]["buffers"]
    if entry["kind"] == "dpo-step":
        assert m["sequences"] == 2 * entry["b"] == entry["dpo"]["sequences"]
        assert m["reference_pass"]["bytes"] == m["phase_peaks"]["reference forward"] <= peak["bytes"]
    else:
        parts = m["parts"]
        assert parts["resident"] + parts["logits"] + parts["working"] == peak["bytes"]
        assert parts["resident"] == m["resident"]["bytes"] and parts["working"] > 0
        width = 4 if entry["logprob"]["logits_dtype"] == "fp32" else 2
        vocab = shapes.SHAPES[entry["model"]]["vocab"]
        assert m["logits"]["bytes"] == width * entry["b"] * entry["s"] * vocab


# --- 3. the recorded full-size figures against what is known from outside ----------------------

def test_llama_3_8b_records_hold_the_published_counts(recorded):
    chosen = [c for c in recorded.values() if c["model"] == "llama-3-8b"]
    assert len(chosen) == 13
    for c in chosen:
        assert c["measured"]["parameters_count"] == LLAMA_3_8B
        assert c["measured"]["reference"]["weights"] == 2 * LLAMA_3_8B  # bf16, exactly
        _holds_invariants(c)


def test_dpo_policy_states_are_a_plain_steps(recorded):
    """The policy's states after a DPO step are those of a plain step of the same recipe
    (the step records of validate/measure/step.py): the reference adds nothing to them."""
    doc = json.loads(configs.OUTPUT.read_text())
    plain = next(c for c in doc["configurations"]
                 if c["id"] == "step/llama-3-8b/reference-sdpa/zero-bf16/s2048-b1")
    for c in recorded.values():
        if c["kind"] == "dpo-step" and c["model"] == "llama-3-8b" and c["recipe"] == "zero-bf16":
            assert c["measured"]["states"] == plain["measured"]["states"], c["id"]


@pytest.mark.parametrize("s, b", [(1024, 1), (1024, 2), (2048, 1), (2048, 2)])
@pytest.mark.parametrize("order", ORDERS)
def test_reference_pass_holds_the_logits_trls_code_keeps(recorded, order, s, b):
    """At the reference pass's peak (bf16 logits, TRL's row-by-row log_softmax): the
    reference's logits [2b, s, V] and two of its rows' log_softmax [s-1, V] (the one being
    made and the last, still bound to ``row_logps``); in TRL's order also the policy's logits
    (``outputs`` is held until the loss returns) and the 2b log_softmax rows its
    backward needs. All bf16."""
    tail = f"reference-first/s{s}-b{b}" if order == "reference-first" else f"s{s}-b{b}"
    m = recorded[f"dpo-step/llama-3-8b/hf-sdpa/zero-bf16/{tail}"]["measured"]
    n = 2 * b
    want = 2 * (n * s * V + 2 * (s - 1) * V)
    if order == "trl":
        want += 2 * (n * s * V + n * (s - 1) * V)
    assert m["reference_pass"]["alive"]["logits"] == want


def test_autocast_caches_bf16_weights_through_a_no_grad_pass(recorded):
    """torch.autocast casts each fp32 Linear weight that requires grad to bf16 once and keeps
    the copy until the autocast region ends, under no_grad as well: every Linear weight of
    Llama-3-8B (all but the embedding and the 2L + 1 RMSNorm weights), 2 bytes each."""
    m = recorded["logprob-pass/llama-3-8b/hf-sdpa/autocast-fp32/logits-fp32/s2048-b4"]["measured"]
    linear = LLAMA_3_8B - V * H - (2 * L + 1) * H
    assert m["passes"]["policy log-probs"]["alive"]["weight copies"] == 2 * linear
    assert "weight copies" not in m["passes"]["reference log-probs"]["alive"]  # bf16 already
