"""The step-time model the planner ranks layouts by: compute, bubble and the traffic that does
not hide under compute.

- **compute**: the hardware FLOPs of the step (:func:`trainmath.time.flops.flops_per_token`,
  recomputation included) over ``achievable`` × the GPU's dense peak in the recipe's precision
  (:func:`trainmath.memory.recipes.peak_precision`); ``achievable`` is an assumption, stated in
  every output (:data:`ACHIEVABLE`);
- **pipeline bubble**: (pp-1)/(m·v) of the time of the micro-batches
  (:func:`trainmath.parallel.schedules.bubble_fraction`; Narayanan et al. 2021, §2.2);
- **communication**: the bytes each device sends per step
  (:func:`trainmath.time.communication.communication`) over the link they travel on: NVLink
  inside a node, the network across nodes (:data:`trainmath.hardware.INTERCONNECTS`), in
  Megatron-Core's rank order (tp innermost, then cp, dp, pp);
- **latency** (optional, ``latency=NCCL_RING``): each collective also costs NCCL's ring
  latency (:class:`RingLatency`, :data:`NCCL_RING`); off by default, bandwidth only;
- **overlap**: each kind of traffic hides under the compute by its share in :class:`Overlap`;
  what does not hide adds to the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..hardware import gpu as accelerator
from ..memory.recipes import peak_precision, recipe as _recipe
from ..model.shape import ModelShape
from ..parallel.layout import Layout
from ..parallel.schedules import _bubble
from .communication import communication, tensor_parallel_collectives
from .flops import flops_per_token
from ..units import Bytes


#: The default share of a GPU's dense peak that the step's matrix multiplications sustain: an
#: assumption, not a measurement. The largest runs of Korthikanti et al. 2022 (Table 5) reach
#: 57% HFU with the bubble and all communication included; 0.6 leaves those out.
ACHIEVABLE = 0.6


@dataclass(frozen=True)
class Overlap:
    """The share of each kind of traffic that hides under the step's compute (0 to 1).

    Defaults: Megatron-LM overlaps the data-parallel gradient reduce-scatter with the backward
    pass and the parameter all-gather with the forward (``--overlap-grad-reduce``,
    ``--overlap-param-gather``), and ring attention passes K and V while it computes (Liu et al.
    2023, §3): 1. Tensor-parallel all-reduces sit between a layer's matrix multiplications and
    pipeline sends between stages: 0. Overlapped traffic still costs the time by which it
    exceeds the compute it hides under.
    """

    dp: float = 1.0
    tp: float = 0.0
    pp: float = 0.0
    cp: float = 0.0

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "cp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ValueError(f"overlap {name} must be a fraction from 0 to 1, got {value!r}")


@dataclass(frozen=True)
class RingLatency:
    """Seconds a ring collective costs beyond its bytes: ``base`` once per collective, and per
    ring step ``nvlink`` inside a node or ``network`` across nodes (the α of an α–β model)."""

    base: float
    nvlink: float
    network: float
    source: str

    def collective(self, ranks: int, nodes: int, all_reduce: bool = False) -> float:
        """Seconds of latency of one ring all-gather or reduce-scatter (``all_reduce``: both)
        over ``ranks`` ranks on ``nodes`` nodes: base + (steps - inter) · nvlink + inter ·
        network, steps = n - 1 (2(n - 1) for an all-reduce), inter = nodes - 1 (doubled too)."""
        if ranks <= 1:
            return 0.0
        k = 2 if all_reduce else 1
        steps, inter = k * (ranks - 1), k * (nodes - 1)
        return self.base + (steps - inter) * self.nvlink + inter * self.network


#: NCCL's own latency model of a ring collective with its Simple protocol (``src/graph/tuning.cc``,
#: ``ncclTunerConstantsDefaults``: ``baseLatencies`` ring/Simple 8.4 µs, ``hwLatencies`` ring/Simple
#: NVLink 3.4 µs and network 14 µs per step); its topology-dependent extras (``latencyInter``,
#: the network overhead) are left out. Used with ``plan(..., latency=NCCL_RING)``.
NCCL_RING = RingLatency(8.4e-6, 3.4e-6, 14e-6,
                        "NCCL src/graph/tuning.cc (commit 5067397c), ring, Simple protocol")


@dataclass(frozen=True)
class StepTime:
    """Predicted seconds of one optimizer step, by what takes them.

    ``compute`` is the hardware FLOPs at the achievable rate; ``bubble`` the pipeline's idle
    time; ``tp``, ``cp``, ``pp``, ``dp`` and ``ep`` the part of each kind of traffic that the
    compute does not hide (``ep``, a mixture of experts' all-to-all, is never hidden: the
    experts wait for their tokens). ``recompute`` is the part of ``compute`` spent rerunning
    the forward.
    """

    compute: float
    recompute: float
    bubble: float
    tp: float
    cp: float
    pp: float
    dp: float
    ep: float = 0.0

    @property
    def total(self) -> float:
        """Seconds per step: every part together."""
        return self.compute + self.bubble + self.tp + self.cp + self.pp + self.dp + self.ep

    def overheads(self) -> dict[str, float]:
        """Seconds beyond the model's own FLOPs, by cause."""
        return {"recompute": self.recompute, "bubble": self.bubble, "tp comm": self.tp,
                "cp comm": self.cp, "pp comm": self.pp, "dp comm": self.dp, "ep comm": self.ep}

    @property
    def limit(self) -> str:
        """What costs the most beyond the model's own FLOPs: ``"bubble 9%"``, or ``"compute"``."""
        name, seconds = max(self.overheads().items(), key=lambda kv: kv[1])
        if seconds <= 0.01 * self.total:
            return "compute"
        return f"{name} {seconds / self.total:.0%}"


