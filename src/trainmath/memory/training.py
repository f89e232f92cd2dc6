"""How a model is trained: recipe, optimizer, ZeRO stage, recomputation, kernels, offload.

:class:`Training` checks each choice when it is made; what it leaves open (None) is filled by
:func:`resolve` from what the model is commonly trained with
(:func:`trainmath.model.presets.trained_with`) and the recipe's defaults, and the names of the
choices so filled are returned, so a report can say what it assumed. The rules of a training
setup alone (a ZeRO stage the recipe offers, offload as the frameworks offer it) live here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .checkpointing import parse_policy, recompute_policy_problems
from .kernels import (ACTIVATION_OFFLOADS, ATTENTION_KINDS, DEFAULT_LOSS_CHUNKS, IMPLEMENTATIONS,
                      LOSS_KINDS, MLP_KERNELS, RECOMPUTE_KINDS, attention_problems,
                      implementation, loss_problems)
from .recipes import Recipe, optimizer, optimizer_impl, recipe
from .sharding import OFFLOAD_ALIASES, OFFLOADS, check_stage
from ..model.moe import Routing
from ..model.presets import CUSTOM_DEFAULTS, trained_with
from ..model.shape import ModelShape
from ..problems import Problem, check
from ..units import choice, positive_int


# -- the parts of a run -------------------------------------------------------------------------
@dataclass(frozen=True)
class Training:
    """How the model is trained: recipe, optimizer, ZeRO stage, recomputation, kernels.

    ``recipe`` is one of :data:`trainmath.memory.recipes.RECIPES` (or an alias such as ``"zero-paper"``),
    ``optimizer`` one of :data:`trainmath.memory.recipes.OPTIMIZERS`, ``zero_stage`` 0 to 3
    (:mod:`trainmath.memory.sharding`) among those the recipe offers, ``recompute`` one of
    :data:`trainmath.memory.kernels.RECOMPUTE_KINDS`, ``implementation`` one of
    :data:`trainmath.memory.kernels.IMPLEMENTATIONS`, ``mlp_kernel`` one of
    :data:`trainmath.memory.kernels.MLP_KERNELS` (eager PyTorch, or a fused SwiGLU) and
    ``optimizer_impl`` one of :data:`trainmath.memory.recipes.OPTIMIZER_IMPLS`.

    None leaves a choice to the :class:`~trainmath.runs.description.Run`, which takes it from the model
    (:func:`trainmath.model.presets.trained_with`) or the recipe. ``attention`` ("eager" or "flash") is
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
    #: model states moved to host (CPU) memory: one of :data:`trainmath.memory.sharding.OFFLOADS`
    #: ("none", "optimizer": ZeRO-Offload, "parameters": ZeRO-Infinity / FSDP2 CPUOffloadPolicy)
    offload: str = "none"
    #: a mixture of experts' routing: capacity factor, padding, and the expert load counted
    #: (:class:`trainmath.model.moe.Routing`; the default is dropless and balanced)
    routing: Routing = Routing()
    #: with ``recompute="op"``: the op-level policy, "torchtitan" or the ops whose outputs are
    #: saved ("q,v,attention"; :mod:`trainmath.memory.checkpointing`); None: torchtitan's
    recompute_policy: str | None = None
    #: under ``torch.compile``: its min-cut partitioner decides what is saved for backward
    compiled: bool = False
    #: the loss over the vocabulary: one of :data:`trainmath.memory.kernels.LOSS_KINDS`
    #: (standard, chunked, fused: :mod:`trainmath.memory.loss`)
    loss: str = "standard"
    #: a chunked loss's chunk count; None: :data:`trainmath.memory.kernels.DEFAULT_LOSS_CHUNKS`
    loss_chunks: int | None = None
    #: activations offloaded to host memory: one of
    #: :data:`trainmath.memory.kernels.ACTIVATION_OFFLOADS` (:mod:`trainmath.memory.act_offload`)
    activation_offload: str = "none"

    def __post_init__(self) -> None:
        if self.recipe is not None:
            object.__setattr__(self, "recipe", recipe(self.recipe).name)  # aliases resolved
        offload = OFFLOAD_ALIASES.get(self.offload, self.offload)
        object.__setattr__(self, "offload", choice("offload", offload, OFFLOADS))
        optimizer(self.optimizer)
        problems = []
        if self.zero_stage is not None:
            object.__setattr__(self, "zero_stage", check_stage(self.zero_stage))
            if self.recipe is not None:
                problems += recipe_stage_problems(recipe(self.recipe), self.zero_stage)
        choice("recompute", self.recompute, RECOMPUTE_KINDS)
        if self.recompute_policy is not None:
            object.__setattr__(self, "recompute_policy", parse_policy(self.recompute_policy))
        problems += recompute_policy_problems(self.recompute, self.recompute_policy)
        if not isinstance(self.compiled, bool):
            raise ValueError(f"compiled must be True or False, got {self.compiled!r}")
        choice("mlp_kernel", self.mlp_kernel, MLP_KERNELS)
        if self.attention is not None:
            choice("attention", self.attention, ATTENTION_KINDS)
        if self.implementation is not None:
            problems += attention_problems(self.attention, self.implementation)
        check(problems)
        choice("loss", self.loss, LOSS_KINDS)
        choice("activation_offload", self.activation_offload, ACTIVATION_OFFLOADS)
        if self.loss_chunks is not None:
            positive_int("loss_chunks", self.loss_chunks)
        check(loss_problems(self.loss, self.loss_chunks))
        if self.optimizer_impl is not None:
            optimizer_impl(self.optimizer_impl)
        if not isinstance(self.routing, Routing):
            raise ValueError(f"routing must be a trainmath.model.moe.Routing, got {self.routing!r}")

    @property
    def chunks(self) -> int:
        """Chunks the loss scores the tokens in: ``loss_chunks``, or for a chunked loss without
        one :data:`~trainmath.memory.kernels.DEFAULT_LOSS_CHUNKS`; 1 for the standard loss
        (Liger's fused kernel sizes its own: :func:`trainmath.memory.loss.liger_chunk_size`)."""
        if self.loss != "chunked":
            return 1
        return self.loss_chunks or DEFAULT_LOSS_CHUNKS

    @property
    def resolved(self) -> bool:
        """Whether every choice is made (a :class:`~trainmath.runs.description.Run`'s training always is)."""
        return None not in (self.recipe, self.zero_stage, self.implementation,
                            self.attention, self.optimizer_impl)


