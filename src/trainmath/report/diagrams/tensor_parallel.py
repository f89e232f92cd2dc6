"""Tensor parallelism drawn: the MLP split by columns then rows, attention's heads shared out,
and sequence parallelism's gathers and reduce-scatters around the norms.

Megatron-LM (Shoeybi et al. 2019, §3, Figure 3) splits a transformer layer's first MLP matrix
by columns, so that each of the tp GPUs applies the activation to its own share with no
communication, and the second by rows, so that each GPU holds a partial sum of the output that
one all-reduce adds up; attention is split by heads the same way. Sequence parallelism
(Korthikanti et al. 2022, §4.2.2, Figure 5) splits the norms and residual adds along the
sequence instead, turning each all-reduce into a reduce-scatter before them and an all-gather
after. The bytes are one activation of tokens × h in 16 bits; the seconds are
:func:`trainmath.time.network.collective_time` over the tp group, the step-time model's own.

>>> from trainmath.model.presets import preset
>>> d = mlp_split_diagram(preset("llama-3-70b"), tp=8, tokens=8192)
>>> [lab.text for lab in d.numbers][:2]
['7,168 columns', '3,584 rows']
"""

from __future__ import annotations

from ...model.shape import GATED_MLPS, ModelShape
from ...time.network import collective_time, Fabric
from ...units import Bytes, positive_int
from . import Diagram, Label


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def activation_bytes(model: ModelShape, tokens: int, value_bytes: int = 2) -> Bytes:
    """One activation of ``tokens`` × h values (16-bit by default): what each tensor-parallel
    collective gathers or reduces (:func:`trainmath.time.step.step_time` times the same)."""
    return Bytes(positive_int("tokens", tokens) * model.hidden * value_bytes)


def tp_collective(kind: str, model: ModelShape, tp: int, tokens: int, *, gpu: str = "h100-sxm",
                  inside_node: bool = True) -> float:
    """Seconds of one tensor-parallel ``kind`` collective of :func:`activation_bytes` over
    ``tp`` GPUs, all in one node (NVLink) or one per node (the network)."""
    fabric = Fabric.of(gpu)
    per_node = min(tp, fabric.node_gpus) if inside_node else 1
    return collective_time(kind, activation_bytes(model, tokens).n, ranks=tp,
                           ranks_per_node=per_node, gpu=gpu, fabric=fabric)


def _split_check(model: ModelShape, tp: int) -> int:
    tp = positive_int("tp", tp)
    if model.ffn % tp or model.heads % tp or model.kv_heads % tp:
        raise ValueError(f"tp = {tp} must divide the FFN width {model.ffn}, the {model.heads} "
                         f"heads and the {model.kv_heads} KV heads")
    return tp


def mlp_split_diagram(model: ModelShape, *, tp: int, tokens: int, gpu: str = "h100-sxm") -> Diagram:
    """The MLP over ``tp`` GPUs (module docstring): the first GPU's and the last's shares of
    the two matrices, and the all-reduce of the output, in bytes and seconds on NVLink and
    across nodes."""
    tp = _split_check(model, tp)
    f = model.ffn // tp
    up = 2 * f if model.mlp in GATED_MLPS else f  # a gated MLP's gate and up columns
    act = activation_bytes(model, tokens)
    nv = tp_collective("all_reduce", model, tp, tokens, gpu=gpu)
    ib = tp_collective("all_reduce", model, tp, tokens, gpu=gpu, inside_node=False)
    fn = {"swiglu": "SwiGLU", "geglu": "GeGLU"}.get(model.mlp, "GeLU")
    d = Diagram("Tensor parallelism in the MLP: columns, then rows, then one all-reduce",
                height=276,
                alt=f"{model.name}'s MLP split over tp = {tp} GPUs: each GPU holds {up:,} of the "
                    f"first matrix's columns and {f:,} of the second's rows, applies {fn} to its "
                    f"own columns without communicating, and ends with a partial sum; one "
                    f"all-reduce of {act.format('MB', 0)} adds them: {_ms(nv)} on NVLink, "
                    f"{_ms(ib)} across nodes.")
    d.box(10, 4, 400, 26, "light gray", "input X: every token, whole on every GPU")
    for col, (x, name) in enumerate(((10, "GPU 1"), (230, f"GPU {tp}"))):
        d.line(x + 90, 30, x + 90, 44, arrow=True)
        d.text(x + 90, 52, Label(name, name=True), weight="bold")
        d.box(x, 62, 180, 40, "light blue", "first matrix, by columns",
              Label(f"{up:,} columns", up, claim=f"{up:,}"))
        d.box(x, 108, 180, 26, "faint", f"{fn}: no communication")
        d.box(x, 140, 180, 40, "light gray", "second matrix, by rows",
              Label(f"{f:,} rows", f, claim=f"{f:,}"))
        d.box(x, 186, 180, 22, "faint", "a partial sum of the output", stroke=True)
        d.line(x + 90, 208, x + 90, 222, arrow=True)
    d.text(210, 120, "⋯", size=20)
    d.rect(10, 222, 6, 52, "red", rounded=0)
    d.box(16, 222, 394, 52, "faint",
          Label(f"all-reduce of {act.format('MB', 0)}", act, claim=act.format("MB", 0)),
          Label(f"{_ms(nv)} on NVLink", nv, claim=_ms(nv)),
          Label(f"{_ms(ib)} across nodes", ib, claim=_ms(ib)))
    return d


