"""vLLM's start-up arithmetic (trainmath.memory.rollout) against published vLLM logs.

Logs round GiB to 2 decimals, so a logged "X GiB" is any amount in [X - 0.005, X + 0.005):
blocks computed from it are checked to bracket the logged blocks, and tokens and concurrency are
checked exactly from the logged blocks.
"""

from fractions import Fraction

import pytest

from trainmath.memory.rollout import (
    Engine, engine_memory, engine_weights, kv_bytes_per_token, kv_capacity, profile_activations)
from trainmath.model.presets import PRESETS, preset
from trainmath.model.shape import modified, shape
from trainmath.units import GiB, Bytes

HALF_CENT = Fraction(GiB, 200)  # 0.005 GiB: half the last digit of a logged "x.xx GiB"

# Llama-3.1-8B and -70B: Llama 3's shapes with config.json's max_position_embeddings 131072
LLAMA31_8B = modified(preset("llama-3-8b"), max_positions=131072)
LLAMA31_70B = modified(preset("llama-3-70b"), max_positions=131072)
# Qwen3-235B-A22B, config.json: 94 layers, 64 heads, 4 key-value heads, head_dim 128
QWEN3_235B = shape("qwen3-235b-a22b", layers=94, hidden=4096, heads=64, kv_heads=4, ffn=12288,
                   vocab=151936, head_width=128, max_positions=40960, experts=128,
                   experts_per_token=8, expert_ffn=1536, qk_norm="head")


def gib(x: str) -> Fraction:
    return Fraction(x) * GiB


def bracket(logged_gib: str, per_token: Bytes, block_size: int = 16) -> tuple[int, int]:
    """The blocks vLLM can have made from an amount that its log rounds to ``logged_gib``."""
    lo = kv_capacity(available=Bytes(gib(logged_gib) - HALF_CENT), per_token=per_token,
                     block_size=block_size, max_model_len=1).blocks
    hi = kv_capacity(available=Bytes(gib(logged_gib) + HALF_CENT), per_token=per_token,
                     block_size=block_size, max_model_len=1).blocks
    return lo, hi


@pytest.mark.parametrize("logged_gib, blocks, length, concurrency", [
    # vllm issue #10517 (kaspersiminski, 2024-12-02): Llama-3.1-8B-Instruct, RTX 3090, util 0.9:
    # "kv_cache_size=3.81GiB", "GPU blocks: 1952", "Maximum concurrency for 20000 tokens per
    # request: 1.56x"; and at 29k: "kv_cache_size=2.89GiB", "# GPU blocks: 1478", "0.82x",
    # "maximum number of tokens that can be stored in KV cache (23648)"
    ("3.81", 1952, 20000, "1.56"),
    ("2.89", 1478, 29000, "0.82"),
])
def test_issue_10517_blocks_tokens_concurrency(logged_gib, blocks, length, concurrency):
    per_token = kv_bytes_per_token(LLAMA31_8B)
    lo, hi = bracket(logged_gib, per_token)
    assert lo <= blocks <= hi
    kv = kv_capacity(available=per_token * 16 * blocks, per_token=per_token, block_size=16,
                     max_model_len=length)
    assert kv.blocks == blocks and f"{kv.concurrency:.2f}" == concurrency
    if length == 29000:
        assert kv.tokens == 23648


@pytest.mark.parametrize("length, peak_torch, blocks", [
    # the same log lines: total_gpu_memory=23.58GiB, peak_torch_memory=17.06GiB (17.98GiB at
    # 29k; vLLM's peak includes the weights), non_torch_memory=0.35GiB, gpu_memory_utilization=0.90
    (20000, "17.06", 1952),
    (29000, "17.98", 1478),
])
def test_issue_10517_budget_from_logged_parts(length, peak_torch, blocks):
    engine = Engine(max_model_len=length, max_num_batched_tokens=length)
    m = engine_memory(LLAMA31_8B, engine, gpu_total=Bytes(gib("23.58")),
                      non_torch=Bytes(gib("0.35")), weights=Bytes(0),
                      activations=Bytes(gib(peak_torch)))
    # four rounded figures: 0.9 x 0.005 + 0.005 + 0.005 GiB at most, 7.4 blocks of 2 MiB
    assert abs(m.kv.blocks - blocks) <= 8
    assert m.requested == Bytes(gib("23.58") * Fraction(9, 10))


@pytest.mark.parametrize("length, peak_torch, blocks", [
    (20000, "17.06", 1952),  # vllm issue #10517, as above
    (29000, "17.98", 1478),
])
def test_issue_10517_estimates(length, peak_torch, blocks):
    # "Loading model weights took 14.9888 GB" (vLLM divides by 2^30: GiB)
    assert abs(engine_weights(LLAMA31_8B).gib - 14.9888) < 0.0001
    # peak_torch_memory less the weights: the profile run's activations, to 1%
    act = profile_activations(LLAMA31_8B, tokens=length, seqs=256)
    assert act.gib == pytest.approx(float(Fraction(peak_torch)) - 14.9888, rel=0.01)
    # everything estimated but non-torch memory (the default is this log's 0.35 GiB): within
    # 10 blocks (0.5%) of the logged blocks
    m = engine_memory(LLAMA31_8B, Engine(max_model_len=length, max_num_batched_tokens=length),
                      gpu_total=Bytes(gib("23.58")))
    assert abs(m.kv.blocks - blocks) <= 10


