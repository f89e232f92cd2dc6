"""Fine-tuning trainers' published peak memory against the estimate of the same run.

A trainer's tutorial or README that prints a peak (torchtune's ``get_memory_stats``, for one)
reads one of PyTorch's figures: ``max_memory_reserved()`` or the peak of active bytes, which is
``max_memory_allocated()`` rounded up to the allocator's blocks. Each :class:`Reading` names the
figure, its unit as the trainer's code computes it (torchtune divides by 10^9 through v0.2 and by
2^30 from v0.3), its source, and the run its source states, as keywords of
:func:`trainmath.runs.description.run`. :func:`compare` checks a reading against what the estimate
says that figure is:

- a **reserved** reading is within when it lies in the band the estimate gives for
  ``max_memory_reserved()`` (:data:`trainmath.memory.device.RESERVED_RATIO` around the predicted
  allocated peak);
- an **active** or **allocated** reading is within when it is within :data:`TOLERANCE` of the
  predicted allocated peak. The trainers' own modules are counted as the nearest kernels the
  library has (``hf-sdpa``), so the tolerance is wider than the measured comparisons' 2%.

The readings live in ``docs/_data/trainer-memory.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from ..memory.finetune import Adapter
from ..memory.finetune_presets import adapter_preset
from ..model.presets import preset
from ..model.shape import shape
from ..runs.description import run
from ..runs.estimates import Estimate, estimate
from ..units import Bytes, choice, parse_bytes

#: Where the readings are kept.
DATA = Path(__file__).resolve().parents[3] / "docs" / "_data" / "trainer-memory.json"
#: The figures a trainer prints, and what each is in PyTorch.
METRICS = {"reserved": "max_memory_reserved()",
           "active": "memory_stats()['active_bytes.all.peak']",
           "allocated": "max_memory_allocated()"}
#: The readings the estimate does not reproduce, and why.
NOT_REPRODUCED = {
    "torchtune-qlora-tutorial/qlora": (
        "the same table gives 9.13 GB reserved after model init, before the first step: the "
        "allocator already held about twice what the NF4 model's tensors take, which no step's "
        "memory explains; the tutorial prints no allocated figure to tell cached blocks from "
        "tensors"),
}
#: How far an active or allocated reading may be from the predicted peak: abs(ratio − 1).
TOLERANCE = Fraction(1, 10)


@dataclass(frozen=True)
class Reading:
    """One published peak: who printed it, where, which figure, and the run it is of."""

    id: str
    label: str
    trainer: str
    source: str
    url: str
    config: str
    metric: str
    value: Bytes
    run: dict
    not_modelled: str = ""

    def __post_init__(self) -> None:
        choice("metric", self.metric, METRICS)


@dataclass(frozen=True)
class Compared:
    """A reading beside the estimate: the predicted figure, its band, and whether it holds."""

    reading: Reading
    estimate: Estimate
    predicted: Bytes
    low: Bytes
    high: Bytes

    @property
    def ratio(self) -> Fraction:
        """Published over predicted."""
        return Fraction(self.reading.value.n, self.predicted.n)

    @property
    def within(self) -> bool:
        """Whether the published figure is inside the band (see the module's rules)."""
        return self.low <= self.reading.value <= self.high


def readings(path: Path = DATA) -> tuple[Reading, ...]:
    """Every reading in ``path`` (the project's file by default)."""
    rows = json.loads(Path(path).read_text(encoding="utf-8"))["readings"]
    return tuple(Reading(r["id"], r["label"], r["trainer"], r["source"], r["url"], r["config"],
                         r["metric"], parse_bytes(r["value"]), r["run"], r.get("not_modelled", ""))
                 for r in rows)


def run_keywords(spec: dict) -> dict:
    """The keywords of :func:`~trainmath.runs.description.run` for a reading's run: its model (a
    preset's name or shape fields), an adapter recipe's settings with the reading's rank and
    targets, then every other keyword as given."""
    spec = dict(spec)
    model = spec.pop("model")
    if isinstance(model, dict):
        fields = dict(model)
        model = shape(fields.pop("name"), **fields)
    else:
        model = preset(model)
    keywords: dict = {}
    recipe = spec.pop("adapter_recipe", None)
    method = spec.pop("finetune", None)
    rank, targets = spec.pop("rank", None), spec.pop("targets", None)
    if recipe is not None:
        p = adapter_preset(recipe)
        keywords = p.run_keywords(method)
        keywords["adapter"] = p.adapter(method, rank=rank,
                                        targets=None if targets is None else tuple(targets))
    elif method not in (None, "full"):
        keywords["adapter"] = Adapter(method, rank, tuple(targets))
    keywords.update(spec)
    return {"model": model, **keywords}


def compare(reading: Reading) -> Compared:
    """The reading beside the estimate of its run."""
    keywords = run_keywords(reading.run)
    est = estimate(run(keywords.pop("model"), **keywords))
    d = est.on_device
    if reading.metric == "reserved":
        return Compared(reading, est, d.reserved.typical, d.reserved.low, d.reserved.high)
    lo = Bytes(int(d.allocated.n * (1 - TOLERANCE)))
    hi = Bytes(int(d.allocated.n * (1 + TOLERANCE)))
    return Compared(reading, est, d.allocated, lo, hi)
