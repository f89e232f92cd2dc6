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
- with a :class:`~trainmath.runs.description.Budget` (tokens, MFU) and a GPU kind: FLOPs per
  token, time to train and GPU-hours (:class:`TrainingTime`; Kaplan et al. 2020, Chowdhery et
  al. 2022 Appendix B).

The reports render the estimate as text (:mod:`trainmath.report.text`), JSON
and HTML (:mod:`trainmath.report.page`). Pure, fast and
free of I/O, so a planner can call it in a loop and a browser (Pyodide) can run it.

>>> from trainmath.runs.description import run
>>> e = estimate(run("llama-3-8b", seq_len=8192, dp=8, zero_stage=3, gpu_memory="80GB"))
>>> print(e.training.implementation, e.total, e.peak.bytes, e.fits)
megatron-te 64.5 GB 72.3 GB True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from fractions import Fraction

from ..hardware import Peak, gpu as _accelerator
from ..memory.activations import LayerActivations, _layer
from ..memory.embedding_and_loss import _output, _rotary
from ..memory.finetune import AdapterStates, BASE_BYTES, _adapter_states, _frozen_output, _lora_layer, adapter_value_bytes, frozen_embedding
from ..memory.kernels import MASK_BYTES, STAT_BYTES, implementation
from ..memory.peak import GatheredUnits, StepPeak, _step_peak
from ..memory.recipes import BytesPerParam, Recipe, bytes_per_param, peak_precision, recipe
from ..memory.sharding import _zero_states
from ..memory.stages import DeviceMemory, StageActivations, _device_memory, _stage, fullest
from ..memory.step import _activations, _adapter_step_inputs, _count_only_inputs, _fsdp2_device, _offloaded, _offloaded_inputs, _stage_inputs
from ..memory.training import Training
from ..model.shape import param_breakdown
from ..parallel.layout import _microbatches
from ..parallel.schedules import _bubble, _in_flight
from .description import Run
from ..time.flops import flops_per_token, time_to_train
from ..units import Bytes


# -- the estimate -------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainingTime:
    """Time to train a :class:`~trainmath.runs.description.Run` on its :class:`~trainmath.runs.description.Budget`: tokens × FLOPs per token ÷ (MFU ×
    GPUs × the dense peak of one), :func:`trainmath.time.flops.time_to_train`."""

    tokens: int
    mfu: float
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
    #: host (CPU) memory one device's offloaded model states need (0 without offload)
    host: Bytes = Bytes(0)
    #: with a :class:`~trainmath.runs.description.Budget`: FLOPs per token, time to train, GPU-hours
    time: TrainingTime | None = None

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
        """The step's :attr:`peak` plus the :attr:`overhead`: what :attr:`fits` compares."""
        return self.peak.bytes + self.run.overhead

    @property
    def fits(self) -> bool | None:
        """Whether the step's :attr:`peak` and the run's overhead fit the GPU's memory; None
        without a GPU."""
        return None if self.run.gpu is None else self.needed <= self.run.gpu.memory

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
        return _adapter_estimate(run, r)
    per = bytes_per_param(t.recipe, t.optimizer)
    if shape is None:  # a parameter count alone: model states on one data-parallel rank
        s = _zero_states(run.params, lay.zero_group, t.zero_stage, per)
        device = DeviceMemory(
            stage=0, params=run.params, zero_stage=t.zero_stage, zero_group=lay.zero_group,
            weights=s.weights, gradients=s.gradients, master_weights=s.master_weights,
            optimizer_states=s.optimizer_states, activations=Bytes(0))
        peak = _step_peak(_offloaded_inputs(_count_only_inputs(run, r, per, device), t.offload))
        device, host = _offloaded(device, r, t.offload)
        return Estimate(run, (device,), device, None, None, None, peak, host=host,
                        time=_time(run))
    m = None
    bubble = None
    if batch.global_batch is not None:
        m = _microbatches(batch.global_batch, lay.dp, batch.micro_batch)
        bubble = _bubble(lay.pp, m, lay.v)
    layer, acts_of, devices, inputs, peaks, top = _stages(run, r, per, m, every_stage=True)
    stage_acts = tuple(acts_of.values())
    stages = tuple(devices.values())
    moved = [_offloaded(d, r, t.offload) for d in stages]
    stages = tuple(d for d, _ in moved)
    device = fullest(stages)
    return Estimate(run, stages, device, layer, m, bubble, peaks[top], top, stage_acts,
                    inputs[top].gathered, moved[device.stage][1], _time(run))


