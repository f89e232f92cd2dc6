"""trainmath.model.moe and expert parallelism: total and active parameters, per-device memory with ep,
the all-to-all, and the command's flags."""

from fractions import Fraction

import pytest

from trainmath.report.data import estimate_dict
from trainmath.cli.command import main
from trainmath.model.shape import modified, param_count, param_shapes, shape
from trainmath.model.presets import preset
from trainmath.model.moe import active_params, expert_params, expert_tokens, total_params
from trainmath.time.communication import all_to_all_elements
from trainmath.parallel.layout import Layout, expert_problems, layout
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
def test_ep_must_fold_over_the_gpus_and_divide_the_experts():
    """Megatron-Core's initialize_model_parallel (core_v0.15.0): world_size must divide by
    expert_tensor_parallel_size × expert_model_parallel_size × pipeline_model_parallel_size."""
    with pytest.raises(ValueError, match=r"etp × ep = 1 × 8 = 8 does not divide the dp × cp × tp "
                                         r"= 2 × 2 × 1 = 4 GPUs"):
        run(MIXTRAL, dp=2, cp=2, ep=8)
    with pytest.raises(ValueError, match="experts 8 is not divisible by ep 16"):
        run(MIXTRAL, dp=16, ep=16)
    with pytest.raises(ValueError, match="ep 2 needs a mixture of experts, and llama-3-8b is dense"):
        run("llama-3-8b", dp=2, ep=2)
    with pytest.raises(ValueError, match="etp 1 needs a mixture of experts"):
        run("llama-3-8b", tp=2, etp=1)
    Layout(dp=8, ep=3)  # a layout alone is fine: the rule needs the model's experts


def test_ep_folds_over_context_parallelism():
    """Megatron-Core's MoE README (core_v0.15.0), MoE Parallel Folding: "the traditional way with
    (CP=8, EP=8) needs at least 64 GPUs, for now it only requires 8 GPUs"."""
    r = run(MIXTRAL, cp=8, ep=8, seq_len=4096)
    assert r.layout.gpus == 8
    assert r.layout.expert_zero_group == 1  # expert data-parallel size: 8 / (1 × 8 × 1)
    (one,) = stage_params(MIXTRAL, r.layout)
    assert one.expert == expert_params(MIXTRAL) // 8  # one of the eight experts per GPU


def test_folding_sets_expert_tensor_parallelism_apart():
    """The README at Megatron-LM d98e8a64: "Traditional: TP=4, CP=2, DP=8, PP=4 → max EP=8 / With
    Folding: Same attention config, but MoE uses ETP=1, EP=64, EDP=1"."""
    m = shape("moe64", layers=8, hidden=1024, heads=16, ffn=4096, vocab=1000, experts=64,
              experts_per_token=4, expert_ffn=512)
    lay = layout(dp=8, tp=4, cp=2, pp=4, ep=64, etp=1, sequence_parallel=True)
    assert lay.gpus == 256 and lay.expert_zero_group == 1
    r = run(m, dp=8, tp=4, cp=2, pp=4, ep=64, etp=1, sequence_parallel=True)
    sp = stage_params(m, r.layout)[0]
    assert sp.expert == 2 * 3 * 1024 * 512  # 2 layers a stage, one whole expert each (etp 1)
    with pytest.raises(ValueError, match="etp × ep = 1 × 128"):
        run(modified(m, experts=128), dp=8, tp=4, cp=2, pp=4, ep=128, etp=1)


def test_ep_adds_no_gpus_and_shows_in_the_layout():
    lay = layout(dp=16, pp=4, ep=8)
    assert lay.gpus == 64 and lay.expert_zero_group == 2
    assert lay.describe().endswith("experts ep 8 × etp 1 × edp 2")


def test_expert_weights_divide_by_ep_times_etp_and_the_rest_by_tp():
    """Megatron-Core: experts split over ep, and by --expert-tensor-parallel-size, which
    defaults to tp (megatron/training/arguments.py: ``if args.expert_tensor_parallel_size is
    None: args.expert_tensor_parallel_size = args.tensor_model_parallel_size``)."""
    (one,) = stage_params(MIXTRAL, layout(dp=8, tp=2, ep=4))
    assert one.expert == expert_params(MIXTRAL) // 8
    (whole,) = stage_params(MIXTRAL, layout(dp=8, tp=2, ep=4, etp=1))
    assert whole.expert == expert_params(MIXTRAL) // 4 and whole.dense == one.dense
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
    (["--model", "mixtral-8x7b", "--ep", "3", "--dp", "4"], "etp × ep = 1 × 3 = 3 does not divide the dp × cp × tp = 4 × 1 × 1 = 4 GPUs"),
    (["--model", "mixtral-8x7b", "--pad-to-capacity"], "pad_to_capacity needs a capacity factor"),
    (["--model", "mixtral-8x7b", "--capacity-factor", "-1"], "argument --capacity-factor: '-1' is not a capacity factor"),
    (["--model", "mixtral-8x7b", "--expert-load", "high"], "unknown expert load 'high'; accepted: balanced, measured, worst"),
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


