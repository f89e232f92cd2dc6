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
    with pytest.raises(Invalid, match="accepted: cp = 1") as e:
        run(LLAMA, seq_len=8192, recompute="op", cp=2, implementation="megatron-te")
    assert ("recompute", "cp") in [p.fields for p in e.value.problems]
    with pytest.raises(Invalid, match="accepted: sequence parallelism on with tp > 1"):
        run(LLAMA, seq_len=8192, recompute="op", tp=2, implementation="megatron-te")
    with pytest.raises(Invalid, match="accepted: torchtitan with tp > 1"):
        run(LLAMA, seq_len=8192, recompute="op", recompute_policy="attention", tp=2,
            sequence_parallel=True, implementation="megatron-te")
    with pytest.raises(Invalid, match="linear layers with biases"):
        run(shape_of([c for c in DOC["configurations"] if c["model"] == "gpt3-xl"][0]),
            seq_len=2048, recompute="op", tp=2, sequence_parallel=True,
            implementation="megatron-te")
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
    with pytest.raises(Invalid, match="measured on one rank"):  # compiled with TP: not measured
        run(LLAMA, seq_len=8192, recompute="op", compiled=True, tp=2, sequence_parallel=True,
            implementation="megatron-te")


TP_RECORDS = {c["tp"]: c for c in DOC["configurations"] if c["kind"] == "op-sac-tp-saved"}


def test_with_tensor_parallelism_a_rank_keeps_what_pytorch_kept():
    """One Llama-3-8B layer on one rank of torchtitan's TP plan with sequence parallelism
    (``apply_tp``, torchtitan/models/llama3/infra/parallelize.py at 238fa9953e4a), under its
    policy, measured with DTensor on a fake process group (validate/measure/tensor_parallel.py):
    the library within 1% of the bytes PyTorch kept, at tp = 2, 4 and 8."""
    assert sorted(TP_RECORDS) == [2, 4, 8]
    for tp, config in TP_RECORDS.items():
        measured = config["measured"]["per_layer"][0]
        a = layer_activations(shape_of(config), config["s"], config["b"], recompute="op",
                              tp=tp, sequence_parallel=True, implementation="megatron-te")
        assert abs(a.total.n - measured) <= 0.01 * measured, tp


def test_with_tensor_parallelism_each_saved_tensor_is_the_plans_shard():
    """The plan, tensor by tensor, at s 8192 (bf16; the log-sum-exp fp32): the input a 1/tp
    sequence shard; wq (mm 1), wv (mm 3), the attention kernel and w1 (mm 5) column-parallel,
    1/tp of their width; w2 (mm 7) row-parallel, its mm output the full s × h partial sum; both
    reduce-scatters' outputs (in torchtitan's save set) s/tp × h. wk, wo, w3 (mm 2, 4, 6)
    recomputed."""
    s, h, q, kv, f, a = 8192, 4096, 4096, 1024, 14336, 32
    for tp, config in TP_RECORDS.items():
        expected = (2 * s * h // tp  # the layer input, kept as the previous layer's output
                    + 2 * s * q // tp + 2 * s * kv // tp  # q and v
                    + 2 * s * q // tp + 4 * s * a // tp  # O and its log-sum-exp
                    + 2 * s * f // tp  # gate
                    + 2 * s * h  # down's partial sum
                    + 2 * (2 * s * h // tp))  # the two reduce-scatters' outputs
        assert config["measured"]["per_layer"][0] == expected
        ops = sorted(op for op, _shape, _n in config["measured"]["layer_tensors"])
        assert ops.count("mm.default") == 4 and ops.count("reduce_scatter_tensor.default") == 2
        # the all-gathers rerun in the backward, the reduce-scatters do not
        assert config["measured"]["collectives"] == {
            "forward": {"all_gather_into_tensor": 2, "reduce_scatter_tensor": 2},
            "backward": {"all_gather_into_tensor": 4, "reduce_scatter_tensor": 2}}


def test_with_tensor_parallelism_the_rerun_gathers_cost_time():
    """Under the op-level policy with sequence parallelism the backward all-gathers the
    attention's and the MLP's inputs again: the step's tensor-parallel time grows by the
    forward's two all-gathers (exposed: no TP overlap), the GEMMs rerun as at tp = 1."""
    base = dict(recipe="fsdp2", dp=1, tp=8, sequence_parallel=True, seq_len=8192,
                global_batch=8, gpu="h100-sxm", implementation="megatron-te")
    op = estimate(run(LLAMA, recompute="op", **base)).step.time
    none = estimate(run(LLAMA, **base)).step.time
    assert op.tp > none.tp
    assert op.recompute > 0
    # per micro-batch, without recomputation: L layers of 2 all-gathers + 2 reduce-scatters
    # forward and as many backward, of the same b·s·h bytes (a ring: one time c each), and the
    # final hidden gathered before the LM head and back (2c): c(8L + 2). The policy adds 2L c.
    L = LLAMA.layers
    assert abs((op.tp - none.tp) - none.tp * 2 * L / (8 * L + 2)) <= 1e-9 * none.tp


def test_the_command_estimates_op_level_checkpointing_with_tensor_parallelism():
    out = execute(["estimate", "--model", "llama-3-8b", "--seq-len", "8192", "--recompute", "op",
                   "--tp", "8", "--sequence-parallel", "--implementation", "megatron-te",
                   "--json"])
    assert out.status == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["checkpointing"]["policy"] == "torchtitan"
    assert "one layer keeps 0.141 GB" in execute(
        ["estimate", "--model", "llama-3-8b", "--seq-len", "8192", "--recompute", "op", "--tp",
         "8", "--sequence-parallel", "--implementation", "megatron-te"]).stdout
    bad = execute(["estimate", "--model", "llama-3-8b", "--seq-len", "8192", "--recompute", "op",
                   "--tp", "2", "--implementation", "megatron-te"])
    assert bad.status == 2 and "no sequence parallelism is not modelled" in bad.stderr
    bad = execute(["estimate", "--model", "llama-3-8b", "--seq-len", "8192", "--recompute", "op",
                   "--cp", "2", "--implementation", "megatron-te"])
    assert bad.status == 2 and "cp = 2 is not modelled" in bad.stderr
