"""Seconds per optimizer step, from parts that can each be checked: the planner ranks layouts by
it and ``estimate`` predicts a run's throughput and MFU with it.

One micro-batch on one device of pipeline stage i costs

    t_i = Σ over its layers (forward + backward + recomputation + exposed tp, cp, ep traffic)
          + embedding (first stage) + LM head and loss (last stage)
          + pipeline sends + the data-parallel gathers FSDP does not hide

with each layer's work from :mod:`trainmath.time.layer` (GEMMs, attention's core, memory-bound
ops) and each collective from :mod:`trainmath.time.network`. The pipeline runs m micro-batches
over pp stages of v chunks each in 1F1B order, paced by its slowest stage (Narayanan et al.
2021, §2.2: bubble (pp-1)/(m·v) of equal stages), so

    pipeline = m · max_i t_i + (Σ_i t_i − max_i t_i) / v

and the step adds what the data-parallel reduction leaves after the last backward and the
optimizer's update (:func:`trainmath.time.memory_bound.optimizer_bytes_per_param`).

**Overlap, per mechanism** (:class:`Overlap`):

- FSDP2 and ZeRO-3 gather layer j+1's weights while layer j computes (FSDP2's forward and
  backward prefetch of one module; DeepSpeed's prefetch bucket): per layer the gather is exposed
  only by what exceeds the previous layer's compute, and in the backward the gather and the
  previous layer's reduce-scatter share the window. The first gather and the last
  reduce-scatter of each micro-batch, and the root module's (embedding, final norm, LM head),
  wait. Under a pipeline FSDP2 keeps the weights gathered across the micro-batches and
  reduce-scatters once, at the last backward (torchtitan's ``reshard_after_forward`` off with
  pp; PyTorch pipelining syncs gradients on the last micro-batch only): once a step.
- DDP and ZeRO-1/2 reduce gradients in buckets as the backward produces them (PyTorch DDP's
  buckets; Megatron-Core's ``--overlap-grad-reduce``, during the last micro-batch only): exposed
  by what exceeds that backward, and the last bucket (one layer's gradients) always. ZeRO-1/2
  gather the updated weights once a step, under the next forward with Megatron-Core's
  ``--overlap-param-gather``.
- tensor-parallel all-gathers and reduce-scatters are exposed unless the framework overlaps
  them with the neighbouring GEMM (Transformer Engine's ``--tp-comm-overlap``).
- ring attention passes K and V while it computes (Liu et al. 2023, §3; Megatron-Core's "p2p"
  context parallelism): exposed by what exceeds the attention it hides under. Ulysses'
  all-to-alls (Jacobs et al. 2023; ``--cp-kind ulysses``, and the hybrid's Ulysses part) wait:
  DeepSpeed's uneven-heads path refuses async, and the attention needs their result.
- pipeline sends and a mixture's all-to-alls are exposed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache

from ..hardware import gpu as accelerator, host_link
from ..memory.act_offload import offload_seconds
from ..memory.kernels import implementation as _implementation
from ..memory.recipes import peak_precision, recipe as _recipe
from ..model.moe import Routing, dispatch
from ..model.shape import ModelShape, distinct_kinds, kind_counts, layer_kinds, layer_shape
from ..parallel.layout import Layout
from ..parallel.placement import _stage_params
from ..parallel.schedules import TWO_WAY, V_SCHEDULES, _bubble_idle
from .calibration import sustained as calibrated_sustained
from .gemm import HBM_EFFICIENCY
from .layer import Device, Work, embedding_work, head_work, layer_work
from .memory_bound import optimizer_bytes_per_param
from .attention import FLASH_KERNELS
from .communication import context_parallel_bytes
from .network import Fabric, collective_time
from ..units import choice, positive_int


@dataclass(frozen=True)
class Overlap:
    """Which communication the framework overlaps with compute (module docstring).

    ``gradients``: the data-parallel reduction runs in buckets during the backward (DDP,
    ZeRO, Megatron-Core's ``--overlap-grad-reduce``); ``parameters``: weight gathers are
    prefetched (FSDP, ZeRO-3) or hidden under the next forward (``--overlap-param-gather``);
    ``tensor``: tensor-parallel collectives overlap the neighbouring GEMMs (TE's
    ``--tp-comm-overlap``).
    """

    gradients: bool = True
    parameters: bool = True
    tensor: bool = False

    def describe(self) -> str:
        """``"gradient reduction and weight gathers overlapped; tensor-parallel exposed"``."""
        dp = {(True, True): "gradient reduction and weight gathers overlapped",
              (True, False): "gradient reduction overlapped, weight gathers exposed",
              (False, True): "gradient reduction exposed, weight gathers overlapped",
              (False, False): "gradient reduction and weight gathers exposed"}
        tp = "tensor-parallel overlapped" if self.tensor else "tensor-parallel exposed"
        return f"{dp[(self.gradients, self.parameters)]}; {tp}"


@dataclass(frozen=True)
class Timing:
    """The step-time model's settings a user may change, each stated in every output: what the
    framework overlaps (:class:`Overlap`), the flash kernel (None: the implementation's own on
    the GPU, :func:`attention_kernel`), the sustained share of the benchmarks' tensor-core rates
    (None: :func:`trainmath.time.calibration.sustained`), and the links (None: the GPU's DGX/HGX
    node, :data:`trainmath.hardware.INTERCONNECTS`): GPUs per node, NVLink and network bytes/s
    per GPU each way."""

    overlap: Overlap = Overlap()
    kernel: str | None = None
    sustained: float | None = None
    node_gpus: int | None = None
    nvlink: float | None = None
    network: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.overlap, Overlap):
            raise ValueError(f"overlap must be an Overlap, got {self.overlap!r}")
        if self.kernel is not None:
            choice("attention kernel", self.kernel, FLASH_KERNELS)
        if self.sustained is not None and (isinstance(self.sustained, bool)
                                           or not isinstance(self.sustained, (int, float))
                                           or not 0 < self.sustained <= 1):
            raise ValueError(f"sustained must be a share in (0, 1], such as 0.7, got "
                             f"{self.sustained!r}")
        for name in ("nvlink", "network"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not value > 0):
                raise ValueError(f"{name} must be a positive number of bytes per second, got "
                                 f"{value!r}")
        if self.node_gpus is not None:
            object.__setattr__(self, "node_gpus", positive_int("gpus per node", self.node_gpus))

    def fabric(self, gpu: str) -> Fabric:
        """The links of GPU kind ``gpu`` with this timing's overrides."""
        return Fabric.of(gpu, self.node_gpus, self.nvlink, self.network)

    def share(self, gpu: str) -> float:
        """The sustained share used on ``gpu``: this timing's, else the calibrated one."""
        return calibrated_sustained(gpu) if self.sustained is None else float(self.sustained)


@dataclass(frozen=True)
class StepTime:
    """Predicted seconds of one optimizer step, by part.

    ``gemm``, ``attention`` and ``memory`` are the compute on the pipeline's critical path (the
    slowest stage, m micro-batches), ``recompute`` the part of them spent rerunning the
    forward; ``tp``, ``cp``, ``pp``, ``dp`` and ``ep`` the traffic compute does not hide;
    ``bubble`` the pipeline's fill and drain; ``optimizer`` the update. ``stages`` is each
    stage's seconds per micro-batch.
    """

    gemm: float
    attention: float
    memory: float
    recompute: float
    optimizer: float
    bubble: float
    tp: float
    cp: float
    pp: float
    dp: float
    ep: float = 0.0
    microbatches: int = 1
    stages: tuple[float, ...] = ()
    #: offloaded activations' copies to and from host memory the step waits for
    #: (:func:`trainmath.memory.act_offload.offload_seconds`)
    offload: float = 0.0

    @property
    def compute(self) -> float:
        """GEMMs, attention and memory-bound work on the critical path."""
        return self.gemm + self.attention + self.memory

    @property
    def communication(self) -> float:
        """Exposed traffic of every kind."""
        return self.tp + self.cp + self.pp + self.dp + self.ep

    @property
    def total(self) -> float:
        """Seconds per step: every part together."""
        return self.compute + self.optimizer + self.bubble + self.communication + self.offload

    def parts(self) -> dict[str, float]:
        """Seconds by part, in the order outputs show them."""
        return {"GEMMs": self.gemm, "attention": self.attention, "memory-bound": self.memory,
                "optimizer": self.optimizer, "bubble": self.bubble, "tp comm": self.tp,
                "cp comm": self.cp, "pp comm": self.pp, "dp comm": self.dp, "ep comm": self.ep,
                "host copies": self.offload}

    def overheads(self) -> dict[str, float]:
        """Seconds beyond the model's own compute, by cause."""
        return {"recompute": self.recompute, "bubble": self.bubble, "tp comm": self.tp,
                "cp comm": self.cp, "pp comm": self.pp, "dp comm": self.dp, "ep comm": self.ep,
                "optimizer": self.optimizer, "host copies": self.offload}

    @property
    def limit(self) -> str:
        """What costs the most beyond the model's own compute: ``"bubble 9%"``, or ``"compute"``."""
        name, seconds = max(self.overheads().items(), key=lambda kv: kv[1])
        if seconds <= 0.02 * self.total:
            return "compute"
        return f"{name} {seconds / self.total:.0%}"


def attention_kernel(training_implementation: str, gpu: str, kernel: str | None = None) -> str:
    """The attention kernel a run's implementation uses on ``gpu``: "eager" for the eager
    implementations; for flash, ``kernel`` if given, else cuDNN's fused attention for
    Megatron-LM with Transformer Engine on Hopper and later (TE's default backend there) and
    FlashAttention-2 otherwise (PyTorch SDPA's flash backend, TE on Ampere)."""
    impl = _implementation(training_implementation)
    if impl.attention == "eager":
        return "eager"
    if kernel is not None:
        return kernel
    hopper = accelerator(gpu).key not in ("a100-sxm", "a100-40gb")
    return "cudnn" if impl.family == "megatron" and hopper else "fa2"


def groups(lay: Layout, node: int) -> dict[str, tuple[int, int]]:
    """(ranks, ranks per node) of each parallel group of ``lay`` on nodes of ``node`` GPUs:
    "tp", "cp", "dp" (with the context ranks) and "ep" (the all-to-all's)."""
    return _groups(lay, node)


def _groups(lay: Layout, node: int) -> dict[str, tuple[int, int]]:
    """(ranks, ranks per node) of each group in Megatron-Core's rank order: tp innermost, then
    cp, dp, pp; the experts on their own folded grid, etp innermost, then ep, edp, pp (MoE
    parallel folding, ``megatron/core/parallel_state.py``), so an ep group's ranks are spaced
    etp apart."""
    def per_node(ranks: int, stride: int) -> int:
        return max(1, min(ranks, node // stride)) if stride < node else 1
    return {"tp": (lay.tp, min(lay.tp, node)), "cp": (lay.cp, per_node(lay.cp, lay.tp)),
            "dp": (lay.dp * lay.cp, per_node(lay.dp * lay.cp, lay.tp)),
            "ep": (lay.ep, per_node(lay.ep, lay.expert_tp))}


def step_time(model: ModelShape, lay: Layout, *, seq_len: int, global_batch: int,
              micro_batch: int, zero_stage: int, recompute: str, recipe: str,
              implementation: str, fabric: Fabric, overlap: Overlap = Overlap(),
              kernel: str | None = None, sustained: float | None = None,
              precision: str | None = None, compiled: bool = False,
              routing: Routing = Routing(), loss: str = "standard", loss_chunks: int = 1,
              activation_offload: str = "none", offloaded: float = 0.0) -> StepTime:
    """Predicted seconds per optimizer step of one layout and setting (module docstring).

    ``implementation`` decides the attention (eager or flash, and which flash kernel unless
    ``kernel`` names one) and the eager ops' byte counts; ``sustained`` multiplies every GEMM's
    best-shape efficiency (default: :func:`trainmath.time.calibration.sustained` for the GPU).
    ``precision`` runs the GEMMs in another precision than the recipe's (torchao's Float8
    linears under FSDP2: "fp8"); ``compiled`` fuses as ``torch.compile`` does
    (:func:`trainmath.time.memory_bound.layer_bytes_per_token`). A mixture's ``routing``
    (:class:`trainmath.model.moe.Routing`) sets its experts' rows: balanced, padded to a
    capacity, or the load it counts, on the busiest device, which the all-to-alls wait for;
    the all-to-all moves that device's rows. ``loss`` and ``loss_chunks`` time the loss as it
    runs (:func:`trainmath.time.layer.head_work`); ``offloaded`` bytes of one micro-batch's
    activations cross the GPU's host link (:func:`trainmath.hardware.host_link`) each way, and
    ``activation_offload`` says what the step waits for
    (:func:`trainmath.memory.act_offload.offload_seconds`): every copy ("sync"), or what
    outlasts the forward and backward compute it overlaps ("overlap").
    """
    return _step_time(model, lay, seq_len, global_batch, micro_batch, zero_stage, recompute,
                      recipe, implementation, fabric, overlap, kernel, sustained, precision,
                      compiled, routing, loss, loss_chunks, activation_offload, float(offloaded))


@lru_cache(maxsize=8192)
def _step_time(model, lay, s, B, b, z, rc, recipe_name, impl, fabric, overlap, kernel, scale,
               gemm_precision, compiled, routing=Routing(), loss="standard", chunks=1,
               act_offload="none", offloaded=0.0):
    # the stages without context parallelism's traffic are the same under every cp kind and
    # every schedule of one placement: timed once, the traffic and the bubble added here
    m, stage_t, stage_parts, dp_tails, opt, passes, layers, attention, host_x = _stage_times(
        model, _core(lay), s, B, b, z, rc, recipe_name, impl, fabric, overlap, kernel, scale,
        gemm_precision, compiled, routing, loss, chunks, act_offload, offloaded)
    cp_layer = 0.0 if lay.cp == 1 else _cp_layer(
        model, (lay.tp, lay.cp, lay.cp_kind), s, b, rc, _recipe(recipe_name).compute, fabric,
        attention)
    stage_t = [t + n * cp_layer for t, n in zip(stage_t, layers)]
    crit = max(range(lay.pp), key=lambda j: stage_t[j])
    t_max = stage_t[crit]
    # DualPipe: a stage's time covers the device's two stages, and each micro-batch runs one
    # of them on each device, so the device runs m/2 of them (DeepSeek-AI 2024 §3.2.1)
    n = m // 2 if lay.schedule in TWO_WAY else m
    pipeline = n * t_max + _fill(lay, stage_t, passes, crit)
    work, recomputed, tp_x, pp_x, fsdp_x, ep_x = stage_parts[crit]
    cp_x = layers[crit] * cp_layer
    # the optimizer and the step's tail wait for the slowest stage; stage 0 finishes last
    return StepTime(gemm=n * work.gemm, attention=n * work.attention, memory=n * work.memory,
                    recompute=n * recomputed, optimizer=max(opt), bubble=pipeline - n * t_max,
                    tp=n * tp_x, cp=n * cp_x, pp=n * pp_x, dp=n * fsdp_x + dp_tails[0],
                    ep=n * ep_x, microbatches=m, stages=tuple(stage_t),
                    offload=n * host_x[crit])


@lru_cache(maxsize=8192)
def _core(lay: Layout) -> Layout:
    """``lay`` with the ring and the schedule that places its chunks alike (1F1B, or ZB-V for
    a V): what :func:`_stage_times` times, the same for every cp kind and schedule."""
    canonical = "zb-v" if lay.schedule in V_SCHEDULES else (
        lay.schedule if lay.schedule in TWO_WAY else "1f1b")
    if (lay.cp_kind, lay.schedule) == ("ring", canonical):
        return lay
    return replace(lay, cp_kind="ring", schedule=canonical)


@lru_cache(maxsize=1024)
def _cp_layer(model, split, s, b, rc, compute_bytes, fabric, attention) -> float:
    """Context parallelism's exposed seconds per layer and micro-batch (``split``: tp, cp and
    the cp kind): the K/V ring under attention (forward and backward, ``attention`` their
    seconds), Ulysses' all-to-alls in full; a full recomputation reruns the forward's."""
    tp, cp, kind = split
    lay = Layout(tp=tp, cp=cp, cp_kind=kind)
    gpu = fabric.gpu
    ranks, per_node = _groups(lay, fabric.node_gpus)["cp"]
    split = context_parallel_bytes(model, lay, seq_len=s, micro_batch=b,
                                   activation_bytes=compute_bytes)
    ring, a2a = 0.0, 0.0
    if split.ring_ranks > 1:  # K and V around the ring, under attention
        kv = float(split.ring) / (split.ring_ranks - 1)
        sends = split.ring_ranks - 1
        ring = sends * collective_time("send", kv, ranks=ranks, ranks_per_node=per_node, gpu=gpu,
                                       fabric=fabric) if lay.tp * lay.cp <= fabric.node_gpus else \
            sends * collective_time("send", kv, ranks=2, ranks_per_node=1, gpu=gpu, fabric=fabric)
    if split.ulysses > 1:  # Q, K, V and the output by all-to-all, exposed
        u = split.ulysses
        buffer = float(split.all_to_all * u / (u - 1))
        a2a = 2 * collective_time("all_to_all", buffer / 2, ranks=u,
                                  ranks_per_node=max(1, min(u, fabric.node_gpus // lay.tp)),
                                  gpu=gpu, fabric=fabric)
    forward, backward = attention
    f = max(0.0, ring - forward) + a2a
    return f * (2 if rc == "full" else 1) + max(0.0, 2 * ring - backward) + a2a


@lru_cache(maxsize=8192)
def _stage_times(model, lay, s, B, b, z, rc, recipe_name, impl, fabric, overlap, kernel, scale,
                 gemm_precision, compiled, routing=Routing(), loss="standard", chunks=1,
                 act_offload="none", offloaded=0.0):
    """Each stage's seconds a micro-batch without context parallelism's traffic, and what
    :func:`_step_time` adds it and the bubble from."""
    r = _recipe(recipe_name)
    gpu = fabric.gpu
    precision = gemm_precision or peak_precision(r)
    device = Device(gpu, precision, attention_kernel(impl, gpu, kernel),
                    _implementation(impl).family,
                    calibrated_sustained(gpu) if scale is None else float(scale), compiled)
    m = B // (lay.dp * b)
    T = b * s // lay.cp
    kinds = distinct_kinds(model)
    rows, a2a_scale = _expert_rows(model, T, lay.tp, lay.ep, lay.etp, routing)
    works = {k: layer_work(layer_shape(model, k), tokens=T, batch=b, seq_q=s // lay.cp,
                           seq_kv=s, tp=lay.tp, ep=lay.ep,
                           sequence_parallel=lay.sequence_parallel, recompute=rc, device=device,
                           etp=lay.etp if k.moe else None, rows=rows if k.moe else None)
             for k in kinds}
    lw = max(works.values(), key=lambda w: w.total)  # the largest layer: tp overlap, FSDP units
    # per kind: (all its work, what recomputation reruns, forward, backward with the rerun)
    per = {k: (w.forward + w.backward + w.recompute, w.recompute.total, w.forward.total,
               w.backward.total + w.recompute.total) for k, w in works.items()}
    # the weights' gradient, W of Qi et al. 2024: half the backward's GEMMs (layer.py)
    weight_grad = {k: w.backward.gemm / 2 for k, w in works.items()}
    groups = _groups(lay, fabric.node_gpus)

    def coll(kind: str, size: float, group: str) -> float:
        ranks, per_node = groups[group]
        return collective_time(kind, size, ranks=ranks, ranks_per_node=per_node, gpu=gpu,
                               fabric=fabric)

    # -- tensor parallelism: per layer, forward (and its rerun) and backward --------------------
    act = T * model.hidden * r.compute
    tp_f = tp_b = 0.0
    if lay.tp > 1:
        if lay.sequence_parallel:
            ag, rs = coll("all_gather", act, "tp"), coll("reduce_scatter", act, "tp")
            pairs = [(ag, "qkv"), (rs, "attention out"), (ag, "mlp up"), (rs, "mlp down")]
        else:
            ar = coll("all_reduce", act, "tp")
            pairs = [(ar, "attention out"), (ar, "mlp down")]
        gemm_of = {g[0]: g[4] for g in lw.gemms}
        every = sum(t for t, _ in pairs)
        if overlap.tensor:
            tp_f = sum(max(0.0, t - gemm_of.get(name, 0.0)) for t, name in pairs)
            tp_b = sum(max(0.0, t - 2 * gemm_of.get(name, 0.0)) for t, name in pairs)
        else:
            tp_f = tp_b = every
    # the forward's collectives rerun: all of them under full recomputation; under an op-level
    # policy with sequence parallelism the two all-gathers (the all-gathered inputs are
    # recomputed, the reduce-scatters' outputs saved: checkpointing.op_layer, measured 4
    # all-gathers in the backward against 2)
    rerun_tp = tp_f if rc == "full" else 0.0
    if rc.startswith("op:") and lay.tp > 1 and lay.sequence_parallel:
        gathers = [(t, name) for t, name in pairs if name in ("qkv", "mlp up")]
        rerun_tp = (sum(max(0.0, t - gemm_of.get(name, 0.0)) for t, name in gathers)
                    if overlap.tensor else sum(t for t, _ in gathers))
    tp_layer = tp_f + rerun_tp + tp_b

    # -- expert parallelism: dispatch and combine, forward and backward ------------------------
    ep_layer = 0.0
    if lay.ep > 1:
        a2a = coll("all_to_all", float(T * model.experts_per_token * model.hidden * r.compute
                                       * a2a_scale), "ep")
        ep_layer = a2a * (4 + (2 if rc == "full" else 0))

    # -- per stage, per micro-batch -------------------------------------------------------------
    params = _stage_params(model, lay)
    on_device = lay.device_layers(model.layers)
    w = r.compute if r.compute == 2 else r.weights  # gathers move the compute-format weights
    g = r.reduce_bytes or r.gradients
    n_dp = groups["dp"][0]
    stage_t, stage_parts, dp_tails, opt = [], [], [], []
    head = head_work(model, tokens=T, tp=lay.tp, device=device, loss=loss, chunks=chunks)
    link = host_link(gpu) if act_offload != "none" else 0.0
    host_x = []  # each stage's host copies per micro-batch
    emb = embedding_work(model, tokens=T, tp=lay.tp, device=device)
    pp_send = 0.0
    if lay.pp > 1:
        size = T * model.hidden * r.compute / (lay.tp if lay.sequence_parallel else 1)
        across = lay.tp * lay.cp * lay.dp >= fabric.node_gpus
        pp_send = 2 * (2 if lay.schedule in TWO_WAY else lay.v) * collective_time(
            "send", size, ranks=2, ranks_per_node=1 if across else 2, gpu=gpu, fabric=fabric)
    per_param = optimizer_bytes_per_param(grad_bytes=r.gradients, master=r.master_weights > 0)
    hbm = HBM_EFFICIENCY * accelerator(gpu).hbm_bandwidth
    seen: dict[tuple, tuple] = {}  # the middle stages are alike: each distinct one timed once
    passes: list[tuple[float, float]] = []  # per stage, (F, W) of one micro-batch
    layers: list[int] = []  # per stage, the layers it runs (context parallelism's traffic)
    for i, sp in enumerate(params):
        L = on_device[i]
        first, last = lay.holds_first(i), lay.holds_last(i)
        if len(kinds) == 1:
            held = {kinds[0]: L + (model.mtp_layers if last else 0)}
        else:
            held = _stage_kinds(model, lay)[i]
        key = (tuple(held.items()), sp.layer_sharded, sp.layer_replicated, sp.embedding,
               sp.lm_head, sp.final_norm, sp.expert, first, last)
        if key in seen:
            t_i, parts_i, tail_i, opt_i, passes_i, layers_i, host_i = seen[key]
            passes.append(passes_i)
            layers.append(layers_i)
            stage_t.append(t_i)
            stage_parts.append(parts_i)
            dp_tails.append(tail_i)
            opt.append(opt_i)
            host_x.append(host_i)
            continue
        n_layers = sum(held.values())
        work, recomputed_i, moe_layers = None, 0.0, 0
        layer_compute_f = layer_compute_b = 0.0
        for k, n in held.items():
            all_work, rerun, fwd, bwd = per[k]
            work = all_work.times(n) if work is None else work + all_work.times(n)
            recomputed_i += n * rerun
            moe_layers += n if k.moe else 0
            layer_compute_f += n * fwd / max(n_layers, 1)
            layer_compute_b += n * bwd / max(n_layers, 1)
        work = Work() if work is None else work
        extra_tp = 0.0
        if first:
            work = work + emb
        if last:
            work = work + head.times(1 + model.mtp_layers)
            if lay.tp > 1:  # the final hidden gathered (or reduced) before the LM head, and back
                extra_tp = 2 * coll("all_gather" if lay.sequence_parallel else "all_reduce",
                                    act, "tp")
        dense_layer = (sp.layer_sharded + sp.layer_replicated) / max(L, 1)
        expert_layer = sp.expert / max(L, 1)
        root = sp.embedding + sp.lm_head + sp.final_norm
        fsdp, _, tail, _ = _data_parallel(
            z, overlap, coll, n_dp=n_dp, layers=L, dense_layer=dense_layer,
            expert_layer=expert_layer, root=root, total=sp.total, w=w, g=g,
            forward=layer_compute_f, backward=layer_compute_b, pipelined=lay.pp > 1)
        if lay.schedule in TWO_WAY and lay.pp > 1:
            # each stage's gradients live on devices i and pp − 1 − i and are summed between
            # the pair once a step (deepseek-ai/DualPipe, examples/example_dualpipe.py, "Check
            # grads": p0.grad += the twin's p1.grad): an all-reduce of the device's gradients
            # (its shard under ZeRO-2/3) over the two, after the backward, not overlapped
            pair = sp.total * g / (n_dp if z >= 2 else 1)
            tail += collective_time("all_reduce", pair, ranks=2,
                                    ranks_per_node=1 if across else 2, gpu=gpu, fabric=fabric)
        tp_i = n_layers * tp_layer + extra_tp
        ep_i = moe_layers * ep_layer
        comm = tp_i + ep_i + pp_send + fsdp
        host_i = 0.0
        if link:
            host_i = offload_seconds(act_offload, moved=offloaded, link=link,
                                     forward=n_layers * layer_compute_f,
                                     backward=n_layers * layer_compute_b)
        host_x.append(host_i)
        stage_t.append(work.total + comm + host_i)
        stage_parts.append((work, recomputed_i, tp_i, pp_send, fsdp, ep_i))
        dp_tails.append(tail)
        sharded = z >= 1 and n_dp > 1
        local = (sp.total - sp.expert) / (n_dp if sharded else 1) + sp.expert / (
            lay.expert_zero_group if sharded else 1)
        opt.append(local * per_param / hbm)
        passes.append((sum(n * per[k][2] for k, n in held.items()),
                       sum(n * weight_grad[k] for k, n in held.items())))
        layers.append(n_layers)
        seen[key] = (stage_t[-1], stage_parts[-1], dp_tails[-1], opt[-1], passes[-1],
                     layers[-1], host_x[-1])
    return (m, tuple(stage_t), tuple(stage_parts), tuple(dp_tails), tuple(opt), tuple(passes),
            tuple(layers), (lw.forward.attention, lw.backward.attention), tuple(host_x))


def _fill(lay: Layout, stage_t: list[float], passes: tuple[tuple[float, float], ...], crit: int
          ) -> float:
    """The pipeline's idle time beyond m micro-batches of its slowest stage, by schedule
    (:func:`trainmath.parallel.schedules.bubble_idle` for stages that differ): 1F1B fills and
    drains the other stages' time over v, (Σ t_i − t_max)/v; ZB-H1 the same of
    max(B, F + B − W) = t − W − min(F, W) (its W passes fill the rest), ZB-V of
    max(B/2, B − W), B = t − F − W (the input's gradient with the traffic); DualPipeV its
    slowest stage's :func:`~trainmath.parallel.schedules.bubble_idle`;
    ZB-H2 the same sum over the other stages of max(F, F + B − 2W) = max(F, t − 3W), the
    (pp − 1)·max(F, F + B − 2W) of stages alike."""
    if lay.schedule == "1f1b":
        return (sum(stage_t) - stage_t[crit]) / lay.v
    if lay.schedule == "zb-h1":
        g = [t - w - min(f, w) for t, (f, w) in zip(stage_t, passes)]
        return max(0.0, sum(g) - g[crit]) / lay.v
    if lay.schedule == "zb-v":
        g = [max((t - f - w) / 2, t - f - 2 * w) for t, (f, w) in zip(stage_t, passes)]
        return max(0.0, sum(g) - g[crit])
    if lay.schedule == "zb-h2":
        return sum(max(f, t - 3 * w) for j, (t, (f, w)) in enumerate(zip(stage_t, passes))
                   if j != crit)
    f, w = passes[crit]
    return _bubble_idle(lay.schedule, lay.pp, lay.v, f, stage_t[crit] - f - w, w)


@lru_cache(maxsize=1024)
def _expert_rows(model: ModelShape, tokens: int, tp: int, ep: int, etp: int | None,
                 routing: Routing) -> tuple[int | None, Fraction | None]:
    """Rows each expert of the busiest device takes for the load ``routing`` counts, and that
    device's all-to-all volume over the balanced one; (None, None) for a dense model."""
    if not model.moe:
        return None, None
    d = dispatch(model, tokens=tokens, tp=tp, ep=ep, etp=etp, routing=routing)
    device_rows = d.rows(routing.load)
    return (int(device_rows * ep // model.experts),
            device_rows / (d.router_tokens * model.experts_per_token * d.etp))


@lru_cache(maxsize=4096)
def _stage_kinds(model: ModelShape, lay: Layout) -> tuple[dict, ...]:
    """Per pipeline stage, how many of its device's layers are of each kind, the last stage
    with the prediction modules (of the last layer's kind) that run after its layers."""
    out = []
    kinds = layer_kinds(model)
    for i, indices in enumerate(lay.device_layer_indices(model.layers)):
        counts = dict(kind_counts(model, indices))
        if lay.holds_last(i) and model.mtp_layers:
            counts[kinds[-1]] = counts.get(kinds[-1], 0) + model.mtp_layers
        out.append(counts)
    return tuple(out)


def _data_parallel(z: int, overlap: Overlap, coll, *, n_dp: int, layers: int,
                   dense_layer: float, expert_layer: float, root: float, total: float, w: int,
                   g: int, forward: float, backward: float,
                   pipelined: bool = False) -> tuple[float, float, float, float]:
    """The data-parallel traffic of one stage's device under ZeRO stage ``z`` (module
    docstring): (exposed, hidden) seconds per micro-batch and (exposed, hidden) once per step.
    Routed experts' states live on their own, smaller group; their traffic is timed at the
    data-parallel group's rate."""
    if n_dp <= 1:
        return 0.0, 0.0, 0.0, 0.0

    def gather(params: float) -> float:
        return coll("all_gather", params * w, "dp")

    def reduce(params: float, kind: str = "reduce_scatter") -> float:
        return coll(kind, params * g, "dp")

    L = layers
    per_layer = dense_layer + expert_layer
    if z == 3 and pipelined:  # weights kept gathered over the micro-batches, reduced once
        ag, rs = gather(per_layer), reduce(per_layer)
        ag_root, rs_root = gather(root), reduce(root)
        every = L * (ag + rs) + ag_root + rs_root
        if not overlap.parameters:
            return 0.0, 0.0, every, 0.0
        shown = ag_root + ag + max(0, L - 1) * max(0.0, ag - forward) \
            + max(0, L - 1) * max(0.0, rs - backward) + rs + rs_root
        return 0.0, 0.0, shown, every - shown
    if z == 3:
        ag, rs = gather(per_layer), reduce(per_layer)
        ag_root, rs_root = gather(root), reduce(root)
        every = L * (2 * ag + rs) + 2 * ag_root + rs_root
        if not overlap.parameters:
            return every, 0.0, 0.0, 0.0
        fwd = ag_root + ag + max(0, L - 1) * max(0.0, ag - forward)
        bwd = max(0, L - 1) * max(0.0, ag + rs - backward) + rs + rs_root
        return fwd + bwd, every - fwd - bwd, 0.0, 0.0
    kind = "all_reduce" if z == 0 else "reduce_scatter"
    last_bucket, whole = reduce(per_layer, kind), reduce(total, kind)
    if overlap.gradients:
        grads = max(0.0, whole - L * backward) + last_bucket
    else:
        grads = whole
    per_micro = (grads, max(0.0, whole - grads)) if z == 2 else (0.0, 0.0)
    tail = (0.0, 0.0) if z == 2 else (grads, max(0.0, whole - grads))
    if z >= 1:
        ag = gather(total)
        shown = (max(0.0, ag - L * forward) + gather(per_layer)) if overlap.parameters else ag
        tail = (tail[0] + shown, tail[1] + max(0.0, ag - shown))
    return per_micro[0], per_micro[1], tail[0], tail[1]


@dataclass(frozen=True)
class Zero3Micro:
    """One micro-batch of ZeRO-3/FSDP data parallelism as :func:`step_time` times it, on one
    device of a run without a pipeline: a decoder layer's forward and backward compute, the
    all-gather of its weights and the reduce-scatter of its gradients over the data-parallel
    group, the root module's (embedding, final norm, LM head) gather and reduce-scatter, and the
    seconds the prefetch leaves exposed and hides (``_data_parallel``, the module
    docstring's overlap). Seconds throughout."""

    layers: int
    forward: float
    backward: float
    gather: float
    reduce: float
    root_gather: float
    root_reduce: float
    exposed: float
    hidden: float


def zero3_micro(model: ModelShape, lay: Layout, *, seq_len: int, micro_batch: int,
                recompute: str, recipe: str, implementation: str, fabric: Fabric,
                overlap: Overlap = Overlap(), kernel: str | None = None,
                sustained: float | None = None) -> Zero3Micro:
    """The pieces of one ZeRO-3 micro-batch that :func:`step_time` adds up (:class:`Zero3Micro`),
    for a dense model on a layout without pipeline or context parallelism: the figures a
    timeline of FSDP's prefetch draws are the estimate's own.

    >>> from trainmath.model.presets import preset
    >>> from trainmath.parallel.layout import Layout
    >>> z = zero3_micro(preset("llama-2-7b"), Layout(dp=8), seq_len=4096, micro_batch=1,
    ...                 recompute="none", recipe="fsdp2", implementation="hf-sdpa",
    ...                 fabric=Fabric.of("h100-sxm"))
    >>> z.gather < z.forward  # one layer's gather hides under the layer before it
    True
    """
    if lay.pp != 1 or lay.cp != 1 or model.moe:
        raise ValueError("zero3_micro times a dense model without pipeline or context "
                         f"parallelism; got pp={lay.pp}, cp={lay.cp}, moe={model.moe}")
    r = _recipe(recipe)
    gpu = fabric.gpu
    device = Device(gpu, peak_precision(r), attention_kernel(implementation, gpu, kernel),
                    _implementation(implementation).family,
                    calibrated_sustained(gpu) if sustained is None else float(sustained), False)
    (kind,) = distinct_kinds(model)
    w = layer_work(layer_shape(model, kind), tokens=micro_batch * seq_len, batch=micro_batch,
                   seq_q=seq_len, seq_kv=seq_len, tp=lay.tp, ep=1,
                   sequence_parallel=lay.sequence_parallel, recompute=recompute, device=device)
    groups = _groups(lay, fabric.node_gpus)

    def coll(kind: str, size: float, group: str) -> float:
        ranks, per_node = groups[group]
        return collective_time(kind, size, ranks=ranks, ranks_per_node=per_node, gpu=gpu,
                               fabric=fabric)

    (sp,) = _stage_params(model, lay)
    L = model.layers
    forward, backward = w.forward.total, w.backward.total + w.recompute.total
    wb = r.compute if r.compute == 2 else r.weights
    g = r.reduce_bytes or r.gradients
    layer = (sp.layer_sharded + sp.layer_replicated) / L
    root = sp.embedding + sp.lm_head + sp.final_norm
    exposed, hidden, _, _ = _data_parallel(
        3, overlap, coll, n_dp=groups["dp"][0], layers=L, dense_layer=layer, expert_layer=0,
        root=root, total=sp.total, w=wb, g=g, forward=forward, backward=backward)
    return Zero3Micro(L, forward, backward, coll("all_gather", layer * wb, "dp"),
                      coll("reduce_scatter", layer * g, "dp"),
                      coll("all_gather", root * wb, "dp"), coll("reduce_scatter", root * g, "dp"),
                      exposed, hidden)