@lru_cache(maxsize=4096)
def _traffic(model: ModelShape, lay: Layout, s: int, b: int, B: int, z: int, recipe_name: str,
             rc: str) -> tuple[Bytes, Bytes, Bytes, Bytes, Bytes]:
    r = _recipe(recipe_name)
    c = communication(model, lay, seq_len=s, micro_batch=b, global_batch=B, zero_stage=z,
                      precision=recipe_name, activation_bytes=r.compute,
                      grad_bytes=r.reduce_bytes or r.gradients, recompute=rc)
    return (c.data_parallel, c.tensor_parallel, c.pipeline_parallel, c.context_parallel,
            c.expert_parallel)


def _exposed(seconds: float, overlap: float, window: float) -> float:
    """The part of ``seconds`` of traffic that the compute does not hide."""
    return seconds - min(overlap * seconds, window)


def step_time(model: ModelShape, lay: Layout, *, seq_len: int, global_batch: int,
              micro_batch: int, zero_stage: int, recompute: str, recipe: str, gpu: str,
              node_gpus: int, achievable: float, nvlink: float, network: float,
              overlap: Overlap, latency: RingLatency | None = None) -> StepTime:
    """Predicted seconds per optimizer step of one layout (see the module docstring).

    compute = B·s × hardware FLOPs per token / (gpus × achievable × peak); the micro-batches'
    time (compute, exposed tensor-, context- and pipeline-parallel traffic) is stretched by the
    bubble (pp-1)/(m·v), and the exposed data-parallel traffic comes once per step. A group
    stays on NVLink while it fits in a node in Megatron-Core's rank order (tp, cp, dp, pp).
    With ``latency`` each kind of traffic also costs its collectives' latency: per step the
    tensor-parallel all-reduces, context-parallel ring passes and pipeline sends of every
    micro-batch and the ZeRO stage's collectives, each over the nodes its group spans.
    """
    s, B, b = seq_len, global_batch, micro_batch
    peak = accelerator(gpu).peak(peak_precision(_recipe(recipe))).flops
    f = flops_per_token(model, s, recompute)
    rate = lay.gpus * achievable * peak
    compute = B * s * f.hardware / rate
    extra = B * s * (f.hardware - f.model) / rate
    dp_b, tp_b, pp_b, cp_b, ep_b = _traffic(model, lay, s, b, B, zero_stage, recipe, recompute)

    def link(span: int) -> float:
        return nvlink if span <= node_gpus else network

    m = B // (lay.dp * b)
    lat = (0.0, 0.0, 0.0, 0.0) if latency is None else _latencies(
        model, lay, m, zero_stage, recompute, node_gpus, latency)
    tp_t = _exposed(tp_b.n / link(lay.tp) + lat[1], overlap.tp, compute)
    cp_t = _exposed(cp_b.n / link(lay.tp * lay.cp) + lat[3], overlap.cp, compute)
    pp_t = _exposed(pp_b.n / link(lay.gpus) + lat[2], overlap.pp, compute)
    dp_t = _exposed(dp_b.n / link(lay.tp * lay.cp * lay.dp) + lat[0], overlap.dp, compute)
    # the all-to-all: ep ranks spaced tp·cp apart inside the data-parallel group
    ep_t = ep_b.n / link(lay.tp * lay.cp * lay.ep) if lay.ep > 1 else 0.0
    bubble = float(_bubble(lay.pp, m, lay.v)) * (compute + tp_t + cp_t + pp_t + ep_t)
    return StepTime(compute, extra, bubble, float(tp_t), float(cp_t), float(pp_t), float(dp_t),
                    float(ep_t))


