"""The bytes each device sends per optimizer step, by kind of parallelism.

Tensor-parallel all-reduces (Shoeybi et al. 2019, §3; Korthikanti et al. 2022, §4.2.2),
data-parallel reduce-scatters and all-gathers by ZeRO stage
(:func:`trainmath.time.communication.zero_traffic`), pipeline sends between stages (Narayanan et
al. 2021, §3.2), context-parallel K/V rings (Megatron-Core) and the all-to-alls of expert
parallelism (Lepikhin et al. 2021, §2.3); ring factors from :mod:`trainmath.time.collectives`.
:mod:`trainmath.time.step` turns them into seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache

from ..memory.kernels import RECOMPUTE_KINDS
from ..memory.recipes import recipe
from ..memory.sharding import (DTYPE_BYTES, FSDP_STRATEGIES, _check_strategy, _dtype,
                               _shard_group, check_stage)
from ..model.moe import _check
from ..model.shape import ModelShape
from ..parallel.layout import Layout, microbatches, sequence_problems, ulysses_degree
from ..problems import check
from ..parallel.placement import stage_params
from ..parallel.schedules import V_SCHEDULES
from .collectives import all_to_all_factor, ring_all_reduce_factor, ring_gather_factor
from ..units import Bytes, choice, positive_int


# -- communication ------------------------------------------------------------------------------
# -- ZeRO's traffic: what data parallelism sends per step, by stage ----------------------------
@dataclass(frozen=True)
class StepTraffic:
    """Bytes one rank sends per optimizer step (ring collectives send what they receive)."""

    all_reduce: Bytes
    reduce_scatter: Bytes
    all_gather: Bytes
    #: the part of the above that crosses between shard groups (HYBRID_SHARD's all-reduce)
    across_groups: Bytes

    @property
    def total(self) -> Bytes:
        """All the bytes this rank sends per step."""
        return self.all_reduce + self.reduce_scatter + self.all_gather


def zero_traffic(
    params: int,
    n_d: int,
    stage: int,
    *,
    microbatches: int = 1,
    weight_bytes: int = 2,
    grad_bytes: int = 2,
) -> StepTraffic:
    """Bytes each rank sends per optimizer step under ZeRO ``stage`` over ``n_d`` ranks (ZeRO §7.2).

    With f = (n_d-1)/n_d (a ring, :func:`trainmath.time.collectives.ring_gather_factor`), g bytes per
    gradient and w per weight: stage 0 all-reduces the gradients once per step, 2fΨg; stage 1
    reduce-scatters them and all-gathers the updated weights, fΨ(g + w), the same 2Ψ when
    w = g (§7.2.1); stage 2 shards the gradients, so it reduce-scatters after every one of the
    m = ``microbatches`` micro-batches, fΨ(m·g + w); stage 3 gathers the weights for every
    forward and every backward and reduce-scatters every micro-batch's gradients,
    m·fΨ(2w + g): the paper's 3Ψ (§7.2.2) when m = 1 and w = g. The one definition of ZeRO's
    traffic: :func:`step_traffic` and :func:`trainmath.time.communication.communication` use it.
    """
    psi = positive_int("params", params)
    n = positive_int("n_d", n_d)
    s = check_stage(stage)
    m = positive_int("microbatches (m)", microbatches)
    return _zero_traffic(psi, n, s, m=m, w=positive_int("weight_bytes", weight_bytes),
                         g=positive_int("grad_bytes", grad_bytes))


@lru_cache(maxsize=4096)  # pure; the planner asks again for each recomputation and interleave
def _zero_traffic(psi: int, n: int, stage: int, *, m: int, w: int, g: int) -> StepTraffic:
    """:func:`zero_traffic` on checked inputs."""
    zero = Bytes(0)
    if stage == 0:
        return StepTraffic(Bytes(ring_all_reduce_factor(n) * psi * g), zero, zero, zero)
    f = ring_gather_factor(n)
    reductions = m if stage >= 2 else 1  # a sharded gradient is reduced every micro-batch
    gathers = 2 * m if stage == 3 else 1  # ZeRO-3 gathers for every forward and backward
    return StepTraffic(zero, Bytes(f * psi * g * reductions), Bytes(f * psi * w * gathers), zero)


def step_traffic(
    params: int,
    n_d: int,
    strategy: str | int,
    *,
    shard_group: int | None = None,
    grad_dtype: str = "bf16",
    param_dtype: str | None = None,
    microbatches: int = 1,
) -> StepTraffic:
    """Bytes each rank sends per step for gradient sync and parameter gathers (ZeRO §7).

    A ring all-reduce of Ψ elements is a reduce-scatter plus an all-gather, 2Ψ(N-1)/N elements
    per rank (ZeRO §7.1 rounds this to 2Ψ). ZeRO-1 and ZeRO-2 reduce-scatter the gradients and
    all-gather the updated parameters: the same volume (§7.2.1). ZeRO-3 all-gathers the
    parameters in the forward and again in the backward, then reduce-scatters the gradients:
    3Ψ(N-1)/N, 1.5× (§7.2.2). ``strategy`` is a ZeRO stage (0-3) or an FSDP strategy name.

    The paper counts one micro-batch per step. With ``microbatches`` = m (gradient
    accumulation), what a stage does in every backward happens m times, as :func:`zero_traffic`
    (the one definition, which this calls) counts it: whole gradients (stages 0 and 1)
    accumulate and are reduced once; sharded ones (stage 2, FULL_SHARD) are reduce-scattered
    after every micro-batch, and ZeRO-3 gathers the weights for every forward and backward.
    FSDP reduces in every backward unless told not to (FSDP1's ``no_sync``, FSDP2's
    ``set_requires_gradient_sync(False)``, which keep unsharded gradients instead).
    SHARD_GRAD_OP reshards after each backward, so it gathers before every forward: m(Ψg + Ψw)
    where ZeRO-2 keeps the weights and gathers once. HYBRID_SHARD does ZeRO-3's traffic inside a
    shard group of S ranks, then all-reduces each rank's Ψ/S gradient shard across the n_d/S
    groups (FSDP §3.2.2), every micro-batch.
    """
    psi = positive_int("params", params)
    n = positive_int("n_d", n_d)
    m = positive_int("microbatches (m)", microbatches)
    g = DTYPE_BYTES[_dtype(grad_dtype)]
    w = DTYPE_BYTES[_dtype(param_dtype)] if param_dtype is not None else g
    if isinstance(strategy, str):
        stage = FSDP_STRATEGIES[_check_strategy(strategy)]
    else:
        stage = check_stage(strategy)
    if strategy == "HYBRID_SHARD":
        s = _shard_group(strategy, n, shard_group)
        across = Bytes(m * ring_all_reduce_factor(n // s) * Fraction(psi, s) * g)
        inside = _zero_traffic(psi, s, 3, m=m, w=w, g=g)
        return StepTraffic(across, inside.reduce_scatter, inside.all_gather, across)
    _shard_group(strategy, n, shard_group)
    if strategy == "SHARD_GRAD_OP":  # like ZeRO-2, but gathering again for every forward
        f = ring_gather_factor(n)
        zero = Bytes(0)
        return StepTraffic(zero, Bytes(m * f * psi * g), Bytes(m * f * psi * w), zero)
    return _zero_traffic(psi, n, stage, m=m, w=w, g=g)


@dataclass(frozen=True)
class Communication:
    """Bytes one device sends per optimizer step, by scheme (it receives the same amount)."""

    stage: int
    data_parallel: Bytes
    tensor_parallel: Bytes
    pipeline_parallel: Bytes
    context_parallel: Bytes
    #: the all-to-alls of expert parallelism (a mixture of experts with ep > 1)
    expert_parallel: Bytes = Bytes(0)

    @property
    def total(self) -> Bytes:
        """Bytes this device sends per step, all schemes together."""
        return (self.data_parallel + self.tensor_parallel + self.pipeline_parallel
                + self.context_parallel + self.expert_parallel)

    def parts(self) -> dict[str, Bytes]:
        """Each scheme's bytes by name."""
        return {
            "data parallel": self.data_parallel,
            "tensor parallel": self.tensor_parallel,
            "pipeline parallel": self.pipeline_parallel,
            "context parallel": self.context_parallel,
            "expert parallel": self.expert_parallel,
        }


