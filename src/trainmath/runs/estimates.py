"""One estimate of a training run's memory per device: the entry point pages and tools share.

``estimate(run) -> Estimate``, for the fullest device (the pipeline stage that needs the most):

- model states after an optimizer step, as the recipe keeps them
  (:data:`trainmath.memory.recipes.RECIPES`), divided over the dp·cp ranks by the ZeRO stage
  (Rajbhandari et al. 2020, §5.1–5.3; :mod:`trainmath.memory.sharding`; FSDP2's exact shards),
  of the parameters that tensor and pipeline parallelism leave on the device
  (:mod:`trainmath.parallel.placement`);
- activations, with a shape and a sequence length: the tensors each layer saves for backward
  with the run's kernels (Korthikanti et al. 2022, §4; :mod:`trainmath.memory.activations`),
  times the micro-batches in flight on the stage (:mod:`trainmath.parallel.schedules`), plus the
  embedding on the first stage and the output layer on the last;
- the peak of a step (:mod:`trainmath.memory.peak`): when each of these is alive, with the
  loss's logits, gathered ZeRO-3/FSDP units and the optimizer's temporaries; ``fits`` compares
  it with the GPU's usable memory;
- with a global batch: m micro-batches per step and the bubble, (pp-1)/(m·v);
- with offload: the offloaded states moved from the device to :attr:`Estimate.host`, CPU memory
  per device (ZeRO-Offload, Ren et al. 2021; ZeRO-Infinity, Rajbhandari et al. 2021; FSDP2's
  ``CPUOffloadPolicy``), and per node with ``gpus_per_node``;
- the run's overhead, what no formula counts, added to the peak for ``fits``
  (:attr:`Estimate.needed`);
- with a shape, a sequence, a global batch and a GPU kind: the step's time by part, tokens per
  second and MFU (:class:`StepPrediction`, :func:`trainmath.time.step.step_time`);
- for a mixture of experts with a sequence: its experts' split, capacity and rows, and the
  step's peak under each expert load, balanced, measured and worst (:class:`Experts`), so an
  estimate says what imbalanced routing can add to the balanced figure;
- with a :class:`~trainmath.runs.description.Budget` (tokens, and an MFU or the predicted one)
  and a GPU kind: FLOPs per token, time to train and GPU-hours (:class:`TrainingTime`; Kaplan
  et al. 2020, Chowdhery et al. 2022 Appendix B).

Each figure carries its derivation (:attr:`Estimate.derivations`), recorded where it is
computed. The reports render the estimate as text (:mod:`trainmath.report.text`), JSON
and HTML (:mod:`trainmath.report.page`). Pure, fast and
free of I/O, so a planner can call it in a loop and a browser (Pyodide) can run it.

>>> from trainmath.runs.description import run
>>> e = estimate(run("llama-3-8b", seq_len=8192, dp=8, zero_stage=3, gpu_memory="80GB"))
>>> print(e.training.implementation, e.total, e.peak.bytes, e.fits)
megatron-te 64.5 GB 72.3 GB True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

from ..hardware import Peak, gpu as _accelerator, pcie
from ..memory.act_offload import MIN_OFFLOAD_BYTES, offloaded_activations
from ..memory.activations import LayerActivations
from ..memory.checkpointing import Checkpointing, checkpointing, timed_recompute
from ..derivations import Derivation, bytes_text
from ..memory.finetune import AdapterStates, _adapter_states, adapter_derivations
from ..memory.device import OnDevice, on_device
from ..memory.offload import Tier, tier_needs, verdict
from ..memory.peak import GatheredUnits, StepPeak, _step_peak
from ..memory.recipes import bytes_per_param, peak_precision, recipe
from ..memory.sharding import _zero_states
from ..memory.stages import (DeviceMemory, StageActivations, _device_memory, activation_derivation,
                             fullest, state_derivations_of)
from ..memory.step import (activations, adapter_activations, adapter_inputs, count_only_inputs,
                           fsdp2_device, offload_derivations, offloaded, offloaded_inputs,
                           stage_inputs)
from ..memory.training import Training
from ..model.moe import EXPERT_LOADS, Dispatch, dispatch
from ..parallel.layout import _microbatches
from ..parallel.placement import _stage_params
from ..parallel.schedules import _bubble
from ..memory.recipes import peak_precision_problems
from ..time.flops import flops_per_token, time_to_train
from ..time.network import Fabric
from ..time.offload import OffloadTraffic, offload_traffic
from ..time.step import StepTime, Timing, attention_kernel, groups, step_time
from .rules import untimed_reason
from ..units import Bytes
from .description import Run


# -- the estimate -------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepPrediction:
    """The step-time model's prediction for a run (:func:`trainmath.time.step.step_time`): the
    step by part, tokens per second over all its GPUs and MFU against ``peak``, with the
    settings it used (``timing`` as given, ``sustained``, ``kernel`` and ``fabric`` as
    applied)."""

    time: StepTime
    tokens_per_second: float
    mfu: float
    peak: Peak
    sustained: float
    kernel: str
    fabric: Fabric
    timing: Timing


@dataclass(frozen=True)
class TrainingTime:
    """Time to train a :class:`~trainmath.runs.description.Run` on its :class:`~trainmath.runs.description.Budget`: tokens × FLOPs per token ÷ (MFU ×
    GPUs × the dense peak of one), :func:`trainmath.time.flops.time_to_train`."""

    tokens: int
    mfu: float
    #: "assumed" (the budget's MFU) or "predicted" (the step-time model's, :class:`StepPrediction`)
    mfu_from: str
    #: model FLOPs per trained token: 6N + 12·L·h·s with a shape and a sequence length (PaLM,
    #: Chowdhery et al. 2022, Appendix B; :func:`trainmath.time.flops.flops_per_token`), else 6N
    #: over all parameters (Kaplan et al. 2020, §2.1)
    flops_per_token: int
    #: how ``flops_per_token`` was counted, in words, with its source
    counted: str
    peak: Peak
    gpus: int
    seconds: float

    @property
    def total_flops(self) -> int:
        """Model FLOPs of the whole training: tokens × FLOPs per token."""
        return self.tokens * self.flops_per_token

    @property
    def gpu_hours(self) -> float:
        """GPUs × hours: what a cloud bill counts."""
        return self.seconds * self.gpus / 3600

    @property
    def tokens_per_second(self) -> float:
        """The throughput the MFU means, over all the run's GPUs."""
        return self.tokens / self.seconds


