"""One estimate of a training run's memory per device: the entry point pages and tools share.

A :class:`Run` describes one run in small frozen parts: the model (a checked
:class:`~trainmath.models.ModelShape`, or a parameter count alone, which gives model states
only), the :class:`Training` recipe (precision, optimizer, ZeRO stage, recomputation, attention
kernel), the :class:`~trainmath.parallelism.Layout`, the :class:`Batch` and, optionally, the
:class:`Gpu`. Each part checks its own fields when it is made, and :class:`Run` checks how the
parts fit together (:func:`trainmath.parallelism.validate`), raising one ValueError that names
the bad values and what is accepted. A Run that exists is valid, so :func:`estimate` checks
nothing again: it calls the unchecked cores of the modules below. :func:`run` builds a Run from
plain keywords (a preset name, a GPU kind such as ``"h100-sxm"``, ``"80GB"``).

``estimate(run) -> Estimate``, for the fullest device (the pipeline stage that needs the most):

- model states: ZeRO's 2Ψ + 2Ψ + KΨ per parameter divided over the dp·cp ranks (Rajbhandari
  et al. 2020, §5.1–5.3; :mod:`trainmath.sharding`), of the parameters that tensor and pipeline
  parallelism leave on the device (:mod:`trainmath.parallelism`);
- activations, with a shape and a sequence length: the tensors each layer saves for backward
  (Korthikanti et al. 2022, §4; :mod:`trainmath.activations`) in the compute precision, times
  the micro-batches in flight on the stage (1F1B and interleaved schedules, Narayanan et al.
  2021, §2.2), plus the embedding on the first stage and the output layer on the last;
- with a global batch: m micro-batches per step and the bubble, (pp-1)/(m·v).

Pure, fast and free of I/O, so a planner can call it in a loop and a browser (Pyodide) can
run it. :meth:`Estimate.to_dict` is exactly the JSON that ``trainmath estimate --json`` prints.

>>> e = estimate(run("llama-3-8b", seq_len=8192, attention="flash", dp=8, zero_stage=3,
...                  gpu_memory="80GB"))
>>> print(e.total, e.fits)
64.5 GB True
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from fractions import Fraction

from .activations import (ATTENTION_KINDS, MASK_BYTES, MLP_KERNELS, RECOMPUTE_KINDS, STAT_BYTES,
                          LayerActivations, _in_flight, _input, _layer, _output, _stage,
                          check_context_parallel)
from .compute import GPUS, gpu as _accelerator
from .memory import bytes_per_param, optimizer, recipe
from .models import ModelShape, param_count, preset
from .parallelism import (DeviceMemory, Layout, _bubble, _device_memory, _microbatches, fullest,
                          validate)
from .sharding import _zero_states, check_stage
from .units import Bytes, choice, parse_bytes, positive_int


# -- the parts of a run -------------------------------------------------------------------------
@dataclass(frozen=True)
class Training:
    """How the model is trained: precision recipe, optimizer, ZeRO stage, recomputation, kernels.

    ``precision`` is one of :data:`trainmath.memory.RECIPES`, ``optimizer`` one of
    :data:`trainmath.memory.OPTIMIZERS`, ``zero_stage`` 0 to 3 (:mod:`trainmath.sharding`),
    ``recompute`` one of :data:`trainmath.activations.RECOMPUTE_KINDS`, ``attention`` one of
    :data:`trainmath.activations.ATTENTION_KINDS` and ``mlp_kernel`` one of
    :data:`trainmath.activations.MLP_KERNELS` (eager PyTorch, or a fused SwiGLU).
    """

    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    zero_stage: int = 0
    recompute: str = "none"
    attention: str = "eager"
    mlp_kernel: str = "eager"

    def __post_init__(self) -> None:
        recipe(self.precision)
        optimizer(self.optimizer)
        object.__setattr__(self, "zero_stage", check_stage(self.zero_stage))
        choice("recompute", self.recompute, RECOMPUTE_KINDS)
        choice("attention", self.attention, ATTENTION_KINDS)
        choice("mlp_kernel", self.mlp_kernel, MLP_KERNELS)


@dataclass(frozen=True)
class Batch:
    """Sequence length s (None: activations are not counted), micro-batch b, sequences per step."""

    seq_len: int | None = None
    micro_batch: int = 1
    #: sequences per optimizer step over all replicas; None: no micro-batch count, no bubble
    global_batch: int | None = None

    def __post_init__(self) -> None:
        if self.seq_len is not None:
            object.__setattr__(self, "seq_len", positive_int("seq_len (s)", self.seq_len))
        object.__setattr__(self, "micro_batch", positive_int("micro_batch (b)", self.micro_batch))
        if self.global_batch is not None:
            object.__setattr__(self, "global_batch",
                               positive_int("global_batch (sequences per step)", self.global_batch))


@dataclass(frozen=True)
class Gpu:
    """One device: the memory the estimate checks the run against, and which GPU it is.

    ``Gpu(kind="h100-sxm")`` takes that GPU's usable memory, the total ``nvidia-smi`` reports
    (:attr:`trainmath.compute.GpuMemory.usable`: 81,559 MiB for an H100 sold as "80GB");
    ``Gpu(memory)`` takes an amount as given (``parse_bytes("80GB")`` is 80 × 10^9 bytes, less
    than an "80GB" card holds). ``kind`` is a key of :data:`trainmath.compute.GPUS`.
    """

    memory: Bytes | None = None
    kind: str | None = None

    def __post_init__(self) -> None:
        if self.kind is not None:
            accelerator = _accelerator(self.kind)  # a ValueError lists the known kinds
            if self.memory is None:
                object.__setattr__(self, "memory", accelerator.memory.usable)
        elif self.memory is None:
            raise ValueError(f"a Gpu needs a kind (accepted: {', '.join(GPUS)}) or a memory "
                             "such as parse_bytes('80GB')")
        if not isinstance(self.memory, Bytes) or self.memory.n <= 0:
            raise ValueError(f"gpu memory must be a positive Bytes, e.g. parse_bytes('80GB'), "
                             f"got {self.memory!r}")

    @property
    def name(self) -> str | None:
        """The GPU's name (``"H100 SXM"``), or None when only its memory was given."""
        return None if self.kind is None else _accelerator(self.kind).name


