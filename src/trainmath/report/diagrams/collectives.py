"""Ring collectives drawn: a ring all-reduce as a reduce-scatter followed by an all-gather, and
each of the two step by step, with the bytes each GPU sends and the seconds at the GPU's links.

In a ring of n ranks the buffer is cut into n chunks. A reduce-scatter passes chunks round the
ring n-1 times, each rank adding its own part to the chunk it receives, until rank i holds the
sum of chunk i; an all-gather passes the summed chunks round n-1 more times until every rank
holds them all. Each phase sends (n-1)/n of the buffer through every rank, the all-reduce
2(n-1)/n (Patarasuk & Yuan 2009; ZeRO §7.1; :mod:`trainmath.time.collectives`). The seconds
are :func:`trainmath.time.network.collective_time`'s, the step-time model's own: over NVLink
when the ring is inside one node, over the network when each GPU is in its own node.

>>> from trainmath.units import Bytes
>>> d = ring_all_reduce(Bytes(1_000_000_000), 4, "h100-sxm")
>>> [lab.text for lab in d.numbers][-2:]
['NVLink: 4.1 ms', 'InfiniBand: 32.3 ms']
"""

from __future__ import annotations

from ...time.collectives import ring_all_reduce_factor, ring_gather_factor
from ...time.network import collective_time
from ...units import Bytes, positive_int
from . import Diagram, Label

#: GPU kinds whose node network the labels call InfiniBand (every DGX/HGX node the library
#: models uses InfiniBand adapters for its compute network: trainmath.hardware.INTERCONNECTS)
NETWORK_NAME = "InfiniBand"


def ring_seconds(kind: str, buffer: Bytes, n: int, gpu: str) -> dict[str, float]:
    """Seconds of one ring ``kind`` ("reduce_scatter", "all_gather") over ``buffer`` among
    ``n`` GPUs: {"NVLink": all in one node, "InfiniBand": one GPU per node}.

    >>> s = ring_seconds("all_gather", Bytes(10**9), 8, "h100-sxm")
    >>> s["NVLink"] < s["InfiniBand"]
    True
    """
    return {"NVLink": collective_time(kind, buffer.n, ranks=n, ranks_per_node=n, gpu=gpu),
            NETWORK_NAME: collective_time(kind, buffer.n, ranks=n, ranks_per_node=1, gpu=gpu)}


def milliseconds(seconds: float) -> str:
    """Seconds as a label writes them: "4.1 ms", "123 ms".

    >>> milliseconds(0.0041), milliseconds(0.1234)
    ('4.1 ms', '123 ms')
    """
    ms = seconds * 1000
    return f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"


def _chunks(d: Diagram, x: float, y: float, states: list[str], size: float = 22) -> None:
    """A GPU's buffer as n chunks: "own" (its unsummed part), "sum" (summed), "gone" (freed)."""
    for c, state in enumerate(states):
        fill = {"own": "light gray", "sum": "blue", "gone": "none"}[state]
        d.box(x + c * (size + 2), y, size, size, fill, f"c{c}", size=11,
              stroke=state == "gone", dashed=state == "gone")


def ring_all_reduce(buffer: Bytes, n: int, gpu: str, what: str = "") -> Diagram:
    """A ring all-reduce of ``buffer`` over ``n`` GPUs (at most 6 drawn) as its two phases: the
    chunks each GPU holds at the start, after the reduce-scatter and after the all-gather; the
    share of the buffer each GPU sends and the seconds at ``gpu``'s NVLink and network
    (:func:`ring_seconds`: the reduce-scatter's and the all-gather's, added). ``what`` names
    the buffer."""
    n = positive_int("n (GPUs)", n)
    if not 2 <= n <= 6:
        raise ValueError(f"ring_all_reduce draws 2 to 6 GPUs, got {n}")
    share = ring_gather_factor(n)
    rs, ag = ring_seconds("reduce_scatter", buffer, n, gpu), ring_seconds("all_gather", buffer, n, gpu)
    both = {k: rs[k] + ag[k] for k in rs}
    size, row = 22, 30
    cols = [60, 60 + n * 24 + 40, 60 + 2 * (n * 24 + 40)]
    width = max(420, cols[2] + n * 24 + 10)
    top = 48
    height = top + n * row + 118
    d = Diagram("A ring all-reduce: a reduce-scatter, then an all-gather", width=width,
                height=height,
                alt=(f"{n} GPUs each start with their own gradients cut into {n} chunks. After "
                     f"the reduce-scatter GPU i holds the sum of chunk i; after the all-gather "
                     f"every GPU holds every summed chunk. Each phase sends {float(share):.0%} of the "
                     f"buffer from each GPU, the all-reduce {float(2 * share):g} times it. "
                     f"{what + ' ' if what else ''}{buffer.format('GB', 2)}: "
                     f"{milliseconds(both['NVLink'])} over NVLink, {milliseconds(both[NETWORK_NAME])} over "
                     f"{NETWORK_NAME} with one GPU per node."))
    for x, title in zip(cols, ("start", "reduce-scatter", "all-gather")):
        d.text(x + n * 24 / 2 - 1, 16, title, weight="bold")
    for i in range(n):
        y = top + i * row
        d.text(8, y + size / 2, Label(f"GPU {i}", name=True), anchor="start")
        _chunks(d, cols[0], y, ["own"] * n)
        _chunks(d, cols[1], y, ["sum" if c == i else "gone" for c in range(n)])
        _chunks(d, cols[2], y, ["sum"] * n)
    mid = top + n * row / 2 - 4
    for a, b in ((cols[0], cols[1]), (cols[1], cols[2])):
        d.line(a + n * 24 + 4, mid, b - 6, mid, arrow=True)
    d.text(cols[1] + n * 24 / 2, top - 14, Label(f"{n - 1} steps", n - 1, claim=f"{n - 1}"), size=11)
    d.text(cols[2] + n * 24 / 2, top - 14, Label(f"{n - 1} steps", n - 1, claim=f"{n - 1}"), size=11)
    y = top + n * row + 14
    d.text(8, y, Label(f"each phase sends {float(share):.0%} of the buffer per GPU", share,
                       claim=f"{float(share):.0%}"), anchor="start")
    d.text(8, y + 20, Label(f"all-reduce: {float(2 * share):g}× the buffer",
                            ring_all_reduce_factor(n), claim=f"{float(2 * share):g}×"),
           anchor="start")
    name = f"{what}: " if what else "buffer: "
    d.text(8, y + 44, Label(f"{name}{buffer.format('GB', 2)}", buffer,
                            claim=buffer.format("GB", 2)), anchor="start", weight="bold")
    d.text(8, y + 66, Label(f"NVLink: {milliseconds(both['NVLink'])}", both["NVLink"],
                            claim=milliseconds(both["NVLink"])), anchor="start")
    d.text(8, y + 88, Label(f"{NETWORK_NAME}: {milliseconds(both[NETWORK_NAME])}", both[NETWORK_NAME],
                            claim=milliseconds(both[NETWORK_NAME])), anchor="start")
    return d


