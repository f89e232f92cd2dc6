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

from .units import Bytes, choice, positive_int


@dataclass(frozen=True)
class Recipe:
    """A precision recipe: bytes for each kind of state, per parameter or per optimizer value."""

    name: str
    weights: int
    gradients: int
    master_weights: int
    #: bytes of each optimizer-state value (a moment or momentum entry)
    state_value: int
    description: str


#: The precision recipes by name (``precision=``), each with its source in ``description``.
#:
#: :meta hide-value:
RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            "fp32", 4, 4, 0, 4,
            "everything in fp32; the weights are their own master copy",
        ),
        Recipe(
            "fp16-mixed", 2, 2, 4, 4,
            "fp16 weights and gradients for compute, fp32 master weights and optimizer states "
            "(Micikevicius et al. 2018; ZeRO §3.1)",
        ),
        Recipe(
            "bf16-mixed", 2, 2, 4, 4,
            "bf16 weights and gradients for compute, fp32 master weights and optimizer states "
            "(Kalamkar et al. 2019; ZeRO §3.1)",
        ),
        Recipe(
            "bf16", 2, 2, 0, 2,
            "pure bf16: weights, gradients and optimizer states in bf16, no fp32 master copy "
            "(Zamirai et al. 2020, Revisiting BFloat16 Training)",
        ),
    )
}


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
                  "m and v, as Adam; weight decay adds no state (Loshchilov & Hutter 2019)"),
        Optimizer("sgd", 0, None, Fraction(0), "no state: the update uses the gradient only"),
        Optimizer("sgd-momentum", 1, None, Fraction(0),
                  "one momentum buffer (torch.optim.SGD with momentum > 0)"),
        Optimizer(
            "adam-8bit", 2, 1, blockwise_overhead(ADAM_8BIT_BLOCK),
            "m and v quantised to 1 byte each, plus one fp32 absmax per block of "
            f"{ADAM_8BIT_BLOCK} values for each (Dettmers et al. 2022, 8-bit Optimizers "
            "via Block-wise Quantization, §2)",
        ),
    )
}


@dataclass(frozen=True)
class BytesPerParam:
    """Bytes of each kind of training state for one parameter."""

    weights: int | Fraction
    gradients: int | Fraction
    master_weights: int | Fraction
    optimizer_states: int | Fraction

    @property
    def total(self) -> int | Fraction:
        """All four kinds together: ZeRO §3.1's 2 + 2 + K with 16-bit compute."""
        return self.weights + self.gradients + self.master_weights + self.optimizer_states

    @property
    def beyond_weights(self) -> int | Fraction:
        """Everything but the compute weights: what a "parameters × 2 bytes" estimate misses."""
        return self.total - self.weights

    @property
    def optimizer_side(self) -> int | Fraction:
        """Master weights plus optimizer states: ZeRO's K (K = 12 for mixed-precision Adam)."""
        return self.master_weights + self.optimizer_states


def recipe(name: str) -> Recipe:
    """The precision recipe called ``name``; a ValueError lists the known ones."""
    return RECIPES[choice("precision", name, RECIPES)]


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
    return BytesPerParam(r.weights, r.gradients, r.master_weights, states)


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
        """All the memory counted: the model states (:class:`~trainmath.parallelism.DeviceMemory`
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
        gradients=Bytes(n * per.gradients),
        master_weights=Bytes(n * per.master_weights),
        optimizer_states=Bytes(n * per.optimizer_states),
    )
