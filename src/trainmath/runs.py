"""One estimate of a training run's memory per device: the entry point pages and tools share.

A :class:`Run` describes one run in small frozen parts: the model (a checked
:class:`~trainmath.models.ModelShape`, or a parameter count alone, which gives model states
only), the :class:`Training` setup (recipe, optimizer, ZeRO stage, recomputation, kernels), the
:class:`~trainmath.parallelism.Layout`, the :class:`Batch` and, optionally, the :class:`Gpu`.
Each part checks its own fields when it is made, and :class:`Run` checks how the parts fit
together (:func:`trainmath.parallelism.validate`, a sequence no longer than the model's
positions, kernels that can run the shape and layout), raising one ValueError that names the
bad values and what is accepted. What the training setup leaves open (the recipe, the kernels,
the ZeRO stage, the optimizer's implementation) the Run fills from the model
(:func:`trainmath.models.trained_with`: what a preset is commonly trained with) and the recipe,
and records in :attr:`Run.assumed`. A Run that exists is valid, so :func:`estimate` checks
nothing again: it calls the unchecked cores of the modules below. :func:`run` builds a Run from
plain keywords (a preset name, a GPU kind such as ``"h100-sxm"``, ``"80GB"``).

``estimate(run) -> Estimate``, for the fullest device (the pipeline stage that needs the most):

- model states after an optimizer step, as the recipe keeps them
  (:data:`trainmath.memory.RECIPES`), divided over the dp·cp ranks by the ZeRO stage
  (Rajbhandari et al. 2020, §5.1–5.3; :mod:`trainmath.sharding`; FSDP2's exact shards), of the
  parameters that tensor and pipeline parallelism leave on the device
  (:mod:`trainmath.parallelism`);
- activations, with a shape and a sequence length: the tensors each layer saves for backward
  with the run's kernels (Korthikanti et al. 2022, §4; :mod:`trainmath.activations`), times
  the micro-batches in flight on the stage (1F1B and interleaved schedules, Narayanan et al.
  2021, §2.2), plus the embedding on the first stage and the output layer on the last;
- the peak of a step (:mod:`trainmath.peak`): when each of these is alive, with the loss's
  logits, gathered ZeRO-3/FSDP units and the optimizer's temporaries; ``fits`` compares it
  with the GPU's usable memory;
- with a global batch: m micro-batches per step and the bubble, (pp-1)/(m·v);
- with ``offload`` (:class:`Training`): the offloaded states moved from the device to
  :attr:`Estimate.host`, CPU memory per device (ZeRO-Offload, Ren et al. 2021; ZeRO-Infinity,
  Rajbhandari et al. 2021; FSDP2's ``CPUOffloadPolicy``), and per node with ``gpus_per_node``;
- :attr:`Run.overhead`, what no formula counts (CUDA context, workspaces, NCCL buffers,
  fragmentation), added to the peak for ``fits`` (:attr:`Estimate.needed`);
- with a :class:`Budget` (tokens, MFU) and a GPU kind: FLOPs per token, time to train and
  GPU-hours (:class:`TrainingTime`; Kaplan et al. 2020, Chowdhery et al. 2022 Appendix B).

Pure, fast and free of I/O, so a planner can call it in a loop and a browser (Pyodide) can
run it. :meth:`Estimate.to_dict` is exactly the JSON that ``trainmath estimate --json`` prints.

>>> e = estimate(run("llama-3-8b", seq_len=8192, dp=8, zero_stage=3, gpu_memory="80GB"))
>>> print(e.training.implementation, e.total, e.peak.bytes, e.fits)
megatron-te 64.5 GB 72.3 GB True
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields, replace
from fractions import Fraction

from .activations import (IMPLEMENTATIONS, MASK_BYTES, MLP_KERNELS, RECOMPUTE_KINDS, STAT_BYTES,
                          FP32_BYTES, LayerActivations, StageActivations, _in_flight, _input,
                          _layer, _output, _rotary, _stage, check_context_parallel, implementation,
                          kernels_problem)
from .compute import GPU_ALIASES, GPUS, Peak, flops_per_token, gpu as _accelerator, time_to_train
from . import finetune as _ft
from .finetune import Adapter
from .memory import BytesPerParam, Recipe, bytes_per_param, optimizer, optimizer_impl, recipe
from .models import (CUSTOM_DEFAULTS, ModelShape, param_breakdown, param_count, param_shapes,
                     preset, trained_with)
from .parallelism import (DeviceMemory, Layout, _bubble, _device_memory, _microbatches,
                          _stage_params, fullest, validate)
from .peak import GatheredUnits, StepInputs, StepPeak, _step_peak, _temporaries
from .sharding import OFFLOADS, STEP_BYTES, _zero_states, check_stage, fsdp2_rank
from .units import Bytes, choice, parse_bytes, positive_int


# -- the parts of a run -------------------------------------------------------------------------
@dataclass(frozen=True)
class Training:
    """How the model is trained: recipe, optimizer, ZeRO stage, recomputation, kernels.

    ``recipe`` is one of :data:`trainmath.memory.RECIPES` (or an alias such as ``"zero-paper"``),
    ``optimizer`` one of :data:`trainmath.memory.OPTIMIZERS`, ``zero_stage`` 0 to 3
    (:mod:`trainmath.sharding`) among those the recipe offers, ``recompute`` one of
    :data:`trainmath.activations.RECOMPUTE_KINDS`, ``implementation`` one of
    :data:`trainmath.activations.IMPLEMENTATIONS`, ``mlp_kernel`` one of
    :data:`trainmath.activations.MLP_KERNELS` (eager PyTorch, or a fused SwiGLU) and
    ``optimizer_impl`` one of :data:`trainmath.memory.OPTIMIZER_IMPLS`.

    None leaves a choice to the :class:`Run`, which takes it from the model
    (:func:`trainmath.models.trained_with`) or the recipe. ``attention`` ("eager" or "flash") is
    a shorthand: the implementation of the same kernel family with that attention
    (megatron-eager or megatron-te, hf-eager or hf-sdpa); once the Run has resolved its
    training, ``attention`` is the implementation's.
    """

    recipe: str | None = None
    optimizer: str = "adamw"
    zero_stage: int | None = None
    recompute: str = "none"
    implementation: str | None = None
    mlp_kernel: str = "eager"
    attention: str | None = None
    optimizer_impl: str | None = None
    #: model states moved to host (CPU) memory: one of :data:`trainmath.sharding.OFFLOADS`
    #: ("none", "optimizer": ZeRO-Offload, "parameters": ZeRO-Infinity / FSDP2 CPUOffloadPolicy)
    offload: str = "none"

    def __post_init__(self) -> None:
        if self.recipe is not None:
            object.__setattr__(self, "recipe", recipe(self.recipe).name)  # aliases resolved
        choice("offload", self.offload, OFFLOADS)
        optimizer(self.optimizer)
        if self.zero_stage is not None:
            object.__setattr__(self, "zero_stage", check_stage(self.zero_stage))
            if self.recipe is not None:
                _check_recipe_stage(recipe(self.recipe), self.zero_stage)
        choice("recompute", self.recompute, RECOMPUTE_KINDS)
        choice("mlp_kernel", self.mlp_kernel, MLP_KERNELS)
        if self.attention is not None:
            choice("attention", self.attention, ("eager", "flash"))
        if self.implementation is not None:
            impl = implementation(self.implementation)
            if self.attention is not None and self.attention != impl.attention:
                raise ValueError(f"attention {self.attention!r} contradicts implementation "
                                 f"{impl.name!r}, whose attention is {impl.attention!r}; give one "
                                 "of them")
        if self.optimizer_impl is not None:
            optimizer_impl(self.optimizer_impl)

    @property
    def resolved(self) -> bool:
        """Whether every choice is made (a :class:`Run`'s training always is)."""
        return None not in (self.recipe, self.zero_stage, self.implementation,
                            self.attention, self.optimizer_impl)


def _check_recipe_stage(r: Recipe, stage: int) -> None:
    if stage not in r.stages:
        raise ValueError(f"ZeRO stage {stage} is not one recipe {r.name!r} offers; accepted: "
                         f"{', '.join(map(str, r.stages))}")


def _family_with(attention: str, family: str) -> str:
    """The implementation of ``family`` whose attention is ``attention``."""
    (name,) = [i.name for i in IMPLEMENTATIONS.values()
               if i.family == family and i.attention == attention]
    return name


def _resolve(t: Training, model: ModelShape | None) -> tuple[Training, tuple[str, ...]]:
    """``t`` with every choice made, and the names of those taken from the defaults."""
    defaults = CUSTOM_DEFAULTS if model is None else trained_with(model)
    assumed = []
    name = t.recipe
    if name is None:
        name, _ = defaults.recipe, assumed.append("recipe")
    r = recipe(name)
    impl = t.implementation
    if impl is None:
        if model is not None:  # kernels matter only where activations are counted
            assumed.append("implementation")
        impl = defaults.implementation
        if t.attention is not None:
            impl = _family_with(t.attention, implementation(impl).family)
    stage = t.zero_stage
    if stage is None:
        stage = r.default_stage
    _check_recipe_stage(r, stage)
    impl_opt = t.optimizer_impl
    if impl_opt is None:
        impl_opt, _ = r.optimizer_impl, assumed.append("optimizer_impl")
    resolved = replace(t, recipe=r.name, zero_stage=stage, implementation=impl,
                       attention=implementation(impl).attention, optimizer_impl=impl_opt)
    return resolved, tuple(assumed)


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
    than an "80GB" card holds). ``kind`` is a key of :data:`trainmath.compute.GPUS` (or one of
    :data:`trainmath.compute.GPU_ALIASES`, resolved to its key). Given both, ``memory`` is the
    one checked against and ``kind`` still names the GPU (its peak FLOP/s for :class:`Budget`).
    """

    memory: Bytes | None = None
    kind: str | None = None

    def __post_init__(self) -> None:
        if self.kind is not None:
            accelerator = _accelerator(self.kind)  # a ValueError lists the known kinds
            object.__setattr__(self, "kind", accelerator.key)  # aliases resolved
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


@dataclass(frozen=True)
class Budget:
    """What the run trains on and how well it runs: ``tokens`` to train on and the ``mfu``
    assumed (a fraction in (0, 1]), for the time to train (:class:`TrainingTime`)."""

    tokens: int
    mfu: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", positive_int("tokens", self.tokens))
        if isinstance(self.mfu, bool) or not isinstance(self.mfu, (int, float, Fraction)) \
                or not 0 < self.mfu <= 1:
            raise ValueError(f"mfu must be a fraction in (0, 1], such as 0.4, got {self.mfu!r}")


def peak_precision(r: Recipe) -> str:
    """The tensor-core precision a recipe's matrix multiplies run in, whose dense peak is the
    MFU denominator (:meth:`trainmath.compute.Accelerator.peak`): "fp8" for fp8 training,
    "fp16" for fp16-mixed, "bf16" for every other 16-bit compute (autocast included); a
    ValueError for fp32, which the GPU table has no peak for.

    >>> peak_precision(recipe("amp")), peak_precision(recipe("fp16-mixed"))
    ('bf16', 'fp16')
    """
    if r.fp8_gemms:
        return "fp8"
    if r.compute != 2:
        raise ValueError(f"recipe {r.name!r} computes in fp32, which the GPU table has no peak "
                         "for; accepted for a time to train: a recipe computing in bf16, fp16 or "
                         "fp8")
    return "fp16" if r.name.startswith("fp16") else "bf16"


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
    alone only the model states (and the optimizer step's peak) are estimated, so tp, pp, v
    and a global batch are refused. ``training`` is resolved when the Run is made (every None
    filled, :attr:`assumed` naming what was filled from the model's or the recipe's defaults).
    """

    model: ModelShape | int
    training: Training = Training()
    layout: Layout = Layout()
    batch: Batch = Batch()
    gpu: Gpu | None = None
    #: the training choices the run did not give, filled from defaults: "recipe",
    #: "implementation", "optimizer_impl" (set when the Run is made)
    assumed: tuple[str, ...] = ()
    #: memory no formula counts (CUDA context, cuBLAS workspaces, NCCL buffers, the allocator's
    #: fragmentation), added to the step's peak for :attr:`Estimate.fits`; 0 unless given
    overhead: Bytes = Bytes(0)
    #: tokens and MFU, for the time to train (needs a GPU kind for its peak); None: no time
    budget: Budget | None = None
    #: GPUs on one node, for the host memory offload needs per node; None: per device only
    gpus_per_node: int | None = None
    #: a LoRA or QLoRA adapter on the frozen model (:mod:`trainmath.finetune`); None: every
    #: parameter is trained (pre-training or full fine-tuning)
    adapter: Adapter | None = None

    def __post_init__(self) -> None:
        for name, kind in (("training", Training), ("layout", Layout), ("batch", Batch)):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"{name} must be a {kind.__name__}, got {getattr(self, name)!r}")
        adapter_defaults = None
        if self.adapter is not None:
            adapter_defaults = _check_adapter(self)
        if self.gpu is not None and not isinstance(self.gpu, Gpu):
            raise ValueError(f"gpu must be a Gpu or None, got {self.gpu!r}")
        if not isinstance(self.overhead, Bytes) or self.overhead.n < 0:
            raise ValueError(f"overhead must be a Bytes of 0 or more, e.g. parse_bytes('2GiB'), "
                             f"got {self.overhead!r}")
        if self.budget is not None and not isinstance(self.budget, Budget):
            raise ValueError(f"budget must be a Budget or None, got {self.budget!r}")
        if self.gpus_per_node is not None:
            object.__setattr__(self, "gpus_per_node",
                               positive_int("gpus_per_node", self.gpus_per_node))
        lay, batch = self.layout, self.batch
        if not isinstance(self.model, ModelShape):  # then a parameter count, such as 7e9
            object.__setattr__(self, "model", positive_int("model (a ModelShape or a parameter "
                                                           "count)", self.model))
            _check_count_only(lay, batch)
        training, assumed = _resolve(self.training, self.shape)
        if adapter_defaults:  # peft's fp32 adapters, Hugging Face's kernels, when not given
            training, assumed = _resolve(replace(self.training, **adapter_defaults), self.shape)
            assumed = tuple(sorted({*assumed, *adapter_defaults},
                                   key=("recipe", "implementation", "optimizer_impl").index))
        if not self.training.resolved:
            object.__setattr__(self, "training", training)
            object.__setattr__(self, "assumed", assumed)
        _check_offload(self.training)
        if self.budget is not None:
            if self.gpu is None or self.gpu.kind is None:
                raise ValueError("a time to train needs a GPU kind for its peak FLOP/s; accepted: "
                                 f"gpu one of {', '.join([*GPUS, *GPU_ALIASES])}")
            _accelerator(self.gpu.kind).peak(peak_precision(recipe(self.training.recipe)))
        if self.shape is None:
            return
        model, t = self.model, self.training
        validate(model, lay, seq_len=batch.seq_len, global_batch=batch.global_batch,
                 micro_batch=None if batch.global_batch is None else batch.micro_batch)
        if batch.seq_len is not None:
            if model.max_positions and batch.seq_len > model.max_positions:
                raise ValueError(
                    f"seq_len {batch.seq_len} is longer than the {model.max_positions} positions "
                    f"{model.name} was trained for ({'its learned positions' if model.positions else 'max_position_embeddings in its config'}); "
                    f"accepted: at most {model.max_positions}")
            check_context_parallel(lay.cp, t.attention)
        problem = kernels_problem(model, implementation(t.implementation).family, tp=lay.tp,
                                  sequence_parallel=lay.sequence_parallel, cp=lay.cp,
                                  recompute=t.recompute, mlp_kernel=t.mlp_kernel)
        if problem:
            raise ValueError(f"implementation {t.implementation!r}: {problem}")
        if recipe(t.recipe).name == "fsdp2" and lay.pp > 1:
            raise ValueError("recipe 'fsdp2' with pp > 1 is not modelled; accepted: pp = 1")
        if recipe(t.recipe).name == "fsdp2" and lay.ep > 1:
            raise ValueError("recipe 'fsdp2' with ep > 1 is not modelled; accepted: ep = 1")

    @property
    def shape(self) -> ModelShape | None:
        """The model's shape, or None when only its parameter count is known."""
        return self.model if isinstance(self.model, ModelShape) else None

    @property
    def params(self) -> int:
        """Parameters of the whole model."""
        return param_count(self.model) if isinstance(self.model, ModelShape) else self.model


