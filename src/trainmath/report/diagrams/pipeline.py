"""Pipeline schedules drawn: each stage's forward and backward passes over time, and the bubble.

:func:`schedule` runs Megatron-LM's order of passes (``megatron/core/pipeline_parallel/
schedules.py``: 1F1B, Narayanan et al. 2021 §2.2.1, and the interleaved schedule with v model
chunks per device, §2.2.2) on equal stages whose backward takes twice the forward, each pass
starting when its stage is free and its input has arrived. The idle time it leaves is the
bubble that :func:`trainmath.parallel.schedules.bubble_fraction` states and the step-time model
(:mod:`trainmath.time.step`) charges, (pp − 1)/(m·v) of the ideal time; :func:`pipeline_diagram`
draws it and labels that fraction.

>>> slots = schedule(4, 8)
>>> idle_fraction(slots, 8)
Fraction(3, 8)
>>> pipeline_diagram(4, 8).numbers[-1].text
'bubble 37.5% of the ideal time'
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ...parallel.schedules import bubble_fraction
from ...units import positive_int
from . import Diagram, Label

#: Time units of one micro-batch's forward and backward pass through a whole stage (the
#: backward runs two GEMMs per forward GEMM: Narayanan et al. 2021, §3.5)
FORWARD, BACKWARD = Fraction(1), Fraction(2)


@dataclass(frozen=True)
class Slot:
    """One pass on one stage: ``kind`` "F" or "B", model ``chunk`` (0 to v − 1), micro-batch
    ``micro`` (from 0), and its ``start`` and ``end`` in :data:`FORWARD` units."""

    stage: int
    kind: str
    chunk: int
    micro: int
    start: Fraction
    end: Fraction


def _order(pp: int, m: int, v: int, i: int) -> list[tuple[str, int, int]]:
    """Stage i's passes in Megatron-LM's order: warm-up forwards, then one forward and one
    backward in turn, then the remaining backwards."""
    total = m * v

    def chunk(k: int, forward: bool) -> int:
        c = (k % (pp * v)) // pp
        return c if forward else v - 1 - c

    def micro(k: int) -> int:
        return (k // (pp * v)) * pp + k % pp

    warm = min(2 * (pp - i - 1) + (v - 1) * pp, total) if v > 1 else min(pp - i - 1, m)
    ops = [("F", chunk(k, True), micro(k)) for k in range(warm)]
    for k in range(total - warm):
        ops += [("F", chunk(k + warm, True), micro(k + warm)), ("B", chunk(k, False), micro(k))]
    ops += [("B", chunk(k, False), micro(k)) for k in range(total - warm, total)]
    return ops


def schedule(pp: int, m: int, v: int = 1) -> tuple[Slot, ...]:
    """Every pass of a step of ``m`` micro-batches over ``pp`` equal stages of ``v`` chunks
    each (module docstring); interleaving (v > 1) needs m a multiple of pp, as Megatron-LM's."""
    pp, m = positive_int("pp", pp), positive_int("m (micro-batches)", m)
    v = positive_int("v (model chunks per pipeline device)", v)
    if v > 1 and m % pp:
        raise ValueError(f"the interleaved schedule needs m a multiple of pp; got m = {m}, "
                         f"pp = {pp}")
    orders = [_order(pp, m, v, i) for i in range(pp)]
    done: dict[tuple, Fraction] = {}
    free, pos, out = [Fraction(0)] * pp, [0] * pp, []
    while any(pos[i] < len(orders[i]) for i in range(pp)):
        moved = False
        for i in range(pp):
            if pos[i] == len(orders[i]):
                continue
            kind, c, j = orders[i][pos[i]]
            if kind == "F":
                dep = (i - 1, "F", c, j) if i else ((pp - 1, "F", c - 1, j) if c else None)
            else:
                dep = (i + 1, "B", c, j) if i < pp - 1 else (
                    (0, "B", c + 1, j) if c < v - 1 else None)
            if dep is not None and dep not in done:
                continue
            start = max(free[i], done[dep] if dep else Fraction(0))
            end = start + (FORWARD if kind == "F" else BACKWARD) / v
            done[(i, kind, c, j)] = free[i] = end
            out.append(Slot(i, kind, c, j, start, end))
            pos[i] += 1
            moved = True
        if not moved:  # pragma: no cover - the orders above never deadlock
            raise RuntimeError("pipeline schedule deadlocked")
    return tuple(out)


def idle_fraction(slots: tuple[Slot, ...], m: int) -> Fraction:
    """The idle time of a schedule over its ideal time m·(forward + backward): its bubble."""
    span = max(s.end for s in slots)
    ideal = m * (FORWARD + BACKWARD)
    return (span - ideal) / ideal


_FILLS = {"F": ("blue", "light blue"), "B": ("orange", "red")}


def pipeline_diagram(pp: int, m: int, v: int = 1, *, span: Fraction | None = None) -> Diagram:
    """The schedule of :func:`schedule` drawn stage by stage, its bubble labelled from
    :func:`~trainmath.parallel.schedules.bubble_fraction` (and checked against the drawing's
    idle time); ``span`` sets the time the width stands for, to draw two schedules to one scale.
    """
    slots = schedule(pp, m, v)
    bubble = bubble_fraction(pp, m, v)
    if idle_fraction(slots, m) != bubble:  # pragma: no cover - the schedule's own check
        raise AssertionError("the drawn schedule's idle time is not the bubble fraction")
    end = max(s.end for s in slots)
    span = end if span is None else Fraction(span)
    name = "interleaved" if v > 1 else "1F1B"
    pct = f"{float(bubble):.1%}".replace(".0%", "%")
    chunks = f", {v} chunks per GPU" if v > 1 else ""
    d = Diagram(f"The {name} pipeline schedule and its bubble", height=58 + 30 * pp,
                alt=f"The {name} schedule of {m} micro-batches over {pp} pipeline stages"
                    f"{chunks}: each stage's forward passes (blue) and backward passes (orange, "
                    f"twice as long) over time; the gaps at the start and end are the bubble, "
                    f"{pct} of the ideal time, (pp - 1)/(m·v).")
    left, width, top, row = 62, 420 - 62 - 4, 30, 30
    x = lambda t: left + float(t / span) * width  # noqa: E731
    d.box(left, 2, 14, 14, "blue")
    d.text(left + 18, 9, "forward", anchor="start")
    d.box(left + 92, 2, 14, 14, "orange")
    d.text(left + 110, 9, "backward", anchor="start")
    d.text(left + 200, 9, Label(f"m = {m} micro-batches", m, claim=str(m)), anchor="start")
    for i in range(pp):
        y = top + i * row
        d.text(4, y + 11, Label(f"stage {i + 1}", name=True), anchor="start")
        d.rect(left, y, x(end) - left, 22, "faint")
    for s in slots:
        fill = _FILLS[s.kind][s.chunk % 2]
        d.rect(x(s.start) + 0.4, top + s.stage * row, max(0.6, x(s.end) - x(s.start) - 0.8),
               22, fill)
    y = top + pp * row + 6
    d.line(left, y, x(end), y, arrow=True)
    d.text(x(end) - 2, y + 12, "time", anchor="end")
    d.text(left, y + 12, Label(f"bubble {pct} of the ideal time", bubble, claim=pct),
           anchor="start", weight="bold")
    return d
