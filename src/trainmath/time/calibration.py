"""The step-time model's calibrated parameters: few, physical, fitted on a stated part of the
published runs (:mod:`trainmath.checks.published`), with the error on the rest reported apart.

The tensor-core rates of :mod:`trainmath.time.gemm` (best-shape GEMMs) and
:mod:`trainmath.time.attention` (the flash kernels' benchmarks) come from short
microbenchmarks; a training run sustains less: under hours of load a GPU holds the clock its
power limit allows, and its kernels run between others rather than back to back. ``sustained``
is that share, one per GPU as deployed, and the model's only calibrated parameters.

They were fitted by :func:`trainmath.checks.published.fit`: for each deployment, the share (to
0.01) with the least median abs(predicted / measured − 1) over the calibration part, every third
published run of that deployment in ``docs/_data/throughput.json``'s order. The tests refit
them and fail when these numbers are no longer the fit.
"""

from __future__ import annotations

from ..hardware import gpu as accelerator

#: Deployment -> sustained share of the microbenchmarks' tensor-core rates: A100 SXM (400 W);
#: H100 SXM at its 700 W; the 500 W H100 with HBM2e of torchtitan's benchmark machines
#: ("lower-TDP", its performance page), a part this library lists under no GPU kind of its own.
SUSTAINED: dict[str, float] = {"a100": 0.85, "h100": 0.73, "h100-500w": 0.56}

#: GPU kind -> the deployment whose share it uses. H200 and H800 (the H100's GH100 compute) and
#: B200 have no published run in the set: they take the 700 W H100's share, an assumption.
DEPLOYMENT = {"a100-sxm": "a100", "a100-40gb": "a100", "h100-sxm": "h100", "h800": "h100",
              "h200": "h100", "b200": "h100"}


def sustained(gpu: str) -> float:
    """The calibrated sustained share of the benchmarks' tensor-core rates on GPU kind ``gpu``."""
    return SUSTAINED[DEPLOYMENT[accelerator(gpu).key]]


#: How well the model does on the published runs (:mod:`trainmath.checks.published`):
#: (runs, median abs(predicted / measured − 1)) of the calibration part and of the held-out part,
#: and how many of all the checked runs are within 25%. Recorded here for the outputs to state;
#: the tests recompute them and fail when they drift.
ACCURACY = {"calibration": (38, 0.083), "held-out": (73, 0.087), "within_25": (101, 111)}


def accuracy() -> str:
    """``"within 8.7% at the median on 73 held-out published runs (101 of 111 within 25%)"``."""
    runs, median = ACCURACY["held-out"]
    inside, total = ACCURACY["within_25"]
    return (f"within {median:.1%} at the median on {runs} held-out published runs ({inside} of "
            f"{total} within 25%)")