# -- routing as it runs: capacity, padding, imbalance ---------------------------------------------
def test_capacity_is_megatrons_get_capacity():
    """moe_utils.get_capacity (core_v0.15.0): ceil(num_tokens / num_experts × capacity_factor),
    called with num_tokens = the router's tokens × topk: 4096 × 2 / 8 × 1.25 = 1280."""
    from trainmath.model.moe import capacity

    assert capacity(MIXTRAL, 4096, 1.25) == 1280
    assert capacity(MIXTRAL, 4095, 1.0) == 1024  # ceil(1023.75)


def test_padding_makes_every_expert_exactly_its_capacity():
    """With --moe-pad-expert-input-to-capacity each local expert takes capacity × tp_size ×
    ep_size rows (MoEAlltoAllTokenDispatcher.preprocess, core_v0.15.0): Mixtral, ep 8, one
    expert a GPU, 8 routers × 1280 = 10,240 rows whatever the routing, eager SwiGLU's four
    14336-wide intermediates in bf16."""
    e = estimate(run(MIXTRAL, dp=8, ep=8, seq_len=4096, capacity_factor=1.25,
                     pad_to_capacity=True))
    moe = [t for t in e.layer.tensors if "routed experts" in t.name]
    assert [t.bytes.n for t in moe] == [4 * 2 * 10240 * 14336]
    assert {x.load: x.rows for x in e.experts.loads} == {"balanced": 10240, "measured": 10240,
                                                         "worst": 10240}


def test_worst_case_is_every_copy_of_the_ep_group():
    """Dropless, a device's experts can receive every copy its ep group's routers send them:
    8 routers × 4096 tokens, each token once per expert, Mixtral's one expert a GPU."""
    e = estimate(run(MIXTRAL, dp=8, ep=8, seq_len=4096))
    rows = {x.load: x.rows for x in e.experts.loads}
    assert rows["balanced"] == 4096 * 2 and rows["worst"] == 8 * 4096
    worst = [x for x in e.experts.loads if x.load == "worst"][0]
    assert worst.peak > e.peak.bytes
    assert e.experts.dropped_at_most is None and e.experts.dispatch.dropped_share == 0


