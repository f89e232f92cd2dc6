"""Issue 24's memory techniques in the library: a chunked or fused loss, activations offloaded.

Expected values come from the sources: Liger-Kernel's own chunk-size example, the research
measurement of a torchtune-style chunked loss (CPU profiler, /work/research/issue24 ce_peak:
2.50 bf16 logits tensors at 8 chunks), PyTorch measurements of the whole step
(docs/_data/measurements.json, compared in tests/test_measured.py), datasheet link rates.
"""

from __future__ import annotations

import json

import pytest

from trainmath.cli.command import execute
from trainmath.hardware import host_link
from trainmath.memory.act_offload import MIN_OFFLOAD_BYTES, offload_seconds
from trainmath.memory.kernels import activation_offload_problems, loss_problems
from trainmath.memory.loss import liger_chunk_size, loss_memory
from trainmath.memory.training import Training
from trainmath.problems import Invalid
from trainmath.runs.description import run
from trainmath.runs.estimates import estimate
from trainmath.units import GB


@pytest.mark.parametrize("BT,H,V,chunk", [
    (16384, 4096, 32000, 2048),  # the example in Liger's own comment (inc_factor 8)
    (8192, 4096, 128256, 256),   # Llama-3-8B at s 8192: inc_factor 32
    (8192, 2304, 256000, 128),   # Gemma-2-2B: inc_factor 112
    (16384, 3584, 152064, 512),  # Qwen2.5-7B: inc_factor 43
    (100, 4096, 4096, 100),      # one chunk covers BT when the budget allows; never above BT
])
def test_liger_chunk_size(BT, H, V, chunk):
    assert liger_chunk_size(BT, H, V) == chunk


def test_a_torchtune_style_chunked_loss_peaks_as_measured():
    """ce_peak.py's "chunked x8, projection inside chunk, one backward": 2.50 L above the start
    (L = one bf16 logits tensor, BT = 2048, H = 256, V = 32768): every chunk's saved fp32
    log-softmax (2 L) and the first chunk's two fp32 gradients."""
    BT, H, V = 2048, 256, 32768
    L = 2 * BT * V
    m = loss_memory("chunked", tokens=BT, vocab=V, hidden=H, chunks=8)
    assert (4 * BT * V + m.backward.n) / L == 2.5


def test_the_standard_loss_is_the_spike_the_peak_already_counted():
    m = loss_memory("standard", tokens=8192, vocab=128256, hidden=4096)
    assert m.forward.n == 6 * 8192 * 128256 and m.backward.n == 8 * 8192 * 128256


def test_more_chunks_smaller_forward_but_the_weight_gradients_stay():
    """Chunking shrinks the logits N-fold, but not the LM head's weight gradients: three of
    them (two and their sum) while the second chunk's is added, 3·2·V·h."""
    V, h = 128256, 4096
    m8, m64 = (loss_memory("chunked", tokens=8192, vocab=V, hidden=h, chunks=n) for n in (8, 64))
    assert m64.forward.n * 8 == m8.forward.n
    assert m64.backward.n > 3 * 2 * V * h * 0.95


def test_liger_holds_no_vocabulary_tensor_in_its_backward():
    m = loss_memory("fused", tokens=8192, vocab=128256, hidden=4096)
    assert m.backward.n == 0 and m.chunks == 32
    assert m.forward.n == 2 * 256 * 128256 + 5 * 8192


def test_fused_loss_saves_the_gradients_instead_of_the_log_softmax():
    standard = estimate(run("llama-3-8b", seq_len=8192))
    fused = estimate(run("llama-3-8b", seq_len=8192, loss="fused"))
    V, h, s = 128256, 4096, 8192
    # log-softmax 4sV, the LM head's input 2sh, targets 8s and a count out; grad of the input
    # 2sh and of the weight 2Vh in
    assert standard.activations.n - fused.activations.n == 4 * s * V + 8 * s + 4 - 2 * V * h


def test_loss_rules_name_their_fields():
    (p,) = loss_problems("fused", 4)
    assert p.fields == ("loss_chunks", "loss")
    (p,) = loss_problems("chunked", None, tp=8)
    assert p.fields == ("loss", "tp") and "tp = 1" in p.message
    (p,) = loss_problems("chunked", 9000, seq_len=8192)
    assert p.fields == ("loss_chunks", "seq_len")
    assert loss_problems("chunked", 8, tp=1, seq_len=8192) == []
    with pytest.raises(ValueError, match="loss"):
        Training(loss="cut")
    with pytest.raises(ValueError, match="loss_chunks"):
        Training(loss="chunked", loss_chunks=0)


def test_a_run_refuses_what_is_not_modelled():
    with pytest.raises(Invalid, match="tp = 1"):
        run("llama-3-8b", seq_len=8192, tp=2, loss="chunked")
    with pytest.raises(Invalid, match="pp = 1"):
        run("llama-3-8b", seq_len=8192, pp=2, activation_offload="sync")
    (p,) = activation_offload_problems("overlap", pp=4)
    assert p.fields == ("activation_offload", "pp")
    from trainmath.memory.finetune import Adapter
    with pytest.raises(Invalid, match="adapter"):
        run("llama-2-7b", seq_len=2048, adapter=Adapter("lora", 16, ("q", "v")), loss="chunked")