@dataclass(frozen=True)
class ExpertLoad:
    """The fullest device under one expert load (:data:`trainmath.model.moe.EXPERT_LOADS`): its
    experts' rows per layer and micro-batch, the step's peak, the process's memory as
    nvidia-smi would show it (typical) and whether that fits (None without a GPU)."""

    load: str
    rows: Fraction
    peak: Bytes
    process: Bytes
    fits: bool | None


@dataclass(frozen=True)
class Experts:
    """A mixture of experts on the fullest device: how its experts are split and take their
    tokens (:class:`trainmath.model.moe.Dispatch`), the load the estimate's figures count, the
    same device under every load, and what a capacity can drop."""

    dispatch: Dispatch
    #: the load the estimate's figures count (the run's ``expert_load``)
    counted: str
    loads: tuple[ExpertLoad, ...]
    #: token copies routed per step (global batch × s × k × layers; None without a global batch)
    step_copies: int | None
    #: the all-to-all's group: (ranks, ranks in one node), Megatron-Core's folded rank order
    all_to_all: tuple[int, int] = (1, 1)
    #: routed experts' parameters on this device (all its layers)
    params: int = 0

    def load(self, name: str) -> ExpertLoad:
        """The :class:`ExpertLoad` named ``name``."""
        return next(x for x in self.loads if x.load == name)

    @property
    def dropped_at_most(self) -> Fraction | None:
        """Token copies a step can drop at most (0 dropless; None without a global batch)."""
        if self.step_copies is None:
            return None
        return self.step_copies * self.dispatch.dropped_share


