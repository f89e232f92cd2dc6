"""The site's overview: where one GPU's bytes and traffic go in a run (the index's figure).

Two panels from one :class:`~trainmath.runs.estimates.Estimate`: the memory of the fullest
device by kind (:meth:`~trainmath.runs.estimates.Estimate.parts`: the model states as ZeRO
counts them, Rajbhandari et al. 2020 §3 and §5, and the activations tensor by tensor,
Korthikanti et al. 2022 §4), their sum and the step's peak (:mod:`trainmath.memory.peak`); and
the bytes one GPU sends per step by kind of parallelism
(:func:`trainmath.time.communication.communication`: Shoeybi et al. 2019 §3, Narayanan et al.
2021 §3.2, ZeRO §7.2), the seconds they take at the full rate of the link they travel on
(NVLink inside a node, the network across nodes: :class:`trainmath.time.network.Fabric`) and
the seconds the step-time model leaves exposed (:class:`trainmath.time.step.StepTime`). The
numbers are the estimate's and the step model's, so the figure cannot disagree with the pages.

>>> from trainmath.report.running_example import example_estimate
>>> d = overview(example_estimate())
>>> [lab.text for lab in d.numbers][:2]
['31.4 GB', '4.5 GB']
"""

from __future__ import annotations

from dataclasses import dataclass

from ...memory.recipes import recipe
from ...runs.estimates import Estimate
from ...time.communication import Communication, communication
from ...time.step import groups
from ...units import Bytes
from . import Diagram, Label

#: The colour of each kind of memory: the pages' (trainmath.report.plots.KIND_COLORS, which
#: needs matplotlib), activations green
COLORS = {"weights": "blue", "gradients": "light blue", "master weights": "orange",
          "optimizer states": "red", "activations": "green"}


@dataclass(frozen=True)
class Traffic:
    """One kind of parallelism's traffic from one GPU in a step: bytes sent, the link they
    travel on ("NVLink" or "network"), the seconds at that link's full rate, and the seconds
    the step-time model does not hide."""

    kind: str
    sent: Bytes
    link: str
    at_link: float
    exposed: float


def traffic(e: Estimate) -> tuple[Traffic, ...]:
    """The traffic of ``e``'s run by kind of parallelism (those that send anything), for the
    GPU that sends the most (:func:`~trainmath.time.communication.communication`, gradients
    reduced in the recipe's bytes as the step-time model reduces them). A group whose ranks
    all sit in one node travels over NVLink, any other over the network
    (:func:`trainmath.time.step.groups`, Megatron-Core's rank order).

    >>> from trainmath.report.running_example import example_estimate
    >>> [t.kind for t in traffic(example_estimate())]
    ['tensor parallel', 'pipeline parallel', 'data parallel']
    """
    r = e.run
    if e.step is None or r.batch.seq_len is None or r.batch.global_batch is None:
        raise ValueError("traffic needs an estimate with a shape, a sequence, a global batch "
                         "and a GPU kind (a predicted step); accepted: estimate(run(model, "
                         "seq_len=..., global_batch=..., gpu=...))")
    rc = recipe(r.training.recipe)
    c: Communication = communication(
        r.shape, r.layout, seq_len=r.batch.seq_len, micro_batch=r.batch.micro_batch,
        global_batch=r.batch.global_batch, zero_stage=r.training.zero_stage,
        precision=r.training.recipe, grad_bytes=rc.reduce_bytes or rc.gradients,
        recompute=r.training.recompute)
    fabric, t = e.step.fabric, e.step.time
    g = groups(r.layout, fabric.node_gpus)
    # a pipeline neighbour is in the same node only when a stage fits in less than a node
    pp_inside = r.layout.dp * r.layout.tp * r.layout.cp < fabric.node_gpus
    rows = [("tensor parallel", c.tensor_parallel, g["tp"][0] == g["tp"][1], t.tp),
            ("context parallel", c.context_parallel, g["cp"][0] == g["cp"][1], t.cp),
            ("expert parallel", c.expert_parallel, g["ep"][0] == g["ep"][1], t.ep),
            ("pipeline parallel", c.pipeline_parallel, pp_inside, t.pp),
            ("data parallel", c.data_parallel, g["dp"][0] == g["dp"][1], t.dp)]
    out = []
    for kind, sent, inside, exposed in rows:
        if not sent.n:
            continue
        rate = fabric.nvlink if inside else fabric.network
        out.append(Traffic(kind, sent, "NVLink" if inside else "network",
                           float(sent.n) / rate, exposed))
    return tuple(out)