def _check_offload(t: Training) -> None:
    """Offload as the frameworks offer it (:data:`trainmath.sharding.OFFLOADS`): ZeRO-Offload
    builds on ZeRO-2 (Ren et al. 2021, §4), so "optimizer" needs stage 2 or 3 and a recipe with
    an optimizer-only offload (FSDP2 has none); "parameters" needs stage 3 (ZeRO-Infinity,
    FSDP2's CPUOffloadPolicy). Megatron-LM's persistent fp32 gradient buffer is not modelled
    with offload."""
    if t.offload == "none":
        return
    if recipe(t.recipe).persistent_gradients:
        raise ValueError(f"offload {t.offload!r} with recipe {t.recipe!r} (Megatron-LM's persistent "
                         "fp32 gradient buffer) is not modelled; accepted: offload 'none', or a "
                         "ZeRO recipe (bf16-mixed, deepspeed, fsdp2, ...)")
    if t.offload == "optimizer":
        if t.recipe == "fsdp2":
            raise ValueError("offload 'optimizer' with recipe 'fsdp2': FSDP2 has no optimizer-only "
                             "offload (CPUOffloadPolicy moves the sharded parameters, gradients and "
                             "the step); accepted: offload 'parameters'")
        if t.zero_stage < 2:
            raise ValueError(f"offload 'optimizer' needs ZeRO stage 2 or 3 (ZeRO-Offload builds on "
                             f"ZeRO-2), got stage {t.zero_stage}; accepted: stage 2 or 3")
    elif t.zero_stage != 3:
        raise ValueError(f"offload 'parameters' (params) needs ZeRO stage 3 (sharded parameters), "
                         f"got stage {t.zero_stage}; accepted: stage 3")