@dataclass(frozen=True)
class Estimate:
    """Memory on the fullest device of a :class:`~trainmath.runs.description.Run`, and what it depends on.

    ``stages`` has one device of each pipeline stage; ``device`` is the fullest (ties: the
    earliest). Their ``activations`` are zero when not counted: :attr:`activations` is None
    then, and :attr:`layer` too. Sizes are exact (a shard of an uneven split may be a
    fraction of a byte); the JSON (:func:`trainmath.report.data.estimate_dict`) rounds them up to
    whole bytes. ``peak`` is the step's
    peak (:mod:`trainmath.memory.peak`) on the stage where it is highest, ``peak_stage``.
    """

    run: Run
    stages: tuple[DeviceMemory, ...]
    device: DeviceMemory
    #: the tensors one layer saves for backward on one device, for one micro-batch
    layer: LayerActivations | None
    #: m, micro-batches per step, with a global batch
    microbatches: int | None
    #: pipeline bubble over the ideal step time, with a global batch
    bubble: Fraction | None
    peak: StepPeak
    peak_stage: int = 0
    #: what each stage's device saves for backward, tensor by tensor (None without a sequence)
    saved: tuple[StageActivations | None, ...] = ()
    #: ZeRO-3/FSDP's unsharded units on the peak's stage (None below stage 3)
    gathered: GatheredUnits | None = None
    #: host (CPU) memory one device's offloaded model states and activations need (0 without
    #: offload)
    host: Bytes = Bytes(0)
    #: with a :class:`~trainmath.runs.description.Budget`: FLOPs per token, time to train, GPU-hours
    time: TrainingTime | None = None
    #: with a shape, a sequence, a global batch and a GPU kind: the predicted step
    step: StepPrediction | None = None
    #: the three figures the GPU shows for the peak: allocated, reserved, process
    #: (:mod:`trainmath.memory.device`)
    on_device: OnDevice | None = None
    #: how each figure was computed, recorded where it was: the four kinds of model state, the
    #: activations (when counted), host memory (with offload), the total, the peak, whether it
    #: fits (with a GPU) and the time to train (with a budget), in that order
    derivations: tuple[Derivation, ...] = ()
    #: a mixture of experts with a sequence: its split, routing and every expert load
    experts: Experts | None = None
    #: host memory the activations offloaded from the fullest device take (part of
    #: :attr:`host`; 0 without activation offload, :mod:`trainmath.memory.act_offload`)
    offloaded_activations: Bytes = Bytes(0)

    @property
    def training(self) -> Training:
        """The run's training setup, every choice made."""
        return self.run.training

    @property
    def params(self) -> int:
        """Parameters of the whole model (the run's)."""
        return self.run.params

    @property
    def pipeline_stage(self) -> int:
        """The pipeline stage this estimate describes: the fullest one."""
        return self.device.stage

    @property
    def activations(self) -> Bytes | None:
        """Activation bytes on the fullest device; None when not counted (no shape or no s)."""
        return None if self.layer is None else self.device.activations

    @property
    def weight_copies(self) -> Bytes | None:
        """The part of :attr:`activations` that is autocast's 16-bit weight copies."""
        if self.layer is None:
            return None
        return self.saved[self.pipeline_stage].weight_copies

    @property
    def total(self) -> Bytes:
        """Model states plus, when counted, activations: the sum of the kinds, not the peak."""
        return self.device.total

    @property
    def gpus(self) -> int:
        """Devices in the layout: dp × tp × pp × cp."""
        return self.run.layout.gpus

    @property
    def overhead(self) -> Bytes:
        """What no formula counts, as the run gives it (:attr:`~trainmath.runs.description.Run.overhead`)."""
        return self.run.overhead

    @property
    def needed(self) -> Bytes:
        """What :attr:`fits` compares with the GPU's memory: the process's memory as nvidia-smi
        shows it (:attr:`on_device`, typical), plus the run's :attr:`overhead`."""
        return _typical_process(self) + self.run.overhead

    @property
    def paged(self) -> Bytes:
        """A paged optimizer's states in CUDA managed memory, which the driver evicts to CPU
        memory when the GPU runs out (:mod:`trainmath.memory.bnb_optim`); 0 B for the rest."""
        return Bytes(0) if self.on_device is None else self.on_device.paged

    @property
    def gpu_fits(self) -> bool | None:
        """Whether the process's memory (:attr:`needed`) fits the GPU's, less the paged
        optimizer states the driver can evict (:attr:`paged`); None without a GPU."""
        return None if self.run.gpu is None else self.needed - self.paged <= self.run.gpu.memory

    @property
    def tiers(self) -> tuple[Tier, ...]:
        """Each memory tier's need and capacity: the GPU (per device; capacity None without a
        GPU), and with offload the node's CPU memory and NVMe (:func:`trainmath.memory.offload.tier_needs`;
        capacity None where the run does not give it). Every device of a node is
        counted as the fullest one."""
        return _tiers(self.run, self.host - self.offloaded_activations,
                      self.offloaded_activations, self.device, self.needed - self.paged)

    @property
    def fits(self) -> bool | None:
        """Whether every tier given holds its part (:attr:`tiers`): the GPU's memory and, with
        offload, the node's CPU memory and NVMe; None when none is given."""
        return verdict(self.tiers)[0]

    @property
    def deciding_tier(self) -> Tier | None:
        """The tier that decides :attr:`fits`: the first that does not hold its part, else the
        one with the least to spare; None when none is given."""
        return verdict(self.tiers)[1]

    @property
    def pcie(self) -> OffloadTraffic | None:
        """What offload sends over PCIe each step from the fullest device, and the least time
        at its GPU kind's link (:mod:`trainmath.time.offload`); None without offload."""
        t = self.training
        if t.offload == "none":
            return None
        r = recipe(t.recipe)
        link = None if self.run.gpu is None or self.run.gpu.kind is None else pcie(self.run.gpu.kind)
        return offload_traffic(t.offload, Fraction(self.device.params, self.device.zero_group),
                               weight_bytes=r.weights, gradient_bytes=r.gradients,
                               rate=None if link is None else link[0],
                               rate_source="" if link is None else link[1])

    @property
    def host_per_node(self) -> Bytes | None:
        """:attr:`host` times the GPUs on a node (at most the run's GPUs), None when the run
        does not say how many GPUs a node has. Every device is counted as the fullest one."""
        n = self.run.gpus_per_node
        return None if n is None else self.host * min(n, self.gpus)

    def gathered_at_peak(self) -> tuple[int, Bytes]:
        """Decoder-layer units held unsharded at the step's peak, and their bytes with the
        root's (FSDP2) or the LM head's (other ZeRO-3 engines); (0, 0 B) below stage 3."""
        g = self.gathered
        held = self.peak.peak.as_dict().get("gathered parameters", Bytes(0))
        if g is None or not held.n:
            return 0, held
        return int((held - g.root).n / g.layer.n) if g.layer.n else 0, held

    def parts(self) -> dict[str, Bytes | None]:
        """Each kind of memory on the fullest device, activations None when not counted."""
        d = self.device
        return {"weights": d.weights, "gradients": d.gradients, "master weights": d.master_weights,
                "optimizer states": d.optimizer_states, "activations": self.activations}

    @property
    def checkpointing(self) -> Checkpointing | None:
        """How the layers trade memory for recomputation: the op-level policy's saved and
        recomputed ops, and whether the compiler partitions (None without a shape)."""
        t, shape = self.run.training, self.run.shape
        if shape is None:
            return None
        return checkpointing(shape, recompute=t.recompute, policy=t.recompute_policy,
                             compiled=t.compiled)

    @property
    def adapter_states(self) -> AdapterStates | None:
        """A LoRA or QLoRA run's states split into frozen base and adapter; None without one."""
        r = self.run
        if r.adapter is None:
            return None
        return _adapter_states(r.shape, r.adapter, recipe(r.training.recipe), r.training.optimizer)


