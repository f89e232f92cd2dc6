"""ZeRO drawn: what each rank holds at each stage, how that shrinks with the ranks, what each
stage sends per step in bytes and seconds, and what moves to the CPU with offload.

The bytes are :func:`trainmath.memory.sharding.zero_states` (ZeRO §5.1–5.3, Figure 1) and
:func:`trainmath.memory.sharding.fsdp_memory` (ZeRO-Offload §4.2); the traffic is
:func:`trainmath.time.communication.zero_traffic` (ZeRO §7.2) and its seconds
:func:`trainmath.time.network.collective_time`, the step-time model's own.

>>> d = stage_holdings(7_000_000_000, 4)
>>> [lab.text for lab in d.numbers][-1]
'28.0 GB'
"""

from __future__ import annotations

from ...memory.recipes import bytes_per_param
from ...memory.sharding import ShardedState, zero_states
from ...time.collectives import ring_gather_factor
from ...time.communication import zero_traffic
from ...time.network import collective_time
from ...units import Bytes, positive_int
from . import Diagram, Label
from .collectives import milliseconds

#: The three kinds ZeRO shards, in its order, with the fill each is drawn in
KINDS = (("weights", "blue"), ("gradients", "orange"), ("optimizer side", "green"))
#: How the diagrams name the stages 0-3
STAGE_LABELS = ("data parallel", "ZeRO-1", "ZeRO-2", "ZeRO-3")


def _gb(b: Bytes) -> str:
    return b.format("GB", 1 if b.gb < 100 else 0) if b.gb >= 1 else b.format("GB", 2)


def _per_kind(state: ShardedState) -> dict[str, Bytes]:
    return {"weights": state.weights, "gradients": state.gradients,
            "optimizer side": state.master_weights + state.optimizer_states}


def stage_holdings(params: int, n: int = 4, precision: str = "bf16-mixed",
                   optimizer: str = "adamw") -> Diagram:
    """What each of ``n`` ranks (2 to 4 drawn) holds at ZeRO stages 0–3, drawn to scale in bytes
    per parameter: the weights, the gradients and the optimizer side (master weights and
    moments), filled where the rank keeps the kind whole, a 1/n slice where it keeps its shard
    (the rest outlined, held by the other ranks), with the bytes per rank for ``params``."""
    n = positive_int("n (ranks)", n)
    if not 2 <= n <= 4:
        raise ValueError(f"stage_holdings draws 2 to 4 ranks, got {n}")
    bpp = bytes_per_param(precision, optimizer)
    widths = {"weights": bpp.weights, "gradients": bpp.gradients,
              "optimizer side": bpp.optimizer_side}
    full = _per_kind(zero_states(params, 1, 0, precision, optimizer))
    left, right, gap = 92, 56, 6
    cell = (420 - left - right - gap * (n - 1)) / n
    scale = cell / bpp.total
    top, row, bar = 52, 40, 20
    states = [zero_states(params, n, s, precision, optimizer) for s in range(4)]
    d = Diagram("What each rank holds at each ZeRO stage", width=420, height=top + 4 * row + 8,
                alt=(f"For each stage, {n} ranks each hold the weights ({bpp.weights} bytes a "
                     f"parameter), gradients ({bpp.gradients}) and optimizer side "
                     f"({bpp.optimizer_side}) whole or as a 1/{n} shard: "
                     + "; ".join(f"{STAGE_LABELS[s]} {_gb(st.total)} per rank"
                                 for s, st in enumerate(states))
                     + f" for {params / 1e9:g}B parameters."))
    x = 8
    for kind, fill in KINDS:
        d.rect(x, 8, 12, 12, fill)
        d.text(x + 16, 14, kind, anchor="start", size=12)
        x += 24 + 7 * len(kind)
    for r in range(n):
        d.text(left + r * (cell + gap) + cell / 2, 36, Label(f"rank {r}", name=True), size=12)
    d.text(420 - right / 2, 36, "per rank", size=12)
    for s, st in enumerate(states):
        y = top + s * row
        d.text(8, y + bar / 2, STAGE_LABELS[s], anchor="start", weight="bold", size=12)
        held = _per_kind(st)
        for r in range(n):
            x = left + r * (cell + gap)
            for kind, fill in KINDS:
                w = widths[kind] * scale
                if held[kind] == full[kind]:
                    d.rect(x, y, w, bar, fill, rounded=0)
                else:
                    d.rect(x, y, w, bar, "none", stroke=True, dashed=True, rounded=0)
                    d.rect(x + r * w / n, y, w / n, bar, fill, rounded=0)
                x += w
        d.text(420 - 4, y + bar / 2, Label(_gb(st.total), st.total), anchor="end", size=12)
    return d


