"""Pipeline schedules side by side: what each pipeline stage's GPU saves for backward, and the
bubble, under each schedule of :data:`trainmath.parallel.schedules.SCHEDULES`.

One row of bars per schedule, one bar per stage, each as long as that stage's activations in
:func:`trainmath.runs.estimates.estimate` of the same run with only the schedule (and the
chunks it needs) changed: 1F1B's first stage holds pp micro-batches and its last one; the
interleaved schedule adds (pp − 1)/(pp·v) to the first; ZB-H1 and ZB-V hold pp on every stage,
their W passes waiting; ZB-H2 2·pp − 1 on every stage; DualPipeV pp + ½; DualPipe pp + 1 of one
stage, its GPUs two stages each (:func:`trainmath.parallel.schedules.in_flight`). Under
the V schedules the LM head's tensors sit on the first stage, which the V's last chunk comes
back to. Beside each row, the step's bubble over its ideal time (the estimate's, F = B = W).

>>> from trainmath.report.running_example import example_run
>>> d = schedules_diagram([example_run(v=1), example_run(v=2, schedule="zb-v")])
>>> [label.text for label in d.labels][::10]
['1f1b', 'zb-v, v = 2']
"""

from __future__ import annotations

from collections.abc import Sequence

from ...runs.description import Run
from ...runs.estimates import estimate
from ...units import Bytes
from . import Diagram, Label


def stage_activations(r: Run) -> tuple[Bytes, ...]:
    """Each pipeline stage's activations (its GPU's, fullest micro-batch count) in ``r``'s estimate."""
    return tuple(d.activations for d in estimate(r).stages)


def _row_name(r: Run) -> Label:
    lay = r.layout
    if lay.v == 1:
        return Label(lay.schedule)
    return Label(f"{lay.schedule}, v = {lay.v}", lay.v, claim=str(lay.v))


def schedules_diagram(runs: Sequence[Run]) -> Diagram:
    """The bars of the module docstring for ``runs``, a row each, named by its schedule (and
    its chunks per GPU, v), drawn to one scale."""
    if not runs:
        raise ValueError("schedules_diagram needs at least one run")
    rows = {_row_name(r): (stage_activations(r), estimate(r).bubble) for r in runs}
    pp = {len(acts) for acts, _ in rows.values()}
    if len(pp) != 1:
        raise ValueError(f"the runs have different pipeline sizes {sorted(pp)}; accepted: one pp")
    stages = pp.pop()
    top = max(a.n for acts, _ in rows.values() for a in acts)
    if top <= 0:
        raise ValueError("the runs count no activations: give each a sequence length")
    bar_h, gap, left, width = 14, 3, 118, 210
    row_h = stages * (bar_h + gap) + 18
    d = Diagram("Activations per pipeline stage, by schedule", height=24 + row_h * len(rows),
                alt="Activations saved for backward on each pipeline stage's GPU under each "
                    "schedule: " + "; ".join(
                        f"{name.text}: " + ", ".join(a.format("GB", 1) for a in acts)
                        + (f", bubble {float(bubble):.2%}" if bubble is not None else "")
                        for name, (acts, bubble) in rows.items()) + ".")
    y = 20
    for name, (acts, bubble) in rows.items():
        d.text(4, y + 4, name, anchor="start", weight="bold", size=12)
        if bubble is not None:
            d.text(left + width + 88, y + 4, Label(f"bubble {float(bubble):.2%}", float(bubble),
                                                   claim=f"{float(bubble):.2%}"),
                   anchor="end", size=11)
        for i, a in enumerate(acts):
            yy = y + 10 + i * (bar_h + gap)
            d.text(left - 6, yy + bar_h - 3, Label(f"stage {i}", name=True), anchor="end",
                   size=11)
            d.rect(left, yy, max(1.0, width * a.n / top), bar_h,
                   "orange" if a.n == max(x.n for x in acts) else "blue")
            d.text(left + width * a.n / top + 4, yy + bar_h - 3,
                   Label(a.format("GB", 1), a), anchor="start", size=11)
        y += row_h
    return d
