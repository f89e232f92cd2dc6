"""A real run's memory against the estimate: what was measured, what was predicted, the rest,
and its likely causes in order.

A reading is one of the counters a run shows (:data:`trainmath.checks.loglines.COUNTERS`):
``allocated`` (``max_memory_allocated()``), ``reserved`` (``max_memory_reserved()``) or
``process`` (nvidia-smi); an out-of-memory message (:mod:`trainmath.checks.oom`) gives all three
at the moment it failed, and the request that failed. :func:`diagnose` holds each against the
estimate's figure for it (:class:`trainmath.memory.device.OnDevice`) and, where the reading is
above its band, ranks the causes that could make up the difference, each with the figure that
supports it:

- **fragmentation**: the allocator's reserve beyond its tensors, against the band measured on
  real steps; with an OOM, whether the reserved but unallocated memory alone would have held
  the request (``expandable_segments:True`` is the remedy PyTorch's message names);
- **outside the allocator**: the process's memory beyond the reserve, against the context, the
  kernels and NCCL's communicators counted; more NCCL channels or peers, CUDA graphs' pools,
  paged memory (bitsandbytes) and other libraries' own allocations live there;
- **another process on the GPU**, when an OOM message lists one;
- **a setting not on**: the tensors' peak recomputed with the recomputation, the attention kernel
  or the gradients' format a run may have had instead of the one given, nearest first;
- **routing imbalance**, for a mixture of experts: the estimate assumes every expert gets the
  average share of tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from ..memory.device import CUDA_CONTEXT, EAGER_CONTEXT, Band
from ..runs.estimates import Estimate, estimate
from ..units import Bytes
from .loglines import COUNTERS, Reading
from .oom import OomReading

#: How far an allocated reading may be from the predicted peak and still agree: the peak matched
#: PyTorch within 0.5% on a real H200 (docs/_data/gpu-check.json); 2% leaves room for the kernels.
ALLOCATED_TOLERANCE = Fraction(2, 100)


@dataclass(frozen=True)
class Comparison:
    """One counter: measured, and the predicted band."""

    counter: str
    measured: Bytes
    predicted: Band
    #: where the reading came from ("--measured", "OOM message: ...", "Megatron-LM's log")
    source: str

    @property
    def gap(self):
        """Measured minus the typical prediction, in bytes (negative: less was used)."""
        return self.measured.n - self.predicted.typical.n

    @property
    def within(self) -> bool:
        """Whether the reading lies in the predicted band."""
        return self.predicted.low <= self.measured <= self.predicted.high


@dataclass(frozen=True)
class Cause:
    """One likely cause of a difference, and the figure that supports it."""

    name: str
    figure: str
    #: bytes of the difference it accounts for, where that can be said
    accounts: Bytes | None = None


@dataclass(frozen=True)
class Diagnosis:
    """:func:`diagnose`'s answer."""

    estimate: Estimate
    comparisons: tuple[Comparison, ...]
    oom: OomReading | None
    causes: tuple[Cause, ...]
    #: the part of the largest difference no cause accounts for (None: nothing to explain)
    unexplained: Bytes | None


def _band_of(est: Estimate, counter: str) -> Band:
    d = est.on_device
    if counter == "allocated":
        lo = Bytes(d.allocated.n * (1 - ALLOCATED_TOLERANCE))
        hi = Bytes(d.allocated.n * (1 + ALLOCATED_TOLERANCE))
        return Band(lo, d.allocated, hi, "the tensors' peak, within the peak's measured accuracy")
    return d.reserved if counter == "reserved" else d.process


def _readings(oom: OomReading | None, readings, measured) -> list[tuple[str, Bytes, str]]:
    out = []
    if oom is not None:  # at the failing moment: allocated, plus the request it could not serve
        out.append(("allocated", oom.allocated + oom.requested, "OOM message: allocated + "
                    "the request"))
        out.append(("reserved", oom.reserved + oom.requested, "OOM message: reserved + the "
                    "request"))
        if oom.process is not None:
            out.append(("process", oom.process + oom.requested, "OOM message: this process + "
                        "the request"))
    for r in readings:
        out.append((r.counter, r.value, f"{r.framework}'s log"))
    for counter, value in measured:
        out.append((counter, value, "--measured"))
    return out


def _alternatives(est: Estimate) -> list[tuple[str, Estimate]]:
    """The same run with one setting a run may have had instead: recomputation, attention,
    the gradients' format."""
    run, t = est.run, est.run.training
    alts = []
    for rc in ("none", "selective", "full", "op"):
        if rc != t.recompute:  # op: torchtitan's policy (trainmath.memory.checkpointing)
            what = "'op' (torchtitan's policy)" if rc == "op" else repr(rc)
            alts.append((f"recompute {what} instead of {t.recompute!r}",
                         replace(t, recompute=rc, recompute_policy=None)))
    other = "hf-eager" if t.implementation == "hf-sdpa" else (
        "megatron-eager" if t.implementation == "megatron-te" else None)
    if other is not None:
        alts.append((f"eager attention ({other}) instead of {t.implementation}",
                     replace(t, implementation=other, attention="eager")))
    if t.recipe in ("bf16-mixed", "fp16-mixed", "deepspeed"):
        alts.append(("gradients kept in fp32 (Megatron-LM's main_grad, recipe megatron)",
                     replace(t, recipe="megatron")))
    out = []
    for name, training in alts:
        try:
            out.append((name, estimate(replace(run, training=training))))
        except ValueError:  # the setting cannot run with the rest of this run
            continue
    return out