class ShapeNeeded(ValueError):
    """A run given by its parameter count alone asks for what only a shape can say.

    ``fields`` names the parts of the run that need the shape (``"tp"``, ``"pp"``, ``"v"``,
    ``"global_batch"``), so a caller can word its own message without reading this one.
    """

    def __init__(self, fields: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.fields = fields

    def __reduce__(self):  # picklable, for planners that fan out over processes
        return type(self), (self.fields, *self.args)


@dataclass(frozen=True)
class Run:
    """One training run, checked once, when it is made. See the module docstring.

    ``model`` is a :class:`~trainmath.models.ModelShape` or a parameter count; with a count
    alone only the model states are estimated, so tp, pp, v and a global batch are refused.
    """

    model: ModelShape | int
    training: Training = Training()
    layout: Layout = Layout()
    batch: Batch = Batch()
    gpu: Gpu | None = None

    def __post_init__(self) -> None:
        for name, kind in (("training", Training), ("layout", Layout), ("batch", Batch)):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"{name} must be a {kind.__name__}, got {getattr(self, name)!r}")
        if self.gpu is not None and not isinstance(self.gpu, Gpu):
            raise ValueError(f"gpu must be a Gpu or None, got {self.gpu!r}")
        lay, batch = self.layout, self.batch
        if not isinstance(self.model, ModelShape):  # then a parameter count, such as 7e9
            object.__setattr__(self, "model", positive_int("model (a ModelShape or a parameter "
                                                           "count)", self.model))
            _check_count_only(lay, batch)
            return
        validate(self.model, lay, seq_len=batch.seq_len, global_batch=batch.global_batch,
                 micro_batch=None if batch.global_batch is None else batch.micro_batch)
        if batch.seq_len is not None:
            check_context_parallel(lay.cp, self.training.attention)

    @property
    def shape(self) -> ModelShape | None:
        """The model's shape, or None when only its parameter count is known."""
        return self.model if isinstance(self.model, ModelShape) else None

    @property
    def params(self) -> int:
        """Parameters of the whole model."""
        return param_count(self.model) if isinstance(self.model, ModelShape) else self.model


