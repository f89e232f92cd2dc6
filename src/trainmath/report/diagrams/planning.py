"""The planner's pictures (the plan-a-run page): how it narrows the layouts, where each
candidate's step goes, what its memory sums to and peaks at, and how the fit is judged.

Every number is the planner's own (:func:`trainmath.planner.search.plan`: its candidates and
their reasons, each one's :class:`~trainmath.time.step.StepTime`) or the estimate's
(:func:`trainmath.runs.estimates.estimate`: the kinds of memory, Rajbhandari et al. 2020 §3 and
Korthikanti et al. 2022 §4; the step's peak, :mod:`trainmath.memory.peak`; what the allocator
and the process add, :mod:`trainmath.memory.device`), so a figure cannot disagree with the
ranking it explains.

>>> from trainmath.planner.search import plan
>>> p = plan("llama-3-8b", gpu="h100-sxm", gpus=8, seq_len=8192, global_batch=64)
>>> d = step_bars(p.ranking[:2])
>>> [lab.text for lab in d.numbers][:2]
['rank 1', '7.26 s']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...planner.candidates import Candidate, Plan
from ...runs.estimates import Estimate
from ...time.step import StepTime
from ...units import Bytes
from . import Diagram, Label

#: The step's parts as the bars group them (:meth:`~trainmath.time.step.StepTime.parts`), each with its fill
STEP_GROUPS: dict[str, tuple[tuple[str, ...], str]] = {
    "GEMMs": (("GEMMs",), "blue"),
    "attention": (("attention",), "light blue"),
    "other compute": (("memory-bound", "optimizer"), "gray"),
    "bubble": (("bubble",), "light gray"),
    "tp comm": (("tp comm",), "orange"),
    "other comm": (("cp comm", "pp comm", "dp comm", "ep comm"), "red"),
}

#: The fill of each kind of memory (the pages' colours); the rest of a moment is "other"
MEMORY_FILLS = {"weights": "blue", "parameters": "blue", "gradients": "light blue",
                "master weights": "orange", "optimizer states": "red", "activations": "green"}


def step_groups(t: StepTime) -> dict[str, float]:
    """Seconds of ``t`` by the groups of :data:`STEP_GROUPS`.

    >>> step_groups(StepTime(1.0, 0.5, 0.25, 0.0, 0.25, 0.0, 2.0, 0.0, 0.0, 1.0))["other comm"]
    1.0
    """
    parts = t.parts()
    return {g: sum(parts[p] for p in members) for g, (members, _) in STEP_GROUPS.items()}


def _legend(d: Diagram, y: float, items: Sequence[tuple[str, str]], per_row: int = 3,
            width: float = 136) -> float:
    for i, (name, fill) in enumerate(items):
        x, yy = 8 + (i % per_row) * width, y + (i // per_row) * 18
        d.rect(x, yy - 5, 10, 10, fill)
        d.text(x + 14, yy, name, anchor="start", size=12)
    return y + 18 * ((len(items) + per_row - 1) // per_row)


def step_bars(candidates: Sequence[Candidate], *, example: Candidate | None = None,
              title: str = "Where each candidate's step goes") -> Diagram:
    """One stacked bar per ranked candidate (and ``example``, a layout scored with
    ``layout=``, last), its step's parts grouped by :func:`step_groups`, its total at the end."""
    rows: list[tuple[Label, StepTime]] = []
    for c in candidates:
        if c.time is None or c.rank is None:
            raise ValueError(f"candidate {c.describe()} was not ranked; accepted: the plan's "
                             "ranking")
        rows.append((Label(f"rank {c.rank}", c.rank, claim=str(c.rank)), c.time))
    if example is not None:
        if example.time is None:
            raise ValueError("the example layout was not timed: it breaks a rule")
        rows.append((Label("example"), example.time))
    if not rows:
        raise ValueError("step_bars needs at least one candidate")
    longest = max(t.total for _, t in rows)
    x0, span, h, gap = 66, 290, 16, 24
    top = 14
    legend_y = top + gap * len(rows) + 12
    alt = "Step time by part: " + "; ".join(
        f"{lab.text}: " + ", ".join(f"{g} {s:.2f} s" for g, s in step_groups(t).items() if s)
        + f", total {t.total:.2f} s" for lab, t in rows) + "."
    d = Diagram(title, width=420, height=legend_y + 18 * 2 + 4, alt=alt)
    y = top
    for lab, t in rows:
        d.text(x0 - 6, y + h / 2, lab, anchor="end")
        x = x0
        for g, s in step_groups(t).items():
            w = span * s / longest
            if w > 0.2:
                d.rect(x, y, w, h, STEP_GROUPS[g][1], rounded=0)
            x += w
        d.text(x + 5, y + h / 2, Label(f"{t.total:.2f} s", t.total), anchor="start")
        y += gap
    _legend(d, legend_y, [(g, fill) for g, (_, fill) in STEP_GROUPS.items()])
    return d


