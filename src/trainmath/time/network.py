"""How long one collective takes: latency plus the bytes each rank sends over the bus
bandwidth its group reaches.

nccl-tests defines the *bus bandwidth* of a collective so that it reads against the link's own
rate (``doc/PERFORMANCE.md``): a ring all-gather or reduce-scatter of S bytes over n ranks
sends S·(n-1)/n per rank, an all-reduce twice that, and busbw = those bytes / time. So

    t = α + bytes sent per rank / busbw

- **busbw** inside one node is the measured plateau of nccl-tests on that node's NVLink
  (:data:`NVLINK_EFFICIENCY` × the per-GPU NVLink rate, one way); across nodes a ring crosses
  every node boundary once per step, through the NICs of the group's GPUs in that node, so
  busbw = min(NVLink's, k × NIC rate × :data:`NETWORK_EFFICIENCY`) for k of the group's ranks
  per node (sjeaugey, NVIDIA/nccl#687: "data goes through each GPU and enters/exits the node
  once"). All-to-all across N nodes gets N/(N-1) × one NIC per GPU (the nccl-tests
  definition).
- **α** is NCCL's own latency model (``src/graph/tuning.cc``) for its LL128 protocol: a base,
  and a cost per ring step over NVLink or over the network (:data:`LATENCY`). Held against
  Azure's nccl-tests all-reduce curves on 8 A100s, H100s and H200s from 64 KiB to 8 GiB, this
  α with the plateau bandwidth is within 7% at the median (tests/test_time_parts.py); NCCL's
  own choice of the fastest protocol per size predicts faster than measured.
- **NVLS**: on an NVSwitch node of Hopper or Blackwell, NCCL all-reduces inside the switch
  (NVLink SHARP), at the measured all-reduce plateau (:data:`NVLS_ALL_REDUCE`).

Bus bandwidth at 1 GiB on a DGX H100, all-gather, against the measured 361–370 GB/s:

>>> t = collective_time("all_gather", 1 << 30, ranks=8, ranks_per_node=8, gpu="h100-sxm")
>>> 355e9 < (1 << 30) * 7 / 8 / t < 370e9
True
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hardware import gpu as accelerator, interconnect
from ..units import choice, positive_int

#: Collectives by name: ring all-gather, reduce-scatter and all-reduce, all-to-all, a send.
COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "send")

#: Measured large-message bus bandwidth of ring collectives on one node, as a share of the
#: NVLink rate per GPU one way (nccl-tests): 8×A100 231.6 GB/s (Azure ND A100 v4) of 300;
#: 8×H100 and 8×H200 361–370 (Azure ND H100 v5 / H200 v5 all-gather, reduce-scatter) of 450;
#: 8×B200 673–678 (ring all-reduce) of 900. The H800 has no published figure: the H100's share
#: of its own (narrower) NVLink, an assumption; and no NVLS figure, so none is assumed.
NVLINK_EFFICIENCY: dict[str, float] = {"a100-sxm": 231.6 / 300, "a100-40gb": 231.6 / 300,
                                       "h100-sxm": 365 / 450, "h200": 365 / 450,
                                       "h800": 365 / 450,
                                       "b200": 675 / 900}
#: Measured all-to-all bus bandwidth on one node, as a share of NVLink one way: A100 210 of 300,
#: H100 320 of 450, B200 640 of 900 (NVIDIA GTC 2025 NCCL talk, nccl-tests alltoall_perf).
ALL_TO_ALL_EFFICIENCY: dict[str, float] = {"a100-sxm": 210 / 300, "a100-40gb": 210 / 300,
                                           "h100-sxm": 320 / 450, "h200": 320 / 450,
                                           "h800": 320 / 450,
                                           "b200": 640 / 900}
#: Measured multi-node ring bus bandwidth as a share of the node's NIC total: DGX H100 with
#: 8×400 Gb/s, 370–380 GB/s of 400 (NVIDIA, NCCL GTC 2025); DGX A100 with 8×200 Gb/s, 192 of 200.
NETWORK_EFFICIENCY = 0.93

#: NCCL's LL128 ring latencies, seconds: (base, per step over NVLink, per step over the network)
#: (``src/graph/tuning.cc`` at 5067397c: ``baseLatencies`` 14.0 µs, ``hwLatencies`` NVLink 1.9 µs
#: and NET 4.0 µs).
LATENCY = (14.0e-6, 1.9e-6, 4.0e-6)
#: All-reduce bus bandwidth on one NVSwitch node with NVLink SHARP, as a share of NVLink one
#: way: Azure ND H100 v5 478.9 GB/s and ND H200 v5 480.0 of 450; B200 845.7 of 900
#: (ml-engineering's 8×B200 curve). Ampere has no NVLS.
NVLS_ALL_REDUCE: dict[str, float] = {"h100-sxm": 478.9 / 450, "h200": 480.0 / 450,
                                     "b200": 845.7 / 900}


@dataclass(frozen=True)
class Fabric:
    """The links a run's GPUs use: GPUs per node, and per GPU one way, bytes/s of NVLink and of
    the network (:data:`trainmath.hardware.INTERCONNECTS` unless given), on GPU kind ``gpu``."""

    gpu: str
    node_gpus: int
    nvlink: float
    network: float

    @classmethod
    def of(cls, gpu: str, node_gpus: int | None = None, nvlink: float | None = None,
           network: float | None = None) -> "Fabric":
        """The default node of ``gpu`` with any of its figures overridden."""
        key = accelerator(gpu).key
        net = interconnect(key)
        return cls(key, net.node_gpus if node_gpus is None else positive_int("node_gpus", node_gpus),
                   net.nvlink if nvlink is None else float(nvlink),
                   net.network if network is None else float(network))

    def busbw(self, ranks: int, ranks_per_node: int, kind: str = "all_gather") -> float:
        """Bus bandwidth of a group of ``ranks`` with ``ranks_per_node`` of them in each node."""
        nodes = -(-ranks // ranks_per_node)
        if kind == "all_to_all":
            inside = ALL_TO_ALL_EFFICIENCY[self.gpu] * self.nvlink
            if nodes == 1:
                return inside
            return min(inside, nodes / (nodes - 1) * self.network * NETWORK_EFFICIENCY)
        inside = NVLINK_EFFICIENCY[self.gpu] * self.nvlink
        if nodes == 1:
            if kind == "all_reduce" and self.gpu in NVLS_ALL_REDUCE and ranks >= 4:
                return NVLS_ALL_REDUCE[self.gpu] * self.nvlink
            return inside
        return min(inside, ranks_per_node * self.network * NETWORK_EFFICIENCY)


def _sent(kind: str, size: float, ranks: int) -> float:
    """Bytes one rank sends for a collective over ``size`` bytes (the whole array)."""
    if kind == "all_reduce":
        return 2 * size * (ranks - 1) / ranks
    if kind == "send":
        return size
    return size * (ranks - 1) / ranks


def collective_time(kind: str, size: float, *, ranks: int, ranks_per_node: int, gpu: str,
                    fabric: Fabric | None = None) -> float:
    """Seconds of one ``kind`` collective over ``size`` bytes (the whole gathered or reduced
    array; for a send, the message) among ``ranks`` ranks, ``ranks_per_node`` of them per node
    (module docstring). 0 for a group of one."""
    kind = choice("collective", kind, COLLECTIVES)
    if ranks <= 1 or size <= 0:
        return 0.0
    f = fabric or Fabric.of(gpu)
    per_node = min(ranks_per_node, ranks)
    nodes = -(-ranks // per_node)
    sent = _sent(kind, size, ranks)
    base, nv, net = LATENCY
    if kind == "send":
        bw = f.nvlink * NVLINK_EFFICIENCY[f.gpu] if nodes == 1 else f.network * NETWORK_EFFICIENCY
        return base + (nv if nodes == 1 else net) + sent / bw
    k = 2 if kind == "all_reduce" else 1
    steps, inter = k * (ranks - 1), k * (nodes - 1)
    if kind == "all_to_all":  # every pair at once: one step's latency, over the network if any
        steps, inter = 1, min(1, nodes - 1)
    return base + (steps - inter) * nv + inter * net + sent / f.busbw(ranks, per_node, kind)
