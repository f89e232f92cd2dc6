"""One training run, checked once: :class:`Run` and its parts, and :func:`run` from keywords.

A :class:`Run` describes one run in small frozen parts: the model (a checked
:class:`~trainmath.model.shape.ModelShape`, or a parameter count alone, which gives model states
only), the :class:`~trainmath.memory.training.Training` setup (recipe, optimizer, ZeRO stage,
recomputation, kernels, offload), the :class:`~trainmath.parallel.layout.Layout`, the
:class:`~trainmath.parallel.layout.Batch` and, optionally, the :class:`Gpu`, a :class:`Budget`
of tokens and MFU, and a LoRA or QLoRA :class:`~trainmath.memory.finetune.Adapter`. Each part
checks its own fields when it is made; the Run checks how they fit together with the rules of
:mod:`trainmath.runs.rules` and raises one :class:`~trainmath.problems.Invalid` (a ValueError)
that lists every problem, each naming the fields, the bad values and what is accepted. What the
training setup leaves open the Run fills from the model and the recipe, and records in
:attr:`Run.assumed`. A Run that exists is valid, so :func:`trainmath.runs.estimates.estimate`
checks nothing again.

>>> r = run("llama-2-7b", dp=8, zero_stage=1)
>>> r.params, r.training.recipe, r.training.implementation, r.assumed
(6738415616, 'bf16-mixed', 'megatron-te', ('recipe', 'implementation', 'optimizer_impl'))
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from ..hardware import GPUS, gpu as _accelerator
from ..memory.finetune import Adapter
from ..memory.offload import Tiers, tiers_problems
from ..memory.training import Training, offload_problems, resolve
from ..model.moe import Routing
from ..model.presets import preset
from ..model.shape import ModelShape, param_count, scale_problems
from ..parallel.layout import Batch, Layout, cluster_problems
from ..problems import Invalid, Problem, check
from ..units import Bytes, parse_bytes, positive_int
from ..time.step import Timing
from .rules import (adapter_problems, budget_problems, count_only_problems, positions_warning,
                    predicted_time_problems, run_problems, time_problems, untimed_reason)


@dataclass(frozen=True)
class Gpu:
    """One device: the memory the estimate checks the run against, and which GPU it is.

    ``Gpu(kind="h100-sxm")`` takes that GPU's usable memory, the total ``nvidia-smi`` reports
    (:attr:`trainmath.hardware.GpuMemory.usable`: 81,559 MiB for an H100 sold as "80GB");
    ``Gpu(memory)`` takes an amount as given (``parse_bytes("80GB")`` is 80 × 10^9 bytes, less
    than an "80GB" card holds). ``kind`` is a key of :data:`trainmath.hardware.GPUS` (or one of
    :data:`trainmath.hardware.GPU_ALIASES`, resolved to its key). Given both, ``memory`` is the
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
    assumed (a fraction in (0, 1]), for the time to train (:class:`~trainmath.runs.estimates.TrainingTime`);
    ``mfu`` None: the MFU the step-time model predicts for the run."""

    tokens: int
    mfu: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", positive_int("tokens", self.tokens))
        if self.mfu is None:
            return
        if isinstance(self.mfu, bool) or not isinstance(self.mfu, (int, float, Fraction)) \
                or not 0 < self.mfu <= 1:
            raise ValueError(f"mfu must be a fraction in (0, 1], such as 0.4, got {self.mfu!r}")


class ShapeNeeded(Invalid):
    """A run given by its parameter count alone asks for what only a shape can say.

    :attr:`~trainmath.problems.Invalid.fields` names the parts of the run that need the shape (``"tp"``, ``"pp"``, ``"v"``,
    ``"ep"``, ``"global_batch"``), so a caller can word its own message without reading this one.
    """


@dataclass(frozen=True)
class Run:
    """One training run, checked once, when it is made. See the module docstring.

    ``model`` is a :class:`~trainmath.model.shape.ModelShape` or a parameter count; with a count
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
    #: fragmentation), added to the step's peak for :attr:`~trainmath.runs.estimates.Estimate.fits`; 0 unless given
    overhead: Bytes = Bytes(0)
    #: tokens and MFU, for the time to train (needs a GPU kind for its peak); None: no time
    budget: Budget | None = None
    #: GPUs on one node, for the host memory offload needs per node; None: per device only
    gpus_per_node: int | None = None
    #: a LoRA or QLoRA adapter on the frozen model (:mod:`trainmath.memory.finetune`); None: every
    #: parameter is trained (pre-training or full fine-tuning)
    adapter: Adapter | None = None
    #: the step-time model's settings (:class:`~trainmath.time.step.Timing`): overlap, flash
    #: kernel, sustained share, links
    timing: Timing = Timing()
    #: what the run does that is accepted but worth saying (a sequence past the positions a
    #: rotary model was trained for); set when the Run is made
    warnings: tuple[str, ...] = ()
    #: where offloaded states go (CPU memory or NVMe) and each tier's capacity per node
    #: (:class:`trainmath.memory.offload.Tiers`; the default checks no host tier)
    tiers: Tiers = Tiers()

    def __post_init__(self) -> None:
        for name, kind in (("training", Training), ("layout", Layout), ("batch", Batch)):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"{name} must be a {kind.__name__}, got {getattr(self, name)!r}")
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
        if not isinstance(self.model, ModelShape):  # then a parameter count, such as 7e9
            object.__setattr__(self, "model", positive_int("model (a ModelShape or a parameter "
                                                           "count)", self.model))
        problems = [] if self.adapter is None else adapter_problems(
            self.adapter, shape=self.shape, layout=self.layout, training=self.training,
            timed=self.budget is not None)
        if self.shape is None:
            needs = count_only_problems(self.layout, self.batch, self.training.routing)
            if needs and not problems:
                raise ShapeNeeded(needs)
            problems += needs
        check(problems)
        self._resolve()
        t = self.training
        problems = offload_problems(t)
        if not isinstance(self.tiers, Tiers):
            raise ValueError(f"tiers must be a Tiers, got {self.tiers!r}")
        problems += tiers_problems(self.tiers, offload=t.offload, zero_stage=t.zero_stage,
                                   gpus_per_node=self.gpus_per_node)
        if self.budget is not None:
            problems += budget_problems(t, None if self.gpu is None else self.gpu.kind)
        if self.shape is not None:
            problems += run_problems(self.shape, layout=self.layout, training=t, batch=self.batch)
        if not isinstance(self.timing, Timing):
            raise ValueError(f"timing must be a Timing, got {self.timing!r}")
        if self.budget is not None and self.budget.mfu is None:
            problems += predicted_time_problems(
                shape=self.shape, batch=self.batch, gpu=None if self.gpu is None else self.gpu.kind,
                timeable=untimed_reason(t))
        check(problems)
        object.__setattr__(self, "warnings", tuple(p.message for p in self.warning_problems()))

    def warning_problems(self) -> list[Problem]:
        """What the run does that is accepted but worth saying, as problems naming their fields:
        a sequence past a rotary model's positions (:func:`~trainmath.runs.rules.positions_warning`),
        a model or a GPU count beyond physical sense
        (:func:`~trainmath.model.shape.scale_problems`,
        :func:`~trainmath.parallel.layout.cluster_problems`)."""
        found = []
        if self.shape is not None:
            warning = positions_warning(self.shape, self.batch.seq_len)
            if warning is not None:
                found.append(Problem(("seq_len",), warning))
        params = self.model if self.shape is None else param_count(self.shape)
        return [*found, *scale_problems(params), *cluster_problems(self.layout.gpus)]

    def _resolve(self) -> None:
        """Fill the training choices left open (:func:`trainmath.memory.training.resolve`); an
        adapter run assumes peft's fp32 adapters and Hugging Face's kernels where not given."""
        if self.training.resolved:
            return
        given = self.training
        defaults = {}
        if self.adapter is not None:
            if given.recipe is None:
                defaults["recipe"] = "fp32"
            if given.implementation is None:
                defaults["implementation"] = "hf-eager" if given.attention == "eager" else "hf-sdpa"
        training, assumed = resolve(replace(given, **defaults), self.shape)
        assumed = tuple(sorted({*assumed, *defaults},
                               key=("recipe", "implementation", "optimizer_impl").index))
        object.__setattr__(self, "training", training)
        object.__setattr__(self, "assumed", assumed)

    @property
    def shape(self) -> ModelShape | None:
        """The model's shape, or None when only its parameter count is known."""
        return self.model if isinstance(self.model, ModelShape) else None

    @property
    def params(self) -> int:
        """Parameters of the whole model."""
        return param_count(self.model) if isinstance(self.model, ModelShape) else self.model


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
    stages: tuple[int, ...] = (),
    timing: Timing | None = None,
    etp: int | None = None,
    capacity_factor: float | None = None,
    pad_to_capacity: bool = False,
    expert_load: str = "balanced",
    offload_to: str = "cpu",
    host_memory: Bytes | str | None = None,
    nvme: Bytes | str | None = None,
    schedule: str = "1f1b",
    cp_kind: str = "ring",
    recompute_policy: str | None = None,
    compiled: bool = False,
    loss: str = "standard",
    loss_chunks: int | None = None,
    activation_offload: str = "none",
) -> Run:
    """A :class:`Run` from plain keywords: ``model`` may be a preset name, ``gpu`` a GPU kind
    (``"h100-sxm"``: its usable memory, see :class:`Gpu`) and ``gpu_memory`` an amount, a text
    such as ``"80GB"`` or ``"141 GiB"`` (:func:`trainmath.units.parse_bytes`), which overrides
    the kind's memory when both are given; ``overhead`` an amount too. ``tokens`` and ``mfu``
    go together (:class:`Budget`; ``tokens`` alone: the predicted MFU). ``stages`` splits the
    layers over the pipeline (:class:`~trainmath.parallel.layout.Layout`), ``timing`` sets the
    step-time model (:class:`~trainmath.time.step.Timing`). What is left None the Run fills from the model's and the
    recipe's defaults (:class:`~trainmath.memory.training.Training`). ``adapter`` is a
    :class:`trainmath.memory.finetune.Adapter` (LoRA or QLoRA on the frozen model). A mixture
    of experts takes ``etp`` (the expert-tensor-parallel size, tp unless given) and its routing,
    ``capacity_factor``, ``pad_to_capacity`` and the ``expert_load`` counted
    (:class:`trainmath.model.moe.Routing`). ``offload_to`` ("cpu" or "nvme"), ``host_memory``
    and ``nvme`` (per node, amounts or texts such as ``"1.5TB"``) are the offload's tiers
    (:class:`trainmath.memory.offload.Tiers`). ``schedule`` is the pipeline schedule and
    ``cp_kind`` how context parallelism splits attention (:class:`~trainmath.parallel.layout.Layout`).
    ``recompute="op"`` takes a ``recompute_policy`` and ``compiled`` runs the layers under
    ``torch.compile`` (:mod:`trainmath.memory.checkpointing`). ``loss`` (standard, chunked into
    ``loss_chunks``, or Liger's fused kernel) and ``activation_offload`` (none, sync, overlap)
    are the memory techniques of :mod:`trainmath.memory.loss` and :mod:`trainmath.memory.act_offload`.

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
    check(time_problems(tokens, mfu))
    host_memory, nvme = (parse_bytes(x) if isinstance(x, str) else x for x in (host_memory, nvme))
    return Run(
        model=model,
        training=Training(recipe=recipe, optimizer=optimizer, zero_stage=zero_stage,
                          recompute=recompute, implementation=implementation,
                          mlp_kernel=mlp_kernel, attention=attention,
                          optimizer_impl=optimizer_impl, offload=offload,
                          routing=Routing(capacity_factor, pad_to_capacity, expert_load),
                          recompute_policy=recompute_policy, compiled=compiled,
                          loss=loss, loss_chunks=loss_chunks,
                          activation_offload=activation_offload),
        layout=Layout(dp=dp, tp=tp, pp=pp, cp=cp, v=v, sequence_parallel=sequence_parallel, ep=ep,
                      stages=stages, etp=etp, schedule=schedule, cp_kind=cp_kind),
        batch=Batch(seq_len, micro_batch, global_batch),
        gpu=None if gpu is None and gpu_memory is None else Gpu(gpu_memory, gpu),
        overhead=overhead,
        budget=None if tokens is None else Budget(tokens, mfu),
        gpus_per_node=gpus_per_node,
        adapter=adapter,
        timing=Timing() if timing is None else timing,
        tiers=Tiers(offload_to, host_memory, nvme),
    )
