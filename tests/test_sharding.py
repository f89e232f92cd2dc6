from fractions import Fraction

import pytest

from trainmath.memory.recipes import bytes_per_param, training_state
from trainmath.memory.sharding import fsdp_memory, min_ranks, zero_states
from trainmath.time.communication import step_traffic, zero_traffic
from trainmath.memory.fsdp2 import dim0_rows, fsdp2_dtypes, fsdp2_rank
from trainmath.units import GB, Bytes

PSI_PAPER = 7_500_000_000  # ZeRO Figure 1: Ψ = 7.5B, N_d = 64, K = 12


@pytest.mark.parametrize(
    ("stage", "total", "printed"),
    [
        (0, Bytes(120 * GB), "120 GB"),
        (1, Bytes(31_406_250_000), "31.4 GB"),
        (2, Bytes(16_640_625_000), "16.6 GB"),
        (3, Bytes(1_875_000_000), "1.9 GB"),
    ],
)
def test_zero_paper_figure_1(stage, total, printed):
    """ZeRO §5 / Figure 1, in decimal GB: 120, 31.4, 16.6, 1.9."""
    z = zero_states(PSI_PAPER, 64, stage, "fp16-mixed", "adam")
    assert z.total == total
    assert z.total.format("GB", 1 if stage else 0) == printed