def _check_adapter(r: Run) -> dict[str, str]:
    """What an adapter run needs (one device's whole model, a Llama-style shape, an adapter
    recipe); the choices to assume when not given: the recipe ``fp32`` (peft keeps adapters
    in fp32) and Hugging Face's kernels (``hf-sdpa``; transformers and peft run LoRA)."""
    if not isinstance(r.adapter, Adapter):
        raise ValueError(f"adapter must be a trainmath.finetune.Adapter or None, got {r.adapter!r}")
    if r.shape is None:
        raise ValueError("a LoRA or QLoRA run needs a model shape, not a parameter count alone: "
                         "the adapter's size depends on the matrices; accepted: a ModelShape")
    _ft.check_model(r.shape)
    lay, t = r.layout, r.training
    split = {k: getattr(lay, k) for k in ("tp", "pp", "cp", "v") if getattr(lay, k) > 1}
    if split:
        given = ", ".join(f"{k} {n}" for k, n in split.items())
        raise ValueError(f"LoRA and QLoRA are modelled with the whole model on each device; got "
                         f"{given}; accepted: tp = pp = cp = v = 1 (dp replicas are fine)")
    if t.zero_stage not in (None, 0):
        raise ValueError(f"ZeRO stage {t.zero_stage} with an adapter is not modelled; accepted: 0")
    if t.offload != "none":
        raise ValueError(f"offload {t.offload!r} with an adapter is not modelled; accepted: "
                         "offload 'none'")
    if r.budget is not None:
        raise ValueError("a time to train with an adapter is not modelled (its backward computes "
                         "no gradients for the frozen weights, so 6 FLOPs per parameter and token "
                         "overcounts); accepted: no tokens and mfu")
    if t.recipe is not None and t.recipe not in _ft.ADAPTER_RECIPES:
        raise ValueError(f"recipe {t.recipe!r} for the adapter's weights is not modelled; "
                         f"accepted: {', '.join(_ft.ADAPTER_RECIPES)}")
    defaults = {}
    if t.recipe is None:
        defaults["recipe"] = "fp32"
    if t.implementation is None:
        defaults["implementation"] = "hf-eager" if t.attention == "eager" else "hf-sdpa"
    return defaults


