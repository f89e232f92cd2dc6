"""What to change when a run does not fit, and what its room buys when it does.

:func:`suggest` takes a :class:`~trainmath.runs.description.Run` with a GPU and answers from
the library's own estimate (:func:`trainmath.runs.estimates.estimate`: what nvidia-smi would
show, plus the run's overhead, against the GPU's usable memory, as ``fits`` judges it):

- **it does not fit**: each lever of :data:`~trainmath.planner.levers.LEVERS` (the kernels,
  sequence parallelism, recomputation, the ZeRO stage, offload, more GPUs by dp, tp, cp or pp, a
  smaller micro-batch with gradient accumulation, a shorter sequence, and for an adapter run
  8-bit optimizer states, bf16 adapter weights and a 4-bit base) at the smallest setting that
  makes the run fit; and the pairs of levers where neither fits alone, each at the smallest
  setting the pair needs. Each comes with its memory per device and its step-time cost;
- **it fits**: the memory to spare, and what it could buy: the longest sequence and the largest
  micro-batch that still fit.

**The smallest setting.** A lever's settings run from the smallest change to the largest
(recompute selective, then full; ZeRO stage 1, 2, 3; dp × 2, × 4, ...; the sequence shortened
by one step of :func:`~trainmath.planner.levers.sequence_step`, then two, ...) and memory falls
along them, so the first that fits is found by bisection over the estimate. A setting that a
rule of the run refuses (:mod:`trainmath.runs.rules`: a ZeRO stage the recipe does not offer,
selective recomputation with Hugging Face's kernels, a dp that does not divide the global
batch) is never suggested: the changed :class:`~trainmath.runs.description.Run` checks itself.
For a pair, the first lever's smallest setting that fits with the second at its largest, then
the second's smallest with that; both ways round. A change whose flags include all of another
change that fits is left out (offload's ``--zero 3`` with ``--recompute full``, when ZeRO-3 and
recomputation fit without the offload).

**The cost** of a change is the step-time model's (:func:`trainmath.time.step.step_time`, as
the estimate runs it): the GPU time per trained token, step time × GPUs ÷ (global batch ×
sequence), against the run as given, so that more GPUs and a shorter sequence are charged
fairly. It needs a run that the model times (a model shape, a sequence, a global batch, a GPU
kind, no adapter, no offload: :attr:`trainmath.runs.estimates.Estimate.step`); otherwise
:attr:`Suggestion.cost` is None and :attr:`Suggestion.untimed` says why.

**The ranking rule** (:data:`RANKING`): first the changes that train the same thing each step
(the same model, tokens, batch and optimizer), then those that change it (a shorter sequence,
8-bit optimizer states, bf16 adapter weights, a 4-bit base); within each, the timed ones by
their cost, smallest first, then the untimed ones by the GPUs they use, fewest first, then in
the order of :data:`~trainmath.planner.levers.LEVERS` (a pair by its later lever), then by the
memory they need, least first.

**Bounds**, so that a browser (Pyodide) answers at once: dp, tp, cp and pp grow by powers of
two, dp up to × :data:`~trainmath.planner.levers.MAX_FACTOR`, tp and cp within a node of
:data:`~trainmath.planner.levers.NODE_GPUS`, pp up to the layers; sequences in steps of
:data:`~trainmath.planner.levers.SEQUENCE_STEP` tokens up to :data:`MAX_SEQ_LEN`; one search
computes at most :data:`MAX_ESTIMATES` estimates (:attr:`Suggestions.estimates` counts them).

**A new lever** is one entry of :data:`~trainmath.planner.levers.LEVERS`. Not levers here:
paged optimizers (the library counts their states on the GPU: :mod:`trainmath.memory.finetune`),
offload to NVMe (not modelled), and a new layout from scratch, which ``trainmath plan`` ranks.

>>> from trainmath.memory.finetune import Adapter
>>> from trainmath.runs.description import run
>>> s = suggest(run("llama-2-70b", seq_len=4096, adapter=Adapter("qlora"), gpu="a100-80gb"))
>>> s.fits, s.changes[0].flags, s.changes[0].peak.format("GB", 2)
(False, '--recompute full', '43.83 GB')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from ..problems import Problem, check
from ..runs.description import Run
from ..runs.estimates import Estimate, _on_device, _peak, estimate
from ..units import Bytes
from .levers import (LEVERS, MAX_MICRO_BATCH, Change, micro_change, micro_sizes, seq_change,
                     sequence_step)

#: The longest sequence a headroom search tries.
MAX_SEQ_LEN = 1 << 20
#: The most estimates one :func:`suggest` computes.
MAX_ESTIMATES = 600


@dataclass(frozen=True)
class Suggestion:
    """A change (one lever, or two) and the run it gives: its estimate, whether it fits, the
    GPUs it uses, and its cost in the step-time model (GPU time per token against the run as
    given, minus one: +0.25 is a quarter more), or None with the reason in ``untimed``."""

    changes: tuple[Change, ...]
    estimate: Estimate
    #: same model, tokens, batch and optimizer each step
    keeps: bool
    cost: float | None
    untimed: str | None

    @property
    def flags(self) -> str:
        """The change as the command's flags: ``"--zero 3 --dp 16"``."""
        return " ".join(f"{k} {v}".strip() for c in self.changes for k, v in c.flags)

    @property
    def words(self) -> str:
        """What the change does, in words."""
        return "; ".join(c.words for c in self.changes)

    @property
    def peak(self) -> Bytes:
        """The step's peak on the fullest device (allocated)."""
        return self.estimate.peak.bytes

    @property
    def needed(self) -> Bytes:
        """What fitting is judged by: the process's memory as nvidia-smi shows it, plus the
        overhead (:attr:`trainmath.runs.estimates.Estimate.needed`)."""
        return self.estimate.needed

    @property
    def spare(self) -> Bytes:
        """The GPU's memory left over (negative: over)."""
        return self.estimate.run.gpu.memory - self.estimate.needed

    @property
    def gpus(self) -> int:
        """GPUs of the changed run."""
        return self.estimate.gpus

    @property
    def step_seconds(self) -> float | None:
        """The changed run's predicted step, or None when it is not timed."""
        return None if self.estimate.step is None else self.estimate.step.time.total