def test_stage_formulas_term_by_term():
    psi, n = 1_000_000, 8
    z0, z1, z2, z3 = (zero_states(psi, n, s) for s in range(4))
    # stage 0: 2Ψ + 2Ψ + KΨ, K = 12 split as 4 (master) + 8 (m, v)
    assert (z0.weights, z0.gradients, z0.master_weights, z0.optimizer_states) == (
        Bytes(2 * psi), Bytes(2 * psi), Bytes(4 * psi), Bytes(8 * psi))
    assert z0.total == training_state(psi).total
    # stage 1: 2Ψ + 2Ψ + KΨ/N_d
    assert z1.weights == Bytes(2 * psi) and z1.gradients == Bytes(2 * psi)
    assert z1.optimizer_side == Bytes(12 * psi // n)
    # stage 2: 2Ψ + (2 + K)Ψ/N_d
    assert z2.weights == Bytes(2 * psi)
    assert z2.gradients + z2.optimizer_side == Bytes(14 * psi // n)
    # stage 3: (2 + 2 + K)Ψ/N_d
    assert z3.total == Bytes(16 * psi // n)
    assert list(z3.parts()) == ["weights", "gradients", "master weights", "optimizer states"]


def test_one_rank_shards_nothing():
    for s in range(4):
        assert zero_states(7e9, 1, s).total == Bytes(112 * GB)


def test_exact_fractions_when_n_d_does_not_divide():
    z = zero_states(1_000, 3, 3)
    assert z.total == Bytes(Fraction(16_000, 3))
    assert z.weights.n == Fraction(2_000, 3)


@pytest.mark.parametrize("precision", ["fp32", "fp16-mixed", "bf16-mixed", "bf16"])
@pytest.mark.parametrize("opt", ["adam", "adamw", "sgd", "sgd-momentum", "adam-8bit"])
def test_every_recipe_generalises(precision, opt):
    per = bytes_per_param(precision, opt)
    psi, n = 2_048_000, 16
    assert zero_states(psi, n, 0, precision, opt).total == Bytes(psi * per.total)
    assert zero_states(psi, n, 1, precision, opt).total == Bytes(
        psi * (per.weights + per.gradients) + Fraction(psi * per.optimizer_side, n))
    assert zero_states(psi, n, 2, precision, opt).total == Bytes(
        psi * per.weights + Fraction(psi * (per.gradients + per.optimizer_side), n))
    assert zero_states(psi, n, 3, precision, opt).total == Bytes(Fraction(psi * per.total, n))


def test_fp32_adam_has_no_master_copy_to_shard():
    z = zero_states(1_000_000, 4, 1, "fp32", "adam")
    assert z.master_weights == Bytes(0)
    assert z.weights == Bytes(4_000_000) and z.optimizer_states == Bytes(2_000_000)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stage": 4}, r"unknown ZeRO stage 4; accepted: 0, 1, 2, 3"),
        ({"stage": True}, r"unknown ZeRO stage True"),
        ({"n_d": 0}, r"n_d must be a positive whole number, got 0"),
        ({"params": 1.5}, r"params must be a positive whole number, got 1.5"),
        ({"precision": "fp8"}, r"unknown recipe 'fp8'"),
        ({"optimizer_name": "lion"}, r"unknown optimizer 'lion'"),
    ],
)
def test_bad_input(kwargs, message):
    args = {"params": 1000, "n_d": 4, "stage": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        zero_states(**args)


# -- capacity ---------------------------------------------------------------------------------

def test_min_ranks_seven_billion_on_80_gb():
    """112 GB of state, 30.6 GB of activations set aside (the page's example)."""
    gpu, act = Bytes(80 * GB), Bytes(30_600_000_000)
    assert min_ranks(7e9, 0, gpu, act) is None  # 112 GB never shrinks
    assert min_ranks(7e9, 1, gpu, act) == 4  # 28 + 84/4 = 49 <= 49.4; 28 + 84/3 = 56 > 49.4
    assert min_ranks(7e9, 2, gpu, act) == 3  # 14 + 98/3 = 46.7
    assert min_ranks(7e9, 3, gpu, act) == 3  # 112/3 = 37.3; 112/2 = 56 > 49.4
    assert min_ranks(7e9, 3, gpu) == 2
    assert min_ranks(7e9, 1, Bytes(28 * GB)) is None  # the unsharded 2Ψ + 2Ψ fill it exactly
    assert min_ranks(7e9, 3, gpu, Bytes(80 * GB)) is None


def test_min_ranks_is_the_smallest():
    gpu = Bytes(80 * GB)
    for stage in (1, 2, 3):
        n = min_ranks(13e9, stage, gpu, Bytes(10 * GB))
        assert zero_states(13e9, n, stage).total.n <= 70 * GB
        assert zero_states(13e9, n - 1, stage).total.n > 70 * GB


def test_min_ranks_needs_bytes():
    with pytest.raises(ValueError, match="capacity and reserved must be Bytes"):
        min_ranks(7e9, 3, 80e9)


# -- FSDP strategies --------------------------------------------------------------------------


def test_fsdp_strategies_map_to_zero_stages():
    for strategy, stage in (("NO_SHARD", 0), ("SHARD_GRAD_OP", 2), ("FULL_SHARD", 3)):
        assert fsdp_memory(7e9, 8, strategy).device == zero_states(7e9, 8, stage)
    hybrid = fsdp_memory(7e9, 64, "HYBRID_SHARD", shard_group=8)
    assert hybrid.device == zero_states(7e9, 8, 3)  # sharded over the node only
    assert hybrid.shard_group == 8 and hybrid.n_d == 64
    assert hybrid.device.total == Bytes(14 * GB)


def test_gathered_units_and_prefetch():
    layer = 202_383_360  # a Llama-2-7B decoder layer
    m = fsdp_memory(7e9, 8, "FULL_SHARD", unit_params=layer)
    assert m.gathered_params == Bytes(2 * layer * 2)  # this unit + one prefetched, bf16
    assert m.unsharded_grads == Bytes(layer * 2)
    assert m.peak == Bytes(14 * GB) + Bytes(6 * layer)
    assert fsdp_memory(7e9, 8, unit_params=layer, prefetch=0).gathered_params == Bytes(2 * layer)
    sgo = fsdp_memory(7e9, 8, "SHARD_GRAD_OP", unit_params=layer)
    assert sgo.gathered_params == Bytes(0)  # its weights are already whole: ZeRO-2's 2Ψ
    assert sgo.device.weights == Bytes(14 * GB)
    assert fsdp_memory(7e9, 8, "NO_SHARD", unit_params=layer).transient == Bytes(0)


def test_fsdp2_fp32_reduce_and_the_root_unit_finding_11():
    """FSDP2 with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), Llama-2-7B on 8
    ranks. Expected values measured in PyTorch 2.13 (docs/_data/measurements.json,
    step/llama-2-7b/reference-sdpa/fsdp2-bf16/dp8-rank0, alive at the peak): gathered
    1,333,829,632 bytes (two decoder layers and the root, bf16), reduce-scatter buffers
    809,533,440 (one layer's gradients upcast to fp32), unsharded gradients 667M (a layer's bf16
    gradients and the LM head's and final norm's)."""
    layer, h, V = 202_383_360, 4096, 32000
    root, head = 2 * V * h + h, V * h + h  # embedding, final norm, LM head; LM head + norm
    m = fsdp_memory(6_738_415_616, 8, "FULL_SHARD", unit_params=layer, precision="fsdp2",
                    reduce_dtype="fp32", root_params=root, head_params=head)
    assert m.gathered_params == Bytes(1_333_829_632)
    assert m.reduce_buffer == Bytes(809_533_440)
    assert m.unsharded_grads == Bytes(768_110_592 - 101_191_680)  # less the sharded layer's
    # 6 bytes per parameter of a unit while it reduces, not 2: its bf16 gradients and fp32 copy
    assert (m.reduce_buffer + Bytes(2 * layer)) == Bytes(6 * layer)
    plain = fsdp_memory(6_738_415_616, 8, "FULL_SHARD", unit_params=layer, precision="fsdp2")
    assert plain.reduce_buffer == Bytes(0) and plain.gathered_params == Bytes(4 * layer)


def test_fsdp_memory_agrees_with_the_step_peak():
    """One definition of the FSDP transient: fsdp_memory and the moment of the step's peak where
    a layer's backward holds the previous layer's reduce-scatter input (trainmath.memory.peak)."""
    from trainmath import estimate, run
    e = estimate(run("llama-2-7b", recipe="fsdp2", dp=8, seq_len=2048))
    (moment,) = [m for m in e.peak.moments if "reduce-scatter input held" in m.when]
    parts = moment.as_dict()
    layer, h, V = 202_383_360, 4096, 32000
    m = fsdp_memory(6_738_415_616, 8, "FULL_SHARD", unit_params=layer, precision="fsdp2",
                    reduce_dtype="fp32", root_params=2 * V * h + h, head_params=V * h + h)
    assert parts["gathered parameters"] == m.gathered_params
    assert parts["reduce-scatter buffers"] == m.reduce_buffer
    assert parts["unsharded gradients"] == m.unsharded_grads


def test_offload_moves_and_keeps():
    opt = fsdp_memory(7e9, 8, "SHARD_GRAD_OP", offload="optimizer")  # ZeRO-Offload
    assert opt.device.total == opt.device.weights == Bytes(14 * GB)
    # DeepSpeed (stage_1_and_2.py, initialize_optimizer_states) keeps the CPU gradient partition
    # in the fp32 master weights' dtype: 4 + 4 + 8 bytes per parameter of the 1/8 shard
    assert opt.host == Bytes((4 + 12) * 7 * GB // 8)
    everything = fsdp_memory(7e9, 8, "FULL_SHARD", unit_params=1000, offload="parameters")
    assert everything.device.total == Bytes(0)
    assert everything.host == Bytes(14 * GB)
    assert everything.peak == everything.transient == Bytes(6000)
    # offloading never changes the total
    plain = fsdp_memory(7e9, 8, "FULL_SHARD")
    assert everything.host + everything.device.total == plain.device.total


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategy": "ZERO3"}, "unknown FSDP sharding strategy 'ZERO3'; accepted: NO_SHARD, SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD"),
        ({"strategy": "HYBRID_SHARD"}, "HYBRID_SHARD needs shard_group"),
        ({"strategy": "HYBRID_SHARD", "shard_group": 3}, "shard_group 3 does not divide n_d 8"),
        ({"shard_group": 4}, "shard_group is only for HYBRID_SHARD"),
        ({"offload": "nvme"}, "unknown offload 'nvme'; accepted: none, optimizer, parameters"),
        ({"strategy": "SHARD_GRAD_OP", "offload": "parameters"}, "offload 'parameters' needs sharded parameters"),
        ({"unit_params": -1}, r"unit_params must be a whole number from 0 to params \(1000\), got -1"),
        ({"unit_params": 2000}, r"unit_params must be a whole number from 0 to params"),
        ({"prefetch": -1}, "prefetch must be a whole number >= 0, got -1"),
        ({"root_params": 2000}, r"root_params must be a whole number from 0 to params"),
        ({"root_params": 10, "head_params": 20}, "head_params 20 exceeds root_params 10"),
        ({"reduce_dtype": "fp64"}, "unknown dtype 'fp64'; accepted: fp32, bf16, fp16, fp8"),
    ],
)
def test_fsdp_memory_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        fsdp_memory(1000, 8, **kwargs)


# -- communication ----------------------------------------------------------------------------


def test_traffic_zero_section_7():
    psi, n = 7_500_000_000, 64
    ring = Bytes(psi * 2) * Fraction(n - 1, n)  # Ψ(N-1)/N bf16 elements
    dp = step_traffic(psi, n, 0)
    assert dp.all_reduce == ring * 2 and dp.total == ring * 2
    for stage in (1, 2):
        z = step_traffic(psi, n, stage)
        assert (z.reduce_scatter, z.all_gather, z.all_reduce) == (ring, ring, Bytes(0))
        assert z.total == dp.total  # ZeRO §7.2.1: the same volume
    z3 = step_traffic(psi, n, 3)
    assert z3.total == ring * 3
    assert z3.total / dp.total == Fraction(3, 2)  # ZeRO §7.2.2: 1.5x
    assert step_traffic(psi, n, "FULL_SHARD") == z3
    assert step_traffic(psi, n, "SHARD_GRAD_OP") == step_traffic(psi, n, 2)
    assert step_traffic(psi, n, "NO_SHARD") == dp
    assert step_traffic(psi, n, 0, grad_dtype="fp32").total == dp.total * 2
    assert step_traffic(psi, 1, 3).total == Bytes(0)  # nobody to talk to


def test_step_traffic_counts_micro_batches_as_zero_traffic_does():
    """ZeRO §7.2 counts one micro-batch: 2Ψ / 2Ψ / 3Ψ. With m micro-batches a sharded gradient
    is reduce-scattered after every backward (DeepSpeed stage 2 reduces in each backward; FSDP
    without no_sync likewise) and ZeRO-3 gathers for every forward and backward: ZeRO-2 sends
    (m + 1)Ψ(N-1)/N, ZeRO-3 3mΨ(N-1)/N; whole gradients (DP, ZeRO-1) are reduced once."""
    psi, n, m = 7_500_000_000, 64, 8
    f = Fraction(n - 1, n)
    assert step_traffic(psi, n, 0, microbatches=m).total == Bytes(2 * psi * 2 * f)
    assert step_traffic(psi, n, 1, microbatches=m).total == Bytes(2 * psi * 2 * f)
    assert step_traffic(psi, n, 2, microbatches=m).total == Bytes((m + 1) * psi * 2 * f)
    assert step_traffic(psi, n, 3, microbatches=m).total == Bytes(3 * m * psi * 2 * f)
    for stage in range(4):
        assert step_traffic(psi, n, stage, microbatches=m) == zero_traffic(psi, n, stage, microbatches=m)
    assert step_traffic(psi, n, "FULL_SHARD", microbatches=m) == step_traffic(psi, n, 3, microbatches=m)
    # SHARD_GRAD_OP reshards after every backward: it gathers again for every forward
    assert step_traffic(psi, n, "SHARD_GRAD_OP", microbatches=m).total == Bytes(2 * m * psi * 2 * f)
    assert step_traffic(psi, n, "SHARD_GRAD_OP") == step_traffic(psi, n, 2)  # m = 1: ZeRO-2
    # HYBRID_SHARD: ZeRO-3 inside the group and the Ψ/S all-reduce across, every micro-batch
    h1 = step_traffic(psi, n, "HYBRID_SHARD", shard_group=8)
    h8 = step_traffic(psi, n, "HYBRID_SHARD", shard_group=8, microbatches=m)
    assert h8.total == h1.total * m and h8.across_groups == h1.across_groups * m
    with pytest.raises(ValueError, match=r"microbatches \(m\) must be a positive whole number, got 0"):
        step_traffic(psi, n, 2, microbatches=0)


def test_zero_traffic_section_7_2_with_micro_batches():
    """ZeRO §7.2: stages 0-2 move 2Ψ (2 bytes each), stage 3 moves 3Ψ, × (n-1)/n in a ring.

    With m micro-batches per step a sharded gradient is reduce-scattered after every one, and
    ZeRO-3 gathers the weights for every forward and backward."""
    psi, n = 10**9, 64
    f = Fraction(63, 64)
    dp0 = zero_traffic(psi, n, 0, weight_bytes=2, grad_bytes=2).total
    assert dp0 == Bytes(2 * psi * 2 * f)
    assert zero_traffic(psi, n, 1).total == dp0
    assert zero_traffic(psi, n, 2).total == dp0
    assert zero_traffic(psi, n, 3).total == Bytes(3 * psi * 2 * f)
    assert zero_traffic(psi, n, 3, microbatches=4).total == Bytes(4 * 3 * psi * 2 * f)
    assert zero_traffic(psi, n, 2, microbatches=4).total == Bytes((4 + 1) * psi * 2 * f)
    assert zero_traffic(psi, n, 1, microbatches=4).total == dp0  # unsharded gradients accumulate
    assert zero_traffic(psi, n, 0, microbatches=4).total == dp0
    # fp32 gradients, bf16 weights (Megatron's distributed optimizer): fΨ(4 + 2) at stage 1
    assert zero_traffic(psi, n, 1, weight_bytes=2, grad_bytes=4).total == Bytes(psi * 6 * f)
    with pytest.raises(ValueError, match=r"microbatches \(m\) must be a positive whole number, got 0"):
        zero_traffic(psi, n, 2, microbatches=0)


def test_traffic_mixed_dtypes():
    t = step_traffic(1000, 4, 3, grad_dtype="fp32", param_dtype="bf16")
    assert t.reduce_scatter == Bytes(3000)  # 1000 × 4 bytes × 3/4
    assert t.all_gather == Bytes(3000)  # two gathers of 1000 × 2 bytes × 3/4


def test_traffic_hybrid():
    psi = 7_500_000_000
    h = step_traffic(psi, 64, "HYBRID_SHARD", shard_group=8)
    inside = Bytes(psi * 2) * Fraction(7, 8)
    assert h.reduce_scatter == inside and h.all_gather == inside * 2
    across = Bytes(psi * 2 // 8) * Fraction(7, 8) * 2  # all-reduce of a Ψ/8 shard over 8 nodes
    assert h.all_reduce == h.across_groups == across
    assert h.across_groups.format("GB", 1) == "3.3 GB"
    assert step_traffic(psi, 8, "HYBRID_SHARD", shard_group=8).across_groups == Bytes(0)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((1000, 4, 5), {}, "unknown ZeRO stage 5"),
        ((1000, 4, "ZeRO-3"), {}, "unknown FSDP sharding strategy 'ZeRO-3'"),
        ((1000, 4, 3), {"grad_dtype": "int8"}, "unknown dtype 'int8'; accepted: fp32, bf16, fp16, fp8"),
        ((1000, 4, "HYBRID_SHARD"), {}, "HYBRID_SHARD needs shard_group"),
        ((1000, 4, "HYBRID_SHARD"), {"shard_group": 3}, "shard_group 3 does not divide n_d 4"),
        ((1000, 4, 3), {"shard_group": 2}, "shard_group is only for HYBRID_SHARD"),
    ],
)
def test_traffic_bad_input(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        step_traffic(*args, **kwargs)


# -- FSDP2 tensor by tensor -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "n", "split"),
    [(5, 4, (2, 2, 1, 0)), (8, 4, (2, 2, 2, 2)), (7, 4, (2, 2, 2, 1)), (3, 4, (1, 1, 1, 0)),
     (1, 3, (1, 0, 0)), (13, 3, (5, 5, 3)), (11, 1, (11,))],
)
def test_dim0_rows_follow_torch_chunk(rows, n, split):
    assert dim0_rows(rows, n) == split
    assert sum(split) == rows