def estimate(run: Run) -> Estimate:
    """Memory per device for ``run``, checked when it was made (see the module docstring).

    >>> from trainmath.runs.description import run
    >>> print(estimate(run(7_500_000_000, dp=64, zero_stage=3)).total)   # ZeRO Figure 1
    1.9 GB
    """
    lay, t, batch, shape = run.layout, run.training, run.batch, run.shape
    r = recipe(t.recipe)
    if run.adapter is not None:
        return _adapter_estimate(run)
    per = bytes_per_param(t.recipe, t.optimizer)
    if shape is None:  # a parameter count alone: model states on one data-parallel rank
        s = _zero_states(run.params, lay.zero_group, t.zero_stage, per)
        device = DeviceMemory(
            stage=0, params=run.params, zero_stage=t.zero_stage, zero_group=lay.zero_group,
            weights=s.weights, gradients=s.gradients, master_weights=s.master_weights,
            optimizer_states=s.optimizer_states, activations=Bytes(0))
        inputs = count_only_inputs(params=run.params, layout=lay, training=t, device=device)
        peak = _step_peak(offloaded_inputs(inputs, t.offload))
        before = device
        device, host = offloaded(device, r, t.offload)
        kinds = state_derivations_of(before, per, t.recipe, t.optimizer)
        time = _time(run, None)
        return Estimate(run=run, stages=(device,), device=device, layer=None, microbatches=None,
                        bubble=None, peak=peak, host=host, time=time,
                        on_device=_on_device(run, peak),
                        derivations=_derivations(run, kinds, before, device, None, peak=peak,
                                                 peak_stage=0, host=host, time=time))
    m = None
    bubble = None
    if batch.global_batch is not None:
        m = _microbatches(batch.global_batch, lay.dp, batch.micro_batch)
        bubble = _bubble(lay.pp, m, lay.v, lay.schedule)
    layer, acts_of, devices, inputs, peaks, top, acts_moved = _stages(run, m, every_stage=True)
    stage_acts = tuple(acts_of.values())
    stages = tuple(devices.values())
    moved = [offloaded(d, r, t.offload) for d in stages]
    stages = tuple(d for d, _ in moved)
    device = fullest(stages)
    acts_host = acts_moved[device.stage]
    step = _step(run, acts_host)
    before, time = devices[device.stage], _time(run, step)
    host = moved[device.stage][1] + acts_host
    fsdp2 = r.name == "fsdp2" and lay.tp == 1 and lay.pp == 1
    if fsdp2:  # the formula over the even split; the figures are FSDP2's padded shards
        kinds = state_derivations_of(_even(run, per, before), per, t.recipe, t.optimizer,
                                     values=before, padded=True, where=_where(run, before))
    else:
        kinds = state_derivations_of(before, per, t.recipe, t.optimizer, where=_where(run, before))
    acts = acts_of[device.stage]
    return Estimate(run=run, stages=stages, device=device, layer=layer, microbatches=m,
                    bubble=bubble, peak=peaks[top], peak_stage=top, saved=stage_acts,
                    gathered=inputs[top].gathered, host=host, time=time, step=step,
                    on_device=_on_device(run, peaks[top]),
                    derivations=_derivations(run, kinds, before, device, acts, peak=peaks[top],
                                             peak_stage=top, host=host - acts_host, time=time,
                                             step=step, acts_host=acts_host),
                    experts=_experts(run, peaks[top]), offloaded_activations=acts_host)


def _experts(run: Run, peak: StepPeak) -> Experts | None:
    """A mixture's :class:`Experts`: the fullest device under each expert load, the one the run
    counts from ``peak`` and the others estimated again with that load."""
    shape, lay, batch, t = run.shape, run.layout, run.batch, run.training
    if shape is None or not shape.moe or batch.seq_len is None:
        return None
    d = dispatch(shape, tokens=Fraction(batch.seq_len * batch.micro_batch, lay.cp), tp=lay.tp,
                 ep=lay.ep, etp=lay.etp, routing=t.routing)
    loads = []
    for name in EXPERT_LOADS:
        at = peak if name == t.routing.load else _peak(
            replace(run, training=replace(t, routing=replace(t.routing, load=name))))
        process = _on_device(run, at).process.typical
        fits = None if run.gpu is None else process + run.overhead <= run.gpu.memory
        loads.append(ExpertLoad(name, d.rows(name), at.bytes, process, fits))
    copies = (None if batch.global_batch is None else
              batch.global_batch * batch.seq_len * shape.experts_per_token * shape.layers)
    node = run.gpus_per_node or run.timing.node_gpus or 8
    return Experts(dispatch=d, counted=t.routing.load, loads=tuple(loads), step_copies=copies,
                   all_to_all=groups(lay, node)["ep"], params=_expert_params(run))