@dataclass(frozen=True)
class Headroom:
    """What a run that fits could still do: the memory to spare, the longest sequence and the
    largest micro-batch that still fit (None when the run has no shape or no sequence; the run's
    own when nothing larger fits)."""

    spare: Bytes
    longest_seq: int | None
    largest_micro_batch: int | None
    #: the longest sequence searched (MAX_SEQ_LEN) or the largest micro-batch (the global batch
    #: ÷ dp, or MAX_MICRO_BATCH): a figure at its bound means "at least"
    seq_bound: int
    micro_batch_bound: int


@dataclass(frozen=True)
class Suggestions:
    """:func:`suggest`'s answer for a run: its estimate, whether it fits, the changes that make
    it fit (ranked by the module's rule), or the room it has; how many estimates it took."""

    estimate: Estimate
    fits: bool
    changes: tuple[Suggestion, ...]
    headroom: Headroom | None
    estimates: int

    @property
    def ranking(self) -> str:
        """The ranking rule, in words (:data:`RANKING`)."""
        return RANKING

    @property
    def timed(self) -> bool:
        """Whether the run as given is timed (its changes have costs)."""
        return self.estimate.step is not None


#: The ranking rule in words, as every rendering states it.
RANKING = ("the same training first, by the step-time model's GPU time per token, smallest first, "
           "then what it cannot time, fewest GPUs first; changes to what a step trains last")


# -- the search --------------------------------------------------------------------------------
#: Each lever's place in :data:`~trainmath.planner.levers.LEVERS`, which the ranking falls back on.
ORDER = {lever.name: i for i, lever in enumerate(LEVERS)}


