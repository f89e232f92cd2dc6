"""trainmath.model.moe and expert parallelism: total and active parameters, per-device memory with ep,
the all-to-all, and the command's flags."""

from fractions import Fraction

import pytest

from trainmath.report.data import estimate_dict, estimate_json
from trainmath.cli.command import main
from trainmath.model.shape import modified, param_count, param_shapes, shape
from trainmath.model.presets import preset
from trainmath.model.moe import active_params, expert_params, expert_tokens, total_params
from trainmath.time.communication import all_to_all_elements
from trainmath.parallel.layout import Layout, layout
from trainmath.memory.stages import device_memory
from trainmath.parallel.placement import stage_params
from trainmath.runs.estimates import estimate
from trainmath.runs.description import run
from trainmath.memory.activations import layer_activations
from trainmath.units import Bytes

MIXTRAL = preset("mixtral-8x7b")


def test_mixtral_total_is_the_safetensors_index_total():
    """mistralai/Mixtral-8x7B-v0.1 model.safetensors.index.json: total_size 93,405,585,408 bytes
    of bf16 weights, 2 bytes each."""
    assert total_params(MIXTRAL) == param_count(MIXTRAL) == 93_405_585_408 // 2


def test_mixtral_active_is_what_mistral_rounds_to_12_9b():
    """Mistral AI's announcement: 46.7B total, 12.9B used per token; the exact count rounds to
    both (Jiang et al. 2024 round them to 47B and 13B)."""
    assert round(total_params(MIXTRAL) / 1e8) == 467
    assert round(active_params(MIXTRAL) / 1e8) == 129


def test_active_is_total_less_six_of_eight_experts_per_layer():
    """Each layer's expert: three 4096 × 14336 matrices (Mixtral's config.json)."""
    per_expert = 3 * 4096 * 14336
    assert total_params(MIXTRAL) - active_params(MIXTRAL) == 32 * 6 * per_expert
    assert expert_params(MIXTRAL) == 32 * 8 * per_expert


def test_a_dense_model_is_all_active():
    m = preset("llama-3-8b")
    assert active_params(m) == total_params(m) and expert_params(m) == 0


def test_shared_experts_and_expert_width():
    """A DeepSeekMoE-style shape: 2 shared + 64 routed experts of width 1408, top 6."""
    m = shape("fine", layers=2, hidden=2048, heads=16, ffn=10944, vocab=1000, experts=64,
              experts_per_token=6, shared_experts=2, expert_ffn=1408)
    expert = 3 * 2048 * 1408
    router = 2048 * 64
    layer_attention = 4 * 2048 * 2048
    norms = 2 * 2048
    assert total_params(m) == 2 * (layer_attention + router + 66 * expert + norms) + 2 * 1000 * 2048 + 2048
    assert active_params(m) == total_params(m) - 2 * 58 * expert


def test_param_shapes_hold_the_experts_as_3d_tensors():
    shapes = param_shapes(MIXTRAL)
    assert (8, 4096) in shapes.layer and (8, 2 * 14336, 4096) in shapes.layer
    assert (8, 4096, 14336) in shapes.layer
    total = shapes.layers * sum(__import__("math").prod(t) for t in shapes.layer)
    total += sum(__import__("math").prod(t) for t in shapes.root)
    assert total == param_count(MIXTRAL)


@pytest.mark.parametrize(("fields", "message"), [
    (dict(experts=8), "experts_per_token 0 must be from 1 to experts 8"),
    (dict(experts=8, experts_per_token=9), "experts_per_token 9 must be from 1 to experts 8"),
    (dict(experts_per_token=2), "experts_per_token 2 needs experts"),
    (dict(shared_experts=1), "shared_experts 1 needs experts"),
    (dict(experts=8, experts_per_token=2, dense_layers=32), "dense_layers 32 leaves no mixture"),
    (dict(dense_layers=1), "dense_layers and moe_every place a mixture's layers"),
])
def test_bad_expert_fields(fields, message):
    with pytest.raises(ValueError, match=message):
        shape("x", layers=2, hidden=64, heads=4, ffn=128, vocab=10, **fields)


