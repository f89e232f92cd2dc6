"""A layout drawn on its nodes: which GPUs form each tensor-parallel group, pipeline stage and
data-parallel replica.

Megatron-Core numbers the ranks tp first, then cp, ep, dp and pp
(``initialize_model_parallel(order="tp-cp-ep-dp-pp")``, ``megatron/core/parallel_state.py``;
Narayanan et al. 2021, §3.3: tensor parallelism inside a node, pipeline parallelism across
nodes), so with cp = 1 rank r belongs to tensor rank r mod tp, replica (r div tp) mod dp and
stage r div (tp·dp), and its node is r div node_gpus. :func:`rank_of` computes it and
:func:`layout_diagram` draws it: one column per stage, one row per replica, one cell per
tensor-parallel group.

>>> from trainmath.parallel.layout import Layout
>>> rank_of(Layout(dp=16, tp=8, pp=4), tp_rank=0, replica=1, stage=1)
136
"""

from __future__ import annotations

from ...parallel.layout import Layout
from ...units import positive_int
from . import Diagram, Label


def rank_of(lay: Layout, *, tp_rank: int, replica: int, stage: int) -> int:
    """The global rank of one GPU in Megatron-Core's order (module docstring; cp = 1)."""
    if lay.cp != 1 or lay.ep != 1:
        raise ValueError("rank_of draws layouts without context or expert parallelism "
                         f"(cp = 1, ep = 1); got cp = {lay.cp}, ep = {lay.ep}")
    return tp_rank + lay.tp * (replica + lay.dp * stage)


def layout_diagram(lay: Layout, *, node_gpus: int = 8, layers: int) -> Diagram:
    """The ``lay.gpus`` GPUs of ``lay`` on nodes of ``node_gpus`` (module docstring), for a
    model of ``layers`` layers; needs tp = ``node_gpus`` (one node per tensor-parallel group)."""
    node_gpus = positive_int("node_gpus", node_gpus)
    if lay.tp != node_gpus:
        raise ValueError(f"layout_diagram draws one node per tensor-parallel group: tp must be "
                         f"{node_gpus}, got {lay.tp}")
    rank_of(lay, tp_rank=0, replica=0, stage=0)  # checks cp and ep
    nodes = lay.gpus // node_gpus
    per_stage = layers // lay.pp
    rows, cols = lay.dp, lay.pp
    left, top, cw, rh = 70, 48, (420 - 70 - 4) / cols, 14
    d = Diagram("The running example's layout on its nodes", height=top + rows * rh + 58,
                alt=f"{lay.gpus} GPUs on {nodes} nodes of {node_gpus}: each node is one "
                    f"tensor-parallel group of tp = {lay.tp} GPUs joined by NVLink; the "
                    f"{lay.pp} columns are the pipeline stages, {per_stage} layers each, and "
                    f"the {lay.dp} rows the data-parallel replicas; a pipeline runs along a row "
                    f"across {lay.pp} nodes, and a data-parallel group down a column across "
                    f"{lay.dp} nodes, both over the network.")
    fills = ("blue", "orange", "green", "purple")
    for p in range(cols):
        x = left + p * cw
        d.text(x + cw / 2, 10, Label(f"stage {p + 1}", name=True), weight="bold")
        d.text(x + cw / 2, 28, Label(f"{per_stage} layers", per_stage, claim=str(per_stage)))
        for r in range(rows):
            y = top + r * rh
            d.rect(x + 2, y + 1, cw - 4, rh - 2, "faint")
            g = (cw - 8) / node_gpus
            for t in range(node_gpus):
                d.rect(x + 4 + t * g, y + 3, g - 1.5, rh - 6, fills[p % len(fills)], rounded=1)
    d.rect(left, top, cw * cols, rh, "none", stroke=True, dashed=True)  # one pipeline
    d.rect(left + 1, top - 1, cw - 2, rows * rh + 2, "none", stroke=True, dashed=True)  # one stage
    for r in (0, rows - 1):
        d.text(4, top + r * rh + rh / 2, Label(f"replica {r + 1}", name=True), anchor="start",
               size=12)
    d.text(4, top + rows * rh / 2, "⋮", anchor="start", size=14)
    y = top + rows * rh + 16
    d.text(4, y, Label(f"each cell: one node, tp {lay.tp} on NVLink", lay.tp,
                       claim=str(lay.tp)), anchor="start")
    d.text(4, y + 20, Label(f"{nodes} nodes", nodes, claim=str(nodes)), anchor="start")
    d.text(80, y + 20, Label(f"dp {lay.dp} down a column", lay.dp, claim=str(lay.dp)),
           anchor="start")
    d.text(240, y + 20, Label(f"pp {lay.pp} along a row", lay.pp, claim=str(lay.pp)),
           anchor="start")
    return d
