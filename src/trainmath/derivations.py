"""How a figure was computed, recorded by the code that computes it: the formula in symbols, what
each symbol is for this run, the arithmetic with the values put in, the result, and its source.

The memory, time and run layers write a :class:`Derivation` beside each figure of an estimate
(:attr:`trainmath.runs.estimates.Estimate.derivations`); the reports show them
(:mod:`trainmath.report.terms`) and compute nothing again.

>>> d = Derivation("weights", "P × w", (("P", "parameters: 7"),), "7 × 2 B = 14 B", None, None,
...                "ZeRO", "states")
>>> bytes_text(14), bytes_text(Fraction(7, 2)), number_text(Fraction(7, 2))
('14 B', '3.50 B', '7/2')
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .units import Bytes

#: What a derivation can be about: the topic a page of the site explains (a report links it).
TOPICS = ("states", "frameworks", "zero", "fsdp2", "activations", "pipeline", "peak", "fits",
          "offload", "time", "finetune", "moe", "posttraining")


@dataclass(frozen=True)
class Derivation:
    """One figure and the arithmetic that gives it.

    ``inputs`` pairs each symbol of ``formula`` with what it is for this run (in words, with its
    value); ``arithmetic`` is the formula with the values put in; ``value`` is the figure and
    ``formula_value`` what the formula gives, equal to it but where ``note`` says why not (FSDP2
    pads its shards); both None for a comparison, not an amount. ``topic`` is one of
    :data:`TOPICS`.
    """

    name: str
    formula: str
    inputs: tuple[tuple[str, str], ...]
    arithmetic: str
    value: Bytes | None
    formula_value: Bytes | None
    source: str
    topic: str
    note: str = ""

    def __post_init__(self) -> None:
        if self.topic not in TOPICS:
            raise ValueError(f"unknown topic {self.topic!r}; accepted: {', '.join(TOPICS)}")


def bytes_text(n: int | Fraction) -> str:
    """Bytes as the arithmetic writes them: whole bytes with separators, a fraction to 2 places."""
    n = Fraction(n)
    if n.denominator == 1:
        return f"{int(n):,} B"
    return f"{float(n):,.2f} B"


def number_text(x: int | Fraction) -> str:
    """A number as the arithmetic writes it: a whole number with separators, else a fraction."""
    x = Fraction(x)
    return f"{int(x):,}" if x.denominator == 1 else f"{x.numerator}/{x.denominator}"
