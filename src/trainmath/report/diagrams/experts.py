"""Mixture-of-experts diagrams: a token's path through the router and the all-to-alls, the
experts' places on the GPUs (Megatron-Core's parallel folding), a capacity factor against the
loads a GPU can receive, and the total against the active parameters.

Every number comes from the models the estimate uses: the all-to-all's bytes from
:func:`trainmath.time.communication.all_to_all_bytes` (four a layer: dispatch and combine,
forward and backward; Rajbhandari et al. 2022, §5) and its seconds from
:func:`trainmath.time.network.collective_time` on the ep group of
:func:`trainmath.time.step.groups`, as the step time counts them; the places from Megatron-Core's
rank order (``megatron/core/parallel_state.py``: tp innermost, then cp, dp; the experts' grid
etp, ep, edp), checked by :func:`trainmath.parallel.layout.fold_problems`; the rows from
:func:`trainmath.model.moe.dispatch` (Megatron-Core's ``get_capacity``); the parameters from
:func:`trainmath.model.moe.total_params` and :func:`~trainmath.model.moe.active_params`
(Jiang et al. 2024, §2.1).

>>> from trainmath.model.presets import preset
>>> d = total_and_active(preset("mixtral-8x7b"))
>>> [x.text for x in d.numbers][:2]
['total 46.7B', 'active 12.9B']
"""

from __future__ import annotations

from fractions import Fraction

from . import Diagram, Label
from ...model.moe import Routing, active_params, dispatch, expert_params, total_params
from ...model.shape import ModelShape
from ...parallel.layout import Layout, expert_problems, fold_problems
from ...problems import check
from ...time.communication import ALL_TO_ALLS, all_to_all_bytes
from ...time.network import Fabric, collective_time
from ...time.step import groups
from ...units import Bytes, positive_int

#: The most experts (or GPUs) a row of boxes draws legibly at 420 units on a phone
MAX_BOXES = 8


def _billions(n: int) -> str:
    return f"{n / 1e9:.1f}B"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _expert_names(first: int, count: int) -> str:
    return f"E{first}" if count == 1 else f"E{first}–E{first + count - 1}"


def all_to_all_seconds(model: ModelShape, lay: Layout, *, seq_len: int, micro_batch: int = 1,
                       gpu: str = "h100-sxm", node_gpus: int | None = None) -> float:
    """Seconds of one all-to-all (a dispatch or a combine) of one micro-batch, as the step time
    counts it (:mod:`trainmath.time.step`): the b·s/cp tokens' k copies of h bf16 values over
    the ep group's ranks and nodes, at ``gpu``'s links (:class:`trainmath.time.network.Fabric`).

    >>> from trainmath.model.presets import preset
    >>> from trainmath.parallel.layout import layout
    >>> round(all_to_all_seconds(preset("mixtral-8x7b"), layout(dp=8, ep=8), seq_len=4096) * 1e3, 3)
    0.199
    """
    fabric = Fabric.of(gpu, node_gpus)
    ranks, per_node = groups(lay, fabric.node_gpus)["ep"]
    tokens = positive_int("micro_batch", micro_batch) * positive_int("seq_len", seq_len) // lay.cp
    size = float(tokens * model.experts_per_token * model.hidden * 2)
    return collective_time("all_to_all", size, ranks=ranks, ranks_per_node=per_node,
                           gpu=fabric.gpu, fabric=fabric)


