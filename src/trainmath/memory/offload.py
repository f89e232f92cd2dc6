"""Where offloaded model states live, and whether each tier of a node holds them.

ZeRO-Offload (Ren et al. 2021) moves the optimizer's part of the state to CPU memory;
ZeRO-Infinity (Rajbhandari et al. 2021) moves it, and the 16-bit parameter partition, to CPU
memory or to NVMe. DeepSpeed names the place with the ``device`` of its ``offload_optimizer``
and ``offload_param`` sections, ``"cpu"`` or ``"nvme"`` (:data:`OFFLOAD_DEVICES`).

:func:`tier_needs` says what one node's CPU memory and NVMe must hold for the bytes
:func:`trainmath.memory.step.offloaded` moved off each GPU: with ``"cpu"`` they are all in CPU
memory; with ``"nvme"`` they are on NVMe, and CPU memory keeps DeepSpeed's pinned swap buffers,
sized by its configuration defaults (DeepSpeed v0.19.5, ``deepspeed/runtime/zero/offload_config.py``,
``deepspeed/runtime/zero/config.py``, and the swappers in ``deepspeed/runtime/swap_tensor/``):

- parameters (``offload_param``, ``partitioned_param_swapper.py``): one pinned CPU tensor of
  ``buffer_count`` × ``buffer_size`` elements in the parameters' 16-bit format
  (:data:`PARAM_BUFFER_COUNT`, :data:`PARAM_BUFFER_ELEMENTS`);
- optimizer states (``offload_optimizer``, ``optimizer_utils.py``): ``buffer_count`` pinned fp32
  buffers of the largest sub-group's elements (:data:`OPTIMIZER_BUFFER_COUNT`; a sub-group holds
  about ``sub_group_size`` elements, :data:`SUB_GROUP_ELEMENTS`, or the whole partition when it is
  smaller).

:func:`verdict` then compares each tier's need with its capacity (:class:`Tier`): the run fits
when every tier given holds its part, and the tier that decides is the first that does not,
or, when all hold, the one with the least room to spare.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..problems import Problem
from ..units import Bytes, choice

#: DeepSpeed's ``device`` for offloaded states: CPU memory, or NVMe (ZeRO-Infinity)
OFFLOAD_DEVICES = ("cpu", "nvme")
#: ``offload_param.buffer_count`` default: parameter swap buffers (offload_config.py)
PARAM_BUFFER_COUNT = 5
#: ``offload_param.buffer_size`` default, in elements: ``pp_int(1e8)`` (offload_config.py)
PARAM_BUFFER_ELEMENTS = 100_000_000
#: ``offload_optimizer.buffer_count`` default: "Adam optimizer has 4 states (parameter,
#: gradient, momentum, and variance)" (offload_config.py)
OPTIMIZER_BUFFER_COUNT = 4
#: ``zero_optimization.sub_group_size`` default, in elements: ``pp_int(1e9)`` (zero/config.py)
SUB_GROUP_ELEMENTS = 1_000_000_000
#: the optimizer swap buffers' format: fp32 (the master weights and Adam's moments)
OPTIMIZER_BUFFER_BYTES = 4
#: ``pin_memory`` default of both sections from DeepSpeed v0.19.5 (False up to v0.19.4)
PIN_MEMORY = True


@dataclass(frozen=True)
class Tiers:
    """A node's memory tiers for offloaded states: where they go (``offload_to``, one of
    :data:`OFFLOAD_DEVICES`), and the capacity of its CPU memory (``host_memory``) and NVMe
    (``nvme``) per node, None where not given (then that tier is not checked)."""

    offload_to: str = "cpu"
    host_memory: Bytes | None = None
    nvme: Bytes | None = None

    def __post_init__(self) -> None:
        choice("offload device (--offload-to)", self.offload_to, OFFLOAD_DEVICES)
        for name in ("host_memory", "nvme"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, Bytes) or value.n <= 0):
                raise ValueError(f"{name} must be a Bytes above 0 per node, e.g. "
                                 f"parse_bytes('1.5TB'), or None, got {value!r}")

    @property
    def given(self) -> bool:
        """Whether anything beyond the default (offload to CPU, no capacity) is given."""
        return self.offload_to != "cpu" or self.host_memory is not None or self.nvme is not None


def tiers_problems(tiers: Tiers, *, offload: str, zero_stage: int, gpus_per_node: int | None
                   ) -> list[Problem]:
    """The rules of the tiers for a run: NVMe needs offload and ZeRO stage 3 (ZeRO-Infinity
    offloads ZeRO-3's partitions, Rajbhandari et al. 2021); a capacity per node needs the GPUs a node
    has."""
    problems = []
    if tiers.offload_to == "nvme" and offload == "none":
        problems.append(Problem(("offload_to", "offload"), "offload to nvme with offload 'none': "
                                "nothing is offloaded; accepted: offload 'optimizer' or 'params'"))
    elif tiers.offload_to == "nvme" and zero_stage != 3:
        problems.append(Problem(("offload_to", "zero_stage"), "offload to nvme (ZeRO-Infinity) "
                                f"needs ZeRO stage 3, got stage {zero_stage}; accepted: zero stage "
                                "3, or offload to cpu"))
    if (tiers.host_memory is not None or tiers.nvme is not None) and gpus_per_node is None:
        problems.append(Problem(("host_memory", "gpus_per_node"), "host memory and NVMe are per "
                                "node: give the GPUs a node has (gpus_per_node)"))
    return problems


def swap_buffers(*, offload: str, partition_params: int, weight_bytes: int) -> Bytes:
    """Pinned CPU bytes one GPU's NVMe swapping keeps, at DeepSpeed's defaults: the optimizer
    swapper's ``buffer_count`` fp32 buffers of the largest sub-group (at most
    ``sub_group_size`` elements of the GPU's ``partition_params``), and with ``"parameters"`` the
    parameter swapper's ``buffer_count`` × ``buffer_size`` elements of ``weight_bytes`` each.

    >>> print(swap_buffers(offload="parameters", partition_params=62_500_000_000, weight_bytes=2))
    17 GB
    """
    sub_group = min(SUB_GROUP_ELEMENTS, partition_params)
    pinned = OPTIMIZER_BUFFER_COUNT * sub_group * OPTIMIZER_BUFFER_BYTES
    if offload == "parameters":
        pinned += PARAM_BUFFER_COUNT * PARAM_BUFFER_ELEMENTS * weight_bytes
    return Bytes(pinned)


@dataclass(frozen=True)
class Tier:
    """One tier's need and capacity, per device (the GPU) or per node (CPU memory, NVMe);
    ``capacity`` None: not given, so not checked."""

    name: str
    need: Bytes
    capacity: Bytes | None

    @property
    def fits(self) -> bool | None:
        """Whether the need fits the capacity; None when no capacity is given."""
        return None if self.capacity is None else self.need <= self.capacity

    @property
    def spare(self) -> Fraction | None:
        """The share of the capacity left, negative when it overflows; None unchecked."""
        if self.capacity is None:
            return None
        return Fraction(self.capacity.n - self.need.n) / Fraction(self.capacity.n)


def tier_needs(host_per_device: Bytes, *, offload_to: str, offload: str, gpus: int,
               partition_params: int, weight_bytes: int) -> tuple[Bytes, Bytes]:
    """(CPU memory, NVMe) one node needs for ``gpus`` devices that each offload
    ``host_per_device`` (:func:`trainmath.memory.step.offloaded`): every byte in CPU memory
    with ``"cpu"``; with ``"nvme"`` every byte on NVMe and :func:`swap_buffers` in CPU memory.

    >>> cpu, nvme = tier_needs(Bytes(18 * 62_500_000_000), offload_to="nvme", offload="parameters",
    ...                        gpus=16, partition_params=62_500_000_000, weight_bytes=2)
    >>> print(cpu, nvme)
    272 GB 18,000 GB
    """
    if offload_to == "cpu":
        return host_per_device * gpus, Bytes(0)
    pinned = swap_buffers(offload=offload, partition_params=partition_params,
                          weight_bytes=weight_bytes)
    return pinned * gpus, host_per_device * gpus


def verdict(tiers: tuple[Tier, ...]) -> tuple[bool | None, Tier | None]:
    """Whether every checked tier holds its part (None when none is checked), and the tier that
    decides: the first that does not hold, else the checked one with the least to spare."""
    checked = [t for t in tiers if t.capacity is not None]
    if not checked:
        return None, None
    over = [t for t in checked if not t.fits]
    if over:
        return False, over[0]
    return True, min(checked, key=lambda t: t.spare)