def _check_count_only(lay: Layout, batch: Batch) -> None:
    """A parameter count cannot be split over tp or pp ranks, nor scheduled in a pipeline."""
    given = {"global_batch": batch.global_batch, "v": lay.v if lay.v > 1 else None,
             "tp": lay.tp if lay.tp > 1 else None, "pp": lay.pp if lay.pp > 1 else None,
             "ep": lay.ep if lay.ep > 1 else None}
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
    recipe: str | None = None,
    optimizer: str = "adamw",
    zero_stage: int | None = None,
    recompute: str = "none",
    implementation: str | None = None,
    attention: str | None = None,
    mlp_kernel: str = "eager",
    optimizer_impl: str | None = None,
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
    offload: str = "none",
    overhead: Bytes | str = Bytes(0),
    tokens: int | None = None,
    mfu: float | None = None,
    gpus_per_node: int | None = None,
    adapter: Adapter | None = None,
    ep: int = 1,
) -> Run:
    """A :class:`Run` from plain keywords: ``model`` may be a preset name, ``gpu`` a GPU kind
    (``"h100-sxm"``: its usable memory, see :class:`Gpu`) and ``gpu_memory`` an amount, a text
    such as ``"80GB"`` or ``"141 GiB"`` (:func:`trainmath.units.parse_bytes`), which overrides
    the kind's memory when both are given; ``overhead`` an amount too. ``tokens`` and ``mfu``
    go together (:class:`Budget`). What is left None the Run fills from the model's and the
    recipe's defaults (:class:`Training`). ``adapter`` is a
    :class:`trainmath.finetune.Adapter` (LoRA or QLoRA on the frozen model).

    >>> r = run("llama-2-7b", dp=8, zero_stage=1)
    >>> r.params, r.training.recipe, r.training.implementation, r.assumed
    (6738415616, 'bf16-mixed', 'megatron-te', ('recipe', 'implementation', 'optimizer_impl'))
    """
    if isinstance(model, str):
        model = preset(model)
    if isinstance(gpu_memory, str):
        gpu_memory = parse_bytes(gpu_memory)
    if isinstance(overhead, str):
        overhead = parse_bytes(overhead)
    if (tokens is None) != (mfu is None):
        given, missing = ("tokens", "mfu") if mfu is None else ("mfu", "tokens")
        raise ValueError(f"{given} needs {missing} as well: a time to train needs both the tokens "
                         "and the MFU assumed")
    return Run(
        model=model,
        training=Training(recipe, optimizer, zero_stage, recompute, implementation, mlp_kernel,
                          attention, optimizer_impl, offload),
        layout=Layout(dp, tp, pp, cp, v, sequence_parallel, ep),
        batch=Batch(seq_len, micro_batch, global_batch),
        gpu=None if gpu is None and gpu_memory is None else Gpu(gpu_memory, gpu),
        overhead=overhead,
        budget=None if tokens is None else Budget(tokens, mfu),
        gpus_per_node=gpus_per_node,
        adapter=adapter,
    )