def test_offloaded_activations_move_to_the_host_and_count_there():
    plain = estimate(run("llama-3-8b", seq_len=8192))
    off = estimate(run("llama-3-8b", seq_len=8192, activation_offload="sync"))
    assert off.activations + off.offloaded_activations == plain.activations
    assert off.host == off.offloaded_activations
    assert off.peak.bytes < plain.peak.bytes
    # one layer's tensors come back for its backward: a moment of its own
    assert any("back from host memory" in m.when for m in off.peak.moments)


def test_host_copies_cost_time_sync_more_than_overlap():
    """Datasheet PCIe Gen5 x16: 128 GB/s both ways, 64 each (H100 SXM)."""
    assert host_link("h100-sxm") == 64 * GB
    kw = dict(seq_len=8192, global_batch=8, gpu="h100-sxm")
    none = estimate(run("llama-3-8b", **kw)).step.time
    sync = estimate(run("llama-3-8b", activation_offload="sync", **kw)).step.time
    over = estimate(run("llama-3-8b", activation_offload="overlap", **kw)).step.time
    assert none.offload == 0 < over.offload < sync.offload
    moved = estimate(run("llama-3-8b", activation_offload="sync", **kw)).offloaded_activations
    assert sync.offload == pytest.approx(8 * 2 * moved.n / (64 * GB))
    assert offload_seconds("overlap", moved=1.0, link=1.0, forward=2.0, backward=2.0) == 0.0
    with pytest.raises(ValueError, match="link"):
        offload_seconds("sync", moved=1.0, link=0.0, forward=0.0, backward=0.0)


def test_the_fused_loss_moves_fewer_bytes():
    kw = dict(seq_len=8192, global_batch=8, gpu="h100-sxm")
    standard = estimate(run("llama-3-8b", **kw)).step.time
    fused = estimate(run("llama-3-8b", loss="fused", **kw)).step.time
    assert fused.memory < standard.memory and fused.gemm == standard.gemm


def test_min_offload_bytes_is_torchtunes():
    assert MIN_OFFLOAD_BYTES == 1024


def _json(*args: str) -> dict:
    out = execute(["estimate", *args, "--json"])
    assert out.status == 0, out.stderr
    return json.loads(out.stdout)


def test_the_flags_reach_the_json_and_the_text():
    d = _json("--model", "llama-3-8b", "--seq-len", "8192", "--loss", "chunked", "--loss-chunks",
              "16", "--activation-offload", "overlap")
    assert (d["inputs"]["loss"], d["inputs"]["loss_chunks"], d["inputs"]["activation_offload"]) \
        == ("chunked", 16, "overlap")
    assert d["host"]["activations"] == d["host"]["per_device"] > 0
    text = execute(["estimate", "--model", "llama-3-8b", "--seq-len", "8192", "--loss",
                    "chunked"]).stdout
    assert "loss chunked (8 chunks)" in text
    bad = execute(["estimate", "--model", "llama-3-8b", "--seq-len", "8192", "--loss", "cut"])
    assert bad.status == 2 and "standard, chunked, fused" in bad.stderr


def test_plan_takes_the_same_flags():
    out = execute(["plan", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--gpus", "8",
                   "--seq-len", "8192", "--global-batch", "64", "--loss", "chunked", "--json"])
    assert out.status == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["inputs"]["loss"] == "chunked" and d["inputs"]["loss_chunks"] == 8
    assert d["ranking"] and all(c["tp"] == 1 for c in d["ranking"])
    refused = [c for c in d["candidates"] if c["tp"] > 1]
    assert refused and all("tp = 1" in c["reason"] for c in refused)


def test_fp8_linears_save_their_inputs_in_one_byte():
    """Transformer Engine (module/layernorm_linear.py, linear.py): ln_out and the linear's input
    are saved quantized, one byte a value; FlashAttention keeps its 16-bit output O, so the
    output projection's fp8 copy is extra. Llama-3-8B at s 8192, one layer: h-wide QKV and MLP
    inputs and the ffn-wide down-projection input halve, O gains half of itself."""
    from trainmath.memory.activations import layer_activations
    from trainmath.memory.fp8_activations import fp8_saved
    from trainmath.model.presets import preset

    s, h, f = 8192, 4096, 14336
    bf16 = layer_activations(preset("llama-3-8b"), s, 1, implementation="megatron-te")
    fp8 = fp8_saved(bf16, attention="flash")
    assert bf16.total.n - fp8.total.n == (s * h + s * h + s * f) - s * h
    eager = layer_activations(preset("llama-3-8b"), s, 1, implementation="megatron-eager")
    assert eager.total.n - fp8_saved(eager, attention="eager").total.n == 3 * s * h + s * f
    run_fp8 = estimate(run("llama-3-8b", recipe="fp8-te", seq_len=s))
    assert run_fp8.layer.total == fp8.total
    with pytest.raises(ValueError, match="attention"):
        fp8_saved(bf16, attention="sdpa")
