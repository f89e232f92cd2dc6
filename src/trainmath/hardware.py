"""GPUs as data: peak FLOP/s by precision, memory as sold, built and reported, and the node
each one is built into (GPUs per node, NVLink and network bandwidth per GPU).

Every figure cites the vendor datasheet it comes from (:data:`GPUS`, :data:`INTERCONNECTS`).
Memory, time and the planner read them from here; nothing else states a GPU's numbers.

>>> gpu("a100-80gb").key, gpu("h100-sxm").peak("bf16").flops
('a100-sxm', 989400000000000.0)
"""

from __future__ import annotations

from dataclasses import dataclass

from .problems import Problem, check
from .units import Bytes, GB, GiB, MiB, choice


#: Precisions a :class:`Peak` is taken in.
PRECISIONS = ("bf16", "fp16", "fp8")


#: 10^12 (SI prefix tera): a TFLOP/s is ``TERA`` FLOP/s.
TERA = 10**12
#: 10^15 (SI prefix peta): a PFLOP/s is ``PETA`` FLOP/s.
PETA = 10**15


# -- hardware ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Peak:
    """A peak throughput used as an MFU/HFU denominator: one device, one precision, dense."""

    device: str
    precision: str
    #: FLOP/s of one device
    flops: float
    source: str

    def describe(self) -> str:
        """``"dense bf16 peak of one H100 SXM, 989.4 TFLOP/s"``."""
        return f"dense {self.precision} peak of one {self.device}, {self.flops / TERA:,.1f} TFLOP/s"


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's memory three ways: as the datasheet sells it, as the package holds it, and as
    ``nvidia-smi`` reports it; :attr:`usable` is the one a run is planned against.

    NVIDIA's "GB" on these parts counts binary units: the HBM stacks hold a power of two of
    bytes each (their DRAM dies hold 2^k bits), so an "80GB" A100 or H100 has 80 GiB on the
    package, 85.9 × 10^9 bytes. Read as decimal GB, the label understates the card by 7.4%.
    """

    #: the datasheet's words, e.g. "80GB HBM3"
    label: str
    #: the label's number read in this library's units, GB = 10^9 bytes
    marketed: Bytes
    #: HBM on the package: stacks × bytes per stack (for B200, the raw 192 GiB, not the 180
    #: NVIDIA enables)
    hbm: Bytes
    #: ``memory.total`` as ``nvidia-smi`` prints it (whole MiB): what the driver exposes after
    #: its own reservations
    reported: Bytes
    source: str
    note: str = ""

    @property
    def usable(self) -> Bytes:
        """The memory a run may fill: what ``nvidia-smi`` reports as the total.

        CUDA's context and the allocator's fragmentation take some of it at run time; those
        depend on the program and are not subtracted here.
        """
        return self.reported


@dataclass(frozen=True)
class Accelerator:
    """A GPU's dense tensor-core peaks and memory, from its vendor's documents."""

    key: str
    name: str
    #: dense bf16 = dense fp16 tensor-core FLOP/s (the same on all of these GPUs)
    dense_16bit: float
    #: dense fp8 tensor-core FLOP/s; None where the GPU has no fp8 tensor cores
    dense_fp8: float | None
    memory: GpuMemory
    source: str
    note: str = ""
    #: HBM bandwidth as the datasheet states it, bytes/s
    hbm_bandwidth: float = 0.0
    #: streaming multiprocessors (the GEMM model's wave size: :mod:`trainmath.time.gemm`)
    sms: int = 0
    #: where ``hbm_bandwidth`` and ``sms`` come from
    hbm_source: str = ""

    def peak_problems(self, precision: str) -> list[Problem]:
        """A precision this GPU has no dense tensor-core peak in (fp8 before Hopper)."""
        precision = choice("precision", precision, PRECISIONS)
        if precision == "fp8" and self.dense_fp8 is None:
            return [Problem(("gpu", "recipe"), f"{self.name} has no fp8 tensor cores; accepted "
                            "precisions: bf16, fp16")]
        return []

    def peak(self, precision: str = "bf16") -> Peak:
        """The dense peak in ``precision`` ("bf16", "fp16" or "fp8") as an MFU denominator."""
        check(self.peak_problems(precision))
        if precision == "fp8":
            return Peak(self.name, "fp8", self.dense_fp8, self.source)
        return Peak(self.name, precision, self.dense_16bit, self.source)


_SMI = "nvidia-smi's memory.total on this GPU, as printed in public nvidia-smi outputs (not an NVIDIA document)"

#: GPUs by key (:func:`gpu`), each with its dense peaks, its memory (:class:`GpuMemory`) and
#: vendor documents.
#:
#: :meta hide-value:
GPUS: dict[str, Accelerator] = {
    g.key: g
    for g in (
        Accelerator(
            "a100-sxm", "A100 SXM 80GB", 312 * TERA, None,
            GpuMemory(
                "80GB HBM2e", Bytes(80 * GB), Bytes(80 * GiB), Bytes(81_920 * MiB),
                f"NVIDIA A100 Tensor Core GPU datasheet: 80GB HBM2e; {_SMI}: 81920MiB",
                "The 80 GiB on the package (five 16 GiB HBM2e stacks) is not printed in the "
                "datasheet; it equals the 81,920 MiB nvidia-smi reports.",
            ),
            "NVIDIA A100 Tensor Core GPU datasheet: BFLOAT16/FP16 Tensor Core 312 TFLOPS "
            "(624 with sparsity)",
            "Ampere has no fp8 tensor cores.",
            2039 * GB, 108,
            "NVIDIA A100 Tensor Core GPU datasheet: GPU memory bandwidth 2,039GB/s (80GB SXM); "
            "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs",
        ),
        Accelerator(
            "a100-40gb", "A100 SXM 40GB", 312 * TERA, None,
            GpuMemory(
                "40GB HBM2", Bytes(40 * GB), Bytes(40 * GiB), Bytes(40_960 * MiB),
                f"NVIDIA A100 Tensor Core GPU datasheet: 40GB HBM2; {_SMI}: 40960MiB",
                "The 40 GiB on the package (five 8 GiB HBM2 stacks) is not printed in the "
                "datasheet; it equals the 40,960 MiB nvidia-smi reports.",
            ),
            "NVIDIA A100 Tensor Core GPU datasheet: BFLOAT16/FP16 Tensor Core 312 TFLOPS "
            "(624 with sparsity)",
            "The A100 the 2020 launch shipped; Ampere has no fp8 tensor cores.",
            1555 * GB, 108,
            "NVIDIA A100 Tensor Core GPU datasheet: GPU memory bandwidth 1,555GB/s (40GB SXM); "
            "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs",
        ),
        Accelerator(
            "h100-sxm", "H100 SXM", 989.4 * TERA, 1978.9 * TERA,
            GpuMemory(
                "80GB HBM3", Bytes(80 * GB), Bytes(80 * GiB), Bytes(81_559 * MiB),
                "NVIDIA H100 Tensor Core GPU datasheet: 80GB HBM3; NVIDIA H100 Tensor Core GPU "
                f"Architecture whitepaper: five HBM3 stacks of 16 GiB on H100 SXM5; {_SMI}: 81559MiB",
            ),
            "NVIDIA H100 Tensor Core GPU Architecture whitepaper, H100 SXM5: 989.4 dense bf16/fp16 "
            "and 1,978.9 dense fp8 TFLOPS; the H100 datasheet prints the sparse figures, "
            "1,979 and 3,958 TFLOPS",
            "",
            3350 * GB, 132,
            "NVIDIA H100 Tensor Core GPU datasheet: GPU memory bandwidth 3.35TB/s (SXM); H100 "
            "Architecture whitepaper: 132 SMs on H100 SXM5",
        ),
        Accelerator(
            "h800", "H800 SXM", 989.4 * TERA, 1978.9 * TERA,
            GpuMemory(
                "80GB HBM3", Bytes(80 * GB), Bytes(80 * GiB), Bytes(81_559 * MiB),
                "NVIDIA H800 Tensor Core GPU datasheet (NVIDIA's China product page, 2023), as "
                "public copies quote it: 80GB HBM3, 3.35TB/s; the H100 SXM's five HBM3 stacks of "
                f"16 GiB; {_SMI} taken as the H100 SXM's 81559MiB (same memory): unverified",
                "The datasheet itself was not found in the sources this library reads; its "
                "figures here are those public copies quote, and they equal the H100 SXM's.",
            ),
            "NVIDIA H800 Tensor Core GPU datasheet, as public copies quote it: the H100 SXM's "
            "tensor cores (BF16 1,979 and FP8 3,958 TFLOPS with sparsity, half that dense); "
            "NVLink 400GB/s instead of the H100's 900GB/s, and FP64 cut: the export-control "
            "variant of the same GH100 part",
            "The GPU DeepSeek-V3 was trained on: 2,048 of them (DeepSeek-AI 2024, §3.1).",
            3350 * GB, 132,
            "NVIDIA H800 datasheet as public copies quote it: 3.35TB/s; the H100 SXM's 132 SMs "
            "(same GH100 part)",
        ),
        Accelerator(
            "h200", "H200 SXM", 989.4 * TERA, 1978.9 * TERA,
            GpuMemory(
                "141GB HBM3e", Bytes(141 * GB), Bytes(144 * GiB), Bytes(143_771 * MiB),
                f"NVIDIA H200 Tensor Core GPU datasheet: 141GB HBM3e; {_SMI}: 143771MiB",
                "The 144 GiB on the package (six 24 GiB HBM3e stacks) comes from press reports at "
                "the H200's launch, not from an NVIDIA document: unverified.",
            ),
            "NVIDIA H200 Tensor Core GPU datasheet: the H100 SXM's tensor-core peaks (1,979 bf16 and "
            "3,958 fp8 TFLOPS with sparsity, half that dense)",
            "Same GH100 compute as the H100 SXM; more and faster memory.",
            4800 * GB, 132,
            "NVIDIA H200 Tensor Core GPU datasheet: GPU memory bandwidth 4.8TB/s; the H100 SXM's "
            "132 SMs (same GH100 part)",
        ),
        Accelerator(
            "b200", "B200 (HGX, 1,000 W)", 2.25 * PETA, 4.5 * PETA,
            GpuMemory(
                "180GB HBM3E", Bytes(180 * GB), Bytes(192 * GiB), Bytes(183_359 * MiB),
                "NVIDIA HGX B200 specifications: 180GB HBM3E per GPU (DGX B200: 1,440GB for 8); "
                f"NVIDIA's Blackwell launch material: 192GB of HBM3e per B200; {_SMI}: 183359MiB",
                "192 GB is the raw HBM (eight 24 GiB stacks), 180 GB what NVIDIA enables: one "
                "part, not two SKUs. The stack count is inferred from 192 GiB, not printed by NVIDIA.",
            ),
            "NVIDIA HGX B200 specifications: FP16/BF16 Tensor Core 4.5 PFLOPS and FP8 9 PFLOPS per "
            "GPU with sparsity (2.25 and 4.5 dense)",
            "The GB200 NVL72 part runs at 2.5 PFLOPS dense bf16 (1,200 W); check the SKU you rent.",
            8000 * GB, 148,
            "NVIDIA HGX B200 specifications: GPU memory bandwidth 8TB/s per GPU; 148 SMs as "
            "torch.cuda.get_device_properties reports on B200 in public logs (not an NVIDIA "
            "document)",
        ),
    )
}


#: Other names for a GPU of :data:`GPUS`: "a100-80gb" is the A100 SXM 80GB, the part of the A100
#: datasheet's "80GB" column (the PCIe card of that name is not modelled).
GPU_ALIASES: dict[str, str] = {"a100-80gb": "a100-sxm"}


def gpu(key: str) -> Accelerator:
    """The accelerator called ``key`` (``"a100-sxm"``, ``"h100-sxm"``, ``"h200"``, ``"b200"``, or
    one of :data:`GPU_ALIASES` such as ``"a100-80gb"``).

    >>> gpu("a100-80gb").name
    'A100 SXM 80GB'
    """
    key = GPU_ALIASES.get(key, key) if isinstance(key, str) else key
    return GPUS[choice("GPU", key, [*GPUS, *GPU_ALIASES])]


def peak_flops(key: str, precision: str = "bf16") -> Peak:
    """Dense peak FLOP/s of one GPU in ``precision``: the MFU denominator of this library.

    From the vendor document each :data:`GPUS` entry names in ``source``.

    >>> peak_flops("h100-sxm").describe()
    'dense bf16 peak of one H100 SXM, 989.4 TFLOP/s'
    """
    return gpu(key).peak(precision)


@dataclass(frozen=True)
class Interconnect:
    """How one GPU of a kind talks to the others: GPUs per node, and bytes per second each way
    over NVLink (inside a node) and over the network (to other nodes), per GPU."""

    gpu: str
    node_gpus: int
    #: bytes/s one GPU sends over NVLink (half the bidirectional figure NVIDIA prints)
    nvlink: float
    #: bytes/s one GPU sends to other nodes: its share of the node's network adapters
    network: float
    source: str


#: Per GPU kind (keys of :data:`trainmath.hardware.GPUS`): the node that NVIDIA's DGX/HGX system
#: of that GPU builds, which the planner assumes unless told otherwise.
#:
#: :meta hide-value:
INTERCONNECTS: dict[str, Interconnect] = {
    i.gpu: i
    for i in (
        Interconnect("a100-sxm", 8, 300 * GB, 25 * GB,
                     "NVIDIA DGX A100 datasheet: 8 A100s, NVLink 600 GB/s per GPU (both directions "
                     "together), eight 200 Gb/s HDR InfiniBand adapters for the compute network "
                     "(one per GPU: 25 GB/s each way)"),
        Interconnect("a100-40gb", 8, 300 * GB, 25 * GB,
                     "NVIDIA DGX A100 datasheet (the 320GB system of 8 A100 40GB): NVLink 600 GB/s "
                     "per GPU (both directions together), eight 200 Gb/s HDR InfiniBand adapters "
                     "(25 GB/s each way per GPU)"),
        Interconnect("h100-sxm", 8, 450 * GB, 50 * GB,
                     "NVIDIA DGX H100 datasheet: 8 H100 SXMs, fourth-generation NVLink 900 GB/s per "
                     "GPU (both directions), eight 400 Gb/s ConnectX-7 adapters (50 GB/s each way "
                     "per GPU); Dubey et al. 2024 §3.3.1: Llama 3's 400 Gbps per GPU"),
        Interconnect("h800", 8, 200 * GB, 50 * GB,
                     "NVIDIA H800 datasheet as public copies quote it: NVLink 400GB/s per GPU (both "
                     "directions together: 200 GB/s each way); 8 GPUs a node and 50 GB/s of "
                     "InfiniBand per GPU as in DeepSeek-V3's cluster (DeepSeek-AI 2024, §3.1: 8 "
                     "GPUs a node over NVLink and NVSwitch, InfiniBand across nodes), the adapters' "
                     "rate taken as a DGX H100's 400 Gb/s: an assumption"),
        Interconnect("h200", 8, 450 * GB, 50 * GB,
                     "NVIDIA DGX H200 datasheet: 8 H200s, NVLink 900 GB/s per GPU (both "
                     "directions), eight 400 Gb/s ConnectX-7 adapters"),
        Interconnect("b200", 8, 900 * GB, 50 * GB,
                     "NVIDIA DGX B200 datasheet: 8 B200s, fifth-generation NVLink 1.8 TB/s per GPU "
                     "(both directions), eight 400 Gb/s ConnectX-7 adapters"),
    )
}


def interconnect(key: str) -> Interconnect:
    """The default node and links for GPU kind ``key`` (one of :data:`INTERCONNECTS`)."""
    return INTERCONNECTS[choice("GPU", key, INTERCONNECTS)]


#: PCIe between one GPU and its host, bytes/s each way: half the bidirectional x16 figure the
#: vendor's datasheet prints ("PCIe Gen4: 64GB/s" for A100, "PCIe Gen5: 128GB/s" for H100,
#: H800 and H200): what offloaded activations (:mod:`trainmath.memory.act_offload`) and
#: offloaded model states (:mod:`trainmath.time.offload`) cross. What a copy reaches is lower:
#: 55.4 GB/s host to device on an H200 (nvbandwidth, stas00/ml-engineering network/README.md).
#:
#: :meta hide-value:
HOST_LINKS: dict[str, tuple[float, str]] = {
    "a100-sxm": (32 * GB, "NVIDIA A100 Tensor Core GPU datasheet: PCIe Gen4 64GB/s"),
    "a100-40gb": (32 * GB, "NVIDIA A100 Tensor Core GPU datasheet: PCIe Gen4 64GB/s"),
    "h100-sxm": (64 * GB, "NVIDIA H100 Tensor Core GPU datasheet: PCIe Gen5 128GB/s (SXM)"),
    "h800": (64 * GB, "NVIDIA H800 datasheet as public copies quote it: PCIe Gen5 128GB/s"),
    "h200": (64 * GB, "NVIDIA H200 Tensor Core GPU datasheet: PCIe Gen5 128GB/s"),
    "b200": (64 * GB, "not found in the documents this library reads: taken as the H100's PCIe "
                      "Gen5 128GB/s, an assumption (a PCIe Gen6 host would double it)"),
}


def host_link(key: str) -> float:
    """Bytes/s GPU kind ``key`` moves to host memory, each way (:data:`HOST_LINKS`).

    >>> host_link("h100-sxm") / GB
    64.0
    """
    return HOST_LINKS[gpu(key).key][0]


def pcie(key: str) -> tuple[float, str] | None:
    """:data:`HOST_LINKS`' rate and source for GPU kind ``key`` (aliases resolved), or None for
    a kind it does not list.

    >>> pcie("h100-sxm")[0] / 1e9
    64.0
    """
    return HOST_LINKS.get(gpu(key).key)
