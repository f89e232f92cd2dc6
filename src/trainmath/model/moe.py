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

>>> from trainmath.model.presets import preset
>>> m = preset("mixtral-8x7b")
>>> total_params(m), active_params(m)
(46702792704, 12879925248)
"""

from __future__ import annotations

from .shape import ModelShape, param_breakdown
from ..units import positive_int


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
    """Token copies one device's experts process per micro-batch when routing is balanced:
    b·s·k, whatever ep is (the ep devices of a group send each other their b·s·k copies and
    each keeps 1/ep of everyone's). Imbalanced routing sends some devices more (Fedus et al.
    2022, §2.2, capacity factor); the estimate assumes balance."""
    _check(m)
    return positive_int("b (micro-batch size)", b) * positive_int("s (sequence length)", s) \
        * m.experts_per_token