def _latencies(model: ModelShape, lay: Layout, m: int, zero_stage: int, recompute: str,
               node_gpus: int, latency: RingLatency) -> tuple[float, float, float, float]:
    """Seconds of collective latency per step, (dp, tp, pp, cp), on the first pipeline stage.

    A group's ranks sit in Megatron-Core's rank order (tp innermost, then cp, dp, pp), so a
    group spans one node while it fits in one, else span / node_gpus nodes. Counted per step:
    tensor parallelism, :func:`~trainmath.time.communication.tensor_parallel_collectives` all-reduces
    per micro-batch; context parallelism, 3 ring passes per layer and micro-batch (4 with
    recomputation); pipeline parallelism, 2·m·v sends of one step each; data parallelism over
    dp·cp ranks, ZeRO-0 one all-reduce, ZeRO-1 a reduce-scatter and an all-gather, ZeRO-2 m
    reduce-scatters and an all-gather, ZeRO-3 per layer and micro-batch two all-gathers and a
    reduce-scatter. Gradient buckets are not counted (one collective per kind at least).
    """
    def nodes(ranks: int, span: int) -> int:
        return 1 if span <= node_gpus else min(ranks, span // node_gpus)

    layers = model.layers // lay.pp
    tp = cp = pp = dp = 0.0
    if lay.tp > 1:
        count = tensor_parallel_collectives(layers, first=True, last=lay.pp == 1,
                                            sequence_parallel=lay.sequence_parallel,
                                            recompute=recompute)
        tp = float(count) * m * latency.collective(lay.tp, nodes(lay.tp, lay.tp), True)
    if lay.cp > 1:
        passes = 3 + (1 if recompute != "none" else 0)
        cp = passes * layers * m * latency.collective(lay.cp, nodes(lay.cp, lay.tp * lay.cp))
    if lay.pp > 1:
        hop = latency.network if lay.gpus > node_gpus else latency.nvlink
        pp = 2 * m * lay.v * (latency.base + hop)
    ranks = lay.dp * lay.cp
    if ranks > 1:
        n = nodes(ranks, lay.tp * ranks)
        one = latency.collective(ranks, n)
        dp = {0: latency.collective(ranks, n, True), 1: 2 * one,
              2: (m + 1) * one}.get(zero_stage, 3 * layers * m * one)
    return dp, tp, pp, cp
