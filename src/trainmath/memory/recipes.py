"""Bytes per parameter of training state, and their totals for a model of N parameters.

Training keeps four kinds of state per parameter (Rajbhandari et al. 2020, *ZeRO*, §3.1):

- **weights** used in the forward and backward passes, in the compute precision;
- **gradients**, in the compute precision;
- **master weights**, an fp32 copy the optimizer updates, when compute is 16-bit
  (Micikevicius et al. 2018, *Mixed Precision Training*, §3.1);
- **optimizer states**: Adam's first and second moments m and v (Kingma & Ba 2015,
  Algorithm 1), SGD's momentum buffer, or nothing for plain SGD.

ZeRO §3.1 counts mixed-precision Adam as 2Ψ + 2Ψ + KΨ bytes with K = 12 (master weights,
m and v in fp32): 16 bytes per parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..problems import Problem, check
from ..units import Bytes, choice, positive_int


def peak_precision(r: Recipe) -> str:
    """The tensor-core precision a recipe's matrix multiplies run in, whose dense peak is the
    MFU denominator (:meth:`trainmath.hardware.Accelerator.peak`): "fp8" for fp8 training,
    "fp16" for fp16-mixed, "bf16" for every other 16-bit compute (autocast included); a
    ValueError for fp32, which the GPU table has no peak for.

    >>> peak_precision(recipe("amp")), peak_precision(recipe("fp16-mixed"))
    ('bf16', 'fp16')
    """
    if r.fp8_gemms:
        return "fp8"
    check(peak_precision_problems(r))
    return "fp16" if r.name.startswith("fp16") else "bf16"


def peak_precision_problems(r: Recipe) -> list[Problem]:
    """A recipe that computes in fp32 has no tensor-core peak in the GPU table to time it by."""
    if not r.fp8_gemms and r.compute != 2:
        return [Problem(("recipe",), f"recipe {r.name!r} computes in fp32, which the GPU table has "
                        "no peak for; accepted for a time to train: a recipe computing in bf16, "
                        "fp16 or fp8")]
    return []


#: How an optimizer's step runs, which decides its temporaries (:func:`trainmath.memory.peak.optimizer_temporaries`):
#: "fused" is one kernel per group of tensors that keeps its intermediates in registers
#: (``torch.optim.AdamW(fused=True)``, Apex's and Transformer Engine's FusedAdam, which
#: Megatron-LM uses, and DeepSpeed's FusedAdam); "foreach" is PyTorch's multi-tensor path, the
#: default of ``torch.optim`` when every parameter is on a CUDA device
#: (``_default_to_fused_or_foreach`` in ``torch/optim/optimizer.py``); "for-loop" is its
#: single-tensor path (``foreach=False``, the default on the CPU).
OPTIMIZER_IMPLS = ("fused", "foreach", "for-loop")


@dataclass(frozen=True)
class Recipe:
    """How training keeps its state: bytes of each kind per parameter, and when each exists.

    The first five fields are the formats (ZeRO §3.1's accounting): the weights the forward pass
    reads (or, for recipes with fp32 parameters, the stored fp32 parameters), the gradients
    backward produces, the fp32 master copy and each optimizer-state value. The rest say what a
    framework does beyond the formats, which is where frameworks disagree:

    - ``gradient_copy``: an fp32 copy of each gradient that the optimizer steps from, kept beside
      the master weights (sharded with them from ZeRO stage 1) and still alive after the step;
    - ``step_copy``: bytes per parameter alive only during the optimizer step (an fp32 copy of
      every gradient, made all at once before it and dropped after it);
    - ``frees_gradients``: backward's gradients are freed as they are copied, so only the copy
      is left at the step;
    - ``persistent_gradients``: the gradients live in a buffer allocated once (Megatron-LM's
      ``main_grad``), alive through the forward and backward passes, not made by each backward;
    - ``compute``: bytes of a 16-bit or fp32 activation value, the format the forward runs in;
    - ``autocast``: ``torch.autocast`` over fp32 parameters (fp32 residual stream, a 16-bit copy
      of every Linear weight saved for backward: :mod:`trainmath.memory.activations`);
    - ``stages``: the ZeRO stages the framework offers; ``default_stage`` the one it uses when
      none is given (FSDP2's ``fully_shard`` shards everything: 3);
    - ``reduce_bytes``: bytes per element of the gradients' reduce-scatter when it runs in
      another format than the gradients (FSDP2's ``reduce_dtype=torch.float32``: 4);
    - ``optimizer_impl``: how its optimizer step usually runs (:data:`OPTIMIZER_IMPLS`);
    - ``fp8_gemms``: its matrix multiplies run in fp8 (the fp8 recipe);
    - ``framework``: "" for the four precision recipes (formats only), else the framework whose
      behaviour it follows.
    """

    name: str
    weights: int
    gradients: int
    master_weights: int
    #: bytes of each optimizer-state value (a moment or momentum entry)
    state_value: int
    description: str
    gradient_copy: int = 0
    step_copy: int = 0
    frees_gradients: bool = False
    persistent_gradients: bool = False
    compute: int = 2
    autocast: bool = False
    stages: tuple[int, ...] = (0, 1, 2, 3)
    default_stage: int = 0
    reduce_bytes: int | None = None
    optimizer_impl: str = "foreach"
    framework: str = ""
    #: the matrix multiplies run in fp8 (Transformer Engine): the peak a time to train is
    #: measured against is the fp8 one (:func:`trainmath.memory.recipes.peak_precision`)
    fp8_gemms: bool = False

    @property
    def after_step(self) -> int:
        """Bytes of gradients per parameter kept after the step: backward's, unless freed, and
        the fp32 copy."""
        return (0 if self.frees_gradients else self.gradients) + self.gradient_copy


_ZERO_STEP = ("an fp32 copy of every gradient exists at the step (the optimizer steps the "
              "fp32 masters): 4 more bytes per parameter there, dropped after it")

#: The recipes by name (``precision=``; the command's ``--recipe``), each with its source in
#: ``description``: first the four precision recipes (formats only, as ZeRO §3.1 counts them),
#: then what frameworks really keep, each checked against PyTorch (docs/_data/measurements.json,
#: :mod:`trainmath.checks.measured`) and, where the framework publishes one, its own formula.
#:
#: :meta hide-value:
RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            "fp32", 4, 4, 0, 4,
            "everything in fp32; the weights are their own master copy",
            compute=4,
        ),
        Recipe(
            "fp16-mixed", 2, 2, 4, 4,
            "fp16 weights and gradients for compute, fp32 master weights and optimizer states "
            f"(Micikevicius et al. 2018; ZeRO §3.1); {_ZERO_STEP}",
            step_copy=4, optimizer_impl="fused",
        ),
        Recipe(
            "bf16-mixed", 2, 2, 4, 4,
            "bf16 weights and gradients for compute, fp32 master weights and optimizer states "
            f"(Kalamkar et al. 2019; ZeRO §3.1, the 16 bytes its paper counts); {_ZERO_STEP}",
            step_copy=4, optimizer_impl="fused",
        ),
        Recipe(
            "bf16", 2, 2, 0, 2,
            "pure bf16: weights, gradients and optimizer states in bf16, no fp32 master copy "
            "(Zamirai et al. 2020, Revisiting BFloat16 Training)",
        ),
        Recipe(
            "megatron", 2, 4, 4, 4,
            "Megatron-LM: bf16 parameters, gradients accumulated and all-reduced in an fp32 "
            "main_grad buffer allocated once, fp32 master weights whose .grad is that buffer, "
            "Adam in fp32: 18 bytes per parameter; with its distributed optimizer (ZeRO stage 1) "
            "6 + 12/d (Megatron-LM docs/source/api-guide/dist_optimizer.md; "
            "Float16OptimizerWithFloat16Params with accumulate_allreduce_grads_in_fp32)",
            persistent_gradients=True, optimizer_impl="fused", framework="Megatron-LM",
        ),
        Recipe(
            "deepspeed", 2, 2, 4, 4,
            "DeepSpeed ZeRO with bf16: 16-bit parameters and gradient partitions, at the step an "
            "fp32 gradient partition, fp32 master weights and Adam: 2 + 18/N bytes per parameter "
            "at ZeRO stage 2, DeepSpeed's own estimate (estimate_zero2_model_states_mem_needs in "
            "deepspeed/runtime/zero/stage_1_and_2.py: 18 = 2 grads_16bit + 4 grads_32bit + "
            "4 params_32bit + 8 optimizer states); DeepSpeed frees both gradient partitions after "
            "the step. At stage 3 this counts (2 + 2 + 4 + 4 + 8)/N, which stage3.py holds at "
            "the step (its grad_partitions_flat_buffer beside the fp32 gradient of the step); "
            "DeepSpeed's own stage-3 estimate prints 18/N plus 4 bytes per parameter of the "
            "largest layer (estimate_zero3_model_states_mem_needs), the gathered 16-bit "
            "parameters and gradients, which the step's peak counts",
            gradient_copy=4, stages=(1, 2, 3), default_stage=2, optimizer_impl="fused",
            framework="DeepSpeed",
        ),
        Recipe(
            "bf16-master", 2, 2, 4, 4,
            "bf16 parameters and gradients with an fp32 master copy in plain PyTorch: each "
            "master's .grad is set to p.grad.float() and both stay alive after the step: 20 bytes "
            "per parameter (the naive recipe)",
            gradient_copy=4, framework="PyTorch",
        ),
        Recipe(
            "bf16-master-free", 2, 2, 4, 4,
            "as bf16-master, but each bf16 gradient is freed once copied to fp32: 18 bytes per "
            "parameter after the step and at its peak (16 during the backward pass)",
            gradient_copy=4, frees_gradients=True, framework="PyTorch",
        ),
        Recipe(
            "amp", 4, 4, 0, 4,
            "PyTorch automatic mixed precision: fp32 parameters (their own master copy) and fp32 "
            "gradients, the forward pass under torch.autocast in bf16: 16 bytes per parameter "
            "split 4/4/0/8 (PyTorch's torch.amp documentation), plus the 16-bit copy of every "
            "Linear weight that autocast saves for backward, counted with the activations",
            compute=2, autocast=True, framework="PyTorch",
        ),
        Recipe(
            "fsdp2", 4, 4, 0, 4,
            "PyTorch FSDP2: fully_shard with MixedPrecisionPolicy(param_dtype=torch.bfloat16, "
            "reduce_dtype=torch.float32): fp32 sharded parameters (their own master copy), fp32 "
            "sharded gradients and Adam, 16/N bytes per parameter; units are all-gathered in bf16 "
            "and their gradients reduce-scattered in fp32 (torch.distributed.fsdp.fully_shard); its "
            "reshard_after_forward=False (ZeRO-2 at the peak) is not modelled",
            compute=2, stages=(3,), default_stage=3, reduce_bytes=4, framework="PyTorch FSDP2",
        ),
        Recipe(
            "fp8-te", 2, 4, 4, 4,
            "fp8 training with NVIDIA Transformer Engine under Megatron-LM (--fp8-format hybrid): "
            "the matrix multiplies of the linear layers run in fp8 (E4M3 forward, E5M2 gradients) "
            "while the model states stay as Megatron-LM keeps them, bf16 parameters, an fp32 "
            "main_grad buffer, fp32 master weights and Adam: 18 bytes per parameter (Transformer "
            "Engine's FP8 primer: fp8 is a compute format, the master weights and optimizer stay "
            "in higher precision). The step's peak adds the fp8 copy of each linear weight that "
            "Transformer Engine casts once per step and caches across micro-batches, with its "
            "transpose on Hopper (FP8_WEIGHT_CACHE_BYTES, 1 + 1 bytes per linear weight; TE "
            "docs, FP8 weight caching and Handling transposes). Each linear layer saves its "
            "input in fp8 for backward, one byte a value (trainmath.memory.fp8_activations)",
            persistent_gradients=True, optimizer_impl="fused",
            framework="Megatron-LM with Transformer Engine", fp8_gemms=True,
        ),
    )
}

#: fp8 training (Transformer Engine): bytes per weight of a linear layer's cached fp8 copies, the
#: weight in fp8 and, on Hopper, its transpose too (TE docs: FP8 weight caching across
#: micro-batches; "Handling transposes"); counted in the step's peak for recipes with fp8_gemms
FP8_WEIGHT_CACHE_BYTES = 2

#: Other names for a recipe: the ZeRO paper's count is bf16-mixed (its paper uses fp16, the
#: same bytes).
RECIPE_ALIASES: dict[str, str] = {"zero-paper": "bf16-mixed"}


@dataclass(frozen=True)
class Optimizer:
    """What an optimizer keeps per parameter."""

    name: str
    #: optimizer-state values per parameter (Adam: m and v; momentum SGD: one buffer)
    states: int
    #: bytes per state value, or None to use the recipe's ``state_value``
    state_bytes: int | None
    #: extra bytes per parameter (8-bit Adam's block-wise quantisation constants)
    overhead: Fraction
    description: str
    #: bitsandbytes' state bits (32 or 8; :mod:`trainmath.memory.bnb_optim`), None for a
    #: PyTorch optimizer whose states follow the parameter's dtype
    bits: int | None = None
    #: bitsandbytes keeps the states of tensors of 100,000 elements or more in CUDA managed memory
    paged: bool = False
    #: how a headline names it: "AdamW", "paged AdamW 32-bit"
    label: str = ""


#: Block size of 8-bit Adam's block-wise quantisation in the paper (Dettmers et al. 2022, §2.1:
#: B = 2048), the one :data:`OPTIMIZERS` counts.
ADAM_8BIT_BLOCK = 2048
#: Block size bitsandbytes' 8-bit optimizers have used since v0.44.0 (pull request 1365,
#: "Change 8bit optimizer blocksize 2048->256"; ``Optimizer2State.init_state`` in
#: ``bitsandbytes/optim/optimizer.py``): one fp32 absmax per 256 values of each state.
BITSANDBYTES_8BIT_BLOCK = 256


def blockwise_overhead(block: int, states: int = 2, scale_bytes: int = 4) -> Fraction:
    """Bytes per parameter of block-wise quantisation constants: ``states`` × ``scale_bytes``
    / ``block``, one fp32 absmax per block of each quantised state (Dettmers et al. 2022, §2).

    >>> blockwise_overhead(ADAM_8BIT_BLOCK), blockwise_overhead(BITSANDBYTES_8BIT_BLOCK)
    (Fraction(1, 256), Fraction(1, 32))
    """
    return Fraction(positive_int("states", states) * positive_int("scale_bytes", scale_bytes),
                    positive_int("block", block))

#: The optimizers by name (``optimizer_name=``), each with its source in ``description``.
#:
#: :meta hide-value:
OPTIMIZERS: dict[str, Optimizer] = {
    o.name: o
    for o in (
        Optimizer("adam", 2, None, Fraction(0),
                  "first moment m and second moment v (Kingma & Ba 2015, Algorithm 1)"),
        Optimizer("adamw", 2, None, Fraction(0),
                  "m and v, as Adam; weight decay adds no state (Loshchilov & Hutter 2019)",
                  label="AdamW"),
        Optimizer("sgd", 0, None, Fraction(0), "no state: the update uses the gradient only"),
        Optimizer("sgd-momentum", 1, None, Fraction(0),
                  "one momentum buffer (torch.optim.SGD with momentum > 0)"),
        Optimizer(
            "adam-8bit", 2, 1, blockwise_overhead(ADAM_8BIT_BLOCK),
            "m and v quantised to 1 byte each, plus one fp32 absmax per block of "
            f"{ADAM_8BIT_BLOCK} values for each (Dettmers et al. 2022, 8-bit Optimizers "
            "via Block-wise Quantization, §2)",
        ),
        Optimizer(
            "adamw-8bit", 2, 1, blockwise_overhead(BITSANDBYTES_8BIT_BLOCK),
            "bitsandbytes' AdamW with optim_bits=8 (transformers' adamw_bnb_8bit): m and v in "
            f"uint8 plus one fp32 absmax per {BITSANDBYTES_8BIT_BLOCK} values of each "
            "(Optimizer2State.init_state, bitsandbytes 0.44 and later); tensors under 4,096 "
            "elements keep 32-bit states (min_8bit_size), and transformers' Trainer keeps an "
            "nn.Embedding's at 32 bits (register_module_override), neither counted per parameter",
            bits=8, label="AdamW 8-bit",
        ),
        Optimizer(
            "paged-adamw-8bit", 2, 1, blockwise_overhead(BITSANDBYTES_8BIT_BLOCK),
            "bitsandbytes' AdamW with optim_bits=8 and is_paged=True (paged_adamw_8bit): as "
            "adamw-8bit, m and v of tensors of 100,000 elements or more in CUDA managed memory",
            bits=8, paged=True, label="paged AdamW 8-bit",
        ),
        Optimizer(
            "paged-adamw-32bit", 2, 4, Fraction(0),
            "bitsandbytes' AdamW with is_paged=True (paged_adamw_32bit, QLoRA's qlora.py "
            "default): m and v in float32 whatever the parameter's dtype, those of tensors of "
            "100,000 elements or more in CUDA managed memory (get_state_buffer)",
            bits=32, paged=True, label="paged AdamW 32-bit",
        ),
    )
}


@dataclass(frozen=True)
class BytesPerParam:
    """Bytes of each kind of training state for one parameter, after an optimizer step.

    ``gradients`` are backward's gradients that are still alive (sharded from ZeRO stage 2);
    ``gradient_copy`` is an fp32 copy the optimizer steps from, kept beside the master weights
    (sharded with them from stage 1): see :class:`Recipe`.
    """

    weights: int | Fraction
    gradients: int | Fraction
    master_weights: int | Fraction
    optimizer_states: int | Fraction
    gradient_copy: int | Fraction = 0

    @property
    def total(self) -> int | Fraction:
        """All kinds together: ZeRO §3.1's 2 + 2 + K with 16-bit compute."""
        return (self.weights + self.gradients + self.gradient_copy + self.master_weights
                + self.optimizer_states)

    @property
    def all_gradients(self) -> int | Fraction:
        """Backward's gradients and the fp32 copy together: what a profiler shows as gradients."""
        return self.gradients + self.gradient_copy

    @property
    def beyond_weights(self) -> int | Fraction:
        """Everything but the compute weights: what a "parameters × 2 bytes" estimate misses."""
        return self.total - self.weights

    @property
    def optimizer_side(self) -> int | Fraction:
        """Master weights plus optimizer states: ZeRO's K (K = 12 for mixed-precision Adam)."""
        return self.master_weights + self.optimizer_states


def recipe(name: str) -> Recipe:
    """The recipe called ``name`` (or one of :data:`RECIPE_ALIASES`); a ValueError lists them."""
    name = RECIPE_ALIASES.get(name, name) if isinstance(name, str) else name
    return RECIPES[choice("recipe", name, [*RECIPES, *RECIPE_ALIASES])]


def optimizer_impl(name: str) -> str:
    """``name`` if it is one of :data:`OPTIMIZER_IMPLS`, else a ValueError listing them."""
    return choice("optimizer implementation", name, OPTIMIZER_IMPLS)


def optimizer(name: str) -> Optimizer:
    """The optimizer called ``name``; a ValueError lists the known ones."""
    return OPTIMIZERS[choice("optimizer", name, OPTIMIZERS)]


def bytes_per_param(precision: str = "bf16-mixed", optimizer_name: str = "adamw") -> BytesPerParam:
    """Bytes per parameter for a precision recipe and an optimizer.

    The four kinds of state as ZeRO §3.1 counts them (Rajbhandari et al. 2020): weights and
    gradients in the recipe's compute precision, master weights, and the optimizer's state
    values (K = 12 bytes of master weights and Adam's m and v for mixed precision, 16 bytes
    in all). Each recipe and optimizer names its own source (:data:`RECIPES`,
    :data:`OPTIMIZERS`); 8-bit Adam adds its block-wise constants (Dettmers et al. 2022, §2).

    >>> bytes_per_param("bf16-mixed", "adamw").total
    16
    """
    r = recipe(precision)
    o = optimizer(optimizer_name)
    value_bytes = r.state_value if o.state_bytes is None else o.state_bytes
    states = o.states * value_bytes + o.overhead
    if isinstance(states, Fraction) and states.denominator == 1:
        states = int(states)
    kept = 0 if r.frees_gradients else r.gradients
    return BytesPerParam(r.weights, kept, r.master_weights, states, r.gradient_copy)


@dataclass(frozen=True, kw_only=True)
class ModelStates:
    """The four kinds of model state as memory: for a whole model, or on one device."""

    weights: Bytes
    gradients: Bytes
    master_weights: Bytes
    optimizer_states: Bytes

    @property
    def model_states(self) -> Bytes:
        """Weights, gradients, master weights and optimizer states together."""
        return self.weights + self.gradients + self.master_weights + self.optimizer_states

    @property
    def total(self) -> Bytes:
        """All the memory counted: the model states (:class:`~trainmath.memory.stages.DeviceMemory`
        adds activations)."""
        return self.model_states

    @property
    def optimizer_side(self) -> Bytes:
        """Master weights plus optimizer states (ZeRO's KΨ)."""
        return self.master_weights + self.optimizer_states

    def parts(self) -> dict[str, Bytes]:
        """Each kind of state by name, in the order the pages list them."""
        return {
            "weights": self.weights,
            "gradients": self.gradients,
            "master weights": self.master_weights,
            "optimizer states": self.optimizer_states,
        }


@dataclass(frozen=True, kw_only=True)
class TrainingState(ModelStates):
    """Memory of each kind of training state for a whole model (no activations)."""

    params: int


def training_state(
    params: int, precision: str = "bf16-mixed", optimizer_name: str = "adamw"
) -> TrainingState:
    """Model-state memory for ``params`` parameters (ZeRO §3.1: (2 + 2 + K)Ψ bytes).

    >>> str(training_state(7 * 10**9).total)
    '112 GB'
    """
    n = positive_int("params", params)
    per = bytes_per_param(precision, optimizer_name)
    return TrainingState(
        params=n,
        weights=Bytes(n * per.weights),
        gradients=Bytes(n * per.all_gradients),
        master_weights=Bytes(n * per.master_weights),
        optimizer_states=Bytes(n * per.optimizer_states),
    )