def token_path(model: ModelShape, lay: Layout, *, seq_len: int, micro_batch: int = 1,
               gpu: str = "h100-sxm", node_gpus: int | None = None) -> Diagram:
    """A token's path through one MoE layer: the router keeps its top k experts, the dispatch
    all-to-all sends it to the GPUs that hold them, they run, the combine all-to-all brings the
    outputs back to be summed (Fedus et al. 2022, §2; Lepikhin et al. 2021, §2.3). The bytes one
    GPU sends in each all-to-all of a micro-batch (:func:`~trainmath.time.communication.all_to_all_bytes` over the four) and
    its seconds (:func:`all_to_all_seconds`).

    >>> from trainmath.model.presets import preset
    >>> from trainmath.parallel.layout import layout
    >>> d = token_path(preset("mixtral-8x7b"), layout(dp=8, ep=8), seq_len=4096)
    >>> [x.text for x in d.numbers][:3]
    ['keeps the top 2', 'sends 58.7 MB', '0.20 ms at the links']
    """
    _moe(model, lay)
    if not 1 < lay.ep <= MAX_BOXES:
        raise ValueError(f"token_path draws ep 2 to {MAX_BOXES} GPUs, got ep {lay.ep}; "
                         f"accepted: 2 to {MAX_BOXES} (ep 1 has no all-to-all)")
    E, k, ep = model.experts, model.experts_per_token, lay.ep
    every = all_to_all_bytes(model, seq_len, micro_batch, ep)
    one = Bytes(Fraction(every.n) / ALL_TO_ALLS)
    secs = all_to_all_seconds(model, lay, seq_len=seq_len, micro_batch=micro_batch, gpu=gpu,
                              node_gpus=node_gpus)
    d = Diagram("A token's path through a mixture-of-experts layer", width=420, height=350,
                alt=(f"The router keeps the top {k} of {E} experts for a token; the dispatch "
                     f"all-to-all sends it to the GPUs that hold them, each GPU sending "
                     f"{one.format('MB', 1)} per micro-batch in {_ms(secs)}; the experts run; "
                     f"the combine all-to-all sends as much back and the {k} outputs are "
                     f"summed. Four all-to-alls a layer: {every.format('MB', 0)}."))
    d.box(110, 8, 200, 44, "light blue", "router scores every expert",
          Label(f"keeps the top {k}", k, claim=str(k)))
    n = E // ep
    gap, x0 = 4, 20
    w = (420 - 2 * x0 - gap * (ep - 1)) / ep
    chosen = {i * ep // k + (1 if ep > k else 0) for i in range(k)}
    y = 150
    for g in range(ep):
        x = x0 + g * (w + gap)
        fill = "orange" if g in chosen else "light gray"
        d.box(x, y, w, 40, fill, _expert_names(g * n, n), size=12)
        if g in chosen:
            d.line(210, 52, x + w / 2, y - 2, arrow=True)
            d.line(x + w / 2, y + 40, 210, 288, arrow=True)
    d.text(20, 78, "dispatch: all-to-all", anchor="start", weight="bold")
    d.text(400, 78, Label(f"sends {one.format('MB', 1)}", one, claim=one.format("MB", 1)),
           anchor="end")
    d.text(400, 98, Label(f"{_ms(secs)} at the links", secs, claim=_ms(secs)), anchor="end")
    d.text(210, 202, Label(f"experts on ep {ep} GPUs", ep, claim=str(ep)), size=12)
    d.text(20, 236, "combine: all-to-all", anchor="start", weight="bold")
    d.text(400, 236, Label(f"sends {one.format('MB', 1)}", one, claim=one.format("MB", 1)),
           anchor="end")
    d.text(400, 256, Label(f"{_ms(secs)} at the links", secs, claim=_ms(secs)), anchor="end")
    d.box(110, 290, 200, 32, "light blue", Label(f"sum of {k} outputs", k, claim=str(k)))
    d.text(210, 338, Label(f"per layer, forward and backward: {every.format('MB', 0)}", every,
                           claim=every.format("MB", 0)), size=12)
    return d


def _moe(model: ModelShape, lay: Layout) -> None:
    if not model.moe:
        raise ValueError(f"{model.name!r} is dense (experts 0); accepted: a mixture of experts")
    check(fold_problems(lay) + expert_problems(model, lay))


def folding(model: ModelShape, lay: Layout) -> Diagram:
    """The GPUs of one pipeline stage, each with its rank for attention (tp innermost, then cp,
    then dp) and the experts it holds (etp innermost, then ep, then edp): Megatron-Core's MoE
    parallel folding (``initialize_model_parallel`` in ``megatron/core/parallel_state.py``).
    The ep GPUs of an expert group split the experts; edp groups hold the same ones.

    >>> from trainmath.model.presets import preset
    >>> from trainmath.parallel.layout import layout
    >>> d = folding(preset("mixtral-8x7b"), layout(dp=4, cp=2, ep=8))
    >>> [x.text for x in d.numbers]
    ['ep 8', 'edp 1', 'dp × cp × tp = 8 GPUs']
    """
    _moe(model, lay)
    stage = lay.dp * lay.cp * lay.tp
    if stage > 2 * MAX_BOXES:
        raise ValueError(f"folding draws at most {2 * MAX_BOXES} GPUs a stage, got "
                         f"dp × cp × tp = {stage}; accepted: at most {2 * MAX_BOXES}")
    E, ep, etp, edp = model.experts, lay.ep, lay.expert_tp, lay.expert_zero_group
    per = E // ep
    rows = -(-stage // MAX_BOXES)
    gap, x0 = 4, 20
    w = (420 - 2 * x0 - gap * (MAX_BOXES - 1)) / MAX_BOXES
    cell = 84
    height = 40 + rows * (cell + 14) + 44
    d = Diagram("Folding: each GPU has a rank for attention and one for the experts",
                width=420, height=height,
                alt=(f"The {stage} GPUs of one pipeline stage: for attention they are dp "
                     f"{lay.dp} × cp {lay.cp} × tp {lay.tp}; for the experts ep {ep} × etp "
                     f"{etp} × edp {edp}, each GPU holding {per} of the {E} experts."))
    d.rect(20, 10, 14, 14, "light blue")
    d.text(40, 17, "attention's rank", anchor="start", size=12)
    d.rect(210, 10, 14, 14, "orange")
    d.text(230, 17, "the experts it holds", anchor="start", size=12)
    for g in range(stage):
        r, c = divmod(g, MAX_BOXES)
        x, y = x0 + c * (w + gap), 36 + r * (cell + 14)
        tp_r, cp_r, dp_r = g % lay.tp, (g // lay.tp) % lay.cp, g // (lay.tp * lay.cp)
        etp_r, ep_r = g % etp, (g // etp) % ep
        ranks = [f"dp{dp_r}"] + ([f"cp{cp_r}"] if lay.cp > 1 else []) \
            + ([f"tp{tp_r}"] if lay.tp > 1 else [])
        d.box(x, y, w, cell / 2, "light blue", *ranks[:2], size=11)
        experts = [_expert_names(ep_r * per, per)] + ([f"part {etp_r}"] if etp > 1 else [])
        d.box(x, y + cell / 2, w, cell / 2, "orange", *experts, size=11)
    y = 36 + rows * (cell + 14) + 4
    d.text(20, y, Label(f"ep {ep}", ep, claim=str(ep)), anchor="start")
    d.text(110, y, Label(f"edp {edp}", edp, claim=str(edp)), anchor="start")
    d.text(400, y, Label(f"dp × cp × tp = {stage} GPUs", stage, claim=str(stage)),
           anchor="end")
    d.text(210, y + 22, "the same GPUs, two grids: nothing is added", size=12)
    return d


def capacity_loads(model: ModelShape, *, tokens: int, ep: int, capacity_factor: float,
                   tp: int = 1, etp: int | None = None) -> Diagram:
    """The token copies (rows) one GPU's experts receive a layer and micro-batch under each load
    of :data:`trainmath.model.moe.EXPERT_LOADS`, dropless (:func:`~trainmath.model.moe.dispatch`), against the
    capacity a capacity factor C sets, ⌈T·k/E·C⌉ from each of the ep routers (Megatron-Core's
    ``get_capacity``): the copies beyond it are dropped (Fedus et al. 2022, §2.2).

    >>> from trainmath.model.presets import preset
    >>> d = capacity_loads(preset("mixtral-8x7b"), tokens=4096, ep=8, capacity_factor=1.25)
    >>> [x.text for x in d.numbers][:3]
    ['capacity 10,240', '8,192 kept', '10,240 kept']
    """
    free = dispatch(model, tokens=tokens, tp=tp, ep=ep, etp=etp)
    capped = dispatch(model, tokens=tokens, tp=tp, ep=ep, etp=etp,
                      routing=Routing(capacity_factor))
    cap = capped.worst
    loads = [(name, free.rows(name)) for name in ("balanced", "measured", "worst")]
    top = max(r for _, r in loads)
    x0, span = 100, 300

    def at(rows: Fraction) -> float:
        return x0 + span * float(rows / top)

    c = Fraction(capped.capacity) / capped.router_tokens * model.experts / model.experts_per_token
    d = Diagram("A capacity factor against the loads a GPU's experts can receive",
                width=420, height=230,
                alt=(f"Rows one GPU's experts receive a layer: balanced "
                     f"{int(loads[0][1]):,}, measured {int(loads[1][1]):,}, worst "
                     f"{int(loads[2][1]):,}; capacity factor {float(capacity_factor):g} caps "
                     f"them at {int(cap):,} and drops the rest."))
    d.text(at(cap), 14, Label(f"capacity {int(cap):,}", cap, claim=f"{int(cap):,}"), size=12)
    for i, (name, rows) in enumerate(loads):
        y = 34 + i * 52
        kept, dropped = min(rows, cap), max(Fraction(0), rows - cap)
        d.text(x0 - 8, y + 10, name, anchor="end")
        d.rect(x0, y, at(kept) - x0, 20, "blue")
        if dropped:
            d.rect(at(kept), y, at(rows) - at(kept), 20, "red")
        d.text(x0, y + 32, Label(f"{int(kept):,} kept", kept, claim=f"{int(kept):,}"),
               anchor="start", size=12)
        if dropped:
            d.text(400, y + 32, Label(f"{int(dropped):,} dropped", dropped,
                                      claim=f"{int(dropped):,}"), anchor="end", size=12)
    d.line(at(cap), 24, at(cap), 34 + 2 * 52 + 24, dashed=True)
    d.text(210, 198, Label(f"capacity factor C = {float(c):g}", c, claim=f"{float(c):g}"),
           size=12)
    d.text(210, 218, Label(f"from the {ep} routers of the ep group", ep, claim=str(ep)),
           size=12)
    return d


def total_and_active(model: ModelShape) -> Diagram:
    """The model's total parameters against the active ones: one layer's experts with the k a
    token uses, and the two counts as bars (:func:`~trainmath.model.moe.total_params`, :func:`~trainmath.model.moe.active_params`: the
    total less the E − k experts a token skips in every layer; Jiang et al. 2024, §2.1).

    >>> from trainmath.model.presets import preset
    >>> [x.text for x in total_and_active(preset("mixtral-8x7b")).numbers][2:]
    ['experts 45.1B', 'the rest 1.6B', 'a token uses 2', 'of 8 experts a layer']
    """
    if not model.moe:
        raise ValueError(f"{model.name!r} is dense (experts 0); accepted: a mixture of experts")
    E, k = model.experts, model.experts_per_token
    if E > MAX_BOXES:
        raise ValueError(f"total_and_active draws at most {MAX_BOXES} experts, got {E}; "
                         f"accepted: a mixture of at most {MAX_BOXES} experts")
    total, active, experts = total_params(model), active_params(model), expert_params(model)
    rest = total - experts
    d = Diagram("Total parameters, held in memory, against the active ones a token uses",
                width=420, height=240,
                alt=(f"{model.name}: a token uses {k} of the {E} experts of each layer; total "
                     f"{_billions(total)} parameters ({_billions(experts)} in experts, "
                     f"{_billions(rest)} the rest), active {_billions(active)}."))
    x0, span = 20, 380

    def w(n: int) -> float:
        return span * n / total

    d.text(x0, 14, Label(f"total {_billions(total)}", total, claim=_billions(total)),
           anchor="start", weight="bold")
    d.rect(x0, 26, w(rest), 26, "blue")
    d.rect(x0 + w(rest), 26, w(experts), 26, "light gray")
    d.text(x0, 70, Label(f"active {_billions(active)}", active, claim=_billions(active)),
           anchor="start", weight="bold")
    d.rect(x0, 82, w(rest), 26, "blue")
    d.rect(x0 + w(rest), 82, w(active - rest), 26, "orange")
    d.text(x0 + w(rest) + w(experts) / 2, 39,
           Label(f"experts {_billions(experts)}", experts, claim=_billions(experts)))
    d.text(400, 14, Label(f"the rest {_billions(rest)}", rest, claim=_billions(rest)),
           anchor="end", size=12)
    d.rect(300, 9, 10, 10, "blue")
    gap = 4
    bw = (380 - gap * (E - 1)) / E
    for e in range(E):
        used = e in {i * E // k + 1 for i in range(k)}
        d.box(x0 + e * (bw + gap), 140, bw, 34, "orange" if used else "light gray", f"E{e}",
              size=12)
    d.text(x0, 128, Label(f"a token uses {k}", k, claim=str(k)), anchor="start")
    d.text(400, 128, Label(f"of {E} experts a layer", E, claim=str(E)), anchor="end")
    d.box(x0, 184, 380, 30, "light gray", "attention, norms, router, embeddings: always used",
          size=12)
    d.text(210, 230, "memory follows the total; compute the active", size=12)
    return d