def memory_by_ranks(params: int, ranks: tuple[int, ...] = (1, 8, 64),
                    precision: str = "bf16-mixed", optimizer: str = "adamw",
                    limit: Bytes | None = None, limit_name: str = "") -> Diagram:
    """Model state per GPU at each ZeRO stage for ``params`` over each of ``ranks`` (2 to 4
    values), as bars on one linear scale, with a dashed line at ``limit`` (what a GPU has for
    them, named ``limit_name``) if given (:func:`trainmath.memory.sharding.zero_states`)."""
    if not 2 <= len(ranks) <= 4:
        raise ValueError(f"memory_by_ranks draws 2 to 4 rank counts, got {len(ranks)}")
    states = {n: [zero_states(params, positive_int("ranks", n), s, precision, optimizer).total
                  for s in range(4)] for n in ranks}
    biggest = max(max(v) for v in states.values())
    left, right, bar, group = 96, 70, 14, 4 * 17 + 22
    scale = (420 - left - right) / biggest.gb
    top = 34
    height = top + len(ranks) * group + (24 if limit is not None else 4)
    d = Diagram("Model state per GPU as the ranks grow", width=420, height=height,
                alt=("Model state per GPU by stage: " + "; ".join(
                    f"{n} ranks: " + ", ".join(f"{STAGE_LABELS[s]} {_gb(b)}"
                                                for s, b in enumerate(v))
                    for n, v in states.items())
                    + (f". The line marks {limit_name} ({_gb(limit)})." if limit else ".")))
    fills = ("gray", "orange", "light blue", "blue")
    x = 8
    for s, fill in enumerate(fills):
        d.rect(x, 8, 12, 12, fill)
        d.text(x + 16, 14, STAGE_LABELS[s], anchor="start", size=12)
        x += 26 + 7 * len(STAGE_LABELS[s])
    for g, (n, values) in enumerate(states.items()):
        y0 = top + g * group
        d.text(8, y0 + 2 * 17, Label(f"{n} rank{'s' if n > 1 else ''}", n, claim=str(n)),
               anchor="start", weight="bold")
        for s, b in enumerate(values):
            y = y0 + s * 17
            w = max(1.0, b.gb * scale)
            d.rect(left, y, w, bar, fills[s], rounded=1)
            d.text(left + w + 4, y + bar / 2, Label(_gb(b), b), anchor="start", size=12)
    if limit is not None:
        x = left + limit.gb * scale
        d.line(x, top - 4, x, top + len(ranks) * group - 18, dashed=True)
        d.text(min(x, 420 - 110), top + len(ranks) * group - 4,
               Label(f"{limit_name} {_gb(limit)}".strip(), limit, claim=_gb(limit)), size=12)
    return d


def stage_collectives(params: int, n_d: int, stage: int, *, weight_bytes: int = 2,
                      grad_bytes: int = 2) -> list[tuple[str, Bytes]]:
    """The ring collectives one step of ZeRO ``stage`` runs, one micro-batch, as (kind, whole
    buffer): an all-reduce of the gradients (stage 0); a reduce-scatter of the gradients and an
    all-gather of the weights (stages 1, 2); two all-gathers and a reduce-scatter (stage 3).
    What they send per rank is :func:`trainmath.time.communication.zero_traffic`'s total.

    >>> [k for k, _ in stage_collectives(10**9, 8, 3)]
    ['all_gather', 'all_gather', 'reduce_scatter']
    """
    w, g = Bytes(params * weight_bytes), Bytes(params * grad_bytes)
    out = {0: [("all_reduce", g)], 1: [("reduce_scatter", g), ("all_gather", w)],
           2: [("reduce_scatter", g), ("all_gather", w)],
           3: [("all_gather", w), ("all_gather", w), ("reduce_scatter", g)]}[stage]
    sent = sum((b * ring_gather_factor(n_d) * (2 if k == "all_reduce" else 1) for k, b in out),
               Bytes(0))
    if sent != zero_traffic(params, n_d, stage, weight_bytes=weight_bytes,
                            grad_bytes=grad_bytes).total:  # one definition of ZeRO's traffic
        raise RuntimeError(f"stage {stage}'s collectives disagree with zero_traffic")
    return out


