"""Diagrams of training memory: where the bytes per parameter go, what one GPU holds, how a step's
memory rises and falls, and what a layer saves for backward.

Each function takes the library's own objects (:mod:`trainmath.memory.recipes`'
:class:`~trainmath.memory.recipes.BytesPerParam` and
:class:`~trainmath.memory.recipes.TrainingState`, :mod:`trainmath.memory.peak`'s
:class:`~trainmath.memory.peak.StepPeak`, :mod:`trainmath.memory.activations`'
:class:`~trainmath.memory.activations.LayerActivations`) and returns a
:class:`~trainmath.report.diagrams.Diagram` whose every number is a checked label, so that a page
shows the same numbers as its prose and its estimate. The counts they draw come from Rajbhandari
et al. 2020 (ZeRO, §3.1: 2Ψ + 2Ψ + KΨ bytes of model state), Korthikanti et al. 2022 (§4.1: the
tensors a layer saves) and Dao et al. 2022 (FlashAttention: no s×s tensor is saved).

>>> from trainmath.memory.recipes import bytes_per_param
>>> d = bytes_per_parameter(bytes_per_param("bf16-mixed", "adamw"))
>>> [lab.text for lab in d.numbers][:3]
['16 bytes per parameter', '2', '16-bit']
"""

from __future__ import annotations

from fractions import Fraction

from . import Diagram, Label
from ..plots import KIND_COLORS
from ...memory.activations import LayerActivations
from ...memory.peak import StepPeak
from ...memory.recipes import BytesPerParam, ModelStates
from ...units import Bytes

#: The fill of each kind of memory, the same on every memory diagram (the model states as
#: :data:`trainmath.report.plots.KIND_COLORS` colours them in the charts).
FILLS = {**KIND_COLORS, "parameters": KIND_COLORS["weights"], "activations": "green",
         "logits": "purple", "optimizer temporaries": "gray", "step counters": "gray",
         "unsharded gradients": "light blue", "gathered parameters": "light gray",
         "reduce-scatter buffers": "gray"}
#: The fill of each block of a decoder layer (:meth:`~trainmath.memory.activations.LayerActivations.by_block`): fills that are
#: light in the light theme and dark in the dark one, so the tensors' tags read in both
BLOCK_FILLS = {"norms": "faint", "attention": "light blue", "MLP": "light gray"}
#: Drawing area: the left and right edge of the bars
LEFT, RIGHT = 10.0, 410.0


def _gb(b: Bytes, digits: int = 1) -> Label:
    return Label(b.format("GB", digits), b)


def _format_name(value_bytes: int | Fraction) -> Label:
    """The format of a value of ``value_bytes``: "fp32", or its bits ("16-bit", "8-bit")."""
    if value_bytes == 4:
        return Label("fp32")
    if Fraction(value_bytes).denominator != 1:
        return Label("")
    bits = int(value_bytes) * 8
    return Label(f"{bits}-bit", bits, claim=f"{bits}")