def tensor_parallel_collectives(
    layers: int, *, first: bool, last: bool, sequence_parallel: bool, recompute: str,
    regather: bool = True,
) -> Fraction:
    """All-reduce equivalents of b·s·h activations one TP rank runs per micro-batch on a stage.

    Per layer (Shoeybi et al. 2019, §3, Figure 4): two all-reduces forward (after attention and
    after the MLP, operator g) and two backward (operator f): 4. With sequence parallelism each
    all-reduce becomes a reduce-scatter plus an all-gather, the same bytes: Korthikanti et al.
    2022, §4.2.2, count the same volume as tensor parallelism alone, 4 (``regather=False``).
    Megatron-LM's implementation (``regather=True``, the default) saves only the 1/tp sequence
    shard of each column-parallel linear's input and all-gathers it again in the backward to
    compute the weight gradient (``LinearWithGradAccumulationAndAsyncCommunication.backward``
    in ``megatron/core/tensor_parallel/layers.py``): +2 all-gathers = +1 all-reduce
    equivalent per layer, so 5. Full recomputation reruns the forward: +2. Selective
    recomputation reruns only the attention core, which needs no TP traffic: +0.
    First stage: the vocabulary-parallel embedding's output all-reduce (+1; a reduce-scatter,
    +1/2, with SP). Last stage: the LM head's input gradient all-reduce (+1; with SP an
    all-gather forward and a reduce-scatter backward, also +1). The cross-entropy's three
    all-reduces of b·s fp32 values (max, sum, target logit) are left out: they are 1/h of these.
    """
    per_layer = Fraction(5 if sequence_parallel and regather else 4)
    if recompute == "full":
        per_layer += 2
    count = per_layer * layers
    if first:
        count += Fraction(1, 2) if sequence_parallel else 1
    if last:
        count += 1
    return count


