"""Mixture of experts: total and active parameters, and the all-to-all of expert parallelism.

A mixture-of-experts layer replaces the MLP by E expert MLPs and a router (Shazeer et al. 2017,
*Outrageously Large Neural Networks*; Fedus et al. 2022, *Switch Transformers*, §2): the router,
an h × E matrix, scores every expert for every token, and each token goes through its top k
(``experts_per_token``) only, their outputs weighted by the router's probabilities (Jiang et
al. 2024, *Mixtral of Experts*, §2.1, eq. 1-2). The model holds all E experts, so its memory
scales with the **total** parameters, while each token's compute scales with the **active**
ones: everything but the E - k experts it does not use.

Expert parallelism (``ep``, Lepikhin et al. 2021, *GShard*, §2.3) places E/ep experts on each
device; a token whose expert lives elsewhere is sent there and its output sent back. With the
all-to-all token dispatcher (Megatron-Core MoE), each MoE layer runs two all-to-alls in the
forward pass, *dispatch* (tokens to their experts) and *combine* (outputs back), and two in the
backward pass for their gradients (Rajbhandari et al. 2022, *DeepSpeed-MoE*, §5; Lepikhin et
al. 2021, §2.3). Each moves the b·s·k·h values of a micro-batch's k copies of its tokens, of
which (ep - 1)/ep leave the device when routing spreads evenly over the ep devices.

Routing is not balanced in a real run. :class:`Routing` says how the experts take their tokens:
dropless (Megatron-Core's default), or with a **capacity factor** C that caps each expert at
C times its balanced share of the tokens a router sees, ⌈T·k/E·C⌉ (Megatron-Core's
``get_capacity``), the rest dropped, and with padding every expert processes exactly that many;
and which **load** an estimate counts: balanced, the most loaded expert's share measured in
published training runs (:data:`PUBLISHED_MAX_LOADS`), or the worst case a device can receive.
:func:`dispatch` gives one device's expert rows for one micro-batch under each.

>>> from trainmath.model.presets import preset
>>> m = preset("mixtral-8x7b")
>>> total_params(m), active_params(m)
(46702792704, 12879925248)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real

from .shape import ModelShape, param_breakdown
from ..problems import Problem, check
from ..units import choice, positive_int


def total_params(m: ModelShape) -> int:
    """Every parameter of ``m``, all experts included (:func:`trainmath.model.shape.param_count`)."""
    return param_breakdown(m).total


def active_params(m: ModelShape) -> int:
    """Parameters one token goes through: the total less, in each layer, the E - k routed
    experts the router did not pick (Jiang et al. 2024, §1: "each token has access to 47B
    parameters, but only uses 13B active parameters"). The embedding, attention, norms, router
    and shared experts count in full; a dense model's active parameters are its total."""
    return param_breakdown(m).active


def expert_params(m: ModelShape) -> int:
    """Parameters of all routed experts of ``m``: what expert parallelism divides by ep."""
    b = param_breakdown(m)
    return b.layers * b.per_layer_routed


def _check(m: ModelShape) -> None:
    if not m.moe:
        raise ValueError(f"{m.name!r} is dense (experts 0); accepted: a mixture of experts")


def expert_tokens(m: ModelShape, s: int, b: int) -> int:
    """Token copies one device's experts process per micro-batch when routing is balanced and
    the experts are split by tp: b·s·k, whatever ep is (the ep devices of a group send each
    other their b·s·k copies and each keeps 1/ep of everyone's). :func:`dispatch` counts them
    for any split, capacity and load."""
    _check(m)
    return positive_int("b (micro-batch size)", b) * positive_int("s (sequence length)", s) \
        * m.experts_per_token


# -- routing as it really runs: capacity, padding, imbalance -----------------------------------
#: The loads an estimate can count on a device's experts: ``"balanced"`` (every expert its
#: share), ``"measured"`` (the most loaded expert's share in published training runs,
#: :data:`MEASURED_MAX_LOAD`) and ``"worst"`` (the most a device can receive: every token copy
#: of its ep group, or its experts' capacity with a capacity factor).
EXPERT_LOADS = ("balanced", "measured", "worst")


@dataclass(frozen=True)
class MaxLoad:
    """A published measurement of routing imbalance: the most loaded expert's tokens over the
    mean (``ratio``, 1 + MaxVio), for the run ``what`` describes."""

    ratio: Fraction
    what: str
    #: when in training it was measured
    when: str
    source: str


#: The most loaded expert's load over the mean load, as published for real training runs:
#: Wang et al. 2024 (*Auxiliary-Loss-Free Load Balancing Strategy for Mixture-of-Experts*,
#: DeepSeek-AI) measure MaxVio_global = (max load − mean load) / mean load of DeepSeekMoE
#: models (64 routed experts, top 6, 2 shared) over their validation set after training, with
#: the usual auxiliary loss (coefficient 0.001) and with their bias-based Loss-Free Balancing.
#: A load counted over a whole validation set is evener than one micro-batch's; no published
#: figure for the first steps of training was found, which the worst case bounds.
PUBLISHED_MAX_LOADS: tuple[MaxLoad, ...] = (
    MaxLoad(Fraction(172, 100), "1B-parameter MoE, auxiliary loss", "after 100B tokens",
            "Wang et al. 2024: MaxVio_global 0.72"),
    MaxLoad(Fraction(152, 100), "3B-parameter MoE, auxiliary loss", "after 200B tokens",
            "Wang et al. 2024: MaxVio_global 0.52"),
    MaxLoad(Fraction(104, 100), "1B and 3B MoE, Loss-Free Balancing", "after 100B and 200B tokens",
            "Wang et al. 2024: MaxVio_global 0.04"),
)

#: The band of those measurements, (lowest, highest) max-over-mean load; the ``"measured"``
#: load counts the highest.
MEASURED_BAND: tuple[Fraction, Fraction] = (min(x.ratio for x in PUBLISHED_MAX_LOADS),
                                            max(x.ratio for x in PUBLISHED_MAX_LOADS))
#: The load :data:`EXPERT_LOADS`' ``"measured"`` counts: the band's top.
MEASURED_MAX_LOAD: Fraction = MEASURED_BAND[1]


@dataclass(frozen=True)
class Routing:
    """How a mixture's experts take their tokens, and which load an estimate counts.

    ``capacity_factor`` None is dropless (Megatron-Core's default: every token copy reaches its
    expert); a number C caps each expert at ⌈T·k/E·C⌉ copies of the T tokens one router sees
    (``--moe-expert-capacity-factor``), the copies beyond it dropped before the all-to-all.
    ``pad`` (``--moe-pad-expert-input-to-capacity``) pads every expert to exactly its capacity,
    so the buffers have that size whatever the router does. ``load`` is one of
    :data:`EXPERT_LOADS`.
    """

    capacity_factor: Fraction | float | None = None
    pad: bool = False
    load: str = "balanced"

    def __post_init__(self) -> None:
        c = self.capacity_factor
        if c is not None:
            if isinstance(c, bool) or not isinstance(c, Real) or not math.isfinite(c) or c <= 0:
                raise ValueError(f"capacity_factor must be a number above 0, such as 1.25, got "
                                 f"{c!r}; accepted: a number above 0, or None (dropless)")
            object.__setattr__(self, "capacity_factor", Fraction(c).limit_denominator(10**6))
        object.__setattr__(self, "pad", bool(self.pad))
        choice("expert load", self.load, EXPERT_LOADS)
        if self.pad and c is None:
            check([Problem(("pad_to_capacity", "capacity_factor"), "pad_to_capacity needs a "
                           "capacity factor: there is no capacity to pad to (Megatron-Core: "
                           "moe_expert_capacity_factor must be set to use "
                           "moe_pad_expert_input_to_capacity); accepted: a capacity_factor, or "
                           "no padding")])

    @property
    def dropless(self) -> bool:
        """Whether no token copy is ever dropped (no capacity factor)."""
        return self.capacity_factor is None

    @property
    def default(self) -> bool:
        """Dropless, unpadded, balanced: what a dense model's run has too."""
        return self == Routing()


def routing_problems(m: ModelShape, routing: Routing) -> list[Problem]:
    """What a routing setting cannot do: any setting but the default on a dense model, and a
    capacity factor above E/k, which would give an expert more copies than its router has
    tokens (each token reaches an expert at most once: Megatron-Core's
    ``apply_router_token_dropping`` picks the ``capacity`` highest of the tokens with
    ``torch.topk``, which refuses a k larger than the tokens)."""
    if not m.moe:
        given = [name for name, v in (("capacity_factor", routing.capacity_factor),
                                      ("pad_to_capacity", routing.pad or None),
                                      ("expert_load", None if routing.load == "balanced"
                                       else routing.load)) if v is not None]
        if given:
            return [Problem(tuple(given), f"{', '.join(given)} need{'s' if len(given) == 1 else ''}"
                            f" a mixture of experts, and {m.name} is dense; accepted: none of "
                            "them")]
        return []
    c, E, k = routing.capacity_factor, m.experts, m.experts_per_token
    if c is not None and c > Fraction(E, k):
        return [Problem(("capacity_factor", "experts", "experts_per_token"),
                        f"capacity_factor {float(c):g} exceeds experts / experts_per_token = "
                        f"{E}/{k} = {float(Fraction(E, k)):g}: an expert would take more token "
                        "copies than its router has tokens; accepted: above 0, at most "
                        f"{float(Fraction(E, k)):g}")]
    return []


def capacity(m: ModelShape, router_tokens: int, capacity_factor: Fraction | float) -> int:
    """Token copies one expert takes from one router's ``router_tokens`` tokens: ⌈T·k/E·C⌉.

    Megatron-Core's ``get_capacity(num_tokens, num_experts, capacity_factor)`` =
    ``math.ceil((num_tokens / num_experts) * capacity_factor)``, called with ``num_tokens``
    the router's tokens times top-k (``apply_router_token_dropping`` in
    ``megatron/core/transformer/moe/moe_utils.py``, core_v0.15.0); the same formula sizes the
    padded dispatch (``MoEAlltoAllTokenDispatcher.preprocess``).

    >>> from trainmath.model.presets import preset
    >>> capacity(preset("mixtral-8x7b"), 4096, 1.25)
    1280
    """
    _check(m)
    T = positive_int("router_tokens", router_tokens)
    c = Routing(capacity_factor).capacity_factor
    return math.ceil(Fraction(T * m.experts_per_token, m.experts) * c)


@dataclass(frozen=True)
class Dispatch:
    """One device's experts for one micro-batch of one MoE layer: how many token copies (rows)
    they process under each load, and what a capacity drops.

    Megatron-Core's all-to-all dispatcher (``MoEAlltoAllTokenDispatcher``): each of the ep ranks
    of an expert group routes its ``router_tokens`` T (b·s/(cp·tp) with sequence parallelism),
    sends every copy to the rank that holds its expert, and an expert-tensor-parallel group of
    etp ranks gathers what its ranks received, so a device's E/ep experts process the copies of
    ep·etp routers, each expert 1/etp of its width.
    """

    router_tokens: Fraction
    experts_per_token: int
    experts: int
    ep: int
    etp: int
    #: copies one expert takes from one router (None: dropless)
    capacity: int | None
    padded: bool

    @property
    def local_experts(self) -> int:
        """Experts on this device: E/ep."""
        return self.experts // self.ep

    @property
    def balanced(self) -> Fraction:
        """Rows when every expert gets its share: T·k·etp, or E·capacity·etp when a capacity
        below the share drops copies even then."""
        T, k = self.router_tokens, self.experts_per_token
        rows = T * k
        if self.capacity is not None:
            rows = min(rows, self.experts * self.capacity)
        return rows * self.etp

    @property
    def worst(self) -> Fraction:
        """The most this device's experts can receive: every copy of its ep group's routers
        that can reach them, etp·ep·T·min(k, E/ep) (a token reaches each expert at most once);
        with a capacity, at most E/ep capacities from each router; padded, exactly that."""
        T, k, n = self.router_tokens, self.experts_per_token, self.local_experts
        per_router = T * min(k, n)
        if self.capacity is not None:
            per_router = min(per_router, n * self.capacity)
            if self.padded:
                per_router = n * self.capacity
        return self.ep * self.etp * per_router

    def rows(self, load: str) -> Fraction:
        """Rows under ``load`` (:data:`EXPERT_LOADS`); padded, the capacity whatever the load.
        "measured" is the dropless balanced rows times :data:`MEASURED_MAX_LOAD`, rounded up, at
        most the worst: a device's experts together are no more loaded, over their mean, than
        its most loaded one."""
        choice("expert load", load, EXPERT_LOADS)
        if self.padded or load == "worst":
            return self.worst
        if load == "measured":
            uncapped = self.router_tokens * self.experts_per_token * self.etp
            return min(Fraction(math.ceil(uncapped * MEASURED_MAX_LOAD)), self.worst)
        return self.balanced

    @property
    def dropped_share(self) -> Fraction:
        """The most of a router's token copies a capacity can drop: when the router sends every
        token to the same k experts, each keeps ``capacity`` of its T copies, 1 − capacity/T
        (0 dropless)."""
        if self.capacity is None:
            return Fraction(0)
        return max(Fraction(0), 1 - self.capacity / self.router_tokens)


def dispatch(m: ModelShape, *, tokens: Fraction | int, tp: int = 1, ep: int = 1,
             etp: int | None = None, routing: Routing = Routing()) -> Dispatch:
    """The :class:`Dispatch` of one device holding ``tokens`` = b·s/cp tokens of a micro-batch,
    with tensor-parallel size ``tp``, expert-parallel size ``ep`` and expert-tensor-parallel
    size ``etp`` (None: tp, Megatron-Core's default). Each router sees tokens/tp of them
    (sequence parallelism: Megatron-Core's MoE layer refuses tensor parallelism without it in
    training); its capacity is :func:`capacity`.

    >>> from trainmath.model.presets import preset
    >>> d = dispatch(preset("mixtral-8x7b"), tokens=4096, ep=8)
    >>> d.balanced, d.worst
    (Fraction(8192, 1), Fraction(32768, 1))
    """
    _check(m)
    tp, ep = positive_int("tp", tp), positive_int("ep", ep)
    etp = tp if etp is None else positive_int("etp", etp)
    T = Fraction(tokens) / tp
    cap = None
    if routing.capacity_factor is not None:
        cap = math.ceil(T * m.experts_per_token / m.experts * routing.capacity_factor)
    return Dispatch(T, m.experts_per_token, m.experts, ep, etp, cap, routing.pad)
