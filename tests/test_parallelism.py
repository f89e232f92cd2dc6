"""trainmath.parallel.layout: layouts, per-device parameters and memory, traffic, pipeline bubble.

Every expected value is worked out here from the papers' formulas, not read back from the code.
"""

from fractions import Fraction

import pytest

from trainmath.model.shape import param_count, shape
from trainmath.parallel.layout import Layout, layout, microbatches, validate
from trainmath.parallel.schedules import bubble_fraction, bubble_share
from trainmath.time.communication import communication
from trainmath.memory.stages import device_memory, peak_device_memory
from trainmath.parallel.placement import stage_params
from trainmath.units import Bytes, parse_bytes

# Llama-3-70B: Dubey et al. 2024, Table 3; config.json of meta-llama/Meta-Llama-3-70B.
LLAMA3_70B = shape("llama-3-70b", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256)


def gpt(h=768, layers=12, heads=12, vocab=50304, positions=1024, tied=True):
    return shape("gpt", layers=layers, hidden=h, heads=heads, ffn=4 * h, vocab=vocab, mlp="gelu",
                 norm="layernorm", bias=True, positions=positions, tied_embeddings=tied, dropout=True)


# -- layouts and validation ----------------------------------------------------------------------
def test_layout_counts_gpus_and_zero_group():
    lay = layout(dp=16, tp=8, pp=4, cp=2)
    assert lay.gpus == 16 * 8 * 4 * 2 == 1024
    assert lay.zero_group == 32  # dp·cp share the same weights
    assert lay.describe() == "dp 16 × tp 8 × pp 4 × cp 2 = 1024 GPUs"
    assert layout().describe() == "dp 1 × tp 1 × pp 1 × cp 1 = 1 GPU"
    assert (layout(dp=2, pp=2, v=3, sequence_parallel=True).describe()
            == "dp 2 × tp 1 × pp 2 × cp 1 = 4 GPUs, sequence parallel, 3 chunks per pipeline device")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dp": 0}, "dp .data-parallel size. must be a positive whole number, got 0"),
        ({"dp": 2, "tp": 2.5}, "tp .tensor-parallel size. must be a positive whole number, got 2.5"),
        ({"dp": 2, "v": -1}, "v .model chunks per pipeline device. must be a positive whole number, got -1"),
    ],
)
def test_bad_layout_degrees(kwargs, message):
    with pytest.raises(ValueError, match=message):
        layout(**kwargs)
    with pytest.raises(ValueError, match=message):  # however the layout is made
        Layout(**kwargs)


def test_validate_accepts_a_real_plan():
    lay = layout(dp=16, tp=8, pp=4, v=5, sequence_parallel=True)
    assert validate(LLAMA3_70B, lay, gpus=512, global_batch=512, micro_batch=1, seq_len=8192) is lay


def test_validate_names_every_offending_number():
    lay = layout(dp=3, tp=3, pp=3)
    with pytest.raises(ValueError) as err:
        validate(LLAMA3_70B, lay, gpus=64, global_batch=100, micro_batch=2)
    text = str(err.value)
    for part in (
        "heads 64 is not divisible by tp 3",
        "kv_heads 8 is not divisible by tp 3",
        "ffn 28672 is not divisible by tp 3",
        "gpus 64 ≠ dp × tp × pp × cp = 3 × 3 × 3 × 1 = 27",
        "global batch 100 is not divisible by dp × micro-batch = 3 × 2 = 6",
    ):
        assert part in text


def test_validate_kv_heads_alone():
    """GQA: 64 query heads split 16 ways, but 8 KV heads cannot be."""
    with pytest.raises(ValueError, match="kv_heads 8 is not divisible by tp 16"):
        validate(LLAMA3_70B, layout(dp=1, tp=16))


def test_validate_interleaving_and_sequence():
    with pytest.raises(ValueError, match=r"layers 80 cannot fill pp 81 stages; accepted: pp at most 80"):
        validate(LLAMA3_70B, layout(dp=1, pp=81))
    with pytest.raises(ValueError, match=r"interleaving \(v = 2\) needs pp ≥ 2, got pp 1"):
        validate(LLAMA3_70B, layout(dp=1, v=2))
    with pytest.raises(ValueError, match="seq_len 8196 is not divisible by 2 × cp = 8"):
        validate(LLAMA3_70B, layout(dp=1, cp=4), seq_len=8196)
    with pytest.raises(ValueError, match=r"seq_len 8196 is not divisible by tp × cp = 8 × 1 = 8"):
        validate(LLAMA3_70B, layout(dp=1, tp=8, sequence_parallel=True), seq_len=8196)