def bytes_per_parameter(bpp: BytesPerParam, *, optimizer_states: int = 2,
                        title: str = "Where the bytes of one parameter go") -> Diagram:
    """The bytes one parameter keeps, as blocks in proportion: the weights, the gradients, the
    fp32 master copy and each of the ``optimizer_states`` moments (Adam's m and v), with a
    bracket over the optimizer side (ZeRO's K, Rajbhandari et al. 2020 §3.1).

    >>> from trainmath.memory.recipes import bytes_per_param
    >>> bytes_per_parameter(bytes_per_param("bf16-mixed", "adamw")).numbers[-1].text
    '75%'
    """
    moment = Fraction(bpp.optimizer_states, optimizer_states) if optimizer_states else Fraction(0)
    parts = [("weights", "weights", bpp.weights), ("grads", "gradients", bpp.all_gradients),
             ("master", "master weights", bpp.master_weights)]
    names = {0: (), 1: ("momentum",), 2: ("Adam m", "Adam v")}
    if optimizer_states not in names:
        raise ValueError(f"optimizer_states {optimizer_states!r}: accepted 0, 1 or 2")
    parts += [(name, "optimizer states", moment) for name in names[optimizer_states]]
    parts = [p for p in parts if p[2]]
    total = bpp.total
    scale = (RIGHT - LEFT) / float(total)
    d = Diagram(title, height=150, alt=(
        f"A bar of {float(total):g} bytes per parameter split in proportion: "
        + ", ".join(f"{long if name not in ('Adam m', 'Adam v') else name} {float(b):g}"
                    for name, long, b in parts)
        + f". The master weights and optimizer states make {float(bpp.optimizer_side):g} of "
        f"the {float(total):g} bytes, {float(Fraction(bpp.optimizer_side) / total):.0%}."))
    d.text(210, 12, Label(f"{float(total):g} bytes per parameter", total,
                          claim=f"{float(total):g}"), weight="bold")
    x = LEFT
    for name, kind, b in parts:
        w = float(b) * scale
        d.text(x + w / 2, 34, name, size=12)
        d.rect(x + 1, 46, w - 2, 34, FILLS[kind])
        d.text(x + w / 2, 94, Label(f"{float(b):g}", b), size=14, weight="bold")
        d.text(x + w / 2, 110, _format_name(b if kind != "optimizer states" else moment),
               size=11)
        x += w
    side = float(bpp.optimizer_side) * scale
    start = RIGHT - side
    d.path(f"M {start + 2:.1f} 122 v 6 H {RIGHT - 2:.1f} v -6")
    d.text(start + side / 2, 141, Label(f"optimizer side: {float(bpp.optimizer_side):g} bytes",
                                        bpp.optimizer_side,
                                        claim=f"{float(bpp.optimizer_side):g}"), size=12)
    d.text(start - 8, 141, Label(f"{float(Fraction(bpp.optimizer_side) / total):.0%}",
                                 Fraction(bpp.optimizer_side) / total),
           size=12, anchor="end", weight="bold")
    return d