# -- expert parallelism --------------------------------------------------------------------------
def test_ep_must_divide_dp_and_the_experts():
    with pytest.raises(ValueError, match="ep \\(expert-parallel size\\) 3 does not divide dp 8"):
        Layout(dp=8, ep=3)
    with pytest.raises(ValueError, match="experts 8 is not divisible by ep 16"):
        run(MIXTRAL, dp=16, ep=16)
    with pytest.raises(ValueError, match="ep 2 needs a mixture of experts, and llama-3-8b is dense"):
        run("llama-3-8b", dp=2, ep=2)


def test_ep_adds_no_gpus_and_shows_in_the_layout():
    lay = layout(dp=16, pp=4, ep=8)
    assert lay.gpus == 64 and lay.expert_zero_group == 2
    assert lay.describe().endswith("experts split ep 8 ways within dp")


def test_expert_weights_divide_by_ep_times_tp_and_the_rest_by_tp():
    """Megatron-Core: experts split over ep, and by --expert-tensor-parallel-size (= tp)."""
    (one,) = stage_params(MIXTRAL, layout(dp=8, tp=2, ep=4))
    assert one.expert == expert_params(MIXTRAL) // 8
    dense = param_count(MIXTRAL) - expert_params(MIXTRAL)
    router = 32 * 4096 * 8
    norms = 32 * 2 * 4096 + 4096
    assert one.dense == (dense - router - norms) // 2 + router + norms


def test_zero_shards_expert_states_over_dp_cp_over_ep():
    """ZeRO-1 (bf16-mixed, 12 bytes of master weights and Adam states per parameter): dense states
    over dp = 8 ranks, expert states over dp/ep = 2 ranks."""
    (d,) = device_memory(MIXTRAL, layout(dp=8, ep=4), zero_stage=1)
    experts = Fraction(expert_params(MIXTRAL), 4)
    dense = param_count(MIXTRAL) - expert_params(MIXTRAL)
    assert d.weights.n == 2 * (dense + experts)
    assert (d.master_weights + d.optimizer_states).n == 12 * (Fraction(dense, 8) + experts / 2)
    assert d.expert_zero_group == 2


def test_ep_1_is_the_dense_arithmetic():
    a = estimate_dict(estimate(run(MIXTRAL, dp=8, zero_stage=1)))
    assert a["per_device"]["weights"] == 2 * param_count(MIXTRAL)
    assert a["inputs"]["ep"] == 1


# -- all-to-all and tokens -----------------------------------------------------------------------
def test_all_to_all_is_four_times_the_share_that_leaves():
    """b·s·k·h = 1 × 4096 × 2 × 4096 values, (ep-1)/ep of them leave per all-to-all, four of them."""
    assert all_to_all_elements(MIXTRAL, 4096, 1, 8) == 4 * Fraction(7, 8) * 4096 * 2 * 4096
    assert all_to_all_elements(MIXTRAL, 4096, 1, 1) == 0
    assert expert_tokens(MIXTRAL, 4096, 2) == 2 * 4096 * 2
    with pytest.raises(ValueError, match="is dense"):
        all_to_all_elements(preset("llama-2-7b"), 4096, 1, 2)


def test_moe_activations_count_k_copies_of_each_token():
    """Mixtral, s = 4096, b = 1: the experts' SwiGLU intermediates (4 × 14336 wide, eager) for
    2 copies of each token, bf16."""
    e = estimate(run(MIXTRAL, seq_len=4096))
    moe = [t for t in e.layer.tensors if "routed experts" in t.name]
    assert [t.bytes.n for t in moe] == [2 * 4 * 14336 * 4096 * 2]
    assert any("router probabilities" in t.name for t in e.layer.tensors)


def test_hf_kernels_add_what_mixtrals_loop_keeps():
    """Per token copy: three int64 indices and an fp32 weight; per token an fp32 sum; per
    expert an int32 offset (transformers' grouped_mm experts, validate/test_moe_saved.py)."""
    megatron = estimate(run(MIXTRAL, seq_len=4096, implementation="megatron-te")).layer
    hf = estimate(run(MIXTRAL, seq_len=4096, implementation="hf-sdpa")).layer
    moe = lambda layer: sum(t.bytes.n for t in layer.tensors if t.block == "MLP")  # noqa: E731
    copies, tokens = 2 * 4096, 4096
    assert moe(hf) - moe(megatron) == copies * (3 * 8 + 4) + 4 * tokens + 4 * 8


