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

>>> from trainmath.models import preset
>>> m = preset("mixtral-8x7b")
>>> total_params(m), active_params(m)
(46702792704, 12879925248)
"""

from __future__ import annotations

from fractions import Fraction

from .collectives import all_to_all_factor
from .models import ModelShape, param_breakdown
from .units import Bytes, positive_int


#: All-to-alls per MoE layer and micro-batch: dispatch and combine forward, their gradients
#: backward (Rajbhandari et al. 2022, §5; Lepikhin et al. 2021, §2.3). Full recomputation
#: reruns the forward pass and its two.
ALL_TO_ALLS = 4


def total_params(m: ModelShape) -> int:
    """Every parameter of ``m``, all experts included (:func:`trainmath.models.param_count`)."""
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


def all_to_all_elements(m: ModelShape, s: int, b: int, ep: int) -> Fraction:
    """Values one device sends per MoE layer and micro-batch in the forward and backward pass.

    Four all-to-alls (dispatch and combine forward, their gradients backward), each sending
    (ep - 1)/ep of the b·s·k·h values of the micro-batch's routed token copies: with routing
    spread evenly over the ep devices, a token copy stays on its device with probability 1/ep
    (Lepikhin et al. 2021, §2.3; Rajbhandari et al. 2022, §5). Nothing leaves a device when ep = 1.

    >>> from trainmath.models import preset
    >>> all_to_all_elements(preset("mixtral-8x7b"), s=4096, b=1, ep=8)
    Fraction(117440512, 1)
    """
    _check(m)
    s = positive_int("s (sequence length)", s)
    b = positive_int("b (micro-batch size)", b)
    ep = positive_int("ep (expert-parallel size)", ep)
    return ALL_TO_ALLS * all_to_all_factor(ep) * b * s * m.experts_per_token * m.hidden


def all_to_all_bytes(m: ModelShape, s: int, b: int, ep: int, value_bytes: int = 2) -> Bytes:
    """:func:`all_to_all_elements` in bytes, ``value_bytes`` each (2: bf16 tokens)."""
    return Bytes(all_to_all_elements(m, s, b, ep) * positive_int("value_bytes", value_bytes))


def expert_tokens(m: ModelShape, s: int, b: int) -> int:
    """Token copies one device's experts process per micro-batch when routing is balanced:
    b·s·k, whatever ep is (the ep devices of a group send each other their b·s·k copies and
    each keeps 1/ep of everyone's). Imbalanced routing sends some devices more (Fedus et al.
    2022, §2.2, capacity factor); the estimate assumes balance."""
    _check(m)
    return positive_int("b (micro-batch size)", b) * positive_int("s (sequence length)", s) \
        * m.experts_per_token