def state_against_gpu(state: ModelStates, usable: Bytes, *, model: str, gpu: str,
                      title: str = "A model's training state against one GPU") -> Diagram:
    """The training state of ``model`` (a :class:`~trainmath.memory.recipes.ModelStates`) by
    kind as one bar, above a row of ``gpu``'s memory (``usable``: what a program can fill) to
    the same scale: how many GPUs the state alone fills, before any activation.

    >>> from trainmath.memory.recipes import training_state
    >>> from trainmath.units import GB
    >>> d = state_against_gpu(training_state(7 * 10**9), Bytes(80 * GB), model="a 7B", gpu="GPU")
    >>> [lab.text for lab in d.numbers][-2:]
    ["1.4 GPUs' worth", 'at least 2 GPUs']
    """
    total = state.total
    scale = (RIGHT - LEFT) / total.n
    need = Fraction(total.n, usable.n)
    whole = -(-total.n // usable.n)
    d = Diagram(title, height=190, alt=(
        f"The training state of {model}, {total.format('GB', 0)}: "
        + ", ".join(f"{k} {b.format('GB', 0)}" for k, b in state.parts().items())
        + f". Below it, to the same scale, one {gpu} holds {usable.format('GB', 1)}: the "
        f"state alone is {float(need):.1f} {gpu}s' worth, so at least {whole} of them."))
    d.text(LEFT, 12, Label(f"{model}: {total.format('GB', 0)}", total,
                           claim=total.format("GB", 0)), anchor="start", weight="bold")
    x = LEFT
    for row, (kind, b) in enumerate(state.parts().items()):
        w = b.n * scale
        d.rect(x, 24, max(w - 1, 1), 30, FILLS[kind])
        d.text(x + 3, 66 + 14 * (row % 2), Label(f"{kind.replace(' weights', '')} "
                                                f"{b.format('GB', 0)}", b,
                                                claim=b.format("GB", 0)),
               size=12, anchor="start")
        x += w
    width = usable.n * scale
    for i in range(whole):
        left = LEFT + i * width
        d.rect(left + 0.5, 104, min(width, RIGHT - left) - 1, 30,
               "light gray" if i == 0 else "faint", stroke=i == 0)
    d.text(LEFT, 148, Label(f"one {gpu}: {usable.format('GB', 1)}", usable,
                            claim=usable.format("GB", 1)), anchor="start", size=13)
    d.text(LEFT, 170, Label(f"{float(need):.1f} {gpu}s' worth", need,
                            claim=f"{float(need):.1f}"), anchor="start", size=13, weight="bold")
    d.text(RIGHT, 170, Label(f"at least {whole} GPUs", whole, claim=f"{whole}"), anchor="end",
           size=13, weight="bold")
    return d


def _moment_name(phase: str, when: str) -> tuple[str, str]:
    """Two short lines naming a moment of the step ("backward", "the end")."""
    head = when.split(":")[0]
    head = head.replace("the loss's gradient", "loss gradient").replace("the ", "")
    return ({"optimizer step": "optimizer"}.get(phase, phase), head)


def step_memory(peak: StepPeak, *, title: str = "Memory through one training step") -> Diagram:
    """The memory alive at each moment of one step (:class:`~trainmath.memory.peak.StepPeak`'s
    moments, in order) as stacked columns by kind, the peak marked: the forward pass builds the
    activations, the backward pass frees them as the gradients appear, the optimizer step adds
    its gradient copies and temporaries (:mod:`trainmath.memory.peak`).

    >>> from trainmath.runs.description import run
    >>> from trainmath.runs.estimates import estimate
    >>> d = step_memory(estimate(run("llama-2-7b", seq_len=4096, gpu="h100-sxm")).peak)
    >>> d.numbers[-1].text
    'peak 134.8 GB'
    """
    moments = peak.moments
    top = max(m.total.n for m in moments)
    kinds: list[str] = []
    for m in moments:
        for k, b in m.as_dict().items():
            if k not in kinds and b.n / top > 0.002:
                kinds.append(k)
    base, height = 210.0, 160.0
    col, gap, x0 = 58.0, 14.0, 14.0
    d = Diagram(title, height=262, alt=(
        "Memory alive on one device at each moment of a step: "
        + "; ".join(f"{m.phase}, {m.when.split(':')[0]}: {m.total.format('GB', 1)}"
                    for m in moments)
        + f". The peak is {peak.bytes.format('GB', 1)}, at the {peak.phase}."))
    for i, m in enumerate(moments):
        x = x0 + i * (col + gap)
        y = base
        parts = m.as_dict()
        for k in kinds:
            b = parts.get(k)
            if b is None:
                continue
            h = b.n / top * height
            d.rect(x, y - h, col, max(h - 0.6, 0.4), FILLS.get(k, "gray"), rounded=1)
            y -= h
        is_peak = m is peak.peak
        if is_peak:
            d.rect(x - 3, y - 3, col + 6, base - y + 6, "none", stroke=True, dashed=True)
        else:
            d.text(x + col / 2, y - 10, _gb(m.total), size=11)
        first, second = _moment_name(m.phase, m.when)
        d.text(x + col / 2, base + 14, first, size=11)
        d.text(x + col / 2, base + 28, second, size=11)
    d.line(x0 - 6, base, x0 + len(moments) * (col + gap) - gap + 6, base)
    legend_x = x0 + len(moments) * (col + gap) + 4
    for j, k in enumerate(reversed(kinds)):
        y = 70 + j * 20
        d.rect(legend_x, y - 6, 12, 12, FILLS.get(k, "gray"), rounded=1)
        d.text(legend_x + 16, y, k.replace("optimizer ", "opt. "), size=11, anchor="start")
    i = moments.index(peak.peak)
    d.text(x0 + i * (col + gap) + col / 2, 14, Label(f"peak {peak.bytes.format('GB', 1)}",
                                                  peak.bytes, claim=peak.bytes.format("GB", 1)),
           size=12, weight="bold")
    return d


def _short(name: str) -> str:
    """A tag for a saved tensor short enough for its block ("Q", "gate", "in")."""
    for start, tag in (("input", "in"), ("output O", "O"), ("context", "ctx"),
                       ("gate", "gate"), ("up", "up"), ("SiLU(gate)", "×"), ("SiLU", "SiLU"),
                       ("softmax", "softmax s×s"), ("1/rms", ""), ("log-sum-exp", "")):
        if name.startswith(start):
            return tag
    return name.split(",")[0].split(" ")[0]


def _layer_bar(d: Diagram, layer: LayerActivations, y: float, scale: float, *,
               tags: bool) -> None:
    x = LEFT
    for t in layer.tensors:
        w = t.bytes.n * scale
        if w <= 0:
            continue
        fill = "red" if "s×s" in t.name else BLOCK_FILLS.get(t.block, "gray")
        d.rect(x, y, max(w - 0.8, 0.4), 28, fill, rounded=1, stroke=fill == "faint")
        tag = _short(t.name)
        if tags and tag and w >= 6.5 * len(tag) + 2 and fill != "red":
            d.text(x + w / 2, y + 14, tag, size=10)
        x += w


def layer_saved(flash: LayerActivations, eager: LayerActivations, *,
                title: str = "What one decoder layer saves for backward") -> Diagram:
    """One layer's saved tensors, in proportion and grouped by block (norms, attention, MLP):
    with FlashAttention (``flash``, no s×s tensor: Dao et al. 2022) tensor by tensor, and with
    eager attention (``eager``), whose softmax output grows with the square of the sequence
    (Korthikanti et al. 2022 §4.1), drawn below to a scale that fits it.

    >>> from trainmath.memory.activations import layer_activations
    >>> from trainmath.model.presets import preset
    >>> m = preset("llama-2-7b")
    >>> d = layer_saved(layer_activations(m, 8192, 1, attention="flash"),
    ...                 layer_activations(m, 8192, 1, attention="eager"))
    >>> d.numbers[0].text
    'FlashAttention: 1.26 GB'
    """
    d = Diagram(title, height=236, alt=(
        f"FlashAttention: one layer saves {flash.total.format('GB', 2)}, "
        + ", ".join(f"{k} {b.format('GB', 2)}" for k, b in flash.by_block().items())
        + f". Eager attention saves {eager.total.format('GB', 2)}, of which the s×s softmax "
        "output is "
        + sum((t.bytes for t in eager.tensors if "s×s" in t.name), Bytes(0)).format("GB", 2)
        + ". The lower bar is drawn to a smaller scale than the upper one."))
    d.text(LEFT, 12, Label(f"FlashAttention: {flash.total.format('GB', 2)}", flash.total,
                           claim=flash.total.format("GB", 2)), anchor="start", weight="bold")
    scale = (RIGHT - LEFT) / flash.total.n
    _layer_bar(d, flash, 24, scale, tags=True)
    # the blocks, each under a bracket (a block may come back: the norms sit before each half)
    x, spans = LEFT, []
    for t in flash.tensors:
        w = t.bytes.n * scale
        if spans and spans[-1][0] == t.block:
            spans[-1][2] = x + w
        else:
            spans.append([t.block, x, x + w])
        x += w
    blocks = flash.by_block()
    named: set[str] = set()
    for block, a, b in spans:
        if b - a < 4:
            continue
        d.path(f"M {a + 1:.1f} 58 v 4 H {b - 1:.1f} v -4")
        if block in named:
            continue
        named.add(block)
        width = max((s[2] - s[1] for s in spans if s[0] == block))
        widest = next(s for s in spans if s[0] == block and s[2] - s[1] == width)
        mid = (widest[1] + widest[2]) / 2
        if len(block) * 7 + 44 < width:
            d.text(mid, 74, Label(f"{block} {blocks[block].format('GB', 2)}", blocks[block],
                                  claim=blocks[block].format("GB", 2)), size=11)
        else:
            d.text(mid, 74, block, size=11)
            d.text(mid, 88, _gb(blocks[block], 2), size=11)
    d.text(LEFT, 118, Label(f"eager attention: {eager.total.format('GB', 2)}", eager.total,
                            claim=eager.total.format("GB", 2)), anchor="start", weight="bold")
    small = (RIGHT - LEFT) / eager.total.n
    _layer_bar(d, eager, 130, small, tags=False)
    sq = sum((t.bytes for t in eager.tensors if "s×s" in t.name), Bytes(0))
    d.text(210, 176, Label(f"red: softmax output, s×s per head, {sq.format('GB', 2)}", sq,
                           claim=sq.format("GB", 2)), size=11)
    share = Fraction(sq.n, eager.total.n)
    d.text(210, 192, Label(f"{float(share):.0%} of the layer", share, claim=f"{float(share):.0%}"),
           size=11)
    x = LEFT + 4
    for block, fill in (*BLOCK_FILLS.items(), ("s×s scores", "red")):
        d.rect(x, 214, 12, 12, fill, rounded=1, stroke=fill == "faint")
        d.text(x + 16, 220, block, size=11, anchor="start")
        x += 30 + 7 * len(block) + 8
    return d


def bars(rows: list[tuple[Label | str, list[tuple[str, Bytes]]]], *, title: str, alt_intro: str,
         fills: tuple[str, ...] = ("red", "green", "light blue"), digits: int = 1,
         unit: str = "GB") -> Diagram:
    """Grouped horizontal bars to one scale: ``rows`` of (group name, [(series, bytes)]), every
    series in a fill of ``fills`` and its amount at the bar's end; for the same quantity under
    several settings (activations by sequence length and attention kernel, a cache by design).
    A group name that states a number is a :class:`~trainmath.report.diagrams.Label`.

    >>> from trainmath.units import GB
    >>> d = bars([("short", [("a", Bytes(GB)), ("b", Bytes(3 * GB))])], title="Two bars",
    ...          alt_intro="Two amounts.")
    >>> [lab.text for lab in d.numbers]
    ['1.0 GB', '3.0 GB']
    """
    series = [name for name, _ in rows[0][1]]
    top = max(b.n for _, group in rows for _, b in group)
    name_w, bar_left, bar_right = 64.0, 72.0, 350.0
    row_h, group_gap = 16.0, 10.0
    y = 34.0
    height = y + len(rows) * (len(series) * row_h + group_gap) + 4
    d = Diagram(title, height=height, alt=alt_intro + " " + "; ".join(
        f"{g.text if isinstance(g, Label) else g}: "
        + ", ".join(f"{s} {b.format(unit, digits)}" for s, b in group)
        for g, group in rows) + ".")
    x = LEFT
    for s, fill in zip(series, fills):
        d.rect(x, 6, 12, 12, fill, rounded=1)
        d.text(x + 16, 12, s, size=11, anchor="start")
        x += 30 + 6.5 * len(s)
    for g, group in rows:
        d.text(name_w, y + len(group) * row_h / 2 - 1, g, size=12, anchor="end")
        for (s, b), fill in zip(group, fills):
            w = max(b.n / top * (bar_right - bar_left), 0.8)
            d.rect(bar_left, y, w, row_h - 3, fill, rounded=1)
            d.text(bar_left + w + 4, y + (row_h - 3) / 2, Label(b.format(unit, digits), b),
                   size=12, anchor="start")
            y += row_h
        y += group_gap
    return d


def recipes_overview(rows: list[tuple[str, BytesPerParam]], *,
                     title: str = "Bytes per parameter, recipe by recipe") -> Diagram:
    """Each (name, :class:`~trainmath.memory.recipes.BytesPerParam`) of ``rows`` as a bar of its
    kinds of state to one scale, the total at its end: how precision and optimizer move the
    bytes of ZeRO's count (Rajbhandari et al. 2020 §3.1).

    >>> from trainmath.memory.recipes import bytes_per_param
    >>> d = recipes_overview([("bf16-mixed, AdamW", bytes_per_param("bf16-mixed", "adamw"))])
    >>> d.numbers[0].text
    '16'
    """
    top = max(float(b.total) for _, b in rows)
    bar_left, bar_right = 140.0, 384.0
    kinds = ("weights", "gradients", "master weights", "optimizer states")
    d = Diagram(title, height=40 + 26 * len(rows) + 8, alt=(
        "Bytes per parameter by kind of state: " + "; ".join(
            f"{name}: {float(b.total):.4g} in all (weights {float(b.weights):g}, gradients "
            f"{float(b.all_gradients):g}, master {float(b.master_weights):g}, optimizer "
            f"{float(b.optimizer_states):.4g})" for name, b in rows) + "."))
    x = LEFT
    for k in kinds:
        d.rect(x, 6, 12, 12, FILLS[k], rounded=1)
        d.text(x + 16, 12, k.replace(" weights", "").replace("optimizer ", "opt. "), size=11,
               anchor="start")
        x += 26 + 6.5 * len(k.replace(" weights", "").replace("optimizer ", "opt. ")) + 10
    y = 34.0
    for name, b in rows:
        d.text(bar_left - 6, y + 10, name, size=11, anchor="end")
        x = bar_left
        for k, v in zip(kinds, (b.weights, b.all_gradients, b.master_weights,
                                b.optimizer_states)):
            w = float(v) / top * (bar_right - bar_left)
            if w > 0:
                d.rect(x, y, max(w - 0.8, 0.4), 20, FILLS[k], rounded=1)
            x += w
        total = b.total
        text = f"{float(total):g}" if Fraction(total).denominator == 1 else f"{float(total):.2f}"
        d.text(x + 4, y + 10, Label(text, total), size=12, anchor="start", weight="bold")
        y += 26
    return d