def test_hf_kernels_run_shared_experts_as_a_dense_mlp():
    """DeepSeek's and Llama 4's transformers code runs its shared experts as an ordinary MLP on
    every token: four ffn-wide tensors (gate, up, SiLU, product), as a dense SwiGLU layer."""
    m = modified(MIXTRAL, shared_experts=1)
    with_shared = layer_activations(m, 4096, 1, implementation="hf-sdpa").total
    without = layer_activations(MIXTRAL, 4096, 1, implementation="hf-sdpa").total
    assert with_shared - without == Bytes(4 * 2 * 4096 * MIXTRAL.expert_width)


# -- the command ---------------------------------------------------------------------------------
def test_cli_moe_flags_make_a_mixture(capsys):
    assert main(["estimate", "--model", "mistral-7b", "--experts", "8", "--experts-per-token", "2",
                 "--json"]) == 0
    out = capsys.readouterr().out
    assert '"experts": 8' in out and '"experts_per_token": 2' in out


@pytest.mark.parametrize(("argv", "message"), [
    (["--params", "7e9", "--ep", "2", "--dp", "2"], "ep 2 needs a model shape"),
    (["--model", "llama-3-8b", "--ep", "2", "--dp", "2"], "ep 2 needs a mixture of experts, and llama-3-8b is dense"),
    (["--model", "mixtral-8x7b", "--ep", "3", "--dp", "4"], "ep (expert-parallel size) 3 does not divide dp 4"),
    (["--model", "mixtral-8x7b", "--ep", "0"], "argument --ep: '0' is not a positive whole number"),
    (["--config", "nowhere.json"], "cannot read config 'nowhere.json'"),
    (["--config", "tests/data/hf-configs/gpt2.json", "--model", "llama-2-7b"], "cannot be combined with --model"),
])
def test_cli_bad_values_exit_2(argv, message, capsys):
    assert main(["estimate", *argv]) == 2
    assert message in capsys.readouterr().err


def test_cli_config_names_the_model_by_its_path(capsys):
    path = "tests/data/hf-configs/gemma-7b.json"
    assert main(["estimate", "--config", path]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: 8,537,680,896 parameters")


def test_modified_keeps_expert_fields():
    m = modified(MIXTRAL, experts_per_token=1)
    assert active_params(m) == total_params(m) - 32 * 7 * 3 * 4096 * 14336


def test_expert_parallel_traffic_per_step():
    """Mixtral on dp 16, ep 8, pp 4: per micro-batch and MoE layer 4 × 7/8 × s·k·h bf16 values
    leave the device; 8 layers per stage, m = 256 / 16 = 16 micro-batches."""
    from trainmath.time.communication import communication

    c = communication(MIXTRAL, layout(dp=16, pp=4, ep=8), seq_len=4096, micro_batch=1,
                      global_batch=256, zero_stage=1, stage=0)
    assert c.expert_parallel.n == 4 * Fraction(7, 8) * 4096 * 2 * 4096 * 2 * 8 * 16
    assert c.parts()["expert parallel"] == c.expert_parallel
    dense = communication(preset("mistral-7b"), layout(dp=16, pp=4), seq_len=4096, micro_batch=1,
                          global_batch=256, zero_stage=1, stage=0)
    assert dense.expert_parallel.n == 0


def test_all_to_all_factor():
    from trainmath.time.collectives import all_to_all_factor

    assert all_to_all_factor(8) == Fraction(7, 8) and all_to_all_factor(1) == 0


def test_flops_follow_the_active_parameters():
    """6N counts the router and k experts per layer: Mixtral's active parameters less its token
    embedding (a lookup) and its norms."""
    from trainmath.time.flops import matmul_params

    norms = 32 * 2 * 4096 + 4096
    assert matmul_params(MIXTRAL) == active_params(MIXTRAL) - 32000 * 4096 - norms
    dense = modified(MIXTRAL, experts=0, experts_per_token=0)
    assert matmul_params(dense) == param_count(dense) - 32000 * 4096 - norms