def _gb(b: Bytes) -> str:
    return b.format("GB", 0 if b.n >= 100 * 10**9 else 1)


def _s(x: float) -> str:
    return f"{x:.2f} s"


def overview(e: Estimate, *, title: str = "Where one GPU's bytes and traffic go") -> Diagram:
    """The memory of ``e``'s fullest GPU by kind, their sum and the step's peak, above the
    bytes it sends per step by kind of parallelism with their seconds (:func:`traffic`)."""
    parts = {k: v for k, v in e.parts().items() if v is not None and v.n}
    kinds = sorted(parts, key=lambda k: -parts[k].n)
    moves = traffic(e)
    row, top = 21, 24
    mem_rows = len(kinds) + 2
    traffic_top = top + row * mem_rows + 34
    height = traffic_top + row * (len(moves) + 1) + 30
    t = e.step.time if e.step is not None else None
    alt = ("Memory of one GPU: " + ", ".join(f"{k} {_gb(parts[k])}" for k in kinds)
           + f"; their sum {_gb(e.total)}, the step's peak {_gb(e.peak.bytes)}. Sent per step: "
           + ", ".join(f"{m.kind} {_gb(m.sent)} over {m.link}, {_s(m.at_link)} at its rate, "
                       f"{_s(m.exposed)} exposed" for m in moves)
           + (f"; the step {t.total:.1f} s." if t is not None else "."))
    d = Diagram(title, width=420, height=height, alt=alt)
    d.text(8, 10, "Memory of the fullest GPU", anchor="start", weight="bold")
    x0, span = 122, 220
    biggest = max(e.total.n, e.peak.bytes.n)
    y = top
    for k in kinds:
        w = max(1.5, span * float(parts[k].n / biggest))
        d.text(x0 - 6, y + 7, k, anchor="end")
        d.rect(x0, y, w, 14, COLORS.get(k, "gray"))
        d.text(x0 + w + 5, y + 7, Label(_gb(parts[k]), parts[k]), anchor="start")
        y += row
    for name, amount, fill, dashed in (("sum of kinds", e.total, "light gray", False),
                                       ("peak at once", e.peak.bytes, "none", True)):
        w = span * float(amount.n / biggest)
        d.text(x0 - 6, y + 7, name, anchor="end", weight="bold")
        d.rect(x0, y, w, 14, fill, stroke=True, dashed=dashed)
        d.text(x0 + w + 5, y + 7, Label(_gb(amount), amount), anchor="start", weight="bold")
        y += row
    y = traffic_top
    d.text(8, y - 14, "What it sends in a step", anchor="start", weight="bold")
    cols = (230, 325, 412)
    d.text(8, y, "parallelism, link", anchor="start", size=12, weight="bold")
    for x, head in zip(cols, ("sent", "at the link", "exposed")):
        d.text(x, y, head, anchor="end", size=12, weight="bold")
    y += row
    for m in moves:
        d.text(8, y, f"{m.kind.split()[0]}, {m.link}", anchor="start")
        d.text(cols[0], y, Label(_gb(m.sent), m.sent), anchor="end")
        d.text(cols[1], y, Label(_s(m.at_link), m.at_link), anchor="end")
        d.text(cols[2], y, Label(_s(m.exposed), m.exposed), anchor="end")
        y += row
    d.text(8, y + 2, "at the link: the bytes at NVLink's or the network's full rate;",
           anchor="start", size=11)
    d.text(8, y + 17, "exposed: the wait the step-time model does not hide", anchor="start",
           size=11)
    return d