def _stages(run: Run, r: Recipe, per: BytesPerParam, m: int | None, every_stage: bool):
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
    pp = lay.pp
    peaked = sorted({0, min(1, pp - 1), pp - 1})
    wanted = list(range(pp)) if every_stage else peaked
    layer = None
    acts_of: dict[int, StageActivations | None] = dict.fromkeys(wanted)
    if batch.seq_len is not None:
        layer, acts_of = _activations(shape, lay, t, r, batch, m, wanted)
    acts = [Bytes(0) if a is None else a.total for a in acts_of.values()]
    devices = dict(zip(wanted, _device_memory(shape, lay, t.zero_stage, per, acts, wanted)))
    fsdp2 = r.name == "fsdp2" and lay.tp == 1 and lay.pp == 1
    if fsdp2:  # FSDP2's exact shards of rank 0, the fullest, padding included
        devices = {0: _fsdp2_device(shape, lay, t, devices[0])}
    inputs = {i: _offloaded_inputs(_stage_inputs(run, r, per, devices[i], acts_of[i], fsdp2),
                                   t.offload)
              for i in peaked if i in devices}
    peaks = {i: _step_peak(v) for i, v in inputs.items()}
    top = max(peaks, key=lambda i: (peaks[i].bytes, -i))
    return layer, acts_of, devices, inputs, peaks, top


def _peak(run: Run) -> StepPeak:
    """``estimate(run).peak`` for a run with a model shape, without the stages that cannot
    hold it (the planner's question)."""
    t, batch, lay = run.training, run.batch, run.layout
    m = None if batch.global_batch is None else _microbatches(batch.global_batch, lay.dp,
                                                              batch.micro_batch)
    r = recipe(t.recipe)
    *_, peaks, top = _stages(run, r, bytes_per_param(t.recipe, t.optimizer), m, every_stage=False)
    return peaks[top]


def _time(run: Run) -> TrainingTime | None:
    """The :class:`TrainingTime` of a run with a :class:`~trainmath.runs.description.Budget` (checked when it was made)."""
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
    seconds = time_to_train(run.budget.tokens, fpt, gpus, peak, float(run.budget.mfu))
    return TrainingTime(run.budget.tokens, float(run.budget.mfu), fpt, counted, peak, gpus,
                        seconds)


# -- LoRA and QLoRA -----------------------------------------------------------------------------
def _adapter_estimate(run: Run, r: Recipe) -> Estimate:
    """One device of a LoRA or QLoRA run (:mod:`trainmath.memory.finetune`): the frozen base and the
    adapter's states, activations through the frozen layers, and the step's peak."""
    shape, t, batch, a = run.shape, run.training, run.batch, run.adapter
    states = _adapter_states(shape, a, r, t.optimizer)
    compute = BASE_BYTES  # the frozen base computes in 16-bit (QLoRA: bf16, dequantised)
    adapter_bytes = adapter_value_bytes(r)
    layer = None
    stage_acts: tuple[StageActivations | None, ...] = (None,)
    if batch.seq_len is not None:
        s, b = batch.seq_len, batch.micro_batch
        family = implementation(t.implementation).family
        split = (shape, s, b, 1, False, 1)
        full = _layer(*split, t.recompute, t.attention, compute, MASK_BYTES, STAT_BYTES,
                      t.mlp_kernel, family, False)
        layer = full
        if t.recompute != "full":
            layer = _lora_layer(full, shape, a, s * b, compute, adapter_bytes, MASK_BYTES)
        output = _frozen_output(_output(*split, compute, STAT_BYTES, family, False))
        rotary = _rotary(shape, s, 1, compute, False)
        stage_acts = (_stage(shape, layer, frozen_embedding(), output, 1, None,
                             _in_flight(1, 1, None, 0), rotary, 1),)
    acts = Bytes(0) if layer is None else stage_acts[0].total
    device = DeviceMemory(
        stage=0, params=states.frozen, zero_stage=0, zero_group=run.layout.zero_group,
        weights=states.weights, gradients=states.gradients, master_weights=states.master_weights,
        optimizer_states=states.optimizer_states, activations=acts)
    peak = _step_peak(_adapter_step_inputs(run, r, states, stage_acts[0]))
    return Estimate(run, (device,), device, layer, None, None, peak, 0, stage_acts)