# -- the estimate -------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainingTime:
    """Time to train a :class:`Run` on its :class:`Budget`: tokens × FLOPs per token ÷ (MFU ×
    GPUs × the dense peak of one), :func:`trainmath.compute.time_to_train`."""

    tokens: int
    mfu: float
    #: model FLOPs per trained token: 6N + 12·L·h·s with a shape and a sequence length (PaLM,
    #: Chowdhery et al. 2022, Appendix B; :func:`trainmath.compute.flops_per_token`), else 6N
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
    """Memory on the fullest device of a :class:`Run`, and what it depends on.

    ``stages`` has one device of each pipeline stage; ``device`` is the fullest (ties: the
    earliest). Their ``activations`` are zero when not counted: :attr:`activations` is None
    then, and :attr:`layer` too. Sizes are exact (a shard of an uneven split may be a
    fraction of a byte); :meth:`to_dict` rounds them up to whole bytes. ``peak`` is the step's
    peak (:mod:`trainmath.peak`) on the stage where it is highest, ``peak_stage``.
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
    #: with a :class:`Budget`: FLOPs per token, time to train, GPU-hours
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
        """What no formula counts, as the run gives it (:attr:`Run.overhead`)."""
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

    def to_dict(self) -> dict:
        """The estimate as ``trainmath estimate --json`` prints it: whole bytes, inputs included."""
        r, lay, t, batch = self.run, self.run.layout, self.run.training, self.run.batch
        d, shape, layer = self.device, r.shape, self.layer
        per_device = {"weights": d.weights, "gradients": d.gradients,
                      "master_weights": d.master_weights, "optimizer_states": d.optimizer_states,
                      "activations": self.activations, "total": self.total}
        top = self.peak.peak
        g, (units, held) = self.gathered, self.gathered_at_peak()
        time = self.time
        return {
            "params": self.params,
            "active_params": self.params if shape is None else param_breakdown(shape).active,
            "per_device": {k: _whole(v) for k, v in per_device.items()},
            "peak": {"bytes": _whole(top.total), "phase": top.phase, "moment": top.when,
                     "pipeline_stage": self.peak_stage,
                     "parts": {k.replace(" ", "_"): _whole(v) for k, v in top.as_dict().items()},
                     "gathered": None if g is None else {
                         "unit_bytes": _whole(g.layer), "prefetch": g.prefetch,
                         "units_at_peak": units, "root_bytes": _whole(g.root),
                         "bytes_at_peak": _whole(held)}},
            "activations_per_layer": None if layer is None else _whole(layer.korthikanti),
            "activations_per_layer_with_norm_statistics": None if layer is None else _whole(layer.total),
            "pipeline_stage": self.pipeline_stage,
            "microbatches": self.microbatches,
            "pipeline_bubble": None if self.bubble is None else float(self.bubble),
            "gpus": self.gpus,
            "fits": self.fits,
            "overhead": _whole(self.overhead),
            "needed": _whole(top.total) + _whole(self.overhead),
            "host": {"per_device": _whole(self.host), "per_node": _whole(self.host_per_node)},
            "time": None if time is None else {
                "flops_per_token": time.flops_per_token, "counted": time.counted,
                "total_flops": time.total_flops, "peak_flops_per_gpu": time.peak.flops,
                "peak": time.peak.describe(), "seconds": time.seconds,
                "days": time.seconds / 86400, "gpu_hours": time.gpu_hours,
                "tokens_per_second": time.tokens_per_second},
            "finetune": self._finetune_dict(),
            "inputs": {
                "model": None if shape is None else shape.name,
                "shape": None if shape is None else {
                    f.name: getattr(shape, f.name) for f in fields(shape)
                    if f.name not in ("name", "source")},
                "recipe": t.recipe, "optimizer": t.optimizer, "optimizer_impl": t.optimizer_impl,
                "zero": t.zero_stage,
                "dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "ep": lay.ep,
                "sequence_parallel": lay.sequence_parallel, "seq_len": batch.seq_len,
                "micro_batch": batch.micro_batch, "global_batch": batch.global_batch,
                "interleave": lay.v, "recompute": t.recompute,
                "implementation": t.implementation, "attention": t.attention,
                "mlp_kernel": t.mlp_kernel,
                "assumed": list(r.assumed),
                "gpu": None if r.gpu is None else r.gpu.kind,
                "gpu_memory": None if r.gpu is None else _whole(r.gpu.memory),
                "offload": t.offload,
                "overhead": _whole(r.overhead),
                "gpus_per_node": r.gpus_per_node,
                "tokens": None if r.budget is None else r.budget.tokens,
                "mfu": None if r.budget is None else float(r.budget.mfu),
                "adapter": None if r.adapter is None else {
                    "method": r.adapter.method, "rank": r.adapter.rank,
                    "targets": list(r.adapter.targets), "dropout": r.adapter.dropout,
                    "double_quant": r.adapter.double_quant if r.adapter.quantized else None},
            },
        }

    @property
    def adapter_states(self) -> _ft.AdapterStates | None:
        """A LoRA or QLoRA run's states split into frozen base and adapter; None without one."""
        r = self.run
        if r.adapter is None:
            return None
        return _ft._adapter_states(r.shape, r.adapter, recipe(r.training.recipe), r.training.optimizer)

    def _finetune_dict(self) -> dict | None:
        st = self.adapter_states
        if st is None:
            return None
        return {"trainable_params": st.trainable, "frozen_params": st.frozen,
                "frozen_weights": _whole(st.frozen_weights),
                "adapter_weights": _whole(st.adapter_weights)}

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
    layer = None
    stage_acts: tuple[StageActivations | None, ...] = (None,) * lay.pp
    acts = (Bytes(0),) * lay.pp
    if batch.seq_len is not None:
        layer, stage_acts = _activations(shape, lay, t, r, batch, m)
        acts = tuple(a.total for a in stage_acts)
    stages = _device_memory(shape, lay, t.zero_stage, per, acts)
    fsdp2 = r.name == "fsdp2" and lay.tp == 1 and lay.pp == 1
    if fsdp2:  # FSDP2's exact shards of rank 0, the fullest, padding included
        stages = (_fsdp2_device(shape, lay, t, stages[0]),)
    inputs = [_offloaded_inputs(_stage_inputs(run, r, per, d, a, fsdp2), t.offload)
              for d, a in zip(stages, stage_acts)]
    peaks = [_step_peak(i) for i in inputs]
    top = max(range(len(peaks)), key=lambda i: (peaks[i].bytes, -i))
    moved = [_offloaded(d, r, t.offload) for d in stages]
    stages = tuple(d for d, _ in moved)
    device = fullest(stages)
    return Estimate(run, stages, device, layer, m, bubble, peaks[top], top, stage_acts,
                    inputs[top].gathered, moved[device.stage][1], _time(run))