def _expert_params(run: Run) -> int:
    """Routed experts' parameters on one device of the stage that holds the most of them."""
    return max(sp.expert for sp in _stage_params(run.shape, run.layout))


def _stages(run: Run, m: int | None, every_stage: bool):
    """Each stage's activations and memory, and the step's moments of the stages that can be
    the fullest: (layer, activations by stage, DeviceMemory by stage, StepInputs and StepPeak
    by stage, the fullest stage). ``every_stage`` False: only the stages that can be the
    fullest (the planner asks only for the peak).

    The moments are built for the first stage, the second (the fullest of the middle stages)
    and the last: a middle stage differs from the second only by holding fewer micro-batches
    in flight (fewer activations, and no moment of its step larger), so it is never the sole
    fullest, and ties go to the earliest stage.
    """
    lay, t, batch, shape = run.layout, run.training, run.batch, run.shape
    r, per = recipe(t.recipe), bytes_per_param(t.recipe, t.optimizer)
    pp = lay.pp
    peaked = sorted({0, min(1, pp - 1), pp - 1})
    wanted = list(range(pp)) if every_stage else peaked
    layer = None
    acts_of: dict[int, StageActivations | None] = dict.fromkeys(wanted)
    if batch.seq_len is not None:
        layer, acts_of = activations(shape=shape, layout=lay, training=t, batch=batch,
                                     microbatches=m, stages=wanted)
    moved = dict.fromkeys(wanted, Bytes(0))  # activations offloaded to host memory, by stage
    back = Bytes(0)
    if batch.seq_len is not None and t.activation_offload != "none":
        for i, a in acts_of.items():
            acts_of[i], moved[i] = offloaded_activations(a)
        back = layer.total  # a layer's tensors, back on the device for its backward
    acts = [Bytes(0) if a is None else a.total for a in acts_of.values()]
    devices = dict(zip(wanted, _device_memory(shape, lay, zero_stage=t.zero_stage, per=per,
                                              acts=acts, stages=wanted)))
    fsdp2 = r.name == "fsdp2" and lay.tp == 1 and lay.pp == 1
    if fsdp2:  # FSDP2's exact shards of rank 0, the fullest, padding included
        devices = {0: fsdp2_device(shape=shape, layout=lay, training=t, device=devices[0])}
    inputs = {i: offloaded_inputs(stage_inputs(shape=shape, layout=lay, training=t, batch=batch,
                                               device=devices[i], activations=acts_of[i],
                                               fsdp2=fsdp2, brought_back=back), t.offload)
              for i in peaked if i in devices}
    peaks = {i: _step_peak(v) for i, v in inputs.items()}
    top = max(peaks, key=lambda i: (peaks[i].bytes, -i))
    return layer, acts_of, devices, inputs, peaks, top, moved


def _peak(run: Run) -> StepPeak:
    """``estimate(run).peak`` for a run with a model shape, without the stages that cannot
    hold it (the planner's question)."""
    batch, lay = run.batch, run.layout
    m = None if batch.global_batch is None else _microbatches(batch.global_batch, lay.dp,
                                                              batch.micro_batch)
    *_, peaks, top, _ = _stages(run, m, every_stage=False)
    return peaks[top]


def _even(run: Run, per, d: DeviceMemory) -> DeviceMemory:
    """``d`` as the ZeRO formula gives it, before FSDP2 pads its shards."""
    (even,) = _device_memory(run.shape, run.layout, zero_stage=run.training.zero_stage, per=per,
                             acts=[d.activations], stages=[d.stage])
    return even


def _where(run: Run, d: DeviceMemory) -> str:
    """Whose share of the model a device's parameters are: ``" of 70,553,706,496 (tp 8,
    pipeline stage 0 of 4)"``; "" when it holds the whole model."""
    if d.params == run.params:
        return ""
    lay = run.layout
    parts = [f"tp {lay.tp}"] if lay.tp > 1 or (lay.pp == 1 and lay.ep == 1) else []
    if lay.ep > 1:
        parts.append(f"ep {lay.ep}")
    if lay.pp > 1:
        parts.append(f"pipeline stage {d.stage} of {lay.pp}")
    return f" of {run.params:,} ({', '.join(parts)})"