def suggest_problems(run: Run) -> list[Problem]:
    """Suggestions need a GPU to fit against."""
    if run.gpu is None:
        return [Problem(("suggest", "gpu"), "suggest needs a GPU to fit against; accepted: gpu "
                        "(a GPU kind) or gpu_memory (an amount)")]
    return []


class _Search:
    """Estimates of runs, each computed once, counted and bounded."""

    def __init__(self, base: Run):
        self.base = base
        self.count = 0
        self._needed: dict[Run, Bytes | None] = {}

    def made(self, run: Run, changes: Iterable[Change]) -> Run | None:
        """``run`` with ``changes``, or None when a rule refuses it."""
        for c in changes:
            try:
                run = c.apply(run)
            except ValueError:
                return None
        return run

    def fits(self, run: Run) -> bool:
        """Whether ``run`` fits; False once the search has spent its estimates."""
        needed = self.needed(run)
        return needed is not None and needed <= run.gpu.memory

    def needed(self, run: Run) -> Bytes | None:
        if run not in self._needed:
            if self.count >= MAX_ESTIMATES:
                return None
            self.count += 1
            if run.adapter is None and run.shape is not None:  # the peak alone: fast
                peak = _peak(run)
                self._needed[run] = _on_device(run, peak).process.typical + run.overhead
            else:
                self._needed[run] = estimate(run).needed
        return self._needed[run]

    def first(self, run: Run, changes: Sequence[Change]) -> tuple[Change, Run] | None:
        """The first of ``changes`` (ordered, memory falling) that makes ``run`` fit, by
        bisection; a change the rules refuse counts as not fitting (a short list is filtered
        of them first)."""
        if len(changes) <= 16:
            made = [(c, r) for c in changes if (r := self.made(run, (c,))) is not None]
        else:
            made = [(c, None) for c in changes]

        def ok(i: int) -> bool:
            c, r = made[i]
            r = r or self.made(run, (c,))
            return r is not None and self.fits(r)

        i = _first_true(len(made), ok)
        if i is None:
            return None
        c, r = made[i]
        return c, r or self.made(run, (c,))


def _first_true(n: int, ok: Callable[[int], bool]) -> int | None:
    """The first i < n with ok(i), ok false then true along i; None when ok(n - 1) is false."""
    if n == 0 or not ok(n - 1):
        return None
    lo, hi = 0, n - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def _untimed(est: Estimate) -> str | None:
    if est.step is not None:
        return None
    r = est.run
    if r.adapter is not None:
        return "the step-time model does not time adapter runs"
    if r.training.offload != "none":
        return "the step-time model does not time offload"
    missing = [w for w, have in (("a model shape", r.shape is not None),
                                 ("--seq-len", r.batch.seq_len is not None),
                                 ("--global-batch", r.batch.global_batch is not None),
                                 ("--gpu", r.gpu is not None and r.gpu.kind is not None))
               if not have]
    if missing:
        return "a step time needs " + ", ".join(missing)
    return "the step-time model cannot time this recipe"


def _per_token(est: Estimate) -> float:
    b = est.run.batch
    return est.step.time.total * est.gpus / (b.global_batch * b.seq_len)


def _suggestion(base: Estimate, changes: tuple[Change, ...], run: Run) -> Suggestion:
    est = estimate(run)
    cost = None
    if est.step is not None and base.step is not None:
        cost = _per_token(est) / _per_token(base) - 1
    keeps = all(next(lv for lv in LEVERS if lv.name == c.lever).keeps for c in changes)
    return Suggestion(changes, est, keeps, cost, _untimed(est))


def _rank(s: Suggestion) -> tuple:
    order = max(ORDER[c.lever] for c in s.changes)
    return (not s.keeps, s.cost is None, s.cost or 0.0, s.gpus, order, s.needed.n)