def _offloaded(d: DeviceMemory, r: Recipe, offload: str) -> tuple[DeviceMemory, Bytes]:
    """``d`` with its offloaded states moved out, and the host bytes they need.

    "optimizer" (ZeRO-Offload, Ren et al. 2021, §4: built on ZeRO-2): the master weights, the
    optimizer states and the gradient partition move, the gradients in the master weights'
    format (fp32 for mixed precision, ``initialize_optimizer_states`` in DeepSpeed's
    ``stage_1_and_2.py``), as :func:`trainmath.sharding.fsdp_memory` counts them; the 16-bit
    weights stay. "parameters" (ZeRO-Infinity, Rajbhandari et al. 2021; FSDP2's
    ``CPUOffloadPolicy``): the weights' shards move too; the GPU keeps the gathered units.
    DeepSpeed's own estimate (``estimate_zero3_model_states_mem_needs`` in
    ``deepspeed/runtime/zero/stage3.py``) gives the same 16 and 18 bytes per parameter of host
    memory, before its allowance of 1.5 times that for buffers.
    """
    zero = Bytes(0)
    if offload == "none":
        return d, zero
    grads = Bytes(Fraction(d.params * max(r.gradients, r.master_weights), d.zero_group))
    host = grads + d.master_weights + d.optimizer_states
    if offload == "optimizer":
        return replace(d, gradients=zero, master_weights=zero, optimizer_states=zero), host
    return (replace(d, weights=zero, gradients=zero, master_weights=zero, optimizer_states=zero),
            host + d.weights)


def _offloaded_inputs(i: StepInputs, offload: str) -> StepInputs:
    """A step's inputs with the offloaded states gone from the GPU: the optimizer step runs on
    the CPU (no states, step counters, fp32 gradients or temporaries on the GPU) and each
    gradient partition leaves as it is reduced; with "parameters" the weights' shards leave
    too. Transient GPU buffers (unsharded units and gradients, reduce-scatter inputs) stay;
    DeepSpeed's reduce buckets and pinned staging buffers are not counted."""
    if offload == "none":
        return i
    zero = Bytes(0)
    g = i.gathered
    return replace(i, master_weights=zero, optimizer_states=zero, step_counters=zero,
                   persistent_gradients=zero, backward_gradients=zero, step_gradients=zero,
                   temporaries=zero, weights=zero if offload == "parameters" else i.weights,
                   gathered=None if g is None else replace(g, layer_sharded_grads=zero))


def _time(run: Run) -> TrainingTime | None:
    """The :class:`TrainingTime` of a run with a :class:`Budget` (checked when it was made)."""
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