def _derivations(run: Run, kinds, before: DeviceMemory, device: DeviceMemory,
                 acts: StageActivations | None, *, peak: StepPeak, peak_stage: int, host: Bytes,
                 time: TrainingTime | None, step: StepPrediction | None = None,
                 acts_host: Bytes = Bytes(0)) -> tuple[Derivation, ...]:
    """Every figure's arithmetic, in the order of :attr:`Estimate.derivations`: the kinds (with
    what offload moved), the activations, the host memory, the total, the peak, the fit, the
    time."""
    t, lay = run.training, run.layout
    host_term = None
    if t.offload != "none":
        kinds, host_term = offload_derivations(kinds, before=before, after=device,
                                               r=recipe(t.recipe), offload=t.offload, host=host)
    out = list(kinds)
    if acts is not None:
        b = run.batch
        how = (f"s = {b.seq_len}, b = {b.micro_batch}, {t.implementation} kernels, recompute "
               f"{t.recompute}" + ("" if t.loss == "standard" else f", loss {t.loss}")
               + ("" if t.activation_offload == "none" else ", activations offloaded"))
        out.append(activation_derivation(acts, device.stage, how, lay.pp > 1))
    total = sum((x.value.n for x in out), Fraction(0))
    names, values = [x.name for x in out], [x.value for x in out]
    if host_term is not None:
        out.append(host_term)
    if t.activation_offload != "none" and acts is not None:
        out.append(_acts_host_derivation(acts, acts_host))
    out.append(Derivation("total", " + ".join(names), (),
                          " + ".join(bytes_text(v.n) for v in values) + f" = {bytes_text(total)}",
                          device.total, Bytes(total), "the sum of the kinds above; not the peak, "
                          "which counts what is alive at one moment", "states"))
    out.append(peak.derivation(f" on pipeline stage {peak_stage}" if lay.pp > 1 else ""))
    shown = _on_device(run, peak)
    out.append(_device_derivation(shown))
    if run.gpu is not None:
        out.append(_fit_derivation(run, shown))
    tiers = _tiers(run, host, acts_host, device,
                   Bytes(math.ceil(shown.process.typical.n)) + run.overhead)
    if len(tiers) > 1 and verdict(tiers)[0] is not None:
        out.append(_tier_derivation(run, tiers))
    if step is not None:
        out.append(_step_derivation(run, step))
    if time is not None:
        out.append(_time_derivation(time))
    return tuple(out)


def _acts_host_derivation(kept: StageActivations, moved: Bytes) -> Derivation:
    """The host memory offloaded activations take: every saved tensor of the embedding, the
    layers and the final norm, but those under the offload threshold."""
    return Derivation(
        "host memory for activations", "saved tensors − what stays on the device",
        (("kept", f"on the device: the output head's and the loss's tensors and those under "
                  f"{MIN_OFFLOAD_BYTES:,} bytes, {bytes_text(kept.total.n)}"),),
        f"{bytes_text(moved.n)} in host memory; {bytes_text(kept.total.n)} on the device",
        moved, moved, "trainmath.memory.act_offload: torchtune's and TRL's OffloadActivations "
        "(min_offload_size 1024 bytes, the output head not offloaded), measured with "
        "saved-tensor hooks", "offload")


def _device_derivation(d: OnDevice) -> Derivation:
    """The process's memory as nvidia-smi shows it: the allocator's reserve over the tensors'
    peak, and what sits outside the allocator."""
    parts = [("reserved", d.reserved)] + [(name, band) for name, _, band in d.outside]
    return Derivation(
        "process memory", "reserved (allocated × measured ratio) + CUDA context + kernels + NCCL",
        (("allocated", f"the step's peak, {bytes_text(math.ceil(d.allocated.n))}"),
         *((name, f"{band.describe()}: {band.source}") for name, band in parts)),
        " + ".join(bytes_text(math.ceil(b.typical.n)) for _, b in parts)
        + f" = {bytes_text(math.ceil(d.process.typical.n))} (band "
        f"{bytes_text(math.ceil(d.process.low.n))} to {bytes_text(math.ceil(d.process.high.n))})",
        None, None, "trainmath.memory.device: the allocator's ratio and the parts outside it, "
        "measured on an H200 and in public NCCL and PyTorch threads", "peak")


def _fit_derivation(run: Run, d: OnDevice) -> Derivation:
    """The comparison ``fits`` makes: the process's memory (plus the overhead) against the
    GPU's."""
    need, cap = Bytes(math.ceil(d.process.typical.n)), Bytes(math.ceil(run.gpu.memory.n))
    name = run.gpu.name or "the device"
    over = Bytes(math.ceil(run.overhead.n))
    fits = need + over <= cap
    verdict, rel = ("fits", "≤") if fits else ("does not fit", ">")
    if over.n:  # what no formula counts, as given (--overhead)
        formula = "process + overhead ≤ memory"
        inputs = (("process", f"as nvidia-smi shows it, {bytes_text(need.n)}"),
                  ("overhead", f"as given: {bytes_text(over.n)}"),
                  ("memory", f"{name}: {bytes_text(cap.n)}"))
        arithmetic = (f"{bytes_text(need.n)} + {bytes_text(over.n)} = "
                      f"{bytes_text(need.n + over.n)} {rel} {bytes_text(cap.n)}: {verdict}")
    else:
        formula = "process ≤ memory"
        inputs = (("process", f"as nvidia-smi shows it, {bytes_text(need.n)}"),
                  ("memory", f"{name}: {bytes_text(cap.n)}"))
        arithmetic = f"{bytes_text(need.n)} {rel} {bytes_text(cap.n)}: {verdict}"
    source = ("the usable memory nvidia-smi reports (trainmath.hardware.GpuMemory)"
              if run.gpu.kind else "the memory given")
    return Derivation("fits", formula, inputs, arithmetic, None, None, source, "fits")