def test_fsdp2_dtypes():
    assert fsdp2_dtypes("fp32") == (4, 4)
    assert fsdp2_dtypes("bf16-mixed") == (4, 2)  # fp32 shards are the master copy
    assert fsdp2_dtypes("bf16") == (2, 2)


# Measured with torch 2.13 fully_shard (see validate/test_fsdp.py and docs/_data/fsdp-check.json).
UNITS = [[(7, 10), (7,)], [(5, 7), (5,)], [(3, 5), (3,)]]


@pytest.mark.parametrize(
    ("rank", "parameters", "gradients", "optimizer_states", "numel"),
    [(0, 176, 176, 376, 44), (1, 176, 176, 376, 44), (2, 176, 176, 312, 36), (3, 176, 176, 112, 11)],
)
def test_fsdp2_rank_matches_a_measured_run(rank, parameters, gradients, optimizer_states, numel):
    r = fsdp2_rank(UNITS, 4, rank, "fp32", "adamw")
    assert (r.parameters, r.gradients, r.optimizer_states) == (
        Bytes(parameters), Bytes(gradients), Bytes(optimizer_states))
    assert r.numel == numel and r.padded_numel == 44
    assert r.unsharded_units == (Bytes(352), Bytes(256), Bytes(96))  # (8×10 + 8) × 4 bytes, ...
    assert r.total == Bytes(parameters + gradients + optimizer_states)