def ring_steps(kind: str, n: int = 4) -> Diagram:
    """One ring collective step by step over ``n`` GPUs (3 to 5 drawn): in each of the n-1
    steps, the chunk each GPU sends to the next. ``kind`` "reduce_scatter": GPU i sends chunk
    (i-s-1) mod n at step s, and the receiver adds its own part (the count shows how many GPUs'
    parts the chunk then sums), so GPU i ends with chunk i summed; "all_gather": GPU i sends
    chunk (i-s) mod n, starting from its own, so every GPU ends with every chunk.

    >>> [lab.text for lab in ring_steps("all_gather", 4).numbers][-1]
    'each GPU sends 75% of the buffer'
    """
    if kind not in ("reduce_scatter", "all_gather"):
        raise ValueError(f"ring_steps draws 'reduce_scatter' or 'all_gather', got {kind!r}")
    n = positive_int("n (GPUs)", n)
    if not 3 <= n <= 5:
        raise ValueError(f"ring_steps draws 3 to 5 GPUs, got {n}")
    rs = kind == "reduce_scatter"
    name = "reduce-scatter" if rs else "all-gather"
    col, left, top, row = (420 - 70) / n, 70, 44, 46
    height = top + (n - 1) * row + 60
    d = Diagram(f"A ring {name}, step by step", width=420, height=height,
                alt=(f"{n} GPUs in a ring, each sending one chunk to the next GPU at each of "
                     f"{n - 1} steps. " + (
                         "Each receiver adds its own part, so after the last step GPU i holds "
                         "the sum of chunk i over all GPUs." if rs else
                         "Each GPU starts with its own summed chunk and forwards what it "
                         "received, so after the last step every GPU holds every chunk.")
                     + f" Each GPU sends {n - 1} of {n} chunks, "
                       f"{float(ring_gather_factor(n)):.0%} of the buffer."))
    for i in range(n):
        d.text(left + i * col + col / 2, 14, Label(f"GPU {i}", name=True), weight="bold")
    for s in range(n - 1):
        y = top + s * row
        d.text(8, y + 11, Label(f"step {s + 1}", name=True), anchor="start")
        for i in range(n):
            c = (i - s - 1) % n if rs else (i - s) % n
            x = left + i * col + 6
            d.box(x, y, 32, 22, "light blue" if rs and s < n - 2 else "blue", f"c{c}", size=12)
            if rs:
                d.text(x + 16, y + 32, Label(f"sum of {s + 1}", s + 1, claim=f"{s + 1}"), size=11)
            if i < n - 1:
                d.line(x + 36, y + 11, x + col - 8, y + 11, arrow=True)
            else:
                d.text(x + 52, y + 11, Label("→ GPU 0", name=True), size=11)
    y = top + (n - 1) * row + 14
    share = ring_gather_factor(n)
    d.text(8, y, "ends: GPU i holds chunk i, summed" if rs else
           "ends: every GPU holds every chunk", anchor="start")
    d.text(8, y + 22, Label(f"each GPU sends {float(share):.0%} of the buffer", share,
                            claim=f"{float(share):.0%}"), anchor="start")
    return d

