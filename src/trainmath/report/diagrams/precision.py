"""Mixed precision drawn: bit layouts, ranges, loss scaling, the step's data flow, bytes kept.

Each function takes the library's own objects (:class:`trainmath.precision.FloatFormat`, read
from ``numpy.finfo`` and ``ml_dtypes.finfo``; :class:`trainmath.memory.recipes.BytesPerParam`)
and returns a :class:`~trainmath.report.diagrams.Diagram` whose every number is one of theirs,
so that the mixed-precision page's pictures and prose cannot disagree.

Sources: IEEE 754-2019, §3.3 and §3.4 (sign, exponent, mantissa; normal and subnormal
numbers); Micikevicius et al. 2018, *Mixed Precision Training*, §3.1 (the fp32 master copy) and
§3.2 (loss scaling); Kalamkar et al. 2019 (bf16 keeps fp32's range); Micikevicius et al. 2022,
*FP8 Formats for Deep Learning*, Table 1 (E4M3, E5M2); Rajbhandari et al. 2020 (ZeRO), §3.1
(bytes per parameter of each kind of state).

>>> from trainmath.precision import float_format
>>> d = bit_layouts([float_format("fp16"), float_format("bf16")])
>>> [lab.text for lab in d.numbers][:3]
['5', '10', '16 bits']
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Sequence

from ...units import Bytes
from . import Diagram, Label

#: The colour of each field of a float (text sits on the light ones)
FIELD_FILLS = {"sign": "red", "exponent": "light blue", "mantissa": "light gray"}
#: The colour of each kind of state, as trainmath.report.plots.KIND_COLORS colours them
STATE_FILLS = {"weights": "blue", "gradients": "light blue", "master weights": "orange",
               "optimizer states": "red"}


def _log2(x) -> float:
    return math.log2(float(x))


def _power(x: Fraction) -> Label:
    """2^k as text, for a power of two (the formats' smallest numbers and epsilons)."""
    k = round(_log2(x))
    if Fraction(2) ** k != x:
        raise ValueError(f"{x} is not a power of two")
    return Label(f"2^{k}", x)


def _legend(d: Diagram, y: float, items: Sequence[tuple[str, str]], x: float = 0) -> None:
    """Coloured squares and their names in one row."""
    for name, fill in items:
        d.rect(x, y - 6, 12, 12, fill)
        d.text(x + 16, y, name, anchor="start")
        x += 24 + 7.2 * len(name)


def bit_layouts(formats: Sequence, *, width: float = 420) -> Diagram:
    """Each format's sign, exponent and mantissa bits as boxes sized by their bits (IEEE
    754-2019 §3.4; E4M3 and E5M2: Micikevicius et al. 2022, Table 1).

    >>> from trainmath.precision import float_format
    >>> d = bit_layouts([float_format("fp32")])
    >>> [lab.value for lab in d.numbers]
    [8, 23, 32]
    """
    if not formats:
        raise ValueError("bit_layouts needs at least one format")
    left, total_w = 78, width - 78 - 44
    most = max(f.bits for f in formats)
    unit = total_w / most
    row, top = 34, 38
    alt = ("Bit layouts, as sign, exponent and mantissa bits: "
           + "; ".join(f"{f.name} {f.sign_bits}, {f.exponent_bits}, {f.mantissa_bits} "
                       f"({f.bits} bits)" for f in formats) + ".")
    d = Diagram("Where each format spends its bits", width=width,
                height=top + row * len(formats) + 4, alt=alt)
    _legend(d, 12, [(name, fill) for name, fill in FIELD_FILLS.items()])
    for i, f in enumerate(formats):
        y = top + i * row
        d.text(left - 8, y + 12, f.name, anchor="end")
        x = left
        for part, bits in (("sign", f.sign_bits), ("exponent", f.exponent_bits),
                           ("mantissa", f.mantissa_bits)):
            w = bits * unit
            if part == "sign":
                d.rect(x, y, w, 24, FIELD_FILLS[part])
            else:
                d.box(x, y, w, 24, FIELD_FILLS[part], Label(str(bits), bits))
            x += w + 1
        d.text(x + 5, y + 12, Label(f"{f.bits} bits", f.bits, claim=str(f.bits)),
               anchor="start", size=12)
    return d


def format_ranges(formats: Sequence, *, gradients: tuple[float, float] | None = None,
                  width: float = 420) -> Diagram:
    """Each format's magnitudes on a log₂ axis: subnormal (orange) and normal (blue) numbers,
    from the smallest subnormal to the largest finite number (IEEE 754-2019 §3.3), with a
    dashed band over ``gradients`` (the smallest and largest of a sample of gradient
    magnitudes) and a line where fp16 rounds to zero (half its smallest subnormal).

    >>> from trainmath.precision import float_format
    >>> d = format_ranges([float_format("fp16")], gradients=(1e-9, 1e-2))
    >>> [lab.text for lab in d.numbers]
    ['2^-24', '65,504', '1']
    """
    if not formats:
        raise ValueError("format_ranges needs at least one format")
    if gradients is not None and not 0 < gradients[0] <= gradients[1]:
        raise ValueError(f"gradients {gradients!r}: give (smallest, largest), both positive")
    lo = min(_log2(f.smallest_subnormal) for f in formats) - 4
    hi = max(_log2(f.max) for f in formats) + 2
    left, right = 52, width - 6
    top, row = 28, 30

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * (right - left)

    bottom = top + row * len(formats)
    alt = ("The magnitudes each format holds, on a log2 axis: "
           + "; ".join(f"{f.name} from 2^{round(_log2(f.smallest_subnormal))} (subnormal) and "
                       f"2^{round(_log2(f.smallest_normal))} (normal) to {float(f.max):.3g}"
                       for f in formats) + "."
           + (f" A dashed band marks a sample of gradients, {gradients[0]:.2g} to "
              f"{gradients[1]:.2g}." if gradients else ""))
    d = Diagram("The magnitudes each format can hold", width=width, height=bottom + 40,
                alt=alt)
    _legend(d, 10, [("subnormal", "orange"), ("normal", "light blue")], x=left)
    for i, f in enumerate(formats):
        y = top + i * row
        d.text(left - 6, y + 11, f.name, anchor="end", size=12)
        sub, normal, big = (_log2(v) for v in (f.smallest_subnormal, f.smallest_normal, f.max))
        d.rect(x(sub), y, x(normal) - x(sub), 22, "orange", rounded=1)
        d.rect(x(normal), y, x(big) - x(normal), 22, "light blue", rounded=1)
        low = _power(f.smallest_subnormal)
        high = Label(f"{int(f.max):,}" if f.max < 10**6 else f"{float(f.max):.2g}", f.max)
        span = x(big) - x(sub)
        if span > 190:  # wide: the range inside its bar
            d.text(x(normal) + 8, y + 11, low, anchor="start", size=12)
            d.text(x(big) - 8, y + 11, high, anchor="end", size=12)
        else:  # narrow: its range to its right, "2^-24 to 65,504"
            at = x(big) + 5
            for part in (low, "to", high):
                d.text(at, y + 11, part, anchor="start", size=12)
                at += 6.6 * len(part.text if isinstance(part, Label) else part) + 4
    if gradients is not None:
        g0, g1 = x(_log2(gradients[0])), x(_log2(gradients[1]))
        d.rect(g0, top - 4, g1 - g0, bottom - top + 4, "none", stroke=True, dashed=True)
        d.text((g0 + g1) / 2, bottom + 8, "gradients", size=12)
    for k in (-128, -64, 0, 64, 128):
        if lo < k < hi:
            d.line(x(k), bottom + 18, x(k), bottom + 22)
            d.text(x(k), bottom + 31, Label("1" if k == 0 else f"2^{k}", Fraction(2) ** k),
                   size=12)
    return d


def _sci(x: float) -> str:
    """``x`` in short scientific notation: 1e-8, 6.6e-4."""
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def loss_scaling(fmt, gradient: float, scale: float, *, width: float = 420) -> Diagram:
    """A gradient below half ``fmt``'s smallest subnormal rounds to zero; the same gradient
    times the loss scale lands among its normal numbers (Micikevicius et al. 2018, §3.2). Drawn
    twice on a log₂ axis of ``fmt``'s zones (rounds to zero, subnormal, normal, overflows):
    before the scale and after it.

    >>> from trainmath.precision import float_format
    >>> d = loss_scaling(float_format("fp16"), 1e-8, 2**16)
    >>> [lab.text for lab in d.numbers]
    ['g = 1e-8', '× 2^16', 'g·S = 6.6e-4', '2^-24', '2^-14', '65,504']
    """
    if not gradient > 0 or not scale >= 1:
        raise ValueError(f"gradient {gradient!r} must be positive and scale {scale!r} at least 1")
    zero, normal, big = (_log2(v) for v in (fmt.smallest_subnormal / 2, fmt.smallest_normal,
                                            fmt.max))
    g, gs, k = _log2(gradient), _log2(gradient * scale), _log2(scale)
    lo, hi = min(zero - 14, g - 6), big + 6
    left, right = 6, width - 6

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * (right - left)

    scaled = gradient * scale
    alt = (f"Two log2 axes of {fmt.name}'s magnitudes: below 2^{round(zero)} a value rounds to "
           f"zero, subnormal numbers up to 2^{round(normal)}, normal numbers up to "
           f"{int(fmt.max):,}, then infinity. A gradient of {_sci(gradient)} falls where values "
           f"round to zero; multiplied by the loss scale 2^{round(k)} it becomes "
           f"{_sci(scaled)}, a normal number.")
    d = Diagram("Loss scaling moves a gradient into range", width=width, height=138, alt=alt)
    zones = ((lo, zero, "light gray", "rounds to zero"), (zero, normal, "orange", "subnormal"),
             (normal, big, "light blue", "normal"), (big, hi, "red", "inf"))
    rows = (22, 84)
    for a, b, fill, name in zones:
        d.text((x(a) + x(b)) / 2, 10, name, size=12)
        for y in rows:
            d.rect(x(a), y, x(b) - x(a), 22, fill, rounded=0)
    before, after = rows[0] + 11, rows[1] + 11
    d.rect(x(g) - 5, before - 5, 10, 10, "red", rounded=5)
    d.text(x(g) - 2, before + 22, Label(f"g = {_sci(gradient)}", gradient,
                                        claim=_sci(gradient)), size=12, anchor="end")
    d.line(x(g), before + 8, x(gs) - 3, after - 9, arrow=True)
    d.text((x(g) + x(gs)) / 2 + 10, (before + after) / 2, Label(f"× 2^{round(k)}", scale,
           claim=f"2^{round(k)}"), size=12, weight="bold", anchor="start")
    d.rect(x(gs) - 5, after - 5, 10, 10, "green", rounded=5)
    d.text(x(gs) + 10, after, Label(f"g·S = {_sci(scaled)}", scaled, claim=_sci(scaled)),
           size=12, anchor="start")
    bottom = rows[1] + 22
    for v, lab in ((_log2(fmt.smallest_subnormal), _power(fmt.smallest_subnormal)),
                   (normal, _power(fmt.smallest_normal)),
                   (big, Label(f"{int(fmt.max):,}", fmt.max))):
        d.line(x(v), bottom, x(v), bottom + 5)
        d.text(x(v), bottom + 15, lab, size=12)
    return d


def mixed_precision_step(states, compute: str = "bf16", *, loss_scale: bool | None = None,
                         width: float = 420) -> Diagram:
    """One step of mixed-precision training as a loop (Micikevicius et al. 2018, §3.1 and §3.2):
    the fp32 master weights are cast to a 16-bit copy, the forward and backward passes run in
    16 bits, the 16-bit gradients are unscaled and applied in fp32 with Adam's moments; with the
    bytes per parameter of each (``states``: a :class:`~trainmath.memory.recipes.BytesPerParam`).
    With ``loss_scale`` (fp16's default) the backward pass starts from the loss times S and the
    gradients are divided by S before the update.

    >>> from trainmath.memory.recipes import bytes_per_param
    >>> d = mixed_precision_step(bytes_per_param("bf16-mixed"))
    >>> [lab.text for lab in d.numbers]
    ['4 bytes', '2 bytes', '2 bytes', '8 bytes', '16 bytes per parameter']
    """
    loss_scale = compute == "fp16" if loss_scale is None else loss_scale
    if not states.master_weights:
        raise ValueError("mixed_precision_step draws a recipe with an fp32 master copy; this one "
                         "keeps none")
    w, gap, h = (width - 2 * 44) / 3, 44, 48
    cols = [i * (w + gap) for i in range(3)]
    top, low = 8, 8 + h + 46

    def b(n) -> Label:
        return Label(f"{n} bytes", Bytes(n))

    scaled, unscaled = ((" (on the loss times the scale S)", "divided by S and ") if loss_scale
                        else ("", ""))
    alt = (f"A loop: fp32 master weights ({states.master_weights} bytes per parameter) are cast "
           f"to a {compute} copy ({states.weights} bytes), which the forward pass and the "
           f"backward pass use{scaled}; the backward pass gives {compute} gradients "
           f"({states.gradients} bytes), {unscaled}applied in fp32 by the AdamW step with its "
           f"moments m and v ({states.optimizer_states} bytes), which updates the master "
           f"weights: {states.total} bytes per parameter in all.")
    d = Diagram("One mixed-precision step", width=width, height=low + h + 34, alt=alt)
    kept = ((cols[0], top, "orange", ("fp32 master", b(states.master_weights))),
            (cols[1], top, "blue", (f"{compute} copy", b(states.weights))),
            (cols[2], top, None, ("forward", f"{compute} matmuls")),
            (cols[2], low, None, ("backward", "of loss × S" if loss_scale
                                  else f"{compute} matmuls")),
            (cols[1], low, "light blue", (f"{compute} grads", b(states.gradients))),
            (cols[0], low, "red", ("AdamW m, v", b(states.optimizer_states))))
    for x, y, kind, lines in kept:  # a state's box carries its kind's colour as a stripe
        d.box(x, y, w, h, "faint", *lines, stroke=kind is None)
        if kind:
            d.rect(x, y, 7, h, kind, rounded=2)
    mid = top + h / 2
    d.line(cols[0] + w + 2, mid, cols[1] - 2, mid, arrow=True)
    d.text(cols[0] + w + gap / 2, mid - 10, "cast", size=11)
    d.line(cols[1] + w + 2, mid, cols[2] - 2, mid, arrow=True)
    d.line(cols[2] + w / 2, top + h + 2, cols[2] + w / 2, low - 2, arrow=True)
    mid = low + h / 2
    d.line(cols[2] - 2, mid, cols[1] + w + 2, mid, arrow=True)
    d.line(cols[1] - 2, mid, cols[0] + w + 2, mid, arrow=True)
    d.text(cols[0] + w + gap / 2, mid - 10, "÷ S" if loss_scale else "to fp32", size=11)
    d.line(cols[0] + w / 2, low - 2, cols[0] + w / 2, top + h + 2, arrow=True)
    d.text(cols[0] + w / 2 + 6, (top + h + low) / 2, "update in fp32", size=11, anchor="start")
    d.text(width / 2, low + h + 20, Label(f"{states.total} bytes per parameter",
                                          Bytes(states.total), claim=f"{states.total} bytes"),
           weight="bold")
    return d


def recipe_bytes(recipes: dict, *, width: float = 420) -> Diagram:
    """What each recipe keeps per parameter: weights, gradients, master weights and optimizer
    states as stacked bars sized by bytes (ZeRO §3.1's accounting, Rajbhandari et al. 2020;
    ``recipes`` maps a name to its :class:`~trainmath.memory.recipes.BytesPerParam`).

    >>> from trainmath.memory.recipes import bytes_per_param
    >>> d = recipe_bytes({"bf16": bytes_per_param("bf16")})
    >>> [lab.text for lab in d.numbers]
    ['2', '2', '4', '8 bytes']
    """
    if not recipes:
        raise ValueError("recipe_bytes needs at least one recipe")
    left, row, top = 92, 46, 52
    most = max(s.total for s in recipes.values())
    unit = (width - left - 66) / most
    alt = ("Bytes per parameter each recipe keeps (weights, gradients, master weights, "
           "optimizer states): " + "; ".join(
               f"{name} {s.weights}, {s.gradients}, {s.master_weights}, {s.optimizer_states}, "
               f"{s.total} in all" for name, s in recipes.items()) + ".")
    d = Diagram("What each recipe keeps per parameter", width=width,
                height=top + row * len(recipes) - 10, alt=alt)
    _legend(d, 10, list(STATE_FILLS.items())[:2])
    _legend(d, 30, list(STATE_FILLS.items())[2:])
    for i, (name, s) in enumerate(recipes.items()):
        y = top + i * row + 14
        d.text(left - 8, y + 10, name, anchor="end", size=12)
        x = left
        for kind, n in (("weights", s.weights), ("gradients", s.gradients),
                        ("master weights", s.master_weights),
                        ("optimizer states", s.optimizer_states)):
            if not n:
                continue
            d.rect(x, y, n * unit - 1, 20, STATE_FILLS[kind], rounded=1)
            d.text(x + n * unit / 2, y - 8, Label(str(n), n), size=12)
            x += n * unit
        d.text(x + 6, y + 10, Label(f"{s.total} bytes", Bytes(s.total)), anchor="start",
               size=12, weight="bold")
    return d


#: The colour of each part of a step's peak (trainmath.memory.peak.Moment.parts): the states
#: as :data:`STATE_FILLS`, the activations, and the rest (fp8 weight copies, logits, counters)
PEAK_FILLS = {"parameters": "blue", "gradients": "light blue", "master weights": "orange",
              "optimizer states": "red", "activations": "green", "other": "gray"}


def peak_memory(peaks: dict, memory: Bytes, gpu: str, *, width: float = 420) -> Diagram:
    """What is alive at the peak of a step on one GPU, for each recipe: ``peaks`` maps a recipe's
    name to the peak :class:`~trainmath.memory.peak.Moment` that
    :func:`trainmath.runs.estimates.estimate` found for it (``Estimate.peak.peak``), drawn as
    stacked bars against ``memory``, the ``gpu``'s memory (a dashed line).

    >>> from trainmath.report.running_example import example_estimate
    >>> e = example_estimate()
    >>> d = peak_memory({"bf16-mixed": e.peak.peak}, e.run.gpu.memory, "H100")
    >>> [lab.text for lab in d.numbers]
    ['37.6 GB', 'H100: 85.5 GB']
    """
    if not peaks:
        raise ValueError("peak_memory needs at least one recipe's peak")
    if not memory.n:
        raise ValueError("peak_memory needs the GPU's memory, more than 0 bytes")
    left, row, top = 92, 34, 54
    column = width - 54  # the totals, to the right of the bars and the GPU's memory
    unit = (column - 6 - left) / max([memory.n] + [m.total.n for m in peaks.values()])

    def parts(m) -> dict:
        out = dict.fromkeys(PEAK_FILLS, Bytes(0))
        for kind, b in m.parts:
            key = kind if kind in PEAK_FILLS else "other"
            out[key] = out[key] + b
        return out

    alt = (f"The peak of a step on one {gpu}, by recipe: " + "; ".join(
        f"{name} {m.total.format('GB', 1)} (" + ", ".join(
            f"{kind} {b.format('GB', 1)}" for kind, b in parts(m).items() if b.n) + ")"
        for name, m in peaks.items()) + f"; the {gpu} holds {memory.format('GB', 1)}.")
    bottom = top + row * len(peaks)
    d = Diagram("The peak of a step on one GPU", width=width, height=bottom + 26, alt=alt)
    names = list(PEAK_FILLS.items())
    _legend(d, 10, names[:3])
    _legend(d, 30, names[3:])
    for i, (name, m) in enumerate(peaks.items()):
        y = top + i * row
        d.text(left - 8, y + 10, name, anchor="end", size=12)
        x = left
        for kind, b in parts(m).items():
            if b.n:
                d.rect(x, y, max(b.n * unit - 1, 1), 20, PEAK_FILLS[kind], rounded=1)
                x += b.n * unit
        d.text(column, y + 10, Label(m.total.format("GB", 1), m.total), anchor="start",
               size=12, weight="bold")
    edge = left + memory.n * unit
    d.line(edge, top - 6, edge, bottom - 6, dashed=True)
    d.text(edge, bottom + 6, Label(f"{gpu}: {memory.format('GB', 1)}", memory,
                                   claim=memory.format("GB", 1)), anchor="end", size=12)
    return d