def _stack(d: Diagram, x0: float, y: float, scale: float, parts: Mapping[str, Bytes],
           h: float) -> float:
    x = x0
    for kind, amount in parts.items():
        w = scale * float(amount.n)
        if w > 0.2:
            d.rect(x, y, w, h, MEMORY_FILLS.get(kind, "gray"), rounded=0)
        x += w
    return x


def sum_and_peak(estimates: Mapping[str, Estimate], *,
                 title: str = "The sum of the kinds and the peak") -> Diagram:
    """For each named estimate two stacked bars: the kinds of memory added up
    (:attr:`~trainmath.runs.estimates.Estimate.total`) and what is alive at the step's peak (:attr:`~trainmath.runs.estimates.Estimate.peak`'s
    moment), each part in its kind's colour, the rest of the moment (logits, gathered units,
    buffers) gray."""
    if not estimates:
        raise ValueError("sum_and_peak needs at least one estimate")
    biggest = max(max(e.total.n, e.peak.bytes.n) for e in estimates.values())
    x0, span, h = 112, 232, 16
    scale = span / float(biggest)
    rows = []
    for name, e in estimates.items():
        kinds = {k: v for k, v in e.parts().items() if v is not None}
        rows.append((name, e, kinds, e.peak.peak.as_dict()))
    alt = "; ".join(
        f"{name}: the kinds sum to {e.total.format('GB', 1)} ("
        + ", ".join(f"{k} {v.format('GB', 1)}" for k, v in kinds.items())
        + f"); at the peak ({e.peak.phase}) {e.peak.bytes.format('GB', 1)} are alive ("
        + ", ".join(f"{k} {v.format('GB', 1)}" for k, v in alive.items()) + ")"
        for name, e, kinds, alive in rows) + "."
    block = 22 * 2 + 26
    legend_y = 8 + block * len(rows) + 4
    d = Diagram(title, width=420, height=legend_y + 18 * 2 + 4, alt=alt)
    y = 8
    for name, e, kinds, alive in rows:
        d.text(8, y + 4, name, anchor="start", weight="bold")
        y += 18
        for what, parts, amount in (("sum of kinds", kinds, e.total),
                                    ("peak at once", alive, e.peak.bytes)):
            d.text(x0 - 6, y + h / 2, what, anchor="end")
            end = _stack(d, x0, y, scale, parts, h)
            d.text(end + 5, y + h / 2, Label(amount.format("GB", 1), amount), anchor="start")
            y += 22
        y += block - 18 - 44
    _legend(d, legend_y, [("weights", "blue"), ("gradients", "light blue"),
                          ("master weights", "orange"), ("optimizer states", "red"),
                          ("activations", "green"), ("other", "gray")])
    return d