def _activations(shape: ModelShape, lay: Layout, t: Training, r: Recipe, batch: Batch,
                 m: int | None) -> tuple[LayerActivations, tuple[StageActivations, ...]]:
    """One layer's saved tensors, and the activations on one device of each stage."""
    family = implementation(t.implementation).family
    split = (shape, batch.seq_len, batch.micro_batch, lay.tp, lay.sequence_parallel, lay.cp)
    layer = _layer(*split, t.recompute, t.attention, r.compute, MASK_BYTES, STAT_BYTES,
                   t.mlp_kernel, family, r.autocast)
    embedding = _input(*split, MASK_BYTES)
    output = _output(*split, r.compute, STAT_BYTES, family, r.autocast)
    rotary = _rotary(shape, batch.seq_len, lay.cp, r.compute, r.autocast)
    pp = lay.pp
    stage_acts = tuple(
        _stage(shape, layer, embedding if i == 0 else None, output if i == pp - 1 else None, pp, m,
               _in_flight(pp, lay.v, m, i), rotary, lay.v)
        for i in range(pp)
    )
    return layer, stage_acts


def _fsdp2_device(shape: ModelShape, lay: Layout, t: Training, d: DeviceMemory) -> DeviceMemory:
    """Rank 0's states under FSDP2, exactly (:func:`trainmath.sharding.fsdp2_rank`); Adam's
    step counters are left out of the optimizer states, as everywhere in the estimate."""
    units = param_shapes(shape).units()
    rank = fsdp2_rank(units, lay.zero_group, 0, t.recipe, t.optimizer)
    counters = len(units[0]) * shape.layers + len(units[-1])
    counters *= STEP_BYTES.get(t.optimizer, 0)
    return replace(d, weights=rank.parameters, gradients=rank.gradients,
                   master_weights=Bytes(0), optimizer_states=rank.optimizer_states - Bytes(counters))


def _share(amount: Fraction | int, n: int, sharded: bool) -> Bytes:
    return Bytes(Fraction(amount) / n if sharded else Fraction(amount))


def _count_only_inputs(run: Run, r: Recipe, per: BytesPerParam, d: DeviceMemory) -> StepInputs:
    """The step of a run known by its parameter count: no activations, no tensor shapes."""
    t, n, z, psi = run.training, run.layout.zero_group, run.training.zero_stage, run.params
    zero = Bytes(0)
    persistent = d.gradients if r.persistent_gradients else zero
    backward = zero if r.persistent_gradients else _share(psi * r.gradients, n, z >= 2)
    step = d.gradients + _share(psi * r.step_copy, n, z >= 1)
    numel = Fraction(psi, n) if z >= 1 else Fraction(psi)
    temps = _temporaries(t.optimizer_impl, numel, None, _state_value(r, t))
    return StepInputs(d.weights, d.master_weights, d.optimizer_states, zero, persistent, backward,
                      step, zero, zero, zero, zero, zero, zero, temps, 0)


def _state_value(r: Recipe, t: Training) -> int:
    o = optimizer(t.optimizer)
    return r.state_value if o.state_bytes is None else o.state_bytes


