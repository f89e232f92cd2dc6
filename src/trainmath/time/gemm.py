"""How long one matrix multiply takes on one GPU: C[m×n] = A[m×k] · B[k×n].

A GEMM is cut into output tiles of Tm × Tn; each SM computes one tile at a time, so the GPU
runs ⌈tiles / SMs⌉ *waves*. Two quantisations waste work (NVIDIA, *Matrix Multiplication
Background User's Guide*, "Tile quantization" and "Wave quantization"): a dimension that is not
a multiple of the tile pads its last tile, and a tile count that is not a multiple of the SM
count leaves SMs idle in the last wave. So the throughput of a GEMM is

    efficiency(m, n, k) = e_max × waves(m, n) × k / (k + k₀)

of the GPU's dense peak, with ``waves`` the best of the tiles cuBLAS picks from (a smaller tile
wastes less on small shapes but runs at ``tile_efficiency`` of a large one), ``e_max`` the
share of the peak the best-shaped GEMMs reach (:data:`GEMM_UNITS`, measured), and k₀ the depth
below which a tile's prologue and epilogue dominate. Its time is

    t = max(2mnk / (efficiency × peak), bytes / HBM bandwidth) + t₀

where the bytes are A, B and C read or written once (the roofline bound of memory-bound shapes)
and t₀ a kernel's fixed cost. k₀, t₀ and the tile efficiencies are fitted to the published
cuBLAS curves recorded in ``docs/_data/gemm-benchmarks.json`` (:func:`curve_errors` reports
how well), not to training runs.

An 8192³ 16-bit GEMM on an A100 comes out between the two published measurements of it,
253.7 TFLOP/s (Azure HPC, cuBLASLt, A100 80GB, sustained) and 291 (NVIDIA's cuBLAS figure,
*CUDA 11 Features Revealed*, Figure 6, A100 40GB at launch):

>>> t = gemm_time(8192, 8192, 8192, gpu="a100-sxm", precision="bf16")
>>> 253.7e12 < 2 * 8192**3 / t < 291e12
True
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..hardware import gpu as accelerator
from ..units import choice, positive_int


@dataclass(frozen=True)
class GemmUnit:
    """What decides a GEMM's speed on one GPU kind: its tiles, and the best share of the dense
    peak a well-shaped GEMM reaches in each precision (``e_max``), with their sources."""

    #: (Tm, Tn, efficiency of this tile relative to the largest), largest first
    tiles: tuple[tuple[int, int, float], ...]
    #: precision -> share of the dense peak the fastest shapes sustain
    e_max: dict
    source: str


_TILES_SM80 = ((256, 128, 1.0), (128, 128, 0.9), (64, 128, 0.75))
_TILES_SM90 = ((128, 256, 1.0), (128, 128, 0.9), (64, 128, 0.75))
_MAMF = ("Bekman, ml-engineering, compute/accelerator/benchmarks: maximum achievable matmul "
         "FLOPS (MAMF), best of a shape search, torch bf16/fp8")

#: Per GPU kind: tiles (CUTLASS's default tiles for the architecture: 256×128 or 128×256 on
#: Ampere and Hopper, with 128×128 and 64×128 for small outputs) and e_max, the measured best
#: share of the dense peak (MAMF). A100 40GB shares the A100's SMs and tensor cores.
#:
#: :meta hide-value:
GEMM_UNITS: dict[str, GemmUnit] = {
    "a100-sxm": GemmUnit(_TILES_SM80, {"bf16": 271.2 / 312, "fp16": 271.2 / 312},
                         _MAMF + ": A100 SXM bf16 271.2 TFLOP/s of 312"),
    "a100-40gb": GemmUnit(_TILES_SM80, {"bf16": 271.2 / 312, "fp16": 271.2 / 312},
                          _MAMF + ": A100 SXM bf16 271.2 TFLOP/s of 312 (same GA100 compute)"),
    "h100-sxm": GemmUnit(_TILES_SM90, {"bf16": 794.5 / 989.4, "fp16": 794.5 / 989.4,
                                       "fp8": 1402.6 / 1978.9},
                         _MAMF + ": H100 SXM bf16 794.5 of 989.4, fp8 1,402.6 of 1,978.9 TFLOP/s"),
    "h800": GemmUnit(_TILES_SM90, {"bf16": 794.5 / 989.4, "fp16": 794.5 / 989.4,
                                   "fp8": 1402.6 / 1978.9},
                     _MAMF + ": the H100 SXM's (same GH100 tensor cores; no H800 figure)"),
    "h200": GemmUnit(_TILES_SM90, {"bf16": 794.5 / 989.4, "fp16": 794.5 / 989.4,
                                   "fp8": 1453.4 / 1978.9},
                     _MAMF + ": H200 bf16 as the H100 (\"the same\"), fp8 1,453.4 of 1,978.9"),
    "b200": GemmUnit(((256, 128, 1.0), (128, 128, 0.9), (64, 128, 0.75)),
                     {"bf16": 1745 / 2250, "fp16": 1745 / 2250, "fp8": 3432.5 / 4500},
                     _MAMF + ": B200 bf16 1,745 of 2,250, fp8 3,432.5 of 4,500 TFLOP/s"),
}

#: k₀: the depth at which a tile spends as long in its prologue and epilogue as in its main loop
#: (efficiency × k / (k + k₀)); fitted to the cuBLAS curves of ``docs/_data/gemm-benchmarks.json``.
K_HALF = 128
#: t₀: a kernel's fixed cost, seconds (launch gap, fill and drain); fitted to the same curves.
KERNEL_SECONDS = 4e-6
#: The share of the HBM bandwidth a streaming kernel reaches (BabelStream triad on A100 80GB
#: 0.83, H100 0.89, H200 0.86: Azure HPC, *Benchmarking ND H100 v5 / ND H200 v5*); the roofline
#: of a memory-bound GEMM and of :mod:`trainmath.time.memory_bound` work.
HBM_EFFICIENCY = 0.85


def unit(gpu: str) -> GemmUnit:
    """The :class:`GemmUnit` of GPU kind ``gpu`` (an alias such as "a100-80gb" is accepted)."""
    key = accelerator(gpu).key
    return GEMM_UNITS[choice("GPU", key, GEMM_UNITS)]


@lru_cache(maxsize=8192)
def _waves(m: int, n: int, sms: int, tiles: tuple) -> float:
    best = 0.0
    for tm, tn, f in tiles:
        for a, b in ((tm, tn), (tn, tm)):
            rows, cols = -(-m // a), -(-n // b)
            count = rows * cols
            used = (m * n) / (rows * a * cols * b) * count / (-(-count // sms) * sms)
            best = max(best, f * used)
    return best


def gemm_efficiency(m: int, n: int, k: int, *, gpu: str, precision: str,
                    scale: float = 1.0) -> float:
    """The share of ``gpu``'s dense ``precision`` peak that an m×k by k×n GEMM runs at, from
    tiles, waves and depth (module docstring); ``scale`` multiplies e_max (a sustained rate
    below the best-shape benchmark, :data:`trainmath.time.calibration.SUSTAINED`)."""
    u = unit(gpu)
    precision = choice("precision", precision, tuple(u.e_max))
    waves = _waves(positive_int("m", m), positive_int("n", n), accelerator(gpu).sms, u.tiles)
    return u.e_max[precision] * scale * waves * k / (k + K_HALF)


def gemm_time(m: int, n: int, k: int, *, gpu: str, precision: str, scale: float = 1.0,
              element_bytes: int | None = None) -> float:
    """Seconds of one GEMM (module docstring): compute at :func:`gemm_efficiency`, or the
    bytes of A, B and C over the HBM, whichever is longer, plus the kernel's fixed cost."""
    g = accelerator(gpu)
    k = positive_int("k", k)
    eff = gemm_efficiency(m, n, k, gpu=gpu, precision=precision, scale=scale)
    size = element_bytes or (1 if precision == "fp8" else 2)
    flops = 2 * m * n * k
    moved = size * (m * k + k * n) + 2 * m * n  # the output in 16 bits
    return max(flops / (eff * g.peak(precision).flops),
               moved / (HBM_EFFICIENCY * g.hbm_bandwidth)) + KERNEL_SECONDS


def curve_errors(points: list, *, gpu: str, precision: str) -> list[tuple[tuple[int, int, int], float, float]]:
    """For published (m, n, k, TFLOP/s) points: ((m, n, k), measured, predicted) TFLOP/s."""
    out = []
    for m, n, k, measured in points:
        t = gemm_time(m, n, k, gpu=gpu, precision=precision)
        out.append(((m, n, k), float(measured), 2 * m * n * k / t / 1e12))
    return out