def test_fsdp2_rank_padding_and_optimizers():
    last = fsdp2_rank(UNITS, 4, 3)
    assert last.padding == Bytes((44 - 11) * 8)  # fp32 parameter + fp32 gradient per padded element
    assert fsdp2_rank(UNITS, 4, 0).padding == Bytes(0)
    sgd = fsdp2_rank(UNITS, 4, 0, "fp32", "sgd")
    assert sgd.optimizer_states == Bytes(0)  # no state, no step counter
    momentum = fsdp2_rank(UNITS, 4, 3, "fp32", "sgd-momentum")
    assert momentum.optimizer_states == Bytes(11 * 4)
    mixed = fsdp2_rank(UNITS, 4, 0, "bf16-mixed", "adamw")
    assert mixed.parameters == Bytes(176) and mixed.unsharded_units[0] == Bytes(176)
    pure = fsdp2_rank(UNITS, 4, 0, "bf16", "adam")
    assert pure.parameters == Bytes(88) and pure.optimizer_states == Bytes(44 * 4 + 6 * 4)
    hybrid = fsdp2_rank(UNITS, 2, 1)  # a shard group of 2: rows split 4/3, 3/2, 2/1
    assert hybrid.parameters == Bytes(320) and hybrid.numel == 55


def test_fsdp2_rank_even_split_is_zero_3():
    even = [[(64, 32), (64,)]]
    psi = 64 * 32 + 64
    for rank in range(4):
        r = fsdp2_rank(even, 4, rank, "fp32", "adamw")
        assert r.total == zero_states(psi, 4, 3, "fp32", "adamw").total + Bytes(2 * 4)  # 2 steps


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((UNITS, 4, 4), "shard_rank must be a whole number from 0 to 3, got 4"),
        ((UNITS, 0, 0), "shard_size must be a positive whole number, got 0"),
        ((UNITS, 4, 0, "fp32", "adam-8bit"), "unknown optimizer 'adam-8bit' for FSDP2; accepted: adam, adamw, sgd, sgd-momentum"),
        (([[()]], 4, 0), r"a parameter shape must be a non-empty tuple of sizes, got \(\)"),
        (([[(0, 3)]], 4, 0), "parameter dimension must be a positive whole number, got 0"),
        ((UNITS, 4, 0, "fp8"), "unknown recipe 'fp8'"),
    ],
)
def test_fsdp2_rank_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        fsdp2_rank(*args)