def _stage_inputs(run: Run, r: Recipe, per: BytesPerParam, d: DeviceMemory,
                  acts: StageActivations | None, fsdp2: bool) -> StepInputs:
    """What one device of one pipeline stage holds over the step (:mod:`trainmath.peak`)."""
    shape, lay, t, batch = run.shape, run.layout, run.training, run.batch
    n, z, tp, pp = lay.zero_group, t.zero_stage, lay.tp, lay.pp
    first, last = d.stage == 0, d.stage == pp - 1
    shapes = param_shapes(shape)
    h, V = shape.hidden, shape.vocab
    zero = Bytes(0)
    P = d.params
    Pe, ne = d.expert_params, d.expert_zero_group  # routed experts: their own ZeRO group
    Pd = P - Pe
    # the parameter tensors on this device, for Adam's step counters and the largest one
    # (3-D tensors are a mixture's routed experts, split ep·tp ways)
    layer_tensors = [Fraction(math.prod(s), (tp * lay.ep if len(s) == 3 else tp) if len(s) > 1 else 1)
                     for s in shapes.layer]
    root_first = [Fraction(V * h, tp)] + ([Fraction(shape.positions * h)] if shape.positions else [])
    norms = 2 if shape.norm == "layernorm" else 1
    root_last = [Fraction(h)] * norms + ([Fraction(V * h, tp)] if not shape.tied_embeddings or pp > 1 else [])
    tensors = (d.params and (len(layer_tensors) * (shape.layers // pp)
                             + (len(root_first) if first else 0) + (len(root_last) if last else 0)))
    counters = Bytes(STEP_BYTES.get(t.optimizer, 0) * tensors)
    largest = max(layer_tensors + (root_first if first else []) + (root_last if last else []))
    # gradients: persistent (Megatron's buffer), at the end of backward, at the step
    persistent = d.gradients if r.persistent_gradients else zero
    backward = zero if r.persistent_gradients else (
        _share(Pd * r.gradients, n, z >= 2) + _share(Pe * r.gradients, ne, z >= 2))
    step = d.gradients + _share(Pd * r.step_copy, n, z >= 1) + _share(Pe * r.step_copy, ne, z >= 1)
    sharded_opt = z >= 1
    numel = Fraction(Pd, n) + Fraction(Pe, ne) if sharded_opt else Fraction(P)
    local_largest = -(-largest // n) if sharded_opt else largest
    temps = _temporaries(t.optimizer_impl, numel, local_largest, _state_value(r, t))
    tied = zero
    if shape.tied_embeddings and pp == 1 and z < 3 and not r.persistent_gradients:
        tied = Bytes(2 * r.gradients * Fraction(V * h, tp))  # two contributions, then their sum
    if acts is None:
        A = layer_A = out_A = logits = zero
    else:
        A = acts.total
        layer_A = acts.per_layer.total
        out_A = acts.outputs
        tokens = Fraction(batch.seq_len * batch.micro_batch, lay.cp)
        logits = Bytes(FP32_BYTES * tokens * Fraction(V, tp)) if last else zero
    logits16 = logits * Fraction(r.compute, FP32_BYTES)
    gathered = _gathered(shape, lay, t, r, first, last, fsdp2) if z == 3 else None
    return StepInputs(d.weights, d.master_weights, d.optimizer_states, counters, persistent,
                      backward, step, A, layer_A, out_A, logits, logits16, tied, temps,
                      shape.layers // pp, gathered)


def _gathered(shape: ModelShape, lay: Layout, t: Training, r: Recipe, first: bool, last: bool,
              fsdp2: bool) -> GatheredUnits:
    """ZeRO-3's unsharded units on one device: FSDP2's exact padded units (one per decoder
    layer and the root, which FSDP2 holds from the forward to the end of the backward), or for
    other ZeRO-3 engines a decoder layer and the LM head, even splits."""
    n, tp = lay.zero_group, lay.tp
    c = r.compute
    reduce = r.reduce_bytes or c
    h, V = shape.hidden, shape.vocab
    norms = 2 if shape.norm == "layernorm" else 1
    if fsdp2:
        shapes = param_shapes(shape)
        layer_rank = fsdp2_rank([list(shapes.layer)], n, 0, t.recipe, t.optimizer)
        root_rank = fsdp2_rank([list(shapes.root)], n, 0, t.recipe, t.optimizer)
        layer = layer_rank.unsharded_units[0]  # padded, in the compute format
        root = root_rank.unsharded_units[0]
        head = Bytes(c * (V * h + norms * h))  # the LM head's (or tied embedding's) and norm's
        return GatheredUnits(layer, layer, layer * Fraction(reduce, c), layer_rank.gradients,
                             root, head, root, root * Fraction(reduce, c))
    routed = param_breakdown(shape).per_layer_routed  # a mixture's experts: ep·tp ways
    dense = Fraction(param_count(shape) - _root_params(shape) - shape.layers * routed,
                     shape.layers * tp)
    experts = Fraction(routed, lay.ep * tp)
    layer = Bytes(c * (dense + experts))
    head = Bytes(c * Fraction(V * h, tp)) if last else Bytes(0)
    grads = Bytes(r.gradients * (dense / n + experts / lay.expert_zero_group))
    return GatheredUnits(layer, layer, layer * Fraction(reduce, c), grads, head, head, head,
                         head * Fraction(reduce, c))


def _root_params(shape: ModelShape) -> int:
    norms = 2 if shape.norm == "layernorm" else 1
    head = 0 if shape.tied_embeddings else shape.vocab * shape.hidden
    return shape.vocab * shape.hidden + shape.positions * shape.hidden + norms * shape.hidden + head


# -- LoRA and QLoRA -----------------------------------------------------------------------------
def _adapter_estimate(run: Run, r: Recipe) -> Estimate:
    """One device of a LoRA or QLoRA run (:mod:`trainmath.finetune`): the frozen base and the
    adapter's states, activations through the frozen layers, and the step's peak."""
    shape, t, batch, a = run.shape, run.training, run.batch, run.adapter
    states = _ft._adapter_states(shape, a, r, t.optimizer)
    compute = _ft.BASE_BYTES  # the frozen base computes in 16-bit (QLoRA: bf16, dequantised)
    adapter_bytes = _ft.adapter_value_bytes(r)
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
            layer = _ft._lora_layer(full, shape, a, s * b, compute, adapter_bytes, MASK_BYTES)
        output = _ft._frozen_output(_output(*split, compute, STAT_BYTES, family, False))
        rotary = _rotary(shape, s, 1, compute, False)
        stage_acts = (_stage(shape, layer, _ft.frozen_embedding(), output, 1, None,
                             _in_flight(1, 1, None, 0), rotary, 1),)
    acts = Bytes(0) if layer is None else stage_acts[0].total
    device = DeviceMemory(
        stage=0, params=states.frozen, zero_stage=0, zero_group=run.layout.zero_group,
        weights=states.weights, gradients=states.gradients, master_weights=states.master_weights,
        optimizer_states=states.optimizer_states, activations=acts)
    peak = _step_peak(_adapter_step_inputs(run, r, states, stage_acts[0]))
    return Estimate(run, (device,), device, layer, None, None, peak, 0, stage_acts)


def _adapter_step_inputs(run: Run, r: Recipe, states: _ft.AdapterStates,
                         acts: StageActivations | None) -> StepInputs:
    """What one device holds over a step of an adapter run: only the adapter has gradients,
    step counters, a step copy and optimizer temporaries."""
    shape, t, batch = run.shape, run.training, run.batch
    n = states.trainable
    zero = Bytes(0)
    counters = Bytes(STEP_BYTES.get(t.optimizer, 0) * states.trainable_tensors)
    backward = states.gradients
    step = states.gradients + Bytes(n * r.step_copy)
    largest = max(a.rank * max(d_in, d_out) for a in (run.adapter,)
                  for d_in, d_out in (_ft.matrices(shape)[m] for m in run.adapter.targets))
    temps = _temporaries(t.optimizer_impl, n, largest, _state_value(r, t))
    if acts is None:
        A = layer_A = out_A = logits = zero
    else:
        A, layer_A, out_A = acts.total, acts.per_layer.total, acts.outputs
        logits = Bytes(FP32_BYTES * batch.seq_len * batch.micro_batch * shape.vocab)
    logits16 = logits * Fraction(_ft.BASE_BYTES, FP32_BYTES)
    return StepInputs(states.weights, states.master_weights, states.optimizer_states, counters,
                      zero, backward, step, A, layer_A, out_A, logits, logits16, zero, temps,
                      shape.layers)