def recipe_stage_problems(r: Recipe, stage: int) -> list[Problem]:
    """A ZeRO stage must be one the recipe's framework offers (:attr:`~trainmath.memory.recipes.Recipe.stages`)."""
    if stage not in r.stages:
        return [Problem(("zero_stage", "recipe"), f"ZeRO stage {stage} is not one recipe "
                        f"{r.name!r} offers; accepted: {', '.join(map(str, r.stages))}")]
    return []


def _family_with(attention: str, family: str) -> str:
    """The implementation of ``family`` whose attention is ``attention``."""
    (name,) = [i.name for i in IMPLEMENTATIONS.values()
               if i.family == family and i.attention == attention]
    return name


def resolve(t: Training, model: ModelShape | None) -> tuple[Training, tuple[str, ...]]:
    """``t`` with every choice made, and the names of those taken from the defaults: the
    recipe and kernels from what ``model`` is commonly trained with
    (:func:`trainmath.model.presets.trained_with`; a custom shape's defaults without one), the
    ZeRO stage and the optimizer's implementation from the recipe."""
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
    check(recipe_stage_problems(r, stage))
    impl_opt = t.optimizer_impl
    if impl_opt is None:  # bitsandbytes steps each tensor in one kernel (optimizer_update_32bit)
        impl_opt = "fused" if optimizer(t.optimizer).bits is not None else r.optimizer_impl
        assumed.append("optimizer_impl")
    resolved = replace(t, recipe=r.name, zero_stage=stage, implementation=impl,
                       attention=implementation(impl).attention, optimizer_impl=impl_opt)
    return resolved, tuple(assumed)


def offload_problems(t: Training) -> list[Problem]:
    """Offload as the frameworks offer it (:data:`trainmath.memory.sharding.OFFLOADS`), for a
    resolved training setup: ZeRO-Offload builds on ZeRO-2 (Ren et al. 2021, §4), so
    "optimizer" needs stage 2 or 3 and a recipe with an optimizer-only offload (FSDP2 has none);
    "parameters" needs stage 3 (ZeRO-Infinity, FSDP2's CPUOffloadPolicy). Megatron-LM's
    persistent fp32 gradient buffer is not modelled with offload."""
    if t.offload == "none":
        return []
    if recipe(t.recipe).persistent_gradients:
        return [Problem(("offload", "recipe"), f"offload {t.offload!r} with recipe {t.recipe!r} "
                        "(Megatron-LM's persistent fp32 gradient buffer) is not modelled; accepted: "
                        "offload 'none', or a ZeRO recipe (bf16-mixed, deepspeed, fsdp2, ...)")]
    if t.offload == "optimizer":
        if t.recipe == "fsdp2":
            return [Problem(("offload", "recipe"), "offload 'optimizer' with recipe 'fsdp2': FSDP2 "
                            "has no optimizer-only offload (CPUOffloadPolicy moves the sharded "
                            "parameters, gradients and the step); accepted: offload 'parameters'")]
        if t.zero_stage < 2:
            return [Problem(("offload", "zero_stage"), "offload 'optimizer' needs ZeRO stage 2 or 3 "
                            f"(ZeRO-Offload builds on ZeRO-2), got stage {t.zero_stage}; accepted: "
                            "stage 2 or 3")]
    elif t.zero_stage != 3:
        return [Problem(("offload", "zero_stage"), "offload 'parameters' (params) needs ZeRO stage "
                        f"3 (sharded parameters), got stage {t.zero_stage}; accepted: stage 3")]
    return []