def traffic_by_stage(params: int, n_d: int, gpu: str, node_gpus: int,
                     what: str = "") -> Diagram:
    """Bytes each rank sends per step, one micro-batch, at each ZeRO stage over ``n_d`` ranks
    with 16-bit weights and gradients (ZeRO §7.2: ZeRO-1 and ZeRO-2 as data parallelism, ZeRO-3
    1.5× it), and the seconds those ring collectives take at ``gpu``'s links with
    ``node_gpus`` ranks in each node (:func:`stage_collectives`, :func:`~trainmath.time.network.collective_time`, as
    the step-time model times them, before any overlap)."""
    per_node = min(node_gpus, n_d)
    rows = []
    for s in range(4):
        sent = zero_traffic(params, n_d, s).total
        secs = sum(collective_time(k, b.n, ranks=n_d, ranks_per_node=per_node, gpu=gpu)
                   for k, b in stage_collectives(params, n_d, s))
        rows.append((sent, secs))
    biggest = max(b for b, _ in rows)
    left, right, top, row = 104, 130, 30, 30
    scale = (420 - left - right) / biggest.gb
    d = Diagram("What each stage sends per step", width=420, height=top + 4 * row + 28,
                alt=(f"Bytes each of {n_d} ranks sends per step{' for ' + what if what else ''},"
                     f" and the seconds at the links with {per_node} ranks a node: "
                     + "; ".join(f"{STAGE_LABELS[s]} {_gb(b)}, {milliseconds(t)}"
                                 for s, (b, t) in enumerate(rows)) + "."))
    d.text(left, 12, "bytes sent per GPU", anchor="start", size=12)
    d.text(420 - 4, 12, "time at the links", anchor="end", size=12)
    fills = ("gray", "orange", "light blue", "blue")
    for s, (b, t) in enumerate(rows):
        y = top + s * row
        d.text(8, y + 10, STAGE_LABELS[s], anchor="start", weight="bold", size=12)
        w = b.gb * scale
        d.rect(left, y, w, 20, fills[s], rounded=1)
        d.text(left + w + 4, y + 10, Label(_gb(b), b), anchor="start", size=12)
        d.text(420 - 4, y + 10, Label(milliseconds(t), t), anchor="end", size=12)
    ratio = rows[3][0] / rows[0][0]
    d.text(8, top + 4 * row + 12, Label(f"ZeRO-3 sends {float(ratio):g}× data parallelism",
                                        ratio, claim=f"{float(ratio):g}×"), anchor="start",
           size=12)
    return d


def offload_flow(no_offload, offload) -> Diagram:
    """ZeRO-Offload (DeepSpeed's ``offload_optimizer`` on ZeRO-2, Ren et al. 2021, §3–§4.2):
    the GPU keeps the 16-bit weights and runs the forward and backward; the CPU keeps the fp32
    master weights, the moments and the gradient partition and runs the optimizer step; each
    step the gradients go down and the updated weights come back. ``no_offload`` and
    ``offload`` are :func:`trainmath.memory.sharding.fsdp_memory` of the same model without and
    with ``offload="optimizer"``: their per-rank GPU and CPU bytes are the labels."""
    gpu_b, cpu_b, before = offload.device.total, offload.host, no_offload.device.total
    d = Diagram("Offloading the optimizer to the CPU", width=420, height=200,
                alt=(f"Without offload the GPU holds {_gb(before)} a rank. With the optimizer "
                     f"offloaded the GPU holds {_gb(gpu_b)}: the 16-bit weights, forward and "
                     f"backward; the CPU holds {_gb(cpu_b)}: master weights, moments and the "
                     "fp32 gradient partition, and runs the optimizer step. Gradients go down "
                     "over PCIe every step and updated weights come back."))
    d.box(8, 30, 150, 90, "light blue", "GPU", "bf16 weights", "forward, backward")
    d.box(262, 30, 150, 90, "green", "CPU", "master weights", "moments, gradients",
          "optimizer step")
    d.line(160, 60, 258, 60, arrow=True)
    d.text(210, 48, "gradients", size=12)
    d.line(258, 92, 160, 92, arrow=True)
    d.text(210, 106, "new weights", size=12)
    d.text(210, 76, "PCIe", size=12, weight="bold")
    d.text(83, 140, Label(f"GPU {_gb(gpu_b)}", gpu_b, claim=_gb(gpu_b)), weight="bold")
    d.text(337, 140, Label(f"CPU {_gb(cpu_b)}", cpu_b, claim=_gb(cpu_b)), weight="bold")
    d.text(210, 172, Label(f"without offload: GPU {_gb(before)}", before, claim=_gb(before)))
    d.text(210, 190, "a rank's bytes, per step: both ways", size=11)
    return d
