"""What offload sends over PCIe each step, and the least time that takes.

ZeRO-Offload (Ren et al. 2021, §4.1 and Figure 2) keeps the 16-bit weights on the GPU and the
optimizer on the CPU: each step every GPU sends its partition of the 16-bit gradients to the
host and gets its partition of the updated 16-bit weights back, 2Ψ/N_d bytes each way (the
"4M" of communication its offload strategy minimises, M parameters). ZeRO-Infinity (Rajbhandari
et al. 2021, §5) keeps the 16-bit weights off the GPU too: each GPU fetches its partition
for the forward and again for the backward (bandwidth-centric partitioning, then an all-gather
over NVLink that :mod:`trainmath.time.communication` counts), and sends its gradients back; the
update runs on the host, so the weights do not return.

:func:`offload_traffic` gives those bytes per GPU per step; :attr:`OffloadTraffic.seconds`
the least time at the link's rate (:data:`trainmath.hardware.HOST_LINKS`), the two directions at once.
Not timed: the CPU's Adam step (DeepSpeed states only that its CPU Adam is 5.1 to 6.5 times
faster than PyTorch's, ``docs/_pages/training.md``; no absolute throughput), how much of the
transfer hides behind the backward, and NVMe's reads and writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..units import Bytes, choice

#: What each offload moves (trainmath.memory.training's ``offload`` values).
OFFLOADS = ("optimizer", "parameters")
#: ZeRO-Infinity's weight fetches per step: the forward's and the backward's.
PARAMETER_FETCHES = 2


@dataclass(frozen=True)
class OffloadTraffic:
    """Bytes one GPU moves over PCIe in one step, each way, and the link's rate (bytes/s each
    way; None when not known)."""

    to_gpu: Bytes
    to_host: Bytes
    rate: float | None = None
    rate_source: str = ""

    @property
    def seconds(self) -> float | None:
        """The least time the transfers take: the larger direction at the link's rate (PCIe is
        full duplex); None without a rate."""
        if self.rate is None:
            return None
        return float(max(self.to_gpu.n, self.to_host.n)) / self.rate


def offload_traffic(offload: str, partition_params: Fraction | int, *, weight_bytes: int,
                    gradient_bytes: int, rate: float | None = None, rate_source: str = ""
                    ) -> OffloadTraffic:
    """The bytes one GPU sends and receives each step under ``offload`` ("optimizer": ZeRO-Offload;
    "parameters": ZeRO-Infinity's), for a partition of ``partition_params`` parameters kept in
    ``weight_bytes`` and reduced in ``gradient_bytes`` per parameter.

    ZeRO-Offload's 13B on one GPU, in fp16: 26 GB of gradients down and 26 GB of weights up,
    at least 1.6 s at PCIe Gen3's 16 GB/s each way:

    >>> t = offload_traffic("optimizer", 13 * 10**9, weight_bytes=2, gradient_bytes=2, rate=16e9)
    >>> t.to_gpu.format("GB", 0), t.to_host.format("GB", 0), round(t.seconds, 3)
    ('26 GB', '26 GB', 1.625)
    """
    choice("offload", offload, OFFLOADS)
    if partition_params < 0:
        raise ValueError(f"partition_params must be at least 0, got {partition_params}")
    grads = Bytes(Fraction(partition_params) * gradient_bytes)
    weights = Bytes(Fraction(partition_params) * weight_bytes)
    up = weights if offload == "optimizer" else weights * PARAMETER_FETCHES
    return OffloadTraffic(up, grads, rate, rate_source)
