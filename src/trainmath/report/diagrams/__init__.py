"""Concept diagrams for the pages: SVG drawn from the library's numbers, in the site's theme.

A :class:`Diagram` is a small SVG canvas (boxes, arrows, text) whose every number is a
:class:`Label`: the text the reader sees and the value the library computed for it, so that a
page can check the one against the other as it checks a number in its prose
(``mystclaims.figures.checked``: a label that drifts from its value fails the tests, naming the
figure and the label). Names that mix letters and digits (H100, ZeRO-3, bf16, 1F1B) are not
numbers; other text with a number that is not one (GPU 3) is marked ``name=True``. The SVG follows the reader's light or dark theme: text and
lines are ``currentColor``, fills are the figures' palette (:data:`trainmath.report.plots.PALETTE`,
CSS custom properties ``--tm-fig-blue`` ...); it has ``role="img"`` and a ``<title>`` with the
alt text, which states the figure's numbers.

The modules beside this one draw one concept each, from the same models the estimate uses.

>>> d = Diagram("Two boxes", width=200, height=40, alt="Two boxes: 16 bytes and 2 bytes.")
>>> d.box(0, 0, 90, 40, "blue", Label("16 bytes", 16))
>>> d.box(110, 0, 90, 40, "orange", Label("2 bytes", 2))
>>> [label.text for label in d.labels]
['16 bytes', '2 bytes']
>>> "<svg" in d.svg() and 'role="img"' in d.svg()
True
"""

from __future__ import annotations

import hashlib
import html
import math
import re
from dataclasses import dataclass, field

#: The fills a diagram may use: the figures' palette (trainmath.report.plots.PALETTE's names)
#: and "faint" (a light background box) and "none".
FILLS = ("blue", "light blue", "orange", "red", "green", "purple", "gray", "light gray",
         "faint", "none")
#: Default text size, in SVG units; diagrams are drawn about 420 units wide, so on a 390 px
#: phone (a 358 px column) 13 units is about 11 px.
FONT = 13

#: A number standing alone: digits not inside a name that mixes letters and digits (H100,
#: ZeRO-3, bf16, 1F1B and Llama-2-7B are names; "8", "2.5 GB", "×4" and "GPU 3" have numbers).
_NUMBER = re.compile(r"(?<![\w.-])[-+]?\d[\d,.]*(?![\w-]*[A-Za-z][\w-]*\d)(?![A-Za-z]*\d)")


def has_number(text: str) -> bool:
    """Whether ``text`` states a number: names that mix letters and digits do not count.

    >>> has_number("ZeRO-3 on 8 GPUs"), has_number("an H100's bf16 peak"), has_number("GPU 3")
    (True, False, True)
    """
    return any(not re.fullmatch(r"[A-Za-z]+[\w-]*", w) and _NUMBER.search(w)
               for w in _words(text))


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"\s+", text) if w]


@dataclass(frozen=True)
class Label:
    """Text on a diagram. ``value`` is what the library computed for the number in ``text``
    (checked like a claim in prose: ``mystclaims.figures``); ``name`` marks text whose number
    is a name (GPU 3). Text without a number (:func:`has_number`) needs neither."""

    text: str
    value: object = None
    name: bool = False
    #: the part of ``text`` that states the value, where the text says more ("weights 2.0 GB":
    #: "2.0 GB"); None: the whole text
    claim: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise ValueError(f"label text {self.text!r} is not a string")
        if self.claim is not None and self.claim not in self.text:
            raise ValueError(f"label claim {self.claim!r} is not part of its text {self.text!r}")
        if has_number(self.text) and self.value is None and not self.name:
            raise ValueError(f"label {self.text!r} has a number but no value; accepted: "
                             "Label(text, value) with the value the library computed, or "
                             "name=True for a name such as H100")


def _label(x: Label | str) -> Label:
    return x if isinstance(x, Label) else Label(x)


def _fill(name: str) -> str:
    if name not in FILLS:
        raise ValueError(f"unknown fill {name!r}; accepted: {', '.join(FILLS)}")
    if name == "none":
        return "none"
    if name == "faint":
        return "var(--tm-fig-faint, #e4e4e4)"
    from ..plots import PALETTE
    return f"var(--tm-fig-{name.replace(' ', '-')}, {PALETTE[name][0]})"