def _tiers(run: Run, host: Bytes, acts: Bytes, device: DeviceMemory, needed: Bytes
           ) -> tuple[Tier, ...]:
    """:attr:`Estimate.tiers` of a run whose fullest device needs ``needed`` on the GPU,
    offloads ``host`` of model states (to CPU memory or NVMe, by the run's tiers) and ``acts`` of
    activations (always to CPU memory)."""
    gpu = Tier("GPU", needed, None if run.gpu is None else run.gpu.memory)
    t, tiers, n = run.training, run.tiers, run.gpus_per_node
    if n is None or (t.offload == "none" and not acts.n):
        return (gpu,)
    node = min(n, run.layout.gpus)
    cpu, nvme = Bytes(0), Bytes(0)
    if t.offload != "none":
        cpu, nvme = tier_needs(host, offload_to=tiers.offload_to, offload=t.offload, gpus=node,
                               partition_params=math.ceil(device.params / device.zero_group),
                               weight_bytes=recipe(t.recipe).weights)
    cpu = cpu + acts * node
    return gpu, Tier("CPU memory", cpu, tiers.host_memory), Tier("NVMe", nvme, tiers.nvme)


def _tier_derivation(run: Run, tiers: tuple[Tier, ...]) -> Derivation:
    """The verdict over the tiers: each one's need against its capacity, and the one that
    decides."""
    ok, deciding = verdict(tiers)
    node = min(run.gpus_per_node, run.layout.gpus)
    inputs = tuple((t.name, ("per device" if t.name == "GPU" else f"per node of {node} GPUs")
                    + f": {bytes_text(math.ceil(t.need.n))} needed, "
                    + ("capacity not given" if t.capacity is None else
                       f"{bytes_text(math.ceil(t.capacity.n))} there"))
                   for t in tiers)
    arithmetic = "; ".join(
        f"{t.name} {bytes_text(math.ceil(t.need.n))} "
        + ("(not checked)" if t.fits is None else ("≤ " if t.fits else "> ")
           + bytes_text(math.ceil(t.capacity.n)))
        for t in tiers)
    what = "every tier holds its part" if ok else "does not fit"
    arithmetic += f": {what}; decided by {deciding.name}" if deciding else ""
    to = run.tiers.offload_to
    return Derivation(
        "tiers", "need ≤ capacity, for the GPU, the node's CPU memory and its NVMe", inputs,
        arithmetic, None, None,
        f"offload to {to}: " + ("every offloaded byte in CPU memory" if to == "cpu" else
                                "the offloaded states on NVMe, DeepSpeed's pinned swap buffers "
                                "in CPU memory (deepspeed/runtime/zero/offload_config.py, "
                                "swap_tensor/, v0.19.5)"), "fits")


def _time_derivation(time: TrainingTime) -> Derivation:
    """The time to train: tokens × FLOPs per token over MFU × GPUs × one GPU's peak."""
    return Derivation(
        "time to train", "D × F ÷ (MFU × G × peak)",
        (("D", f"tokens: {time.tokens:,}"),
         ("F", f"FLOPs per token: {time.flops_per_token:,} ({time.counted})"),
         ("MFU", f"{time.mfu_from}: {time.mfu:.1%}"), ("G", f"GPUs: {time.gpus:,}"),
         ("peak", f"{time.peak.describe()}")),
        f"{time.tokens:,} × {time.flops_per_token:,} ÷ ({time.mfu:g} × {time.gpus:,} × "
        f"{time.peak.flops:.4g} FLOP/s) = {time.seconds:,.0f} s = {time.seconds / 86400:,.1f} "
        f"days; {time.gpu_hours:,.0f} GPU-hours", None, None,
        "trainmath.time.flops.time_to_train: Kaplan et al. 2020 (§2.1), Chowdhery et al. 2022 "
        "(Appendix B)", "time")


def _typical_process(est: "Estimate") -> Bytes:
    d = est.on_device
    return est.peak.bytes if d is None else d.process.typical


def _on_device(run: Run, peak: StepPeak, paged: Bytes = Bytes(0)) -> OnDevice:
    """The three counters of the step's peak on the run's GPU (``paged``: its paged optimizer
    states, outside the allocator)."""
    kind = None if run.gpu is None else run.gpu.kind
    node = run.gpus_per_node or run.timing.node_gpus or 8
    return on_device(peak.bytes, gpu=kind, layout=run.layout, node_gpus=node, paged=paged)


def _step(run: Run, offloaded: Bytes = Bytes(0)) -> StepPrediction | None:
    """The predicted step of a run the step-time model can time: a shape, a sequence, a global
    batch, a GPU kind with a tensor-core peak in the recipe's precision, no adapter, no offload
    of model states; ``offloaded``, the activations one micro-batch offloads to host memory,
    whose copies the step waits for as its ``activation_offload`` says."""
    shape, t, b = run.shape, run.training, run.batch
    if (shape is None or b.seq_len is None or b.global_batch is None or run.gpu is None
            or run.gpu.kind is None or run.adapter is not None or untimed_reason(t)):
        return None
    r = recipe(t.recipe)
    if peak_precision_problems(r) or _accelerator(run.gpu.kind).peak_problems(peak_precision(r)):
        return None
    timing = run.timing
    fabric = timing.fabric(run.gpu.kind)
    node = run.gpus_per_node or timing.node_gpus
    if node is not None and node != fabric.node_gpus:
        fabric = Fabric(fabric.gpu, node, fabric.nvlink, fabric.network)
    rc = timed_recompute(shape, recompute=t.recompute, policy=t.recompute_policy)
    st = step_time(shape, run.layout, seq_len=b.seq_len, global_batch=b.global_batch,
                   micro_batch=b.micro_batch, zero_stage=t.zero_stage, recompute=rc,
                   recipe=t.recipe, implementation=t.implementation, fabric=fabric,
                   overlap=timing.overlap, kernel=timing.kernel, sustained=timing.sustained,
                   routing=t.routing, compiled=t.compiled, loss=t.loss, loss_chunks=t.chunks,
                   activation_offload=t.activation_offload, offloaded=float(offloaded.n))
    peak = _accelerator(run.gpu.kind).peak(peak_precision(r))
    tps = b.global_batch * b.seq_len / st.total
    mfu = tps * flops_per_token(shape, b.seq_len).model / (run.layout.gpus * peak.flops)
    return StepPrediction(time=st, tokens_per_second=tps, mfu=mfu, peak=peak,
                          sustained=timing.share(run.gpu.kind),
                          kernel=attention_kernel(t.implementation, run.gpu.kind, timing.kernel),
                          fabric=fabric, timing=timing)