def test_microbatches():
    assert microbatches(512, dp=16, micro_batch=2) == 16
    with pytest.raises(ValueError, match="global batch 500 is not divisible by dp × micro-batch = 16 × 2 = 32"):
        microbatches(500, dp=16, micro_batch=2)


# -- parameters per device -----------------------------------------------------------------------
def test_gpt_layer_split_is_exact():
    """GPT layer: 12h² + 13h. Replicated on every TP rank: 2 LayerNorms (4h) and the biases of
    the two row-parallel linears (2h); the rest (12h² + 7h) is divided by tp."""
    h, tp = 768, 4
    m = gpt(h=h, layers=12)
    stages = stage_params(m, layout(dp=1, tp=tp, pp=3))
    per_layer = (12 * h * h + 7 * h) // tp + 6 * h
    assert [s.layers for s in stages] == [4, 4, 4]
    assert stages[1].total == 4 * per_layer
    # first stage: word embedding split over the vocabulary, learned positions replicated
    assert stages[0].total == 4 * per_layer + (50304 // tp) * h + 1024 * h
    # tied embeddings, pp > 1: the last stage keeps its own copy of the word embedding
    assert stages[2].total == 4 * per_layer + (50304 // tp) * h + 2 * h


def test_tp_shards_add_back_to_the_model():
    """Σ over stages of (sharded part × tp + replicated part) is the whole model (untied, V % tp == 0)."""
    h, tp = 512, 4
    m = gpt(h=h, layers=8, heads=8, vocab=32000, positions=0, tied=False)
    stages = stage_params(m, layout(dp=1, tp=tp, pp=2))
    replicated = sum(s.layer_replicated + s.final_norm for s in stages)
    total = sum(s.total for s in stages)
    assert (total - replicated) * tp + replicated == param_count(m)


def test_llama_3_70b_stages_by_hand():
    h, kv, ffn, V = 8192, 8 * 128, 28672, 128256
    attention = 2 * h * h + 2 * h * kv  # Q and O are h×h; K and V are h×(8 heads × 128)
    mlp = 3 * h * ffn  # SwiGLU: gate, up, down
    norms = 2 * h  # two RMSNorm gains, replicated
    per_device_layer = (attention + mlp) // 8 + norms
    stages = stage_params(LLAMA3_70B, layout(dp=16, tp=8, pp=4))
    assert per_device_layer == 106_971_136
    assert stages[0].total == 20 * per_device_layer + V * h // 8 == 2_270_756_864
    assert stages[1].total == stages[2].total == 20 * per_device_layer
    assert stages[3].total == 20 * per_device_layer + V * h // 8 + h  # LM head + final norm


def test_vocabulary_not_divisible_by_tp_is_padded():
    m = gpt(h=64, layers=2, heads=4, vocab=50257, positions=0, tied=False)
    first = stage_params(m, layout(dp=1, tp=2, pp=2))[0]
    assert first.embedding == 25129 * 64  # ceil(50257 / 2) rows


def test_tied_embeddings_on_one_stage_count_once():
    m = gpt(h=64, layers=2, heads=4, vocab=1000, positions=16)
    (only,) = stage_params(m, layout(dp=1))
    assert only.total == param_count(m)
    assert only.lm_head == 0


# -- memory per device ---------------------------------------------------------------------------
def test_device_memory_zero1_over_dp_times_cp():
    """bf16-mixed AdamW: 2 + 2 bytes replicated, 4 + 8 bytes sharded over dp·cp (ZeRO-1)."""
    lay = layout(dp=8, tp=8, pp=4, cp=2)
    mems = device_memory(LLAMA3_70B, lay, zero_stage=1)
    psi = 2_270_756_864  # first stage, from test_llama_3_70b_stages_by_hand
    first = mems[0]
    assert first.params == psi
    assert first.weights == first.gradients == Bytes(2 * psi)
    assert first.master_weights == Bytes(Fraction(4 * psi, 16))
    assert first.optimizer_states == Bytes(Fraction(8 * psi, 16))
    assert first.total == Bytes(4 * psi + Fraction(12 * psi, 16))
    assert first.activations == Bytes(0)


def test_megatron_fp32_gradients_with_the_distributed_optimizer():
    """Megatron Core's distributed-optimizer guide: bf16 parameters with fp32 gradients take 18
    bytes per parameter, 6 + 12/d with the distributed optimizer over d data-parallel ranks."""
    lay = layout(dp=16, tp=8, pp=4)
    psi = 2_270_756_864  # first stage, from test_llama_3_70b_stages_by_hand
    plain = device_memory(LLAMA3_70B, lay, zero_stage=0, grad_bytes=4)[0]
    assert plain.model_states == Bytes(18 * psi)
    dist = device_memory(LLAMA3_70B, lay, zero_stage=1, grad_bytes=4)[0]
    assert dist.model_states == Bytes(6 * psi + Fraction(12 * psi, 16))
    assert dist.gradients == Bytes(4 * psi)
    # the gradients are reduce-scattered in fp32 and the bf16 weights all-gathered:
    # (4 + 2)Ψ(d-1)/d against ZeRO's (2 + 2)Ψ(d-1)/d
    kw = dict(seq_len=8192, micro_batch=1, global_batch=512, zero_stage=1)
    fp32 = communication(LLAMA3_70B, lay, grad_bytes=4, **kw).data_parallel
    bf16 = communication(LLAMA3_70B, lay, **kw).data_parallel
    assert fp32 / bf16 == Fraction(6, 4)
    with pytest.raises(ValueError, match="grad_bytes must be a positive whole number, got 0"):
        device_memory(LLAMA3_70B, lay, grad_bytes=0)


def test_device_memory_zero3_and_activations_per_stage():
    lay = layout(dp=4, pp=2)
    m = gpt(h=64, layers=4, heads=4, vocab=1000, positions=0, tied=False)
    acts = (Bytes(10**9), Bytes(5 * 10**8))
    mems = device_memory(m, lay, zero_stage=3, activations=acts)
    psi0 = stage_params(m, lay)[0].total
    assert mems[0].model_states == Bytes(Fraction(16 * psi0, 4))
    assert mems[0].activations == Bytes(10**9) and mems[1].activations == Bytes(5 * 10**8)
    assert mems[0].total == Bytes(Fraction(16 * psi0, 4)) + Bytes(10**9)
    assert peak_device_memory(m, lay, zero_stage=3, activations=acts).stage == 0


def test_device_memory_rejects_bad_activations_and_stage():
    lay = layout(dp=2, pp=2)
    m = gpt(h=64, layers=4, heads=4, vocab=1000)
    with pytest.raises(ValueError, match="activations must be one Bytes or 2 Bytes"):
        device_memory(m, lay, activations=(Bytes(1),))
    with pytest.raises(ValueError, match="unknown ZeRO stage 4"):
        device_memory(m, lay, zero_stage=4)


# -- pipeline bubble -----------------------------------------------------------------------------
def test_bubble_narayanan():
    """Narayanan et al. 2021 §2.2: (p-1)/m with p = pp; interleaving divides it by v."""
    assert bubble_fraction(4, 8) == Fraction(3, 8)
    assert bubble_fraction(4, 8, v=2) == Fraction(3, 16)
    assert bubble_fraction(1, 8) == 0
    assert bubble_share(4, 8) == Fraction(3, 11)  # 3 idle slots in 8 + 3
    with pytest.raises(ValueError, match=r"m \(micro-batches per step\) must be a positive whole number, got 0"):
        bubble_fraction(4, 0)


# -- communication -------------------------------------------------------------------------------
def test_communication_data_parallel_only():
    m = gpt(h=64, layers=2, heads=4, vocab=1000)
    c = communication(m, layout(dp=4), seq_len=128, micro_batch=2, global_batch=16)
    assert c.data_parallel == Bytes(2 * param_count(m) * 2 * Fraction(3, 4))
    assert c.tensor_parallel == c.pipeline_parallel == c.context_parallel == Bytes(0)


def test_communication_tensor_parallel_megatron():
    """4 all-reduces of b·s·h per layer (Shoeybi et al. 2019 §3), + embedding forward and LM-head
    backward; 2(tp-1)/tp of the buffer per rank; m micro-batches; bf16."""
    h, L, s, b, tp = 1024, 4, 2048, 2, 4
    model = gpt(h=h, layers=L, heads=16, vocab=32000, tied=False)
    m = 8 // b  # global batch 8, dp 1
    c = communication(model, layout(dp=1, tp=tp), seq_len=s, micro_batch=b, global_batch=8)
    buffer = b * s * h * 2
    assert c.tensor_parallel == Bytes((4 * L + 2) * Fraction(2 * (tp - 1), tp) * buffer * m)
    # full recomputation reruns the forward: 6 per layer
    full = communication(model, layout(dp=1, tp=tp), seq_len=s, micro_batch=b, global_batch=8, recompute="full")
    assert full.tensor_parallel == Bytes((6 * L + 2) * Fraction(2 * (tp - 1), tp) * buffer * m)
    # sequence parallel: + one all-gather per column-parallel block in backward; embedding RS
    sp = communication(model, layout(dp=1, tp=tp, sequence_parallel=True), seq_len=s, micro_batch=b, global_batch=8)
    assert sp.tensor_parallel == Bytes((5 * L + Fraction(3, 2)) * Fraction(2 * (tp - 1), tp) * buffer * m)


def test_sequence_parallel_traffic_the_paper_and_megatron_lm():
    """Korthikanti et al. 2022 §4.2.2: with sequence parallelism each all-reduce becomes a
    reduce-scatter and an all-gather, the same volume as tensor parallelism: 4 all-reduce
    equivalents per layer. Megatron-LM's LinearWithGradAccumulationAndAsyncCommunication
    all-gathers each column-parallel input again in the backward: 2 more all-gathers, 5."""
    count = dict(first=False, last=False, sequence_parallel=True, recompute="none")
    from trainmath.time.communication import tensor_parallel_collectives
    assert tensor_parallel_collectives(1, **count, regather=False) == 4
    assert tensor_parallel_collectives(1, **count) == 5
    h, L, s, b, tp = 1024, 4, 2048, 2, 4
    model = gpt(h=h, layers=L, heads=16, vocab=32000, tied=False)
    kw = dict(seq_len=s, micro_batch=b, global_batch=8)
    lay = layout(dp=1, tp=tp, sequence_parallel=True)
    paper = communication(model, lay, regather=False, **kw).tensor_parallel
    tp_only = communication(model, layout(dp=1, tp=tp), **kw).tensor_parallel
    # the paper's count: the layers cost what tensor parallelism alone costs; only the
    # embedding's all-reduce becomes a reduce-scatter (half)
    buffer = b * s * h * 2 * Fraction(2 * (tp - 1), tp) * (8 // b)
    assert tp_only - paper == Bytes(Fraction(1, 2) * buffer)


def test_communication_pipeline_and_context():
    h, s, b, tp, pp, cp = 1024, 4096, 1, 2, 4, 2
    model = shape("llama-ish", layers=8, hidden=h, heads=16, kv_heads=4, ffn=2816, vocab=32000)
    lay = layout(dp=1, tp=tp, pp=pp, cp=cp)
    m = 16
    interior = communication(model, lay, seq_len=s, micro_batch=b, global_batch=16, stage=1)
    # pipeline: one activation forward and one gradient backward per micro-batch, 1/tp each
    activation = b * (s // cp) * h * 2
    assert interior.pipeline_parallel == Bytes(Fraction(2 * m * activation, tp))
    first = communication(model, lay, seq_len=s, micro_batch=b, global_batch=16, stage=0)
    assert first.pipeline_parallel == Bytes(Fraction(m * activation, tp))
    # context: all-gather K,V forward and backward, reduce-scatter dK,dV: 3 × (cp-1)/cp × 2bs·kv/tp
    kv_dim = 4 * 64
    kv = 2 * b * s * (kv_dim // tp) * 2
    assert interior.context_parallel == Bytes(3 * Fraction(cp - 1, cp) * kv * 2 * m)  # 2 layers/stage
    # interleaving sends v times as often on interior stages
    inter = communication(model, layout(dp=1, tp=tp, pp=pp, cp=cp, v=2), seq_len=s, micro_batch=b,
                          global_batch=16, stage=1)
    assert inter.pipeline_parallel == 2 * interior.pipeline_parallel


def test_communication_bad_input():
    m = gpt(h=64, layers=2, heads=4, vocab=1000)
    with pytest.raises(ValueError, match="unknown recompute 'some'; accepted: none, selective, full"):
        communication(m, layout(dp=2), seq_len=64, micro_batch=1, global_batch=2, recompute="some")
    with pytest.raises(ValueError, match="stage 3 is out of range; accepted: 0 to 1"):
        communication(m, layout(dp=1, pp=2), seq_len=64, micro_batch=1, global_batch=2, stage=3)