def _n(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


@dataclass
class Diagram:
    """A diagram being drawn: ``title`` (shown above it), a canvas of ``width`` × ``height``
    units, and its ``alt`` text (what it shows, with its numbers)."""

    title: str
    width: float = 420
    height: float = 200
    alt: str = ""
    labels: list[Label] = field(default_factory=list)
    _parts: list[str] = field(default_factory=list)
    _classes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.alt.strip():
            raise ValueError(f"diagram {self.title!r} needs alt text that states what it shows")
        if has_number(self.title):
            raise ValueError(f"diagram title {self.title!r} states a number: put numbers in "
                             "labels, where they are checked")

    # -- drawing ------------------------------------------------------------------------------
    def text(self, x: float, y: float, label: Label | str, *, size: float = FONT,
             anchor: str = "middle", weight: str = "normal", fill: str = "text") -> None:
        """Text centred at (x, y) (``anchor`` "start" or "end" to align it there)."""
        lab = _label(label)
        self.labels.append(lab)
        # the <svg> sets the defaults (FONT, centred, the text colour): only the rest is written
        extra = "" if size == FONT else f' font-size="{_n(size)}"'
        extra += "" if anchor == "middle" else f' text-anchor="{anchor}"'
        extra += "" if weight == "normal" else f' font-weight="{weight}"'
        extra += "" if fill == "text" else f' class="{self._class(fill)}"'
        self._parts.append(f'<text x="{_n(x)}" y="{_n(y)}"{extra}>{html.escape(lab.text)}</text>')

    def rect(self, x: float, y: float, w: float, h: float, fill: str = "faint", *,
             stroke: bool = False, dashed: bool = False, rounded: float = 3) -> None:
        """A rectangle (no text)."""
        line = ' stroke="currentColor" stroke-width="1"' if stroke else ""
        dash = ' stroke-dasharray="4 3"' if dashed else ""
        paint = ' fill="none"' if fill == "none" else f' class="{self._class(fill)}"'
        self._parts.append(f'<rect x="{_n(x)}" y="{_n(y)}" width="{_n(w)}" height="{_n(h)}" '
                           f'rx="{_n(rounded)}"{paint}{line}{dash}/>')

    def box(self, x: float, y: float, w: float, h: float, fill: str = "faint",
            *labels: Label | str, size: float = FONT, stroke: bool = False,
            dashed: bool = False) -> None:
        """A rectangle with its lines of text centred in it."""
        self.rect(x, y, w, h, fill, stroke=stroke, dashed=dashed)
        lines = [_label(lab) for lab in labels]
        step = size * 1.25
        top = y + h / 2 - step * (len(lines) - 1) / 2
        for i, lab in enumerate(lines):
            self.text(x + w / 2, top + i * step, lab, size=size)

    def line(self, x1: float, y1: float, x2: float, y2: float, *, arrow: bool = False,
             dashed: bool = False, width: float = 1.2, fill: str = "text") -> None:
        """A line, with an arrowhead at (x2, y2) if ``arrow``."""
        colour = "currentColor" if fill == "text" else _fill(fill)
        dash = ' stroke-dasharray="4 3"' if dashed else ""
        self._parts.append(f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" '
                           f'stroke="{colour}" stroke-width="{_n(width)}"{dash}/>')
        if arrow:
            angle = math.atan2(y2 - y1, x2 - x1)
            size = 6
            left = (x2 - size * math.cos(angle - 0.45), y2 - size * math.sin(angle - 0.45))
            right = (x2 - size * math.cos(angle + 0.45), y2 - size * math.sin(angle + 0.45))
            self._parts.append(f'<polygon points="{_n(x2)},{_n(y2)} {_n(left[0])},{_n(left[1])} '
                               f'{_n(right[0])},{_n(right[1])}" fill="{colour}"/>')

    def path(self, d: str, *, fill: str = "none", width: float = 1.2, dashed: bool = False) -> None:
        """An SVG path ``d`` in the text colour (curves, brackets)."""
        dash = ' stroke-dasharray="4 3"' if dashed else ""
        self._parts.append(f'<path d="{d}" fill="{_fill(fill)}" stroke="currentColor" '
                           f'stroke-width="{_n(width)}"{dash}/>')

    def legend(self, x: float, y: float, items, *, pitch: float = 135) -> None:
        """A key of coloured squares, three to a row ``pitch`` apart: ``items`` are (name, fill)."""
        for j, (name, fill) in enumerate(items):
            cx, cy = x + (j % 3) * pitch, y + (j // 3) * 20
            self.rect(cx, cy - 6, 12, 12, fill)
            self.text(cx + 17, cy, name, anchor="start", size=12)

    # -- output -------------------------------------------------------------------------------
    @property
    def numbers(self) -> list[Label]:
        """The labels that state a number (their value is checked)."""
        return [lab for lab in self.labels if lab.value is not None]

    def svg(self) -> str:
        """The diagram as an inline ``<svg>`` element."""
        key = hashlib.sha1((self.title + self.alt).encode()).hexdigest()[:8]
        title = f'<title id="tm-diagram-{key}-title">{html.escape(self.alt)}</title>'
        # one rule per fill used, scoped to this figure: a class on each mark instead of the
        # colour written out on every one keeps a diagram of many boxes small
        rules = "".join(f".tm-d{key} .{cls}{{fill:{_fill(name)}}}"
                        for name, cls in sorted(self._classes.items()))
        style = f"<style>{rules}</style>" if rules else ""
        return (f'<svg class="tm-chart tm-diagram tm-d{key}" viewBox="0 0 {_n(self.width)} '
                f'{_n(self.height)}" role="img" aria-labelledby="tm-diagram-{key}-title" '
                f'font-size="{FONT}" text-anchor="middle" dominant-baseline="central" '
                f'fill="currentColor" style="font-family: var(--font-stack, sans-serif)">'
                f"{title}{style}" + "".join(self._parts) + "</svg>")

    def _class(self, fill: str) -> str:
        """The class that paints a mark with ``fill`` (checked: :data:`FILLS`)."""
        _fill(fill)
        return self._classes.setdefault(fill, "f-" + fill.replace(" ", "-"))

    def _repr_html_(self) -> str:
        caption = f'<figcaption class="tm-diagram-title">{html.escape(self.title)}</figcaption>'
        return f'<figure class="tm-figure tm-explain">{caption}{self.svg()}</figure>'

    def __repr__(self) -> str:
        return f"Diagram({self.title!r})"