def _step_derivation(run: Run, step: StepPrediction) -> Derivation:
    """The predicted step: its parts, tokens per second and MFU."""
    st, b = step.time, run.batch
    parts = ", ".join(f"{k} {v:.3g} s" for k, v in st.parts().items() if v > 0)
    return Derivation(
        "step time", "pipeline + data-parallel tail + optimizer; tokens/s = B·s ÷ step; "
        "MFU = tokens/s × F ÷ (G × peak)",
        (("parts", parts), ("B·s", f"{b.global_batch:,} × {b.seq_len:,} tokens"),
         ("F", f"model FLOPs per token {flops_per_token(run.shape, b.seq_len).model:,}"),
         ("G", f"GPUs: {run.layout.gpus:,}"), ("peak", step.peak.describe()),
         ("sustained", f"{step.sustained:.0%} of the benchmarks' tensor-core rates"),
         ("overlap", step.timing.overlap.describe()), ("attention", step.kernel)),
        f"{st.total:.4g} s a step; {step.tokens_per_second:,.0f} tokens/s; MFU {step.mfu:.1%}",
        None, None, "trainmath.time.step.step_time: GEMMs (trainmath.time.gemm), attention "
        "(trainmath.time.attention), memory-bound ops, collectives (trainmath.time.network), "
        "the pipeline schedule (Narayanan et al. 2021 §2.2)", "time")


def _time(run: Run, step: StepPrediction | None) -> TrainingTime | None:
    """The :class:`TrainingTime` of a run with a :class:`~trainmath.runs.description.Budget`
    (checked when it was made): at the budget's MFU, else at the predicted one."""
    if run.budget is None:
        return None
    shape, t, s = run.shape, run.training, run.batch.seq_len
    peak = _accelerator(run.gpu.kind).peak(peak_precision(recipe(t.recipe)))
    if shape is not None and s is not None:
        fpt = flops_per_token(shape, s, t.recompute).model
        counted = ("6N + 12·L·h·s, N the weights of the matrix multiplies (Chowdhery et al. 2022, "
                   "PaLM, Appendix B)")
    else:
        fpt = 6 * run.params
        counted = ("6N, N all parameters (Kaplan et al. 2020, §2.1); the attention term needs a "
                   "shape and a sequence length")
    gpus = run.layout.gpus
    if run.budget.mfu is not None:
        mfu, source = float(run.budget.mfu), "assumed"
    else:
        mfu, source = step.mfu, "predicted"
    seconds = time_to_train(run.budget.tokens, fpt, gpus, peak, mfu)
    return TrainingTime(tokens=run.budget.tokens, mfu=mfu, mfu_from=source, flops_per_token=fpt,
                        counted=counted, peak=peak, gpus=gpus, seconds=seconds)


# -- LoRA and QLoRA -----------------------------------------------------------------------------
def _adapter_estimate(run: Run) -> Estimate:
    """One device of a LoRA or QLoRA run (:mod:`trainmath.memory.finetune`): the frozen base and
    the adapter's states, activations through the frozen layers, and the step's peak."""
    shape, t, batch, a = run.shape, run.training, run.batch, run.adapter
    states = _adapter_states(shape, a, recipe(t.recipe), t.optimizer)
    layer, stage = None, None
    if batch.seq_len is not None:
        layer, stage = adapter_activations(shape=shape, adapter=a, training=t, batch=batch)
    device = DeviceMemory(
        stage=0, params=states.frozen, zero_stage=0, zero_group=run.layout.zero_group,
        weights=states.weights, gradients=states.gradients, master_weights=states.master_weights,
        optimizer_states=states.optimizer_states,
        activations=Bytes(0) if stage is None else stage.total)
    peak = _step_peak(adapter_inputs(shape=shape, adapter=a, training=t, batch=batch,
                                     states=states, activations=stage))
    kinds = adapter_derivations(shape, a, recipe(t.recipe), t.optimizer, states)
    return Estimate(run=run, stages=(device,), device=device, layer=layer, microbatches=None,
                    bubble=None, peak=peak, saved=(stage,),
                    on_device=_on_device(run, peak, states.paged_states),
                    derivations=_derivations(run, kinds, device, device, stage, peak=peak,
                                             peak_stage=0, host=Bytes(0), time=None))
