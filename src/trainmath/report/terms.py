"""The arithmetic behind each figure of an estimate: formula, inputs, and where it is explained.

:func:`explain` takes an :class:`~trainmath.runs.estimates.Estimate` and returns one :class:`Term` per
figure ``trainmath estimate`` prints for the fullest device: the four kinds of model state, the
activations, their total, the step's peak and, with a GPU, whether it fits. Each term carries
its formula in symbols, the values of the symbols for this run, the arithmetic written out, the
result, the source of the formula, and a link to the page of this site that explains it. The
terms are the derivations the library recorded as it computed each figure
(:mod:`trainmath.derivations`); the calculator page shows them, one per figure, and nothing
here computes anything again.

The model states follow Rajbhandari et al. 2020 (ZeRO, §5.1-5.3): P parameters on the device
(after tensor and pipeline parallelism, :mod:`trainmath.parallel.layout`), times the recipe's bytes
per parameter (:data:`trainmath.memory.recipes.RECIPES`), divided by the ZeRO group n = dp·cp when the
stage shards that kind. FSDP2 pads each flat parameter to a multiple of n
(:func:`trainmath.memory.fsdp2.fsdp2_rank`), so its shards are the formula's value rounded up to
whole elements; the term says so. Activations follow Korthikanti et al. 2022 (§4) as
:mod:`trainmath.memory.activations` counts them, with the micro-batches in flight on a pipeline stage
from Narayanan et al. 2021 (§2.2). A mixture of experts' routed experts have their own ZeRO
group (dp·cp/ep), and a LoRA or QLoRA run its frozen base and the adapter's own states: each
has its formula. Every term's :attr:`Term.value` is the estimate's own figure;
:attr:`Term.formula_value` is what the formula gives, equal to it except for FSDP2's padding.

>>> from trainmath.runs.estimates import estimate
>>> from trainmath.runs.description import run
>>> terms = explain(estimate(run(7_500_000_000, dp=64, zero_stage=3)))
>>> t = terms[0]
>>> t.name, t.formula, t.arithmetic
('weights', 'P × w ÷ n', '7,500,000,000 × 2 B ÷ 64 = 234,375,000 B')
>>> t.value == t.formula_value
True
"""

from __future__ import annotations

from dataclasses import dataclass

from ..runs.estimates import Estimate
from ..units import Bytes


#: Pages of this site that explain each topic of :data:`trainmath.derivations.TOPICS` (relative
#: links from a page at the site's root).
LINKS = {
    "states": "memory-math.html#the-bytes-per-parameter",
    "frameworks": "memory-math.html#what-frameworks-really-keep",
    "zero": "zero-fsdp.html#concept",
    "fsdp2": "zero-fsdp.html#checked-against-pytorch-fsdp2",
    "activations": "distributed-training.html#activation-memory-tensor-by-tensor",
    "pipeline": "distributed-training.html#pipelines-hold-more-than-one-micro-batch",
    "peak": "how-we-know.html#the-peak-of-a-step",
    "fits": "cli.html#will-it-fit",
    "offload": "zero-fsdp.html#cpu-offload-what-moves-and-what-stays",
    "time": "cli.html#beyond-the-states-zero-3s-units-overhead-offload-and-time",
    "finetune": "fine-tuning.html",
    "moe": "mixture-of-experts.html",
    "posttraining": "post-training.html",
}

@dataclass(frozen=True)
class Term:
    """One figure of an estimate with the arithmetic that gives it.

    ``inputs`` pairs each symbol of ``formula`` with what it is for this run (in words, with
    its value); ``arithmetic`` is the formula with the values put in; ``value`` is the
    estimate's figure and ``formula_value`` what the formula gives (None for terms that are a
    comparison, not an amount). ``link`` is a page of this site, relative to its root.
    """

    name: str
    formula: str
    inputs: tuple[tuple[str, str], ...]
    arithmetic: str
    value: Bytes | None
    formula_value: Bytes | None
    source: str
    link: str
    note: str = ""


def explain(est: Estimate) -> tuple[Term, ...]:
    """The arithmetic of every figure of ``est``, in the order ``trainmath estimate`` prints
    them: weights, gradients, master weights, optimizer states, activations (when counted),
    host memory (with offload), total, peak of a step and, with a GPU, fits; with a budget the
    time to train. Each is the :class:`~trainmath.derivations.Derivation` the library recorded
    where it computed the figure (:attr:`~trainmath.runs.estimates.Estimate.derivations`), with
    the link to the page that explains it; nothing is computed here."""
    return tuple(Term(d.name, d.formula, d.inputs, d.arithmetic, d.value, d.formula_value,
                      d.source, LINKS[d.topic], d.note) for d in est.derivations)
