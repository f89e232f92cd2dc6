"""Op-level selective checkpointing and torch.compile's partition (trainmath.memory.checkpointing).

Expected values come from outside the code: the op order and the save rule of torchtitan's
``SelectiveAC`` (``torchtitan/distributed/activation_checkpoint.py`` at b5bcd76c66d0, lines
241-276; ``models/common/attention.py``: ``self.wq(x), self.wk(x), self.wv(x)``;
``models/common/feed_forward.py``: ``self.w2(F.silu(self.w1(x)) * self.w3(x))``), and the bytes
PyTorch kept for Llama-3-8B at s 8192 (docs/_data/measurements.json, validate/measure).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmath.checks.measured import shape_of
from trainmath.cli.command import execute
from trainmath.memory.activations import layer_activations
from trainmath.memory.checkpointing import (parse_policy, recomputed_ops, timed_recompute,
                                            torchtitan_saved)
from trainmath.model.presets import preset
from trainmath.problems import Invalid
from trainmath.runs.description import run
from trainmath.runs.estimates import estimate
from trainmath.time.flops import flops_per_token

DOC = json.loads((Path(__file__).resolve().parents[1] / "docs" / "_data" /
                  "measurements.json").read_text(encoding="utf-8"))
MEASURED = {c["id"]: c["measured"] for c in DOC["configurations"]}
LLAMA = preset("llama-3-8b")


def test_torchtitan_saves_every_odd_matmul_and_the_attention():
    # mm order wq, wk, wv, wo, w1, w3, w2: the 1st, 3rd, 5th and 7th saved, SDPA saved
    assert torchtitan_saved(LLAMA) == ("q", "v", "attention", "gate", "down")
    assert recomputed_ops(LLAMA, "torchtitan") == ("k", "o", "up")


def test_a_linear_with_a_bias_is_an_addmm_and_always_saved():
    # GPT-3 XL (biases everywhere): every projection an addmm, in the save set, never counted
    (config,) = [c for c in DOC["configurations"]
                 if c["id"] == "op-sac-saved/gpt3-xl/reference-sdpa/bf16/torchtitan/s2048-b1"]
    gpt = shape_of(config)
    assert torchtitan_saved(gpt) == ("qkv", "attention", "o", "up", "down")
    a = layer_activations(gpt, 2048, 1, recompute="op", implementation="megatron-te")
    assert a.total.n == config["measured"]["per_layer"][1]


def test_one_layer_is_what_pytorch_kept():
    measured = MEASURED["op-sac-saved/llama-3-8b/reference-sdpa/bf16/torchtitan/s8192-b1"]
    a = layer_activations(LLAMA, 8192, 1, recompute="op", implementation="megatron-te")
    assert a.total.n == measured["per_layer"][1] == 521_142_272
    mine = layer_activations(LLAMA, 8192, 1, recompute="op", policy="attention",
                             implementation="megatron-te")
    assert mine.total.n == MEASURED[
        "op-sac-saved/llama-3-8b/reference-sdpa/bf16/attention/s8192-b1"]["per_layer"][1]
    compiled = layer_activations(LLAMA, 8192, 1, compiled=True, implementation="megatron-te")
    assert compiled.total.n == MEASURED[
        "compile-saved/llama-3-8b/reference-sdpa/bf16/s8192-b1"]["per_layer"][1]


def test_torchtitans_layout_is_predicted_within_two_percent():
    """The done-when of issue 24: Llama-3-8B, s 8192, FSDP2 on 8 GPUs, op-level policy."""
    measured = MEASURED["op-sac-step/llama-3-8b/reference-sdpa/fsdp2-bf16/torchtitan/dp8-rank0/"
                        "s8192-b1"]["peak"]["bytes"]
    e = estimate(run(LLAMA, recipe="fsdp2", dp=8, seq_len=8192, recompute="op",
                     implementation="megatron-te", optimizer_impl="for-loop"))
    assert abs(e.peak.bytes.n - measured) <= 0.02 * measured


def test_the_policy_reads_as_the_command_takes_it():
    assert parse_policy(" TorchTitan ") == "torchtitan"
    assert parse_policy("down,q, attention") == "q,attention,down"
    with pytest.raises(ValueError, match="accepted: torchtitan, or the ops"):
        parse_policy("q,softmax")


def test_rules_name_their_fields():
    with pytest.raises(Invalid) as e:
        run(LLAMA, seq_len=8192, recompute="full", recompute_policy="q")
    assert e.value.fields == ("recompute_policy", "recompute")
    with pytest.raises(Invalid, match="layers do not run"):
        run(LLAMA, seq_len=8192, recompute="op", recompute_policy="qkv",
            implementation="megatron-te")
    with pytest.raises(Invalid, match="accepted: tp = 1 and cp = 1"):
        run(LLAMA, seq_len=8192, recompute="op", tp=2, implementation="megatron-te")
    with pytest.raises(Invalid, match="accepted: recompute none, full or op"):
        run(LLAMA, seq_len=8192, recompute="selective", compiled=True,
            implementation="megatron-te")
    with pytest.raises(Invalid, match="accepted: megatron-te"):
        run(LLAMA, seq_len=8192, recompute="op", implementation="hf-sdpa")


def test_recomputation_costs_the_reruns_gemms():
    """The step-time model reruns k, o and up: 2 FLOPs per weight of each, per token."""
    assert timed_recompute(LLAMA, recompute="op", policy=None) == "op:k+o+up"
    f = flops_per_token(LLAMA, 8192, "op")
    h, kv, ffn, L = 4096, 1024, 14336, 32
    assert f.hardware - f.model == 2 * L * (h * kv + h * h + h * ffn)
    e = estimate(run(LLAMA, recipe="fsdp2", dp=8, seq_len=8192, global_batch=8, gpu="h100-sxm",
                     recompute="op", implementation="megatron-te"))
    none = estimate(run(LLAMA, recipe="fsdp2", dp=8, seq_len=8192, global_batch=8,
                        gpu="h100-sxm", implementation="megatron-te"))
    full = estimate(run(LLAMA, recipe="fsdp2", dp=8, seq_len=8192, global_batch=8,
                        gpu="h100-sxm", recompute="full", implementation="megatron-te"))
    assert 0 < e.step.time.recompute < full.step.time.recompute
    assert none.step.time.total < e.step.time.total < full.step.time.total


def test_the_command_states_the_policy():
    out = execute(["estimate", "--model", "llama-3-8b", "--seq-len", "8192", "--recompute", "op",
                   "--implementation", "megatron-te", "--json"])
    data = json.loads(out.stdout)
    assert data["checkpointing"] == {"policy": "torchtitan",
                                     "saved_ops": ["q", "v", "attention", "gate", "down"],
                                     "recomputed_ops": ["k", "o", "up"]}
    text = execute(["estimate", "--model", "llama-3-8b", "--seq-len", "8192", "--recompute", "op",
                    "--recompute-policy", "attention", "--implementation", "megatron-te"]).stdout
    assert "recompute op (attention): saves attention; recomputes q, k, v, o, gate, up, down" in text
    bad = execute(["estimate", "--model", "llama-3-8b", "--seq-len", "8192", "--compile",
                   "--recompute", "selective", "--implementation", "megatron-te"])
    assert bad.status == 2 and "compile with recompute 'selective'" in bad.stderr


def test_compiled_op_policy_keeps_what_the_backward_reads():
    """torch.compile over torchtitan's policy (validate/measure/checkpointing.py, the
    compile-op-saved records): the compiled forward hands the backward q, v, the attention
    kernel's outputs and gate, not down's output, which only the residual sum reads."""
    from trainmath.memory.checkpointing import checkpointing
    from trainmath.model.presets import preset

    m = preset("llama-3-8b")
    eager = checkpointing(m, recompute="op", policy=None, compiled=False)
    compiled = checkpointing(m, recompute="op", policy=None, compiled=True)
    assert eager.saved == ("q", "v", "attention", "gate", "down")
    assert compiled.saved == ("q", "v", "attention", "gate")
    assert compiled.recomputed == eager.recomputed == ("k", "o", "up")
    # a layer at s 8192: the down projection's output, b·s·h bf16 values, less than eager
    e = run(LLAMA, seq_len=8192, recompute="op", implementation="megatron-te")
    c = run(LLAMA, seq_len=8192, recompute="op", compiled=True, implementation="megatron-te")
    drop = estimate(e).layer.total.n - estimate(c).layer.total.n
    assert drop == 2 * 8192 * 4096