def test_pr_12569_llama_70b_w8a8():
    # vllm PR #12569: neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8, --max-model-len
    # 2048: "Loading model weights took 67.7229 GB", "# GPU blocks: 1381", "Maximum concurrency
    # for 2048 tokens per request: 10.79x"
    assert engine_weights(LLAMA31_70B, weights="int8").gib == pytest.approx(67.7229, rel=0.001)
    per_token = kv_bytes_per_token(LLAMA31_70B)
    kv = kv_capacity(available=per_token * 16 * 1381, per_token=per_token, block_size=16,
                     max_model_len=2048)
    assert (kv.blocks, kv.tokens, f"{kv.concurrency:.2f}") == (1381, 22096, "10.79")


def test_issue_25350_fp8_kv():
    # vllm issue #25350: --kv-cache-dtype fp8, --max-model-len 100000: "Available KV cache
    # memory: 10.55 GiB", "GPU KV cache size: 230,528 tokens", "Maximum concurrency for 100,000
    # tokens per request: 2.31x"; a model of 48 layers x 4 KV heads x 128, as Qwen3-30B-A3B
    model = preset("qwen3-30b-a3b")
    per_token = kv_bytes_per_token(model, kv_dtype="fp8")
    assert per_token == Bytes(48 * 2 * 4 * 128)
    lo, hi = bracket("10.55", per_token)
    assert lo <= 230528 // 16 <= hi
    kv = kv_capacity(available=per_token * 230528, per_token=per_token, block_size=16,
                     max_model_len=100000)
    assert kv.tokens == 230528 and f"{kv.concurrency:.2f}" == "2.31"
    assert kv_bytes_per_token(model) == per_token * 2  # "auto": the 16-bit dtype


def test_issue_21348_qwen3_235b_tp4():
    # vllm issue #21348: Qwen3-235B-A22B-FP8, --tensor-parallel-size 4 (KV "auto": bf16):
    # "Available KV cache memory: 8.11 GiB", "GPU KV cache size: 178,880 tokens"
    per_token = kv_bytes_per_token(QWEN3_235B, tp=4)
    assert per_token == Bytes(94 * 2 * 1 * 128 * 2)
    assert 178880 % 16 == 0
    kv = kv_capacity(available=Bytes(gib("8.11")), per_token=per_token, block_size=16,
                     max_model_len=40960)
    # 1.1% above the log: vLLM logs one rank's available memory but keeps the fewest blocks of
    # all ranks (the engine core unifies num_blocks across workers), so the logged tokens are
    # those of a rank with less room
    assert kv.tokens == pytest.approx(178880, rel=0.015) and kv.tokens > 178880


def test_mla_is_not_split_by_tp():
    # DeepSeek-V3's config.json: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64
    v3 = PRESETS["deepseek-v3"]
    assert kv_bytes_per_token(v3) == Bytes(61 * (512 + 64) * 2)
    assert kv_bytes_per_token(v3, tp=8) == kv_bytes_per_token(v3)


def test_kv_heads_replicated_past_tp():
    # ModelConfig.get_num_kv_heads: max(1, kv_heads // tp); Llama-3-8B has 8 KV heads
    m = preset("llama-3-8b")
    assert kv_bytes_per_token(m, tp=16) == kv_bytes_per_token(m, tp=8) == Bytes(32 * 2 * 128 * 2)


def test_sleep_keeps_graphs_and_non_torch():
    e = engine_memory(LLAMA31_8B, Engine(max_model_len=8192, sleep_level=1),
                      gpu_total=Bytes(80 * GiB), non_torch=Bytes(GiB // 2),
                      cuda_graphs=Bytes(GiB))
    assert e.asleep(0) == e.awake() > e.requested
    assert e.asleep(1) == e.asleep(2) == e.idle() == Bytes(GiB // 2 + GiB)
    eager = engine_memory(LLAMA31_8B, Engine(max_model_len=8192, cuda_graphs=False),
                          gpu_total=Bytes(80 * GiB))
    assert eager.cuda_graphs == Bytes(0)
    budget = engine_memory(LLAMA31_8B, Engine(max_model_len=8192, graphs_in_budget=True),
                           gpu_total=Bytes(80 * GiB), non_torch=Bytes(GiB // 2),
                           cuda_graphs=Bytes(GiB))
    # v0.21's rule: the graphs' estimate leaves the KV cache's share, and the total stays
    assert budget.kv.available == e.kv.available - Bytes(GiB)
    assert budget.awake().n == pytest.approx(e.awake().n - GiB, abs=e.kv.per_block.n)


@pytest.mark.parametrize("kwargs, named", [
    ({"gpu_memory_utilization": 0}, "gpu_memory_utilization 0"),
    ({"gpu_memory_utilization": 1.5}, "1.5"),
    ({"tp": 0}, "tp"),
    ({"kv_dtype": "fp4"}, "'fp4'"),
    ({"weights": "nf4"}, "'nf4'"),
    ({"sleep_level": 3}, "sleep_level"),
])
def test_bad_engine(kwargs, named):
    with pytest.raises(ValueError, match=named) as err:
        Engine(**kwargs)
    if "kv_dtype" in kwargs:
        assert "auto, fp8" in str(err.value)


def test_budget_too_small():
    with pytest.raises(ValueError, match="GiB requested"):
        engine_memory(preset("llama-3-70b"), Engine(), gpu_total=Bytes(80 * GiB))
