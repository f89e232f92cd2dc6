"""Context parallelism drawn: the sequence split over cp GPUs, K and V passed round a ring.

Ring attention (Liu et al. 2023, §3) and Megatron-Core's "p2p" context parallelism give each of
the cp GPUs s/cp of the tokens; each computes its queries against the key-value chunk it holds,
then passes that chunk to the next GPU of the ring and receives the previous one's, cp − 1
times, so that every query meets every key. The chunk is s/cp tokens of K and V for the
GPU's kv_dim/tp columns in 16 bits; a hop's seconds are one send of it
(:func:`trainmath.time.network.collective_time`), over NVLink when the tp·cp GPUs fit in one
node and across nodes otherwise, as the step-time model (:mod:`trainmath.time.step`) times it.

>>> from trainmath.model.presets import preset
>>> kv_chunk(preset("llama-3-70b"), seq_len=131072, cp=4, tp=8).format("MB", 1)
'16.8 MB'
"""

from __future__ import annotations

import math

from ...model.shape import ModelShape
from ...time.network import Fabric, collective_time
from ...units import Bytes, positive_int
from . import Diagram, Label


def kv_chunk(model: ModelShape, *, seq_len: int, cp: int, tp: int = 1, micro_batch: int = 1,
             value_bytes: int = 2) -> Bytes:
    """Bytes of the K and V chunk one GPU passes on at each hop of the ring."""
    seq_len, cp = positive_int("seq_len", seq_len), positive_int("cp", cp)
    if seq_len % cp:
        raise ValueError(f"cp = {cp} must divide the sequence length {seq_len}")
    return Bytes(seq_len // cp * micro_batch * 2 * (model.kv_dim // positive_int("tp", tp))
                 * value_bytes)


def hop_seconds(model: ModelShape, *, seq_len: int, cp: int, tp: int = 1, gpu: str = "h100-sxm",
                micro_batch: int = 1) -> float:
    """Seconds of one hop: a send of :func:`kv_chunk` inside the node if tp·cp GPUs fit in it,
    else across nodes."""
    fabric = Fabric.of(gpu)
    inside = tp * cp <= fabric.node_gpus
    return collective_time("send", kv_chunk(model, seq_len=seq_len, cp=cp, tp=tp,
                                            micro_batch=micro_batch).n,
                           ranks=2, ranks_per_node=2 if inside else 1, gpu=gpu, fabric=fabric)


def ring_diagram(model: ModelShape, *, seq_len: int, cp: int, tp: int = 1,
                 gpu: str = "h100-sxm") -> Diagram:
    """The ring of ``cp`` ≤ 8 GPUs (module docstring), each with its share of the tokens and
    its K, V chunk, and the chunk's bytes and one hop's seconds."""
    cp = positive_int("cp", cp)
    if not 2 <= cp <= 8:
        raise ValueError(f"ring_diagram draws 2 to 8 context-parallel GPUs; got cp = {cp}")
    chunk = kv_chunk(model, seq_len=seq_len, cp=cp, tp=tp)
    hop = hop_seconds(model, seq_len=seq_len, cp=cp, tp=tp, gpu=gpu)
    share = seq_len // cp
    where = "on NVLink" if tp * cp <= Fabric.of(gpu).node_gpus else "across nodes"
    d = Diagram("Context parallelism: K and V travel round a ring", height=300,
                alt=f"{model.name} at {seq_len:,} tokens over cp = {cp} GPUs in a ring: each "
                    f"holds {share:,} tokens' queries and passes its K, V chunk of "
                    f"{chunk.format('MB', 1)} to the next, {cp - 1} hops a layer, each "
                    f"{hop * 1e3:.2f} ms {where}, so every query meets every key.")
    cx, cy, r = 210, 150, 110
    pts = [(cx + r * math.sin(2 * math.pi * i / cp), cy - r * math.cos(2 * math.pi * i / cp))
           for i in range(cp)]
    for i, (x, y) in enumerate(pts):
        nx, ny = pts[(i + 1) % cp]
        dx, dy = nx - x, ny - y
        n = math.hypot(dx, dy)
        pad = 40 if cp <= 4 else 34
        d.line(x + dx / n * pad, y + dy / n * pad, nx - dx / n * pad, ny - dy / n * pad,
               arrow=True, fill="orange", width=2)
    for i, (x, y) in enumerate(pts):
        d.box(x - 40, y - 22, 80, 44, "light blue", Label(f"GPU {i + 1}", name=True),
              Label(f"K{i + 1}, V{i + 1}", name=True), size=12)
    d.text(cx, cy - 30, Label(f"{share:,} tokens each", share, claim=f"{share:,}"))
    d.text(cx, cy - 10, Label(f"K, V chunk {chunk.format('MB', 1)}", chunk,
                              claim=chunk.format("MB", 1)))
    d.text(cx, cy + 10, Label(f"{hop * 1e3:.2f} ms a hop", hop, claim=f"{hop * 1e3:.2f} ms"))
    d.text(cx, cy + 30, Label(f"{cp - 1} hops a layer", cp - 1, claim=str(cp - 1)))
    return d