def heads_diagram(model: ModelShape, *, tp: int) -> Diagram:
    """Attention's query and key-value heads shared out over ``tp`` ≤ 8 GPUs: each computes
    its own heads' attention with no communication (Shoeybi et al. 2019, §3)."""
    tp = _split_check(model, tp)
    if tp > 8:
        raise ValueError(f"heads_diagram draws at most 8 GPUs; got tp = {tp}")
    q, kv = model.heads // tp, model.kv_heads // tp
    d = Diagram("Attention split by heads", height=128,
                alt=f"{model.name}'s {model.heads} query heads and {model.kv_heads} key-value "
                    f"heads shared over tp = {tp} GPUs: {q} query heads and {kv} KV head(s) on "
                    f"each, whose attention needs nothing from the other GPUs.")
    left, cell = 112, (420 - 112) / tp
    d.text(4, 14, "tp rank", anchor="start")
    for i in range(tp):
        d.text(left + cell * (i + 0.5), 14, Label(f"{i + 1}", name=True), weight="bold")
    rows = ((Label(f"{model.heads} query heads", model.heads, claim=str(model.heads)), q, "light blue"),
            (Label(f"{model.kv_heads} KV heads", model.kv_heads, claim=str(model.kv_heads)), kv,
             "light gray"))
    for r, (name, n, fill) in enumerate(rows):
        y = 30 + r * 36
        d.text(4, y + 15, name, anchor="start")
        for i in range(tp):
            d.box(left + cell * i + 2, y, cell - 4, 30, fill, Label(str(n), n))
    d.text(210, 112, "each GPU's attention uses only its own heads")
    return d


def sequence_parallel_diagram(model: ModelShape, *, tp: int, tokens: int,
                              gpu: str = "h100-sxm") -> Diagram:
    """One layer with sequence parallelism over ``tp`` GPUs: which regions are split along the
    sequence and which by heads or columns, and each gather and reduce-scatter between them,
    in bytes and seconds on NVLink (Korthikanti et al. 2022, §4.2.2)."""
    tp = _split_check(model, tp)
    act = activation_bytes(model, tokens)
    ag = tp_collective("all_gather", model, tp, tokens, gpu=gpu)
    rs = tp_collective("reduce_scatter", model, tp, tokens, gpu=gpu)
    share = tokens // tp
    norm = "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm"
    d = Diagram("Sequence parallelism: gather before each block, reduce-scatter after",
                height=270,
                alt=f"One {model.name} layer with sequence parallelism over tp = {tp} GPUs: the "
                    f"norms and residual adds run on {share:,} of the {tokens:,} tokens each; an "
                    f"all-gather of {act.format('MB', 0)} ({_ms(ag)} on NVLink) makes the whole "
                    f"sequence before attention and before the MLP, which are split by heads and "
                    f"columns, and a reduce-scatter ({_ms(rs)}) splits the sequence again after "
                    f"each.")
    tok = Label(f"{share:,} tokens each", share, claim=f"{share:,}")
    rows = []
    for block in ("attention", "MLP"):
        rows.append(("box", "faint", f"residual, {norm}", tok))
        rows.append(("comm", "all-gather", ag))
        rows.append(("box", "light blue", block, "split by heads" if block == "attention" else
                     "split by columns, then rows"))
        rows.append(("comm", "reduce-scatter", rs))
    y = 4
    for row in rows:
        if row[0] == "box":
            _, fill, name, what = row
            d.box(60, y, 300, 34, fill, name, what, stroke=fill == "faint")
            y += 34
        else:
            _, name, t = row
            d.line(210, y, 210, y + 26, arrow=True)
            d.text(200, y + 13, name, anchor="end")
            d.text(220, y + 13, Label(act.format("MB", 0), act), anchor="start")
            d.text(282, y + 13, Label(_ms(t), t), anchor="start")
            y += 30
    return d