def communication(
    model: ModelShape,
    lay: Layout,
    *,
    seq_len: int,
    micro_batch: int,
    global_batch: int,
    zero_stage: int = 0,
    precision: str = "bf16-mixed",
    activation_bytes: int = 2,
    grad_bytes: int | None = None,
    recompute: str = "none",
    scatter_gather: bool = True,
    regather: bool = True,
    stage: int | None = None,
) -> Communication:
    """Bytes one device of pipeline ``stage`` sends per optimizer step, by scheme.

    ``stage=None`` picks the stage that sends the most. m = global_batch / (dp · micro_batch)
    micro-batches; each device sees s/cp tokens of each sequence. Activations travel in
    ``activation_bytes`` (2 for bf16); gradients are reduced in ``grad_bytes`` (default: the
    precision recipe's gradient bytes, 2 for bf16-mixed, ZeRO's count; Megatron-LM with bf16
    accumulates and reduces gradients in fp32 -- its distributed-optimizer docs: "bf16
    parameters, fp32 gradients" -- pass 4 to model that).

    - data parallel: :func:`trainmath.time.communication.zero_traffic` over dp·cp ranks for this device's
      parameters, m micro-batches per step;
    - tensor parallel: :func:`tensor_parallel_collectives` × 2(tp-1)/tp × b·(s/cp)·h bytes, × m;
      ``regather`` chooses its count with sequence parallelism (Megatron-LM's implementation,
      the default, or Korthikanti et al. 2022's §4.2.2 volume);
    - pipeline parallel: each micro-batch sends its b·(s/cp)·h activation forward and its
      gradient backward across each stage boundary (Narayanan et al. 2021, §3.2: bsh per
      micro-batch per boundary), once per model chunk (v times, §2.2.2), except past the ends of
      the pipeline (under a V schedule both ends are on device 0, and the turn of the V on
      device pp − 1 sends nothing). With ``scatter_gather`` (Narayanan §4.1; default on in Megatron) or with
      sequence parallelism, each TP rank sends only its 1/tp share;
    - context parallel, ring (``lay.cp_kind``): per layer and micro-batch an all-gather of this
      TP rank's K and V in the forward, another in the backward and a reduce-scatter of their
      gradients (Megatron-Core "Context parallelism overview": KV are gathered again in
      backward, dKV reduce-scattered), each moving (cp-1)/cp × 2·b·s·(kv_heads·head_dim/tp)
      values in a ring; recomputation (selective or full) reruns the attention forward and
      gathers K and V once more. Ulysses and the hybrid: :func:`context_parallel_bytes`, its
      all-to-alls once in the forward and once in the backward (again under full
      recomputation), the hybrid's ring as the ring's;
    - expert parallel (ep > 1): per MoE layer and micro-batch four all-to-alls of the
      b·(s/cp)·k·h token copies, (ep-1)/ep of each leaving the device
      (:func:`trainmath.time.communication.all_to_all_elements`), six with full recomputation, which reruns
      the forward's two. Each tensor-parallel rank is counted as dispatching all its tokens
      (an upper bound where the dispatcher splits them over the tensor-parallel ranks).
    """
    s = positive_int("seq_len (s)", seq_len)
    b = positive_int("micro_batch (b)", micro_batch)
    recompute = choice("recompute", recompute, RECOMPUTE_KINDS)
    act = positive_int("activation_bytes", activation_bytes)
    r = recipe(precision)
    g = r.gradients if grad_bytes is None else positive_int("grad_bytes", grad_bytes)
    m = microbatches(global_batch, lay.dp, b)
    tp, pp, cp, v = lay.tp, lay.pp, lay.cp, lay.v
    check(sequence_problems(s, replace(lay, sequence_parallel=False)))
    tokens = b * (s // cp)  # tokens of one micro-batch on this device
    activation = tokens * model.hidden * act  # b·(s/cp)·h bytes
    stages = stage_params(model, lay)
    # The middle stages (neither first nor last) hold the same parameters and send the same
    # bytes: compute the first, one middle one and the last, and copy the middle one.
    distinct = {}
    z = check_stage(zero_stage) if lay.zero_group > 1 else zero_stage  # as zero_traffic checks it
    # exact factors, computed once for the stages below (Fractions: the order changes nothing)
    tp_unit = ring_all_reduce_factor(tp) * activation * m if tp > 1 else 0
    cp_split = context_parallel_bytes(model, lay, seq_len=s, micro_batch=b,
                                      activation_bytes=act) if cp > 1 else None
    for sp in stages:
        i = sp.stage
        if i not in (0, 1, pp - 1):
            continue
        dp_bytes = _zero_traffic(  # its inputs are checked above
            sp.dense if sp.expert else sp.total, lay.zero_group, z, m=m, w=r.weights, g=g,
        ).total if lay.zero_group > 1 else Bytes(0)
        if sp.expert and lay.expert_zero_group > 1:  # experts reduce over dp·cp/ep replicas
            dp_bytes += zero_traffic(sp.expert, lay.expert_zero_group, zero_stage, microbatches=m,
                                     weight_bytes=r.weights, grad_bytes=g).total
        if tp > 1:
            count = tensor_parallel_collectives(
                sp.layers, first=lay.holds_first(i), last=lay.holds_last(i),
                sequence_parallel=lay.sequence_parallel, recompute=recompute, regather=regather,
            )
            tp_bytes = Bytes(count * tp_unit)
        else:
            tp_bytes = Bytes(0)
        if pp > 1:
            if lay.schedule in V_SCHEDULES:  # the V turns on device pp - 1, inside it
                sends = 2 * m * v - (2 * m if i in (0, pp - 1) else 0)
            else:
                sends = 2 * m * v - (m if i in (0, pp - 1) else 0)
            share = tp if (scatter_gather or lay.sequence_parallel) else 1
            pp_bytes = Bytes(Fraction(sends * activation, share))
        else:
            pp_bytes = Bytes(0)
        if cp_split is not None:
            # ring: K and V of the whole sequence on this TP rank, gathered in the forward and
            # the backward, their gradients reduce-scattered; Ulysses: its all-to-alls forward
            # and backward; a rerun of the forward repeats its share
            ring_passes = 3 + (1 if recompute != "none" else 0)
            a2a_passes = 2 + (1 if recompute == "full" else 0)
            cp_bytes = Bytes(sp.layers * m * (ring_passes * cp_split.ring
                                              + a2a_passes * cp_split.all_to_all))
        else:
            cp_bytes = Bytes(0)
        if lay.ep > 1:
            passes = 4 + (2 if recompute == "full" else 0)
            copies = tokens * model.experts_per_token * model.hidden * act
            ep_bytes = Bytes(passes * all_to_all_factor(lay.ep) * copies * sp.layers * m)
        else:
            ep_bytes = Bytes(0)
        distinct[i] = Communication(i, dp_bytes, tp_bytes, pp_bytes, cp_bytes, ep_bytes)
    if stage is None:  # the middle stages tie with stage 1: the earliest wins
        return max(distinct.values(), key=lambda c: (c.total, -c.stage))
    if not isinstance(stage, int) or isinstance(stage, bool) or not 0 <= stage < pp:
        raise ValueError(f"stage {stage!r} is out of range; accepted: 0 to {pp - 1}")
    return distinct[stage] if stage in distinct else replace(distinct[1], stage=stage)


#: All-to-alls per MoE layer and micro-batch: dispatch and combine forward, their gradients
#: backward (Rajbhandari et al. 2022, §5; Lepikhin et al. 2021, §2.3). Full recomputation
#: reruns the forward pass and its two.
ALL_TO_ALLS = 4


@dataclass(frozen=True)
class ContextSplit:
    """What one device sends per layer and micro-batch for context parallelism, by mechanism:
    ``ring`` the bytes of one pass of K and V around the ring, ``all_to_all`` those of one
    pass of Ulysses' all-to-alls (Q, K, V and the output); ``ulysses`` and ``ring_ranks`` the
    two degrees, whose product is cp."""

    ulysses: int
    ring_ranks: int
    ring: Fraction
    all_to_all: Fraction


def context_parallel_bytes(model: ModelShape, lay: Layout, *, seq_len: int, micro_batch: int = 1,
                           activation_bytes: int = 2) -> ContextSplit:
    """Bytes one device sends per layer and micro-batch for one pass of each part of context
    parallelism, with u = :func:`~trainmath.parallel.layout.ulysses_degree` and r = cp/u:

    - Ulysses (Jacobs et al. 2023, *DeepSpeed Ulysses*: an all-to-all of Q, K and V before
      attention and one of the output after, each rank sending (u − 1)/u of its buffer):
      (u − 1)/u × b·(s/cp)·(2·q + 2·kv')/tp values, with q = heads·head_dim and kv' the
      key-value width, each KV head repeated when u exceeds kv_heads/tp (DeepSpeed's
      ``UlyssesSPAttentionHF`` replicates KV heads u/(kv_heads/tp) times);
    - ring (Liu et al. 2023): after Ulysses each rank holds s/r of the sequence for 1/u of its
      heads, and passes its K and V r − 1 times: (r − 1)/r × 2·b·s·kv''/tp, kv'' =
      the KV width over u (at least one head).

    Jacobs et al. write the Ulysses volume per link as 4Nh/P for multi-head attention (N the
    tokens, h the hidden width, P = cp): the q + 2·kv + q = 4h here, sent (u − 1)/u.

    >>> from trainmath.model.presets import preset
    >>> from trainmath.parallel.layout import Layout
    >>> c = context_parallel_bytes(preset("llama-2-7b"), Layout(cp=8, cp_kind="ulysses"),
    ...                            seq_len=8192)
    >>> c.all_to_all == Fraction(7, 8) * 8192 // 8 * 4 * 4096 * 2, c.ring
    (True, Fraction(0, 1))
    """
    s = positive_int("seq_len (s)", seq_len)
    b = positive_int("micro_batch (b)", micro_batch)
    act = positive_int("activation_bytes", activation_bytes)
    u = ulysses_degree(model, lay)
    r = lay.cp // u
    d, tp = model.head_dim, lay.tp
    q_width, kv_width = model.q_dim // tp, model.kv_dim // tp
    tokens = b * (s // lay.cp)
    a2a = (all_to_all_factor(u) * tokens * (2 * q_width + 2 * max(kv_width, u * d)) * act
           if u > 1 else Fraction(0))
    ring_width = kv_width if u == 1 else max(kv_width // u, d)
    ring = (ring_gather_factor(r) * 2 * b * s * ring_width * act if r > 1 else Fraction(0))
    return ContextSplit(u, r, Fraction(ring), Fraction(a2a))


def all_to_all_elements(m: ModelShape, s: int, b: int, ep: int) -> Fraction:
    """Values one device sends per MoE layer and micro-batch in the forward and backward pass.

    Four all-to-alls (dispatch and combine forward, their gradients backward), each sending
    (ep - 1)/ep of the b·s·k·h values of the micro-batch's routed token copies: with routing
    spread evenly over the ep devices, a token copy stays on its device with probability 1/ep
    (Lepikhin et al. 2021, §2.3; Rajbhandari et al. 2022, §5). Nothing leaves a device when ep = 1.

    >>> from trainmath.model.presets import preset
    >>> all_to_all_elements(preset("mixtral-8x7b"), s=4096, b=1, ep=8)
    Fraction(117440512, 1)
    """
    _check(m)
    s = positive_int("s (sequence length)", s)
    b = positive_int("b (micro-batch size)", b)
    ep = positive_int("ep (expert-parallel size)", ep)
    return ALL_TO_ALLS * all_to_all_factor(ep) * b * s * m.experts_per_token * m.hidden


def all_to_all_bytes(m: ModelShape, s: int, b: int, ep: int, value_bytes: int = 2) -> Bytes:
    """:func:`all_to_all_elements` in bytes, ``value_bytes`` each (2: bf16 tokens)."""
    return Bytes(all_to_all_elements(m, s, b, ep) * positive_int("value_bytes", value_bytes))
