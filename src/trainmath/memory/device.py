"""What the GPU shows: the step's tensors, as three counters name them.

The library's peak (:mod:`trainmath.memory.peak`) counts tensors: it is what
``torch.cuda.max_memory_allocated()`` shows, and it matched that counter within 0.5% on a real
H200 (docs/_data/gpu-check.json). A user reads other figures (PyTorch's notes, *CUDA semantics,
memory management*: "the unused memory managed by the allocator will still show as if used in
nvidia-smi"):

- **allocated**: the tensors' peak, ``max_memory_allocated()``;
- **reserved**: what the caching allocator holds from the driver, ``max_memory_reserved()``. It
  rounds requests into blocks and keeps freed blocks for reuse, so the segments it reserved
  exceed the tensors by its fragmentation: a band measured on real runs
  (:data:`RESERVED_RATIO`), not a constant. With ``PYTORCH_CUDA_ALLOC_CONF=
  expandable_segments:True`` a segment grows and shrinks in pages (2 MiB and 20 MiB, PyTorch's
  ``CUDACachingAllocator.cpp``), so at most about a page per pool and stream is left over
  (:data:`EXPANDABLE_SLACK`);
- **process**: what ``nvidia-smi`` shows for the process: reserved plus what lives outside the
  allocator, the CUDA context (:data:`CUDA_CONTEXT`), the kernels the libraries load
  (:data:`LIBRARIES`) and NCCL's buffers, per communicator (:data:`NCCL_COMMUNICATOR`, and NVLS's
  per rank on an NVSwitch node of Hopper or later, :data:`NVLS_PER_RANK`).

Each part is a :class:`Band` (low, typical, high) with its source; ``fits`` compares the device's
capacity with the typical process figure (:class:`~trainmath.runs.estimates.Estimate`).

>>> d = on_device(Bytes(60 * 10**9), gpu="h100-sxm", layout=Layout(dp=8))
>>> d.allocated < d.reserved.typical < d.process.typical
True
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..hardware import gpu as accelerator
from ..parallel.layout import Layout
from ..units import Bytes, MiB

_H200 = "docs/_data/gpu-check.json, this project's run on one H200 (2026-11-30, torch 2.11, CUDA 13.0)"


@dataclass(frozen=True)
class Band:
    """An amount known to a range: ``low`` to ``high``, ``typical`` the figure an output leads
    with; ``source`` says where the range comes from."""

    low: Bytes
    typical: Bytes
    high: Bytes
    source: str

    def __add__(self, other: "Band") -> "Band":
        return Band(self.low + other.low, self.typical + other.typical, self.high + other.high,
                    f"{self.source}; {other.source}")

    def times(self, k: int) -> "Band":
        """This amount ``k`` times."""
        return Band(self.low * k, self.typical * k, self.high * k, self.source)

    def describe(self, unit: str = "GB") -> str:
        """``"48.3 GB (47.9–51.2 GB)"``."""
        return (f"{self.typical.format(unit, 1)} ({self.low.format(unit, 1)}–"
                f"{self.high.format(unit, 1)})")


def _exactly(b: Bytes, source: str) -> Band:
    return Band(b, b, b, source)


#: max_memory_reserved() over max_memory_allocated() of the 28 training steps measured on one H200
#: (default allocator): (lowest, median, highest), the ends rounded outward to 0.0001. The highest are fp32 parameters under autocast
#: and recipes that free and remake their gradients every step.
RESERVED_RATIO = (1.0023, 1.0488, 1.2164)
#: Left over in a grown expandable segment: at most about a 20 MiB page of the large pool and a
#: 2 MiB page of the small one, per stream (PyTorch's ``CUDACachingAllocator.cpp``: the page sizes
#: of ``ExpandableSegment``). From the allocator's design; not measured here.
EXPANDABLE_SLACK = Band(Bytes(0), Bytes(22 * MiB), Bytes(44 * MiB),
                        "PyTorch CUDACachingAllocator.cpp, ExpandableSegment pages (2 MiB, 20 MiB), "
                        "a stream or two")
#: The CUDA context of a process on one device, with lazy module loading (PyTorch's default since
#: 1.13): 287 MB measured by PyTorch's PR #86509, 551 MB on this project's H200 (nvidia-smi's
#: process figure with one tensor), 667 MB with CUDA_MODULE_LOADING=DEFAULT (PR #86509).
CUDA_CONTEXT = Band(Bytes(287_047_680), Bytes(551_092_224), Bytes(666_632_192),
                    "PyTorch PR #86509 (lazy and eager module loading); " + _H200)
#: A process's memory after its first tensor, before lazy module loading (torch 1.x with CUDA
#: 11.2 on a V100): "GPU memory occupied: 1343 MB", in MiB as NVML reports it (Hugging Face
#: transformers docs, *Model training anatomy*). Not counted: a bound for old releases.
EAGER_CONTEXT = Bytes(1343 * MiB)
#: What the first bf16 GEMM and the first flash attention load outside the allocator (cuBLAS,
#: cuBLASLt and the attention kernels): 166 MB and 17 MB more on the H200; one measurement.
LIBRARIES = _exactly(Bytes(714_670_080 - 548_995_072 + 731_447_296 - 714_670_080),
                     _H200 + ": after a bf16 matrix product and flash attention")
#: One NCCL communicator's buffers on a GPU: 544 MB for two ranks and 688 MB for more, on 4 A100s
#: over NVLink (NVIDIA/nccl#964), 585 MB for one rank on this project's H200.
NCCL_COMMUNICATOR = Band(Bytes(544 * 10**6), Bytes(585_105_408), Bytes(688 * 10**6),
                         "NVIDIA/nccl#964 (4×A100); " + _H200 + ": after one all-reduce")
#: NVLink SHARP's buffers per rank for a communicator on one NVSwitch node of Hopper or later with
#: more than two GPUs: nvlsPerRankSize 301,989,888 bytes (NCCL's log on 8 H200s, vllm-project/vllm#9699).
NVLS_PER_RANK = _exactly(Bytes(301_989_888), "NCCL log, nvlsPerRankSize, 8×H200 (vllm#9699)")


@dataclass(frozen=True)
class OnDevice:
    """The three figures a run shows on one GPU, and what sits between them."""

    #: ``max_memory_allocated()``: the step's tensors at their peak
    allocated: Bytes
    #: ``max_memory_reserved()`` with the default allocator, and with expandable segments
    reserved: Band
    reserved_expandable: Band
    #: nvidia-smi's figure for the process: reserved and everything outside the allocator
    process: Band
    #: the parts outside the allocator: (name, what is counted, band)
    outside: tuple[tuple[str, str, Band], ...]
    #: the NCCL communicators counted, as (group, ranks)
    communicators: tuple[tuple[str, int], ...]
    #: paged optimizer states (CUDA managed memory, :mod:`trainmath.memory.bnb_optim`): in the
    #: process's figure while resident, not in ``allocated`` or ``reserved``; the driver can
    #: evict them to CPU memory
    paged: Bytes = Bytes(0)


def communicators(lay: Layout) -> tuple[tuple[str, int], ...]:
    """The NCCL communicators one rank of ``lay`` holds: the default group of every rank and
    each parallel group of more than one rank and fewer than all (tensor, context, data with the
    context ranks, pipeline, expert), as PyTorch and Megatron-Core create one per process group;
    a group of every rank is the default one."""
    groups = [("tp", lay.tp), ("cp", lay.cp), ("dp", lay.dp * lay.cp), ("pp", lay.pp),
              ("ep", lay.ep)]
    if lay.gpus <= 1:
        return ()
    return (("world", lay.gpus),) + tuple((n, r) for n, r in groups if 1 < r < lay.gpus)


def on_device(allocated: Bytes, *, gpu: str | None, layout: Layout,
              node_gpus: int = 8, paged: Bytes = Bytes(0)) -> OnDevice:
    """The three counters of a run whose tensors peak at ``allocated`` on one GPU of kind
    ``gpu`` (None: the kind is not known, NVLS is not counted) in ``layout`` (module docstring).
    ``paged`` of those bytes are a paged optimizer's states in CUDA managed memory: outside the
    allocator, so not in ``allocated`` or ``reserved``, but in the process's figure."""
    allocated = allocated - paged
    lo, mid, hi = (Fraction(str(r)) for r in RESERVED_RATIO)
    reserved = Band(allocated * lo, allocated * mid, allocated * hi,
                    "max_memory_reserved / max_memory_allocated on 28 steps: " + _H200)
    expandable = Band(allocated, allocated, allocated, "the tensors") + EXPANDABLE_SLACK
    comms = communicators(layout)
    outside = [("context", "the CUDA context", CUDA_CONTEXT),
               ("kernels", "cuBLAS's and the attention's kernels", LIBRARIES)]
    if comms:
        outside.append(("NCCL", f"{len(comms)} communicator{'s' if len(comms) > 1 else ''} ("
                        + ", ".join(f"{g} {r}" for g, r in comms) + ")",
                        NCCL_COMMUNICATOR.times(len(comms))))
        hopper = gpu is not None and accelerator(gpu).key not in ("a100-sxm", "a100-40gb")
        # ranks sit in Megatron-Core's order (tp innermost, then cp, dp, pp; the experts' folded
        # grid etp, ep, edp, pp): a group is inside one node when its ranks times their spacing
        # fit in it
        stride = {"tp": 1, "cp": layout.tp, "dp": layout.tp, "ep": layout.expert_tp,
                  "pp": layout.tp * layout.cp * layout.dp, "world": 1}
        nvls = sum(1 for name, ranks in comms
                   if ranks > 2 and ranks * stride[name] <= node_gpus)
        if hopper and nvls:
            outside.append(("NVLS", f"NVLink SHARP, {nvls} group{'s' if nvls > 1 else ''} "
                            "inside a node", NVLS_PER_RANK.times(nvls)))
    if paged.n:
        outside.append(("paged", "paged optimizer states, CUDA managed memory resident on the GPU",
                        _exactly(paged, "bitsandbytes' get_state_buffer and get_paged")))
    process = reserved
    for _, _, band in outside:
        process = process + band
    return OnDevice(allocated=allocated, reserved=reserved, reserved_expandable=expandable,
                    process=Band(process.low, process.typical, process.high,
                                 "reserved, and what sits outside the allocator"),
                    outside=tuple(outside), communicators=comms, paged=paged)
