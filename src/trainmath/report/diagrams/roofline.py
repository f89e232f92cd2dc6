"""A roofline: the FLOP/s a kernel can reach against its arithmetic intensity, with a layer's
GEMMs placed on it.

A kernel that does F FLOPs while moving B bytes through HBM runs at most at
min(peak, (F/B) × bandwidth) (Williams, Waterman and Patterson 2009, the roofline model): below
the *ridge* intensity peak/bandwidth it waits for memory, above it for the tensor cores. A GEMM
of m×k by k×n does 2mnk FLOPs and moves its inputs and output once, the bytes
:func:`trainmath.time.gemm.gemm_time` charges; :func:`intensity` divides the two, and the
diagram places each GEMM at its intensity and at the FLOP/s the GEMM model predicts for it
(which the sustained share and the tile and wave losses keep below the roof).

>>> from trainmath.hardware import gpu
>>> round(ridge("h100-sxm"))
295
>>> round(intensity(8192, 8192, 3584))
1911
"""

from __future__ import annotations

import math

from ...hardware import gpu as accelerator
from ...time.gemm import gemm_time
from ...units import Bytes
from . import Diagram, Label


def intensity(m: int, n: int, k: int, element_bytes: int = 2) -> float:
    """FLOPs per byte of an m×k by k×n GEMM: 2mnk over its inputs and 16-bit output."""
    return 2 * m * n * k / (element_bytes * (m * k + k * n) + 2 * m * n)


def ridge(gpu: str, precision: str = "bf16") -> float:
    """The intensity, FLOPs per byte, above which ``gpu`` is limited by its tensor cores."""
    g = accelerator(gpu)
    return g.peak(precision).flops / g.hbm_bandwidth


def roofline_diagram(gemms, *, gpu: str = "h100-sxm", precision: str = "bf16",
                     sustained: float = 1.0) -> Diagram:
    """The roofline of ``gpu`` with ``gemms`` ((name, m, n, k) or the step-time model's
    (name, m, n, k, seconds)) placed at their intensity and predicted TFLOP/s
    (:func:`trainmath.time.gemm.gemm_time` at the ``sustained`` share)."""
    g = accelerator(gpu)
    peak, bw = g.peak(precision).flops, g.hbm_bandwidth
    pts = []
    for gm in gemms:
        name, m, n, k = gm[:4]
        t = gemm_time(m, n, k, gpu=gpu, precision=precision, scale=sustained)
        pts.append((name, intensity(m, n, k), 2 * m * n * k / t))
    x0, x1, y0, y1 = 1.0, 4.0, 1.0, math.log10(2000)  # log10 of FLOP/byte and of TFLOP/s
    L, R, T, B = 52, 410, 24, 214
    X = lambda i: L + (math.log10(i) - x0) / (x1 - x0) * (R - L)  # noqa: E731
    Y = lambda f: B - (math.log10(f / 1e12) - y0) / (y1 - y0) * (B - T)  # noqa: E731
    rid = ridge(gpu, precision)
    lo = ", ".join(f"{n} {i:,.0f}" for n, i, _ in pts)
    d = Diagram(f"The roofline of one {g.name}", height=B + 56 + 18 * len(pts),
                alt=f"Attainable {precision} FLOP/s against FLOPs per byte on one {g.name}: "
                    f"a slope of {bw / 1e12:.2f} TB/s of HBM up to the ridge at {rid:,.0f} "
                    f"FLOP/byte, then flat at {peak / 1e12:,.1f} TFLOP/s. The layer's GEMMs "
                    f"sit right of the ridge, compute-bound, at intensities {lo}.")
    d.line(L, B, R, B)
    d.line(L, B, L, T - 8)
    for v in (10, 100, 1000, 10000):
        d.line(X(v), B, X(v), B + 4)
        d.text(X(v), B + 12, Label(f"{v:,}", v), size=11)
    for v in (10, 100, 1000):
        d.line(L - 4, Y(v * 1e12), L, Y(v * 1e12))
        d.text(L - 6, Y(v * 1e12), Label(f"{v:,}", v), size=11, anchor="end")
    d.text(L + (R - L) / 2, B + 28, "FLOPs per byte of HBM traffic (log)")
    d.text(4, 8, "TFLOP/s (log)", anchor="start", size=12)
    xs = 10 ** x0
    d.line(X(xs), Y(xs * bw), X(rid), Y(peak), width=2, fill="orange")
    d.line(X(rid), Y(peak), R, Y(peak), width=2, fill="blue")
    d.line(X(rid), Y(peak), X(rid), B, dashed=True)
    d.text(X(rid) + 4, B - 10, Label(f"ridge {rid:,.0f}", rid, claim=f"{rid:,.0f}"),
           anchor="start", size=12)
    d.text(R, Y(peak) - 9, Label(f"peak {peak / 1e12:,.1f} TFLOP/s", peak,
                                 claim=f"{peak / 1e12:,.1f} TFLOP/s"), anchor="end", size=12)
    mid = 10 ** ((x0 + math.log10(rid)) / 2)
    d.text(X(mid) - 16, Y(mid * bw) + 26,
           Label(f"HBM {Bytes(round(bw)).format('TB', 2)}/s", Bytes(round(bw)),
                 claim=Bytes(round(bw)).format("TB", 2)), anchor="start", size=12)
    d.text(L + 8, Y(peak) + 6, "memory-bound:", anchor="start", size=12)
    d.text(L + 8, Y(peak) + 20, "norms, adds", anchor="start", size=12)
    d.text(R - 4, Y(60e12), "compute-bound:", anchor="end", size=12)
    d.text(R - 4, Y(60e12) + 14, "the GEMMs", anchor="end", size=12)
    for name, i, f in pts:
        px, py = X(i), Y(f)
        d.path(f"M {px - 4:.1f} {py:.1f} L {px:.1f} {py - 4:.1f} L {px + 4:.1f} {py:.1f} "
               f"L {px:.1f} {py + 4:.1f} Z", fill="red")
    ky = B + 48
    d.text(4, ky, "GEMM", anchor="start", size=12, weight="bold")
    d.text(250, ky, "FLOP/byte", anchor="end", size=12, weight="bold")
    d.text(410, ky, "TFLOP/s", anchor="end", size=12, weight="bold")
    for j, (name, i, f) in enumerate(sorted(pts, key=lambda p: p[1])):
        y = ky + 18 * (j + 1)
        d.path(f"M 4 {y:.1f} L 8 {y - 4:.1f} L 12 {y:.1f} L 8 {y + 4:.1f} Z", fill="red")
        d.text(18, y, name, anchor="start", size=12)
        d.text(250, y, Label(f"{i:,.0f}", i), anchor="end", size=12)
        d.text(410, y, Label(f"{f / 1e12:,.0f}", f / 1e12), anchor="end", size=12)
    return d