def _check_count_only(lay: Layout, batch: Batch) -> None:
    """A parameter count cannot be split over tp or pp ranks, nor scheduled in a pipeline."""
    given = {"global_batch": batch.global_batch, "v": lay.v if lay.v > 1 else None,
             "tp": lay.tp if lay.tp > 1 else None, "pp": lay.pp if lay.pp > 1 else None}
    needs = tuple(name for name, value in given.items() if value is not None)
    if needs:
        listing = " and ".join(f"{name} {given[name]}" for name in needs)
        verb = "need" if len(needs) > 1 else "needs"
        raise ShapeNeeded(needs, f"{listing} {verb} a model shape, not a parameter count alone: "
                                 "how the layers split over ranks and stages depends on it; "
                                 "accepted: a ModelShape as the model, or tp = pp = v = 1 and "
                                 "no global_batch")


def run(
    model: ModelShape | int | str,
    *,
    precision: str = "bf16-mixed",
    optimizer: str = "adamw",
    zero_stage: int = 0,
    recompute: str = "none",
    attention: str = "eager",
    mlp_kernel: str = "eager",
    dp: int = 1,
    tp: int = 1,
    pp: int = 1,
    cp: int = 1,
    v: int = 1,
    sequence_parallel: bool = False,
    seq_len: int | None = None,
    micro_batch: int = 1,
    global_batch: int | None = None,
    gpu: str | None = None,
    gpu_memory: Bytes | str | None = None,
) -> Run:
    """A :class:`Run` from plain keywords: ``model`` may be a preset name, ``gpu`` a GPU kind
    (``"h100-sxm"``: its usable memory, see :class:`Gpu`) and ``gpu_memory`` an amount, a text
    such as ``"80GB"`` or ``"141 GiB"`` (:func:`trainmath.units.parse_bytes`); not both.

    >>> run("llama-2-7b", dp=8, zero_stage=1).params
    6738415616
    """
    if isinstance(model, str):
        model = preset(model)
    if gpu is not None and gpu_memory is not None:
        raise ValueError(f"give gpu (a kind, {gpu!r}) or gpu_memory (an amount, {gpu_memory!r}), "
                         "not both")
    if isinstance(gpu_memory, str):
        gpu_memory = parse_bytes(gpu_memory)
    return Run(
        model=model,
        training=Training(precision, optimizer, zero_stage, recompute, attention, mlp_kernel),
        layout=Layout(dp, tp, pp, cp, v, sequence_parallel),
        batch=Batch(seq_len, micro_batch, global_batch),
        gpu=None if gpu is None and gpu_memory is None else Gpu(gpu_memory, gpu),
    )