def test_measured_imbalance_is_the_published_max_over_mean():
    """Wang et al. 2024 (Auxiliary-Loss-Free Load Balancing), MaxVio_global = (max load − mean
    load) / mean load: 0.72 (1B, auxiliary loss), 0.52 (3B, auxiliary loss), 0.04 (Loss-Free)."""
    from trainmath.model.moe import MEASURED_BAND, PUBLISHED_MAX_LOADS

    assert sorted(float(m.ratio) for m in PUBLISHED_MAX_LOADS) == [1.04, 1.52, 1.72]
    assert MEASURED_BAND == (Fraction(104, 100), Fraction(172, 100))
    e = estimate(run(MIXTRAL, dp=8, ep=8, seq_len=4096, expert_load="measured"))
    assert e.experts.counted == "measured"
    assert e.experts.load("measured").rows == -(-4096 * 2 * 172 // 100)  # rounded up


def test_a_capacity_bounds_the_worst_case_and_says_what_it_drops():
    """Capacity 1280 of each router's 4096 tokens (factor 1.25): a router that sends all its
    tokens to the same two experts keeps 1280 of each expert's 4096 copies, so 1 − 1280/4096 of
    a step's copies can be dropped: global batch 16 × 4096 tokens × top-2 × 32 layers."""
    e = estimate(run(MIXTRAL, dp=8, ep=8, seq_len=4096, global_batch=16, capacity_factor=1.25))
    assert e.experts.load("worst").rows == 8 * 1280
    assert e.experts.dispatch.dropped_share == 1 - Fraction(1280, 4096)
    assert e.experts.step_copies == 16 * 4096 * 2 * 32
    assert e.experts.dropped_at_most == 16 * 4096 * 2 * 32 * (1 - Fraction(1280, 4096))


def test_routing_rules_name_the_bad_value():
    with pytest.raises(ValueError, match="pad_to_capacity needs a capacity factor"):
        run(MIXTRAL, pad_to_capacity=True)
    with pytest.raises(ValueError, match=r"capacity_factor 5 exceeds experts / experts_per_token "
                                         r"= 8/2 = 4.*accepted: above 0, at most 4"):
        run(MIXTRAL, capacity_factor=5)
    with pytest.raises(ValueError, match="capacity_factor must be a number above 0"):
        run(MIXTRAL, capacity_factor=0)
    with pytest.raises(ValueError, match="capacity_factor needs a mixture of experts"):
        run("llama-3-8b", capacity_factor=1.0)
    with pytest.raises(ValueError, match="unknown expert load 'typical'"):
        run(MIXTRAL, expert_load="typical")


def test_etp_splits_the_experts_rows_and_widths():
    """tp 2 with etp 1: each router holds s/tp tokens (sequence parallelism) and the experts
    are whole, so a GPU's experts take b·s·k/2 rows at the full 14336 width."""
    e = estimate(run(MIXTRAL, dp=4, tp=2, ep=8, etp=1, sequence_parallel=True, seq_len=4096))
    moe = [t for t in e.layer.tensors if "routed experts" in t.name]
    assert e.experts.load("balanced").rows == 4096 * 2 // 2
    assert [t.bytes.n for t in moe] == [4 * 2 * 4096 * 14336]


# -- DeepSeek-V3's published layout ---------------------------------------------------------------
DSV3_CONFIG = "tests/data/hf-configs/DeepSeek-V3.json"


def test_deepseek_v3_layout_is_expressible():
    """DeepSeek-V3 technical report (DeepSeek-AI 2024, §3.1-3.2): 2,048 H800 GPUs, 16-way
    pipeline parallelism, 64-way expert parallelism, ZeRO-1 data parallelism, no tensor
    parallelism. Its config.json: 256 routed experts of moe_intermediate_size 2048 at hidden
    7168, top 8, 1 shared, 3 dense layers of 61 and one prediction module. dp = 2048 / 16 = 128;
    the experts' data-parallel size 2048 / (64 × 16) = 2; 256 / 64 = 4 experts a GPU; 62 layers
    over 16 stages put at most 4 on one, and the 59 mixture layers at least 4 on one (59 > 3 ×
    16), so the fullest device holds 4 × 4 experts of 3 × 7168 × 2048."""
    from trainmath.model.hfconfig import load_config

    m = load_config(DSV3_CONFIG)
    r = run(m, dp=128, pp=16, ep=64, zero_stage=1, gpu="h800", seq_len=4096,
            global_batch=15360, recompute="full")
    assert r.layout.gpus == 2048 and r.layout.expert_zero_group == 2
    e = estimate(r)
    assert e.experts.dispatch.local_experts == 4
    assert e.experts.params == 4 * 4 * 3 * 7168 * 2048
    assert e.experts.all_to_all == (64, 8)  # 8 nodes of 8 GPUs: "spanning 8 nodes" (§3.2)
    assert e.run.gpu.name == "H800 SXM" and e.fits
    # transformers' 61 layers and the prediction module (tests/data/hf-configs/SOURCES.json)
    assert e.params == 671_026_404_352 + 11_610_067_968


def test_deepseek_v3_estimate_answers_on_the_command_line(capsys):
    """The issue's done-when: the published layout as flags answers with the total and active
    parameters and the fullest device's memory."""
    assert main(["estimate", "--config", DSV3_CONFIG, "--ep", "64", "--pp", "16", "--dp", "128",
                 "--zero", "1", "--seq-len", "4096", "--global-batch", "15360", "--recompute",
                 "full", "--gpu", "h800"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{DSV3_CONFIG}: 682,636,472,320 parameters")
    assert "parameters active per token" in out.splitlines()[1]
    assert "= 2048 GPUs, experts ep 64 × etp 1 × edp 2" in out
    assert "per device (pipeline stage" in out and "fits in one H800 SXM" in out


# -- folding: Megatron-Core's rule, not ep | dp ------------------------------------------------------
def _megatron_accepts(world, tp, cp, pp, ep, etp):
    """parallel_state.initialize_model_parallel (core_v0.15.0), written out from its source:
    world % (tp·pp·cp) == 0 and world % (etp·ep·pp) == 0 (etp None: tp)."""
    etp = tp if etp is None else etp
    return world % (tp * pp * cp) == 0 and world % (etp * ep * pp) == 0


@pytest.mark.parametrize(("dp", "tp", "cp", "pp", "ep", "etp"), [
    (4, 1, 2, 1, 8, None),   # ep 8 over dp 4 × cp 2: divides dp·cp, not dp
    (1, 1, 8, 1, 8, None),   # the README's cp 8 × ep 8 on 8 GPUs
    (2, 4, 1, 2, 8, 1),      # etp 1 under tp 4: ep folds over tp too
    (2, 4, 1, 2, 8, None),   # etp = tp 4: 4 × 8 = 32 does not divide 8
    (4, 1, 1, 2, 8, None),   # ep 8 > dp 4, no cp
    (6, 1, 1, 1, 4, None),   # 4 does not divide 6
    (3, 1, 4, 1, 4, None),   # 4 divides 12 = dp·cp, not dp 3
])
def test_ep_is_accepted_exactly_where_megatron_core_accepts_it(dp, tp, cp, pp, ep, etp):
    """Mixtral (8 experts, ffn 14336: every ep and etp here divides them)."""
    world = dp * tp * cp * pp
    ok = _megatron_accepts(world, tp, cp, pp, ep, etp)
    lay = Layout(dp=dp, tp=tp, cp=cp, pp=pp, ep=ep, etp=etp)
    problems = expert_problems(MIXTRAL, lay)
    assert (not problems) == ok
    if ok:
        assert lay.expert_zero_group == world // ((tp if etp is None else etp) * ep * pp)
    else:
        (p,) = problems
        assert f"{lay.expert_tp} × {ep} = {lay.expert_tp * ep} does not divide" in p.message
        assert "accepted: etp × ep a divisor of" in p.message


def test_an_ep_that_divides_dp_cp_but_not_dp_is_accepted(capsys):
    """ep 8 on dp 4 × cp 2 (Megatron-Core folds ep over dp·cp): 8 GPUs, one expert each, the
    expert data-parallel size 8 / 8 = 1, so ZeRO has no expert states to shard."""
    r = run(MIXTRAL, dp=4, cp=2, ep=8, seq_len=4096, zero_stage=1)
    assert r.layout.gpus == 8 and r.layout.expert_zero_group == 1
    (one,) = stage_params(MIXTRAL, r.layout)
    assert one.expert == 32 * 3 * 4096 * 14336  # one expert of each of the 32 layers
    assert main(["estimate", "--model", "mixtral-8x7b", "--dp", "4", "--cp", "2", "--ep", "8",
                 "--seq-len", "4096"]) == 0
    assert "experts ep 8 × etp 1 × edp 1" in capsys.readouterr().out


def test_a_layout_that_does_not_fold_names_the_bad_value_on_the_command_line(capsys):
    assert main(["estimate", "--model", "mixtral-8x7b", "--dp", "2", "--cp", "2", "--ep", "8",
                 "--seq-len", "4096"]) == 2
    err = capsys.readouterr().err
    assert "etp × ep = 1 × 8 = 8 does not divide the dp × cp × tp = 2 × 2 × 1 = 4 GPUs" in err
    assert "accepted: etp × ep a divisor of 4" in err


def test_the_planner_searches_folded_layouts():
    """Mixtral on 8 B200s at s = 32768: the README's cp 8 × ep 8 layout is among the
    candidates, and one with etp 1 under tp 2 (its ep 8 folded over dp·cp·tp); every candidate
    is one Megatron-Core would build."""
    from trainmath.planner.search import plan

    p = plan(MIXTRAL, gpu="b200", gpus=8, seq_len=32768, global_batch=8)
    layouts = {(c.layout.dp, c.layout.tp, c.layout.cp, c.layout.ep, c.layout.expert_tp)
               for c in p.candidates}
    assert (1, 1, 8, 8, 1) in layouts
    assert any(tp == 2 and etp == 1 and ep == 8 and dp * cp * tp == 8
               for dp, tp, cp, ep, etp in layouts)
    assert all(_megatron_accepts(8, c.layout.tp, c.layout.cp, c.layout.pp, c.layout.ep,
                                 c.layout.etp) for c in p.candidates)


def test_h800_is_the_h100s_compute_with_less_nvlink():
    """NVIDIA's H800 datasheet (as public copies quote it): 80GB HBM3, NVLink 400GB/s, the
    H100 SXM's tensor cores (1,979 bf16 TFLOPS with sparsity)."""
    from trainmath.hardware import GB, gpu, interconnect

    h800 = gpu("h800")
    assert h800.memory.label == "80GB HBM3" and round(2 * h800.dense_16bit / 1e12) == 1979
    assert 2 * interconnect("h800").nvlink == 400 * GB