def fit_ladder(e: Estimate, *, title: str = "From the peak to what must fit") -> Diagram:
    """The figures a fit is judged by, for ``e`` (a run with a GPU): the tensors' peak
    (allocated), what the caching allocator reserves for them, the process as nvidia-smi shows
    it (:attr:`~trainmath.runs.estimates.Estimate.on_device`, typical), against the GPU's memory as it reports it."""
    shown, gpu = e.on_device, e.run.gpu
    if shown is None or gpu is None:
        raise ValueError("fit_ladder needs an estimate of a run with a GPU; accepted: "
                         "estimate(run(..., gpu='h100-sxm'))")
    rows = [("peak, allocated", e.peak.bytes, "blue"),
            ("reserved", shown.reserved.typical, "light blue"),
            ("process, nvidia-smi", shown.process.typical, "orange")]
    x0, span, h, gap = 136, 210, 18, 28
    scale = span / float(max(gpu.memory.n, *(b.n for _, b, _ in rows)))
    spare = gpu.memory - shown.process.typical
    alt = (", ".join(f"{name} {b.format('GB', 1)}" for name, b, _ in rows)
           + f"; the GPU reports {gpu.memory.format('GB', 1)}, "
           f"{spare.format('GB', 1)} to spare.")
    d = Diagram(title, width=420, height=24 + gap * len(rows) + 34, alt=alt)
    y = 22
    for name, b, fill in rows:
        w = scale * float(b.n)
        d.text(x0 - 6, y + h / 2, name, anchor="end")
        d.rect(x0, y, w, h, fill)
        d.text(414, y + h / 2, Label(b.format("GB", 1), b), anchor="end")
        y += gap
    limit = x0 + scale * float(gpu.memory.n)
    d.line(limit, 14, limit, y - 4, dashed=True, width=1.5)
    d.text(limit, 8, Label(f"GPU {gpu.memory.format('GB', 1)}", gpu.memory,
                           claim=gpu.memory.format("GB", 1)), anchor="end", size=12)
    d.text(x0, y + 10, Label(f"spare at the process: {spare.format('GB', 1)}", spare,
                             claim=spare.format("GB", 1)), anchor="start", size=12)
    return d


def funnel(p: Plan, *, title: str = "How the planner narrows the layouts") -> Diagram:
    """The planner's search as a funnel, each step with its count and the rule that made it:
    the grids its bounds keep (tp and tp × cp inside a node, pp at most the layers), the
    settings it tried on them, those no rule refused, the grids with a setting that fits (pp,
    ZeRO and recomputation buy memory), and the fastest (dp takes what is left, for
    throughput)."""
    grids = len({c.grid for c in p.candidates})
    tried = len(p.candidates)
    timed = sum(1 for c in p.candidates if c.time is not None)
    fit = len(p.ranking)
    best = p.best
    if best.time is None:
        raise ValueError("the plan's best candidate has no time")
    steps = [
        (Label(f"{grids} grids dp × tp × pp × cp", grids, claim=str(grids)),
         Label(f"tp, tp × cp within a node of {p.node_gpus}", p.node_gpus,
               claim=str(p.node_gpus))),
        (Label(f"{tried:,} settings tried", tried, claim=f"{tried:,}"),
         "ZeRO stage, recompute, b, v"),
        (Label(f"{timed:,} allowed and timed", timed, claim=f"{timed:,}"),
         "no ZeRO-2 or ZeRO-3 with pp"),
        (Label(f"{fit} grids fit", fit, claim=str(fit)),
         Label(f"{p.memory.format('GB', 1)}: pp, ZeRO, recompute", p.memory,
               claim=p.memory.format("GB", 1))),
        (Label(f"fastest: {best.time.total:.1f} s", best.time.total,
               claim=f"{best.time.total:.1f} s"),
         "ranked by step time"),
    ]
    alt = ("The planner's funnel: " + "; ".join(
        f"{a.text} ({b.text if isinstance(b, Label) else b})" for a, b in steps)
        + f"; the fastest is {best.describe()}.")
    w_max, w_min, h, gap, cx = 230, 130, 28, 12, 122
    d = Diagram(title, width=420, height=len(steps) * (h + gap) + 4, alt=alt)
    y = 4
    for i, (count, rule) in enumerate(steps):
        w = w_max - (w_max - w_min) * i / (len(steps) - 1)
        d.rect(cx - w / 2, y, w, h, "light blue", stroke=i == len(steps) - 1)
        d.text(cx, y + h / 2, count, size=12, weight="bold" if i == len(steps) - 1 else "normal",
               fill="text")
        d.text(cx + w / 2 + 8, y + h / 2, rule, anchor="start", size=11)
        if i < len(steps) - 1:
            d.line(cx, y + h, cx, y + h + gap, arrow=True)
        y += h + gap
    return d