def diagnose(est: Estimate, *, oom: OomReading | None = None, readings: tuple[Reading, ...] = (),
             measured: tuple[tuple[str, Bytes], ...] = ()) -> Diagnosis:
    """Hold what a run showed against ``est`` (module docstring). ``measured`` is (counter,
    bytes) pairs; ``readings`` a framework's log lines; ``oom`` an out-of-memory message."""
    if est.on_device is None:
        raise ValueError("a check needs an estimate of the device's memory")
    for counter, _ in measured:
        if counter not in COUNTERS:
            raise ValueError(f"unknown counter {counter!r}; accepted: {', '.join(COUNTERS)}")
    found = _readings(oom, readings, measured)
    if not found:
        raise ValueError("a check needs something measured: an OOM message (--oom), a log line "
                         "(--log) or a reading (--measured SIZE --counter allocated|reserved|"
                         "process)")
    comparisons = tuple(Comparison(c, v, _band_of(est, c), src) for c, v, src in found)
    d = est.on_device
    causes: list[Cause] = []
    by = {c.counter: c for c in comparisons}
    alloc, reserved, process = by.get("allocated"), by.get("reserved"), by.get("process")
    if oom is not None and oom.fragmentation:
        causes.append(Cause("fragmentation", f"the {oom.reserved_unallocated} reserved by PyTorch "
                            f"but unallocated would have held the {oom.requested} request: the "
                            "allocator had the bytes in blocks it could not use; "
                            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                            oom.reserved_unallocated))
    if alloc is not None and reserved is not None:
        slack = reserved.measured.n - alloc.measured.n
        band = d.reserved.high.n - d.allocated.n
        if slack > band and not (oom is not None and oom.fragmentation):
            causes.append(Cause("fragmentation", f"{Bytes(slack)} reserved beyond the tensors, "
                                f"more than the {Bytes(band)} the measured band allows; "
                                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                                Bytes(slack - band)))
    if process is not None and reserved is not None and process.measured > reserved.measured:
        outside = process.measured.n - reserved.measured.n
        counted = d.process.typical.n - d.reserved.typical.n
        allowed = d.process.high.n - d.reserved.high.n
        if outside > allowed:
            causes.append(Cause("outside the allocator", f"{Bytes(outside)} outside PyTorch's "
                                f"allocator where {Bytes(counted)} was counted (context, kernels, "
                                f"{len(d.communicators)} NCCL communicators): more NCCL channels "
                                "or peers, CUDA graphs' pools, paged memory or other libraries",
                                Bytes(outside - allowed)))
    if process is not None and reserved is None and process.measured > process.predicted.high:
        beyond = process.measured.n - process.predicted.high.n
        eager = max(0, EAGER_CONTEXT.n - CUDA_CONTEXT.high.n)
        causes.append(Cause("the reserve, or outside it", f"only nvidia-smi's figure was read: the "
                            f"{Bytes(beyond)} above the band is the allocator's reserve or memory "
                            "outside it (max_memory_reserved() tells which); before lazy module "
                            "loading (PyTorch 1.13 with CUDA 11.7) every kernel loaded at start: "
                            "a context of up to "
                            f"{EAGER_CONTEXT} where {CUDA_CONTEXT.high} is counted at most",
                            Bytes(min(beyond, eager))))
    if oom is not None and oom.others:
        total = sum((b for _, b in oom.others), Bytes(0))
        causes.append(Cause("another process", f"{len(oom.others)} other process"
                            f"{'es' if len(oom.others) > 1 else ''} on the GPU held {total}", total))
    if oom is not None and oom.private_pools is not None and oom.private_pools.n:
        causes.append(Cause("CUDA graphs", f"{oom.private_pools} in CUDA graphs' private pools, "
                            "which the estimate does not count", oom.private_pools))
    off = max((c for c in comparisons if not c.within), key=lambda c: abs(c.gap), default=None)
    if off is not None:  # a setting the run may have had instead, nearest the reading first
        def distance(alt: Estimate) -> float:
            return abs(_band_of(alt, off.counter).typical.n - off.measured.n)
        ranked, seen = [], set()
        for name, alt in sorted(_alternatives(est), key=lambda a: distance(a[1])):
            figure = _band_of(alt, off.counter).typical
            if figure not in seen:  # e.g. selective recomputation is none with flash attention
                seen.add(figure)
                ranked.append((name, alt))
        for name, alt in ranked[:2]:
            if distance(alt) < abs(off.gap):
                band = _band_of(alt, off.counter)
                inside = band.low <= off.measured <= band.high
                # past the reading, on the other side from the estimate: between the two
                between = not inside and (band.typical.n - off.measured.n) * off.gap > 0
                partial = between and name.startswith("recompute")
                causes.append(Cause("a setting", f"with {name} the {off.counter} figure would be "
                                    f"{band.typical}, nearer the {off.measured} measured" + (
                                        ", and its band holds the reading" if inside else "") + (
                                        "; the reading lies between the two: a recomputation of "
                                        "some operations or some layers (recompute op, with its "
                                        "policy, names the operations)" if partial else ""),
                                    Bytes(off.measured.n - off.predicted.high.n)
                                    if inside and off.gap > 0 else None))
        if est.run.shape is not None and est.run.shape.moe and off.gap > 0:
            causes.append(Cause("routing imbalance", "the estimate gives every expert the average "
                                "share of tokens; an unbalanced router sends more to some"))
    worst = max((c for c in comparisons if not c.within), key=lambda c: c.gap, default=None)
    unexplained = None
    if worst is not None and worst.gap > 0:  # beyond the band's top, less what causes account for
        accounted = sum(c.accounts.n for c in causes if c.accounts is not None)
        unexplained = Bytes(max(0, worst.measured.n - worst.predicted.high.n - accounted))
    return Diagnosis(est, comparisons, oom, tuple(causes), unexplained)