# -- the estimate -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Estimate:
    """Memory on the fullest device of a :class:`Run`, and what it depends on.

    ``stages`` has one device of each pipeline stage; ``device`` is the fullest (ties: the
    earliest). Their ``activations`` are zero when not counted: :attr:`activations` is None
    then, and :attr:`layer` too. Sizes are exact (a shard of an uneven split may be a
    fraction of a byte); :meth:`to_dict` rounds them up to whole bytes.
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
    def total(self) -> Bytes:
        """Model states plus, when counted, activations."""
        return self.device.total

    @property
    def gpus(self) -> int:
        """Devices in the layout: dp × tp × pp × cp."""
        return self.run.layout.gpus

    @property
    def fits(self) -> bool | None:
        """Whether :attr:`total` fits the run's GPU memory; None without a GPU."""
        return None if self.run.gpu is None else self.total <= self.run.gpu.memory

    def parts(self) -> dict[str, Bytes | None]:
        """Each kind of memory on the fullest device, activations None when not counted."""
        d = self.device
        return {"weights": d.weights, "gradients": d.gradients, "master weights": d.master_weights,
                "optimizer states": d.optimizer_states, "activations": self.activations}

    def to_dict(self) -> dict:
        """The estimate as ``trainmath estimate --json`` prints it: whole bytes, inputs included."""
        r, lay, t, batch = self.run, self.run.layout, self.run.training, self.run.batch
        d, shape, layer = self.device, r.shape, self.layer
        per_device = {"weights": d.weights, "gradients": d.gradients,
                      "master_weights": d.master_weights, "optimizer_states": d.optimizer_states,
                      "activations": self.activations, "total": self.total}
        return {
            "params": self.params,
            "per_device": {k: _whole(v) for k, v in per_device.items()},
            "activations_per_layer": None if layer is None else _whole(layer.korthikanti),
            "activations_per_layer_with_norm_statistics": None if layer is None else _whole(layer.total),
            "pipeline_stage": self.pipeline_stage,
            "microbatches": self.microbatches,
            "pipeline_bubble": None if self.bubble is None else float(self.bubble),
            "gpus": self.gpus,
            "fits": self.fits,
            "inputs": {
                "model": None if shape is None else shape.name,
                "shape": None if shape is None else {
                    f.name: getattr(shape, f.name) for f in fields(shape)
                    if f.name not in ("name", "source")},
                "precision": t.precision, "optimizer": t.optimizer, "zero": t.zero_stage,
                "dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp,
                "sequence_parallel": lay.sequence_parallel, "seq_len": batch.seq_len,
                "micro_batch": batch.micro_batch, "global_batch": batch.global_batch,
                "interleave": lay.v, "recompute": t.recompute, "attention": t.attention,
                "mlp_kernel": t.mlp_kernel,
                "gpu": None if r.gpu is None else r.gpu.kind,
                "gpu_memory": None if r.gpu is None else _whole(r.gpu.memory),
            },
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as the command prints it (indented by two spaces)."""
        return json.dumps(self.to_dict(), indent=2)


def _whole(b: Bytes | None) -> int | None:
    """Whole bytes: a shard of an uneven division rounds up (that rank holds the extra byte)."""
    return None if b is None else math.ceil(b.n)


def estimate(run: Run) -> Estimate:
    """Memory per device for ``run``, checked when it was made (see the module docstring).

    >>> print(estimate(run(7_500_000_000, dp=64, zero_stage=3)).total)   # ZeRO Figure 1
    1.9 GB
    """
    lay, t, batch, shape = run.layout, run.training, run.batch, run.shape
    per = bytes_per_param(t.precision, t.optimizer)
    if shape is None:  # a parameter count alone: model states on one data-parallel rank
        s = _zero_states(run.params, lay.zero_group, t.zero_stage, per)
        device = DeviceMemory(
            stage=0, params=run.params, zero_stage=t.zero_stage, zero_group=lay.zero_group,
            weights=s.weights, gradients=s.gradients, master_weights=s.master_weights,
            optimizer_states=s.optimizer_states, activations=Bytes(0))
        return Estimate(run, (device,), device, None, None, None)
    m = None
    bubble = None
    if batch.global_batch is not None:
        m = _microbatches(batch.global_batch, lay.dp, batch.micro_batch)
        bubble = _bubble(lay.pp, m, lay.v)
    layer = None
    acts = (Bytes(0),) * lay.pp
    if batch.seq_len is not None:
        layer, acts = _activations(shape, lay, t, batch, m)
    stages = _device_memory(shape, lay, t.zero_stage, per, acts)
    return Estimate(run, stages, fullest(stages), layer, m, bubble)


def _activations(shape: ModelShape, lay: Layout, t: Training, batch: Batch,
                 m: int | None) -> tuple[LayerActivations, tuple[Bytes, ...]]:
    """One layer's saved tensors, and the activation bytes on one device of each stage."""
    value_bytes = recipe(t.precision).weights  # the compute format: 4 bytes in fp32, else 2
    split = (shape, batch.seq_len, batch.micro_batch, lay.tp, lay.sequence_parallel, lay.cp)
    layer = _layer(*split, t.recompute, t.attention, value_bytes, MASK_BYTES, STAT_BYTES,
                   t.mlp_kernel)
    embedding = _input(*split, MASK_BYTES)
    output = _output(*split, value_bytes, STAT_BYTES)
    pp = lay.pp
    acts = tuple(
        _stage(shape, layer, embedding if i == 0 else None, output if i == pp - 1 else None, pp, m,
               _in_flight(pp, lay.v, m, i)).total
        for i in range(pp)
    )
    return layer, acts