def suggest(run: Run) -> Suggestions:
    """What to change so that ``run`` fits its GPU, or the room it has (module docstring)."""
    check(suggest_problems(run))
    base = estimate(run)
    search = _Search(run)
    if base.fits:
        return Suggestions(base, True, (), _headroom(run, base, search), search.count + 1)
    levers = [(lv, lv.settings(run)) for lv in LEVERS]
    levers = [(lv, s) for lv, s in levers if s]
    found, alone = [], []
    for lv, settings in levers:
        hit = search.first(run, settings)
        if hit is None:
            alone.append((lv, settings))
        else:
            found.append(_suggestion(base, (hit[0],), hit[1]))
    found += _pairs(run, base, alone, search)
    found = [s for s in found if s.estimate.fits]  # the full estimate has the last word
    unique = {s.flags: s for s in found}
    flags = {k: {f for c in s.changes for f in c.flags} for k, s in unique.items()}
    kept = [s for k, s in unique.items() if not any(flags[j] < flags[k] for j in flags)]
    ranked = tuple(sorted(kept, key=_rank))
    return Suggestions(base, False, ranked, None, search.count + len(ranked) + 1)


def _pairs(run: Run, base: Estimate, levers, search: _Search) -> list[Suggestion]:
    """Pairs of the levers that do not fit alone (``levers``): for each pair whose largest
    settings together fit, the smallest setting of one with the other at its largest, then the smallest
    setting of the other with it; both ways round."""
    out = []
    for i, (a, sa) in enumerate(levers):
        for b, sb in levers[i + 1:]:
            strongest = search.made(run, (sa[-1], sb[-1]))
            if strongest is None or not search.fits(strongest):
                continue
            for (x, sx), (y, sy) in (((a, sa), (b, sb)), ((b, sb), (a, sa))):
                top = search.made(run, (sy[-1],))
                if top is None:
                    continue
                hx = search.first(top, sx)
                if hx is None:
                    continue
                with_x = search.made(run, (hx[0],))
                if with_x is None:
                    continue
                hy = search.first(with_x, sy)
                if hy is None:
                    continue
                first, second = sorted((hx[0], hy[0]), key=lambda c: ORDER[c.lever])
                out.append(_suggestion(base, (first, second), hy[1]))
    return out


# -- when it fits ------------------------------------------------------------------------------
def _growing(search: _Search, run: Run, values: Sequence[int],
             make: Callable[[int], Change]) -> int | None:
    """The largest of ``values`` (rising, memory rising along them) whose run fits, by doubling
    then bisection, so that only a few are estimated; None when the first does not fit. A value
    the rules refuse counts as not fitting."""
    def ok(i: int) -> bool:
        r = search.made(run, (make(values[i]),))
        return r is not None and search.fits(r)

    if not values or not ok(0):
        return None
    good, k = 0, 1
    while k < len(values) and ok(k):
        good, k = k, 2 * k + 1
    bad = min(k, len(values))  # values[bad] does not fit, or is past the end
    while bad - good > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return values[good]


def _headroom(run: Run, base: Estimate, search: _Search) -> Headroom:
    spare = run.gpu.memory - base.needed
    longest = largest = None
    micro_bound = MAX_MICRO_BATCH
    if run.shape is not None and run.batch.seq_len is not None:
        step = sequence_step(run)
        s = run.batch.seq_len
        first = (s // step + 1) * step
        longer = list(range(first, MAX_SEQ_LEN + 1, step))
        longest = _growing(search, run, longer, seq_change)
        longest = s if longest is None else longest
        sizes = [k for k in micro_sizes(run, False) if k > run.batch.micro_batch]
        if run.batch.global_batch is not None:
            micro_bound = run.batch.global_batch // run.layout.dp
        largest = _growing(search, run, sizes, lambda k: micro_change(run, k))
        largest = run.batch.micro_batch if largest is None else largest
    return Headroom(spare, longest, largest, MAX_SEQ_LEN, micro_bound)

