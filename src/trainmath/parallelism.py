"""Data, tensor, pipeline and context parallelism: layouts, per-device memory, traffic, bubble.

A layout places ``dp · tp · pp · cp`` GPUs on a grid (Megatron-LM's order; Narayanan et al.
2021, *Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM*, §2).
These names, with ``v`` for the model chunks per pipeline device, are the library's one
vocabulary for parallel sizes; the papers write t for tp and p for pp.

- **tensor parallel** (``tp``, Shoeybi et al. 2019, *Megatron-LM*, §3): each layer's weight
  matrices are split tp ways; the query/key/value and first MLP projections by columns, the
  attention output and second MLP projections by rows. Norm weights and the biases of the
  row-split projections are replicated on every rank. The word embedding and LM head are split
  over the vocabulary (a vocabulary that tp does not divide is padded to the next multiple of
  tp here; Megatron pads further, to a multiple of 128·tp -- pass a padded shape to model that).
  Learned position embeddings are replicated.
- **pipeline parallel** (``pp``, Narayanan et al. 2021, §2.2): the L layers are split into pp
  stages of L/pp; the first stage also holds the embedding, the last the final norm and LM
  head. With tied embeddings the last stage holds its own copy of the word embedding (Megatron
  keeps both copies and all-reduces their gradients), unless pp = 1.
- **context parallel** (``cp``, Megatron-Core context parallelism, Liu et al. 2023 *Ring
  Attention*): every activation is split along the sequence; weights are replicated, so CP ranks
  reduce gradients together with the data-parallel ranks.
- **data parallel** (``dp``) with a ZeRO stage: model states are divided by
  :func:`trainmath.sharding.zero_states` over **dp · cp** ranks. That is what Megatron-Core does:
  its distributed optimizer and gradient reduction use the data-parallel group *with* context
  parallelism (``intra_dp_cp_group`` in ``megatron/core/optimizer/__init__.py``).
- **expert parallel** (``ep``, a mixture of experts only; Lepikhin et al. 2021, *GShard*;
  Megatron-Core MoE): each layer's routed experts are split ep ways inside the data-parallel
  group ("the EP group in MoE is a sub-group of DP", Megatron-Core MoE README, *MoE Parallel
  Folding*), so ep divides dp and the expert count and adds no GPUs. Expert weights are also
  split by tp (``--expert-tensor-parallel-size`` defaults to the tensor-parallel size, same
  README), so one device holds 1/(ep·tp) of them, and ZeRO shards their states over the
  dp·cp/ep ranks that hold the same experts (the expert data-parallel group); the router,
  attention, norms and embeddings are dense, as before. :mod:`trainmath.moe` has the rest.

Main entry points:

- :func:`layout` -> :class:`Layout`; :func:`validate` checks it against a model and batch and
  raises one ValueError that names every offending number;
- :func:`stage_params` (parameters on one device of each stage),
  :func:`device_memory` (per stage: weights, gradients, master weights, optimizer states and
  the activation bytes you pass in), :func:`peak_device_memory`;
- :func:`communication` -> :class:`Communication`: bytes each device sends per optimizer step,
  per scheme (ring factors from :mod:`trainmath.collectives`, ZeRO's traffic from
  :func:`trainmath.sharding.zero_traffic`);
- :func:`bubble_fraction` ((pp-1)/m, or (pp-1)/(m·v) interleaved) and :func:`bubble_share`;
- for the memory of one run, activations included, use :func:`trainmath.runs.estimate`; to
  rank every layout of a run by predicted step time, :func:`trainmath.planner.plan`.

Activation bytes are an input here, not computed: the activation model lives in
:mod:`trainmath.activations`. Pass one ``Bytes`` (every stage) or one per stage.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Sequence

from .activations import RECOMPUTE_KINDS
from .collectives import all_to_all_factor, ring_all_reduce_factor, ring_gather_factor
from .memory import BytesPerParam, ModelStates, bytes_per_param, recipe
from .models import ModelShape, param_breakdown
from .sharding import _zero_states, check_stage, zero_traffic
from .units import Bytes, choice, positive_int


# -- layouts ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """A parallel layout: ``dp × tp × pp × cp`` GPUs, ``v`` model chunks per pipeline device.

    ``sequence_parallel`` is Korthikanti et al. 2022's sequence parallelism inside the tensor
    group (it changes activations and the shape of the TP traffic, not the weights). Every
    degree is checked to be a positive whole number when the layout is made.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    v: int = 1
    sequence_parallel: bool = False
    #: expert-parallel size: a mixture of experts' routed experts split over ep of the dp
    #: data-parallel ranks (it adds no GPUs), which ep must divide
    ep: int = 1

    def __post_init__(self) -> None:
        for name, what in (("dp", "data-parallel size"), ("tp", "tensor-parallel size"),
                           ("pp", "pipeline-parallel size"), ("cp", "context-parallel size"),
                           ("v", "model chunks per pipeline device"),
                           ("ep", "expert-parallel size")):
            object.__setattr__(self, name, positive_int(f"{name} ({what})", getattr(self, name)))
        object.__setattr__(self, "sequence_parallel", bool(self.sequence_parallel))
        if self.dp % self.ep:
            raise ValueError(f"ep (expert-parallel size) {self.ep} does not divide dp "
                             f"{self.dp}: expert parallelism runs inside the data-parallel group "
                             f"(Megatron-Core); accepted: a divisor of {self.dp}")

    @property
    def gpus(self) -> int:
        """GPUs the layout needs: dp · tp · pp · cp."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def zero_group(self) -> int:
        """Ranks that share (and shard) the same weights: dp · cp."""
        return self.dp * self.cp

    @property
    def expert_zero_group(self) -> int:
        """Ranks that hold the same experts and shard their states: dp · cp / ep."""
        return self.dp * self.cp // self.ep

    def describe(self) -> str:
        """``"dp 16 × tp 8 × pp 4 × cp 1 = 512 GPUs"`` (plus SP and interleaving when on)."""
        gpus = f"{self.gpus} GPU" + ("s" if self.gpus > 1 else "")
        text = f"dp {self.dp} × tp {self.tp} × pp {self.pp} × cp {self.cp} = {gpus}"
        if self.sequence_parallel:
            text += ", sequence parallel"
        if self.v > 1:
            text += f", {self.v} chunks per pipeline device"
        if self.ep > 1:
            text += f", experts split ep {self.ep} ways within dp"
        return text


def layout(
    dp: int = 1, tp: int = 1, pp: int = 1, cp: int = 1, *, v: int = 1,
    sequence_parallel: bool = False, ep: int = 1,
) -> Layout:
    """A :class:`Layout` with every degree checked to be a positive whole number.

    >>> layout(dp=16, tp=8, pp=4).gpus
    512
    """
    return Layout(dp, tp, pp, cp, v, sequence_parallel, ep)


def microbatches(global_batch: int, dp: int, micro_batch: int) -> int:
    """m, the micro-batches each pipeline runs per step: B / (dp · b), which must be whole.

    Megatron-LM's count (its README: global batch size / (data-parallel size × micro-batch
    size)), the m of Narayanan et al. 2021.

    >>> microbatches(512, dp=16, micro_batch=1)
    32
    """
    B = positive_int("global_batch (sequences per step)", global_batch)
    d = positive_int("dp", dp)
    b = positive_int("micro_batch (b)", micro_batch)
    problem = _batch_problem(B, d, b)
    if problem:
        raise ValueError(f"{problem}; accepted: a multiple of {d * b}")
    return _microbatches(B, d, b)


def _microbatches(global_batch: int, dp: int, micro_batch: int) -> int:
    """:func:`microbatches` on checked inputs."""
    return global_batch // (dp * micro_batch)


def _batch_problem(global_batch: int, dp: int, micro_batch: int) -> str | None:
    """Why ``global_batch`` cannot be split into micro-batches over ``dp`` replicas, or None."""
    if global_batch % (dp * micro_batch):
        return (f"global batch {global_batch} is not divisible by dp × micro-batch = "
                f"{dp} × {micro_batch} = {dp * micro_batch}")
    return None


def validate(
    model: ModelShape,
    lay: Layout,
    *,
    gpus: int | None = None,
    global_batch: int | None = None,
    micro_batch: int | None = None,
    seq_len: int | None = None,
) -> Layout:
    """``lay`` if it can run ``model``; else one ValueError listing every violated rule.

    Rules (each message names the numbers): heads, kv_heads and the FFN width divisible by tp
    (Megatron splits heads and query groups whole, Shoeybi et al. 2019 §3); layers divisible by
    pp, and by pp·v when interleaved, with pp ≥ 2 for v > 1 (Narayanan et al. 2021 §2.2.2);
    GPUs = dp·tp·pp·cp; global batch divisible by dp·micro-batch; with cp > 1 the sequence
    divisible by 2·cp (Megatron-Core/Transformer Engine split it into 2·cp chunks to balance
    causal attention); with sequence parallelism the sequence divisible by tp·cp.
    """
    problems: list[str] = []
    tp = lay.tp
    if model.heads % tp:
        problems.append(f"heads {model.heads} is not divisible by tp {tp}")
    if model.kv_heads % tp:
        problems.append(f"kv_heads {model.kv_heads} is not divisible by tp {tp}")
    if model.ffn % tp:
        problems.append(f"ffn {model.ffn} is not divisible by tp {tp}")
    problems += _expert_problems(model, lay)
    if model.layers % lay.pp:
        problems.append(f"layers {model.layers} is not divisible by pp {lay.pp}")
    elif lay.v > 1 and model.layers % (lay.pp * lay.v):
        problems.append(
            f"layers {model.layers} is not divisible by pp × v = {lay.pp} × {lay.v} = {lay.pp * lay.v}"
        )
    if lay.v > 1 and lay.pp < 2:
        problems.append(f"interleaving (v = {lay.v}) needs pp ≥ 2, got pp {lay.pp}")
    if gpus is not None:
        g = positive_int("gpus", gpus)
        if g != lay.gpus:
            problems.append(
                f"gpus {g} ≠ dp × tp × pp × cp = "
                f"{lay.dp} × {lay.tp} × {lay.pp} × {lay.cp} = {lay.gpus}"
            )
    if global_batch is not None or micro_batch is not None:
        if global_batch is None or micro_batch is None:
            raise ValueError("give both global_batch and micro_batch, or neither")
        problem = _batch_problem(positive_int("global_batch (sequences per step)", global_batch),
                                 lay.dp, positive_int("micro_batch (b)", micro_batch))
        if problem:
            problems.append(problem)
    if seq_len is not None:
        s = positive_int("seq_len (s)", seq_len)
        if lay.cp > 1 and s % (2 * lay.cp):
            problems.append(f"seq_len {s} is not divisible by 2 × cp = {2 * lay.cp}")
        if lay.sequence_parallel and s % (tp * lay.cp):
            problems.append(f"seq_len {s} is not divisible by tp × cp = {tp} × {lay.cp} = {tp * lay.cp}")
    if problems:
        raise ValueError(f"invalid layout ({lay.describe()}) for {model.name}: " + "; ".join(problems))
    return lay


def _expert_problems(model: ModelShape, lay: Layout) -> list[str]:
    """What expert parallelism cannot split: ep with a dense model, experts or their width."""
    problems = []
    if lay.ep > 1 and not model.moe:
        problems.append(f"ep {lay.ep} needs a mixture of experts, and {model.name} is dense "
                        "(accepted: ep 1)")
    elif model.moe:
        if model.experts % lay.ep:
            problems.append(f"experts {model.experts} is not divisible by ep {lay.ep}")
        if model.expert_width % lay.tp:
            problems.append(f"expert ffn {model.expert_width} is not divisible by tp {lay.tp}")
    return problems


# -- parameters and memory per device -----------------------------------------------------------
def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class StageParams:
    """Parameters held by one device of one pipeline stage (after the tensor-parallel split)."""

    stage: int
    layers: int
    #: per-layer parameters split tp ways, on this device (all layers of the stage)
    layer_sharded: int
    #: per-layer parameters replicated on every TP rank: norms, row-parallel biases
    layer_replicated: int
    #: word embedding / LM head rows on this device (vocabulary-parallel), position embeddings
    embedding: int
    lm_head: int
    final_norm: int
    #: routed experts' parameters on this device (all layers of the stage), split ep·tp ways;
    #: ZeRO shards their states over the expert data-parallel group, dp·cp/ep
    expert: int = 0

    @property
    def dense(self) -> int:
        """Parameters on this device that every data-parallel rank holds alike."""
        return self.layer_sharded + self.layer_replicated + self.embedding + self.lm_head + self.final_norm

    @property
    def total(self) -> int:
        """Parameters on one device of this stage."""
        return self.dense + self.expert


def stage_params(model: ModelShape, lay: Layout) -> tuple[StageParams, ...]:
    """Parameters on one device of each pipeline stage, exactly, from ``param_breakdown``.

    Per layer, ``per_layer_norms`` and (with biases) the two row-parallel biases (attention
    output, second MLP projection: 2h) are replicated; everything else is divided by tp
    (Shoeybi et al. 2019, §3). Stages hold L/pp layers each, the first also the embedding, the
    last the final norm and LM head (Narayanan et al. 2021, §2.2).
    """
    if model.layers % lay.pp:
        raise ValueError(f"layers {model.layers} is not divisible by pp {lay.pp}")
    for name, value in (("heads", model.heads), ("kv_heads", model.kv_heads), ("ffn", model.ffn)):
        if value % lay.tp:
            raise ValueError(f"{name} {value} is not divisible by tp {lay.tp}")
    problems = _expert_problems(model, lay)
    if problems:
        raise ValueError("; ".join(problems))
    return _stage_params(model, lay)


def _stage_params(model: ModelShape, lay: Layout) -> tuple[StageParams, ...]:
    """:func:`stage_params` for a layout already checked against the model."""
    tp, pp = lay.tp, lay.pp
    parts = param_breakdown(model)
    h = model.hidden
    replicated = parts.per_layer_norms + (2 * h if model.bias else 0)
    routed = parts.per_layer_routed  # routed experts: split ep·tp ways
    if model.moe:
        replicated += h * model.experts  # the router, on every rank
    split = parts.per_layer - replicated - routed
    if split % tp:  # cannot happen once heads, kv_heads and ffn divide by tp; guard the algebra
        raise ValueError(f"per-layer sharded parameters {split} are not divisible by tp {tp}")
    per_stage = model.layers // pp
    word_rows = _ceil_div(model.vocab, tp) * h  # vocabulary-parallel rows on this rank
    positions = model.positions * h  # replicated
    assert parts.embedding == model.vocab * h + positions  # the breakdown's definition
    stages = []
    for i in range(pp):
        first, last = i == 0, i == pp - 1
        embedding = word_rows + positions if first else 0
        if last:
            lm_head = word_rows if (not model.tied_embeddings or pp > 1) else 0
            final_norm = parts.final_norm
        else:
            lm_head = final_norm = 0
        stages.append(
            StageParams(
                stage=i,
                layers=per_stage,
                layer_sharded=per_stage * split // tp,
                layer_replicated=per_stage * replicated,
                embedding=embedding,
                lm_head=lm_head,
                final_norm=final_norm,
                expert=per_stage * routed // (lay.ep * tp),
            )
        )
    return tuple(stages)


@dataclass(frozen=True, kw_only=True)
class DeviceMemory(ModelStates):
    """Memory on one device of one pipeline stage: ZeRO-divided model states plus activations."""

    stage: int
    #: parameters this device holds before ZeRO sharding (its TP/PP share of the model)
    params: int
    zero_stage: int
    #: ranks the model states are sharded over (dp · cp)
    zero_group: int
    activations: Bytes
    #: of ``params``, the routed experts' (a mixture of experts), whose states ZeRO shards over
    #: ``expert_zero_group`` ranks (dp · cp / ep) instead
    expert_params: int = 0
    expert_zero_group: int = 1

    @property
    def total(self) -> Bytes:
        """Model states plus activations: what this device must hold."""
        return self.model_states + self.activations

    def parts(self) -> dict[str, Bytes]:
        """Each kind of state by name, then the activations."""
        return {**super().parts(), "activations": self.activations}


def _per_stage_activations(activations: Bytes | Sequence[Bytes] | None, pp: int) -> tuple[Bytes, ...]:
    if activations is None:
        return (Bytes(0),) * pp
    if isinstance(activations, Bytes):
        return (activations,) * pp
    acts = tuple(activations)
    if len(acts) != pp or not all(isinstance(a, Bytes) for a in acts):
        raise ValueError(
            f"activations must be one Bytes or {pp} Bytes (one per pipeline stage), got {activations!r}"
        )
    return acts


def device_memory(
    model: ModelShape,
    lay: Layout,
    *,
    zero_stage: int = 0,
    precision: str = "bf16-mixed",
    optimizer_name: str = "adamw",
    activations: Bytes | Sequence[Bytes] | None = None,
    grad_bytes: int | None = None,
) -> tuple[DeviceMemory, ...]:
    """Memory of one device of each pipeline stage.

    Model states: :func:`stage_params` of the stage, divided by ZeRO ``zero_stage`` over
    dp·cp ranks with :func:`trainmath.sharding.zero_states` (ZeRO §5.1-5.3). ``activations``:
    the activation bytes one device of each stage holds (a single ``Bytes`` for all stages or
    one per stage; ``None`` counts model states only). ``grad_bytes`` replaces the precision
    recipe's bytes per gradient: Megatron-LM keeps bf16 parameters with fp32 gradients, 4 bytes
    (its distributed-optimizer guide: 18 bytes per parameter, 6 + 12/d with the distributed
    optimizer, which is ZeRO stage 1 here). Buffers, temporaries and fragmentation are not
    counted.
    """
    check_stage(zero_stage)
    acts = _per_stage_activations(activations, lay.pp)
    stage_params(model, lay)  # checks the layout against the model
    per = bytes_per_param(precision, optimizer_name)
    if grad_bytes is not None:
        per = replace(per, gradients=positive_int("grad_bytes", grad_bytes))
    return _device_memory(model, lay, zero_stage, per, acts)


def _device_memory(model: ModelShape, lay: Layout, zero_stage: int, per: BytesPerParam,
                   acts: Sequence[Bytes]) -> tuple[DeviceMemory, ...]:
    """:func:`device_memory` on checked inputs, with one activation amount per stage."""
    result = []
    for sp, act in zip(_stage_params(model, lay), acts):
        states = _zero_states(sp.dense, lay.zero_group, zero_stage, per)
        experts = _zero_states(sp.expert, lay.expert_zero_group, zero_stage, per)
        result.append(
            DeviceMemory(
                stage=sp.stage, params=sp.total, zero_stage=zero_stage, zero_group=lay.zero_group,
                weights=states.weights + experts.weights,
                gradients=states.gradients + experts.gradients,
                master_weights=states.master_weights + experts.master_weights,
                optimizer_states=states.optimizer_states + experts.optimizer_states,
                activations=act, expert_params=sp.expert,
                expert_zero_group=lay.expert_zero_group,
            )
        )
    return tuple(result)


def fullest(stages: Sequence[DeviceMemory]) -> DeviceMemory:
    """The stage whose device needs the most memory (ties: the earliest)."""
    return max(stages, key=lambda d: (d.total, -d.stage))


def peak_device_memory(model: ModelShape, lay: Layout, **kwargs) -> DeviceMemory:
    """:func:`fullest` of :func:`device_memory`, which takes the same arguments."""
    return fullest(device_memory(model, lay, **kwargs))


# -- pipeline bubble ------------------------------------------------------------------------------
def bubble_fraction(pp: int, m: int, v: int = 1) -> Fraction:
    """Pipeline bubble time over ideal compute time: (pp-1)/m, interleaved (pp-1)/(m·v).

    Narayanan et al. 2021, §2.2.1 (GPipe and 1F1B schedules: t_pb/t_id = (p-1)/m, their p
    being pp) and §2.2.2 (interleaved schedule with v model chunks per device). It is a ratio
    to the *ideal* time: the bubble's share of the whole step is :func:`bubble_share`.

    >>> bubble_fraction(4, 32)
    Fraction(3, 32)
    """
    pp = positive_int("pp (pipeline stages)", pp)
    m = positive_int("m (micro-batches per step)", m)
    v = positive_int("v (model chunks per pipeline device)", v)
    return _bubble(pp, m, v)


def _bubble(pp: int, m: int, v: int) -> Fraction:
    """:func:`bubble_fraction` on checked inputs."""
    return Fraction(pp - 1, m * v)


def bubble_share(pp: int, m: int, v: int = 1) -> Fraction:
    """The bubble's share of a whole step: (pp-1)/(m·v + pp-1) = f/(1+f) for f = bubble_fraction.

    f is bubble time over ideal time (Narayanan et al. 2021, §2.2.1 and §2.2.2); a step lasts
    the ideal time plus the bubble, so the bubble takes f/(1+f) of it.
    """
    f = bubble_fraction(pp, m, v)
    return f / (1 + f)


# -- communication ------------------------------------------------------------------------------
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

    - data parallel: :func:`trainmath.sharding.zero_traffic` over dp·cp ranks for this device's
      parameters, m micro-batches per step;
    - tensor parallel: :func:`tensor_parallel_collectives` × 2(tp-1)/tp × b·(s/cp)·h bytes, × m;
      ``regather`` chooses its count with sequence parallelism (Megatron-LM's implementation,
      the default, or Korthikanti et al. 2022's §4.2.2 volume);
    - pipeline parallel: each micro-batch sends its b·(s/cp)·h activation forward and its
      gradient backward across each stage boundary (Narayanan et al. 2021, §3.2: bsh per
      micro-batch per boundary), once per model chunk (v times, §2.2.2), except past the ends of
      the pipeline. With ``scatter_gather`` (Narayanan §4.1; default on in Megatron) or with
      sequence parallelism, each TP rank sends only its 1/tp share;
    - context parallel: per layer and micro-batch an all-gather of this TP rank's K and V in the
      forward, another in the backward and a reduce-scatter of their gradients (Megatron-Core
      "Context parallelism overview": KV are gathered again in backward, dKV reduce-scattered),
      each moving (cp-1)/cp × 2·b·s·(kv_heads·head_dim/tp) values in a ring; recomputation
      (selective or full) reruns the attention forward and gathers K and V once more;
    - expert parallel (ep > 1): per MoE layer and micro-batch four all-to-alls of the
      b·(s/cp)·k·h token copies, (ep-1)/ep of each leaving the device
      (:func:`trainmath.moe.all_to_all_elements`), six with full recomputation, which reruns
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
    if s % cp:
        raise ValueError(f"seq_len {s} is not divisible by cp {cp}")
    tokens = b * (s // cp)  # tokens of one micro-batch on this device
    activation = tokens * model.hidden * act  # b·(s/cp)·h bytes
    stages = stage_params(model, lay)
    result = []
    for sp in stages:
        i = sp.stage
        dp_bytes = zero_traffic(
            sp.dense if sp.expert else sp.total, lay.zero_group, zero_stage, microbatches=m,
            weight_bytes=r.weights, grad_bytes=g,
        ).total if lay.zero_group > 1 else Bytes(0)
        if sp.expert and lay.expert_zero_group > 1:  # experts reduce over dp·cp/ep replicas
            dp_bytes += zero_traffic(sp.expert, lay.expert_zero_group, zero_stage, microbatches=m,
                                     weight_bytes=r.weights, grad_bytes=g).total
        if tp > 1:
            count = tensor_parallel_collectives(
                sp.layers, first=i == 0, last=i == pp - 1,
                sequence_parallel=lay.sequence_parallel, recompute=recompute, regather=regather,
            )
            tp_bytes = Bytes(count * ring_all_reduce_factor(tp) * activation * m)
        else:
            tp_bytes = Bytes(0)
        if pp > 1:
            sends = 2 * m * v - (m if i in (0, pp - 1) else 0)
            share = tp if (scatter_gather or lay.sequence_parallel) else 1
            pp_bytes = Bytes(Fraction(sends * activation, share))
        else:
            pp_bytes = Bytes(0)
        if cp > 1:
            kv = 2 * b * s * (model.kv_dim // tp) * act  # K and V of the whole sequence, this TP rank
            passes = 3 + (1 if recompute != "none" else 0)
            cp_bytes = Bytes(passes * ring_gather_factor(cp) * kv * sp.layers * m)
        else:
            cp_bytes = Bytes(0)
        if lay.ep > 1:
            passes = 4 + (2 if recompute == "full" else 0)
            copies = tokens * model.experts_per_token * model.hidden * act
            ep_bytes = Bytes(passes * all_to_all_factor(lay.ep) * copies * sp.layers * m)
        else:
            ep_bytes = Bytes(0)
        result.append(Communication(i, dp_bytes, tp_bytes, pp_bytes, cp_bytes, ep_bytes))
    if stage is None:
        return max(result, key=lambda c: (c.total, -c.stage))
    if not isinstance(stage, int) or isinstance(stage, bool) or not 0 <= stage < pp:
        raise ValueError(f"stage {stage!r} is out of range; accepted: 0 to {pp - 1}")
    return result[stage]
