"""Figures for the pages: one style, SVG that follows the reader's light or dark theme, and alt
text written from the data that is drawn.

Needs matplotlib (``pip install 'trainmath[plots]'``); nothing else in the library imports it.

A figure is a :class:`Chart`: a matplotlib figure drawn in this module's style and its alt text.
A notebook or the site shows it as inline SVG (``_repr_html_``), so that

- it is sharp at any size and legible on a phone: figures are drawn :data:`WIDTH` inches wide,
  with text large enough to read at 390 px;
- it follows the page's theme: text and axes are ``currentColor``, the marks' colours are CSS
  custom properties (``--tm-fig-blue`` ...) with the light theme's values as fallbacks, and the
  site sets the dark theme's (:func:`theme_css` writes both); the background is transparent;
- screen readers get ``role="img"`` and a ``<title>`` that states the numbers.

:func:`stacked_bar` and :func:`line_chart` write their own alt text from their data; a figure
drawn by hand with :func:`figure` is given its alt text, built from the same data, by the page.
"""

from __future__ import annotations

import hashlib
import html
import io
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

try:
    import matplotlib
    import matplotlib.ticker
    from matplotlib.figure import Figure
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("trainmath.report.plots needs matplotlib: pip install 'trainmath[plots]'") from exc

from ..units import Bytes

#: Figure width in inches (72 SVG units each). The SVG scales to the column: about 358 px on a
#: 390 px phone, so 11-point text is about 11 px there.
WIDTH = 5.0

#: The colours of marks, by name: (light theme, dark theme). Each reads on its theme's
#: background (at least 3:1) and differs from the others in lightness as well as hue.
PALETTE: dict[str, tuple[str, str]] = {
    "blue": ("#2f6db5", "#78a9eb"),
    "light blue": ("#8fb3e0", "#3f6593"),
    "orange": ("#d9822b", "#f0a455"),
    "red": ("#c2403d", "#f07b77"),
    "green": ("#3d8c4f", "#6fcf83"),
    "purple": ("#7d5ba6", "#b99be0"),
    "gray": ("#7a7a7a", "#9a9a9a"),
    "light gray": ("#c4c4c4", "#4f4f4f"),
}

#: The colour of each kind of training state, on every page that draws them.
KIND_COLORS = {"weights": "blue", "gradients": "light blue", "master weights": "orange",
               "optimizer states": "red"}

# Matplotlib draws with stand-in colours, which the SVG then turns into CSS: one per palette
# entry, and three for text (the page's colour), the page background and a faint grid.
_TEXT, _BACKGROUND, _FAINT = "#01f0f0", "#01f0f1", "#01f0f2"
_STAND_IN = {name: f"#01f0{i:02x}" for i, name in enumerate(PALETTE)}
_CSS = {_TEXT: "currentColor", _BACKGROUND: "var(--tm-fig-background, #fff)",
        _FAINT: "var(--tm-fig-faint, #e4e4e4)"}
_CSS.update({_STAND_IN[name]: f"var(--tm-fig-{name.replace(' ', '-')}, {light})"
             for name, (light, _dark) in PALETTE.items()})

_STYLE = {
    "font.size": 11,
    "font.family": "sans-serif",
    "axes.titlesize": 11.5,
    "axes.titleweight": "bold",
    "axes.labelsize": 11,
    "xtick.labelsize": 10.5,
    "ytick.labelsize": 10.5,
    "legend.fontsize": 10.5,
    "legend.frameon": False,
    "text.color": _TEXT,
    "axes.labelcolor": _TEXT,
    "axes.edgecolor": _TEXT,
    "xtick.color": _TEXT,
    "ytick.color": _TEXT,
    "axes.facecolor": "none",
    "figure.facecolor": "none",
    "savefig.facecolor": "none",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": False,
    "grid.color": _FAINT,
    "lines.linewidth": 2.0,
    "svg.fonttype": "none",  # text stays text: sharp, selectable, in the page's font
}


def color(name: str) -> str:
    """A palette colour by name (``"blue"``, ``"light gray"``, ...), or ``"text"``,
    ``"background"`` (the page's), as matplotlib accepts it in this module's figures."""
    if name == "text":
        return _TEXT
    if name == "background":
        return _BACKGROUND
    if name == "faint":
        return _FAINT
    try:
        return _STAND_IN[name]
    except KeyError:
        raise ValueError(f"unknown colour {name!r}: one of {sorted(PALETTE)}, 'text', "
                         "'background' or 'faint'") from None


def theme_css(dark_selectors: Sequence[str] = ('body[data-theme="dark"]',),
              auto_selector: str = 'body:not([data-theme="light"])') -> str:
    """The CSS that gives the figures their colours: light by default, dark under
    ``dark_selectors`` and, when the reader's system is dark, under ``auto_selector``
    (furo's attributes by default)."""
    def block(selector: str, dark: bool, indent: str = "") -> str:
        lines = [f"{indent}{selector} {{"]
        for name, (light, dark_value) in PALETTE.items():
            lines.append(f"{indent}  --tm-fig-{name.replace(' ', '-')}: "
                         f"{dark_value if dark else light};")
        lines.append(f"{indent}  --tm-fig-background: var(--color-background-primary, "
                     f"{'#131416' if dark else '#fff'});")
        lines.append(f"{indent}  --tm-fig-faint: {'#3a3a3a' if dark else '#e4e4e4'};")
        lines.append(f"{indent}}}")
        return "\n".join(lines)

    return "\n".join([
        "/* Generated by trainmath.report.plots.theme_css(): the figures' colours in each theme. */",
        block(":root", False),
        block(", ".join(dark_selectors), True),
        "@media (prefers-color-scheme: dark) {",
        block(auto_selector, True, "  "),
        "}",
        "",
    ])


def figure(nrows: int = 1, ncols: int = 1, height: float = 3.0, **subplots: Any):
    """A new figure in the site's style, :data:`WIDTH` wide and ``height`` inches tall, and its
    axes (as ``Figure.subplots`` returns them). Not registered with pyplot, so a notebook shows
    only the :class:`Chart` made from it."""
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(WIDTH, height), layout="constrained")
        axes = fig.subplots(nrows, ncols, **subplots)
    return fig, axes


def set_title(ax, text: str, width: int = 56, size: float | None = None) -> None:
    """A title at the axes' left, in bold, wrapped to fit the figure's width."""
    ax.set_title(textwrap.fill(text, width), loc="left", fontweight="bold",
                 fontsize=size or _STYLE["axes.titlesize"], color=_TEXT)


def plain_log_ticks(axis) -> None:
    """Tick labels of a log axis as plain numbers (1, 10, 100, 0.1), not powers."""
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(
        lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def superscript(n: int) -> str:
    """``-10`` -> ``⁻¹⁰``: powers in labels without mathtext."""
    return str(n).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))


@dataclass
class Chart:
    """A figure and its alt text, shown as inline SVG."""

    figure: Any
    alt: str

    def svg(self) -> str:
        """The figure as an inline ``<svg>`` element that follows the page's theme."""
        _follow_the_theme(self.figure)
        key = hashlib.sha1(self.alt.encode()).hexdigest()[:8]
        buffer = io.StringIO()
        with matplotlib.rc_context({**_STYLE, "svg.hashsalt": key}):
            self.figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None},
                                transparent=True)
        svg = buffer.getvalue()
        svg = svg[svg.index("<svg"):]  # no XML prolog or doctype inside HTML
        svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
        # matplotlib's "* {stroke-linejoin: round}" would style the whole page: scope it.
        svg = re.sub(r"<style[^>]*>.*?</style>",
                     f"<style>.tm-chart-{key} * {{stroke-linejoin: round; stroke-linecap: butt}}"
                     "</style>", svg, count=1, flags=re.S)
        svg = re.sub(r"#01f0[0-9a-f]{2}", lambda m: _CSS.get(m.group(0), m.group(0)), svg)
        svg = re.sub(r"font-family:\s*'?[^;'\"]+'?", "font-family: var(--font-stack, sans-serif)",
                     svg)
        svg = _compact(svg)
        svg = re.sub(r'\swidth="[\d.]+pt" height="[\d.]+pt"', "", svg, count=1)
        # matplotlib names its groups figure_1, axes_1, ...: the same on every figure of a page.
        svg = re.sub(r'<g id="[^"]*"', "<g", svg)
        title = f'<title id="tm-chart-{key}-title">{html.escape(self.alt)}</title>'
        svg = re.sub(r"<svg\b", f'<svg class="tm-chart tm-chart-{key}" role="img" '
                     f'aria-labelledby="tm-chart-{key}-title"', svg, count=1)
        svg = re.sub(r"(<svg\b[^>]*>)", lambda m: m.group(1) + title, svg, count=1)
        return svg

    def _repr_html_(self) -> str:
        return f'<figure class="tm-figure">{self.svg()}</figure>'

    def __repr__(self) -> str:
        return f"Chart({self.alt!r})"


def _follow_the_theme(fig) -> None:
    """What a page drew with matplotlib's defaults (black text, a boxed legend) in this style:
    text in the page's colour, legends without a frame."""
    from matplotlib.colors import to_hex
    from matplotlib.legend import Legend
    from matplotlib.text import Text

    for text in fig.findobj(Text):
        if to_hex(text.get_color()) == "#000000":
            text.set_color(_TEXT)
    for legend in fig.findobj(Legend):
        legend.set_frame_on(False)


_NUMBER = re.compile(r"-?\d+\.\d+")


def _compact(svg: str) -> str:
    """Coordinates to 0.1 of a point (0.1 px on a phone) and one line per path: a figure's SVG
    is a third of what matplotlib writes, and looks the same."""
    def numbers(m: re.Match) -> str:
        text = _NUMBER.sub(lambda n: f"{float(n.group(0)):.1f}".rstrip("0").rstrip("."),
                           m.group(2))
        return f'{m.group(1)}="{" ".join(text.split())}"'

    svg = re.sub(r'\b(d|x|y|x1|x2|y1|y2|width|height|transform|points)="([^"]*)"', numbers, svg)
    return re.sub(r">\s+<", "><", svg)


def chart(fig, alt: str) -> Chart:
    """A figure drawn with :func:`figure`, with its alt text: what the figure shows, in words
    and numbers ("Line chart: ... falls from 112 GB to 1.9 GB ...")."""
    if not alt.strip():
        raise ValueError("a chart needs alt text that states what it shows")
    return Chart(fig, alt)


def _amount(value: Bytes | float, unit: str) -> str:
    if isinstance(value, Bytes):
        return str(value) if unit == "auto" else value.format(unit, _places(value.n / _SCALE[unit]))
    return f"{value:,.3g}"


_SCALE = {"GB": 1e9, "GiB": 2**30, "MB": 1e6, "TB": 1e12, "s": 1.0}


def _size(value: Bytes | float) -> float:
    """A mark's size before scaling: bytes, or a plain number (seconds)."""
    return value.n if isinstance(value, Bytes) else float(value)


def _axis_label(unit: str) -> str:
    return "seconds" if unit == "s" else f"{unit} ({'10^9' if unit == 'GB' else '2^30'} bytes)"


def _places(x: float) -> int:
    return 0 if abs(x) >= 100 or x == int(x) else 1


def stacked_bar(parts: Mapping[str, Bytes], *, title: str,
                limit: tuple[str, Bytes] | None = None, colors: Mapping[str, str] | None = None,
                unit: str = "GB") -> Chart:
    """One horizontal bar of ``parts`` stacked left to right, their sizes in the legend, and an
    optional ``limit`` (a label and an amount) drawn as a dashed line.

    Alt text: "Stacked bar: weights 14 GB, gradients 14 GB, ...; total 112 GB, against one
    H100: 85.5 GB usable."
    """
    colors = colors or KIND_COLORS
    scale = _SCALE[unit]
    total = sum((p for p in parts.values()), Bytes(0))
    fig, ax = figure(height=2.2)
    with matplotlib.rc_context(_STYLE):
        left = 0.0
        for kind, amount in parts.items():
            ax.barh(0, amount.n / scale, left=left, height=0.6, color=color(colors[kind]),
                    edgecolor=color("background"), linewidth=1.5,
                    label=f"{kind} {_amount(amount, unit)}")
            left += amount.n / scale
        right = max(total.n, limit[1].n if limit else 0) / scale
        if limit is not None:
            x = limit[1].n / scale
            ax.axvline(x, color=color("text"), linestyle="--", linewidth=1.3)
            right_side = x > right * 0.6
            ax.annotate(f"{limit[0]}: {_amount(limit[1], unit)}", (x, 0.36),
                        xytext=(-4 if right_side else 4, 0), textcoords="offset points",
                        ha="right" if right_side else "left", va="bottom")
        ax.set_ylim(-0.45, 0.75)
        ax.set_xlim(0, right * 1.04)
        ax.set_yticks([])
        ax.spines["left"].set_visible(False)
        ax.set_xlabel(f"{unit} ({'10^9' if unit == 'GB' else '2^30'} bytes)")
        set_title(ax, title)
        fig.legend(ncols=2, loc="outside lower center", handlelength=1.2, columnspacing=1.2)
    alt = ("Stacked bar: " + ", ".join(f"{k} {_amount(v, unit)}" for k, v in parts.items())
           + f"; total {_amount(total, unit)}")
    if limit is not None:
        alt += f", against {limit[0]}: {_amount(limit[1], unit)}"
    return Chart(fig, alt + ".")


def stacked_bars(rows: Mapping[str, Mapping[str, Bytes | float]], *, title: str,
                 colors: Mapping[str, str], limit: tuple[str, Bytes] | None = None,
                 unit: str = "GB") -> Chart:
    """One horizontal stacked bar per row (top to bottom in order), each part a colour named in
    ``colors`` and listed once in the legend, the row's total at its end, and an optional
    ``limit`` drawn as a dashed line, named in the legend: several setups side by side. Parts are ``Bytes``, or
    seconds with ``unit="s"``.

    Alt text: "Stacked bars: full: weights 13 GB, ...; total 135 GB. lora: ...".
    """
    scale = _SCALE[unit]
    labels = list(rows)
    fig, ax = figure(height=0.9 + 0.55 * len(labels))
    with matplotlib.rc_context(_STYLE):
        drawn: set[str] = set()
        right = limit[1].n / scale if limit else 0.0
        for y, label in enumerate(labels):
            left = 0.0
            for kind, amount in rows[label].items():
                ax.barh(y, _size(amount) / scale, left=left, height=0.6, color=color(colors[kind]),
                        edgecolor=color("background"), linewidth=1.2,
                        label=None if kind in drawn else kind)
                drawn.add(kind)
                left += _size(amount) / scale
            total = _total(rows[label].values())
            ax.annotate(_amount(total, unit), (left, y), xytext=(4, 0), textcoords="offset points",
                        va="center", ha="left")
            right = max(right, left)
        if limit is not None:  # named in the legend: a label beside the line would hide a bar
            ax.axvline(limit[1].n / scale, color=color("text"), linestyle="--", linewidth=1.3,
                       label=f"{limit[0]}: {_amount(limit[1], unit)}")
        ax.set_yticks(range(len(labels)), labels)
        ax.invert_yaxis()
        ax.set_xlim(0, right * 1.15)
        ax.set_xlabel(_axis_label(unit))
        set_title(ax, title, width=44)  # the row labels take part of the width
        names = ax.get_legend_handles_labels()[1]
        wide = sum(len(n) for n in names[:3]) > 54  # three such entries overrun the figure
        fig.legend(ncols=2 if wide else 3, loc="outside lower center", handlelength=1.2,
                   columnspacing=1.2)
    alt = "Stacked bars: " + " ".join(
        f"{label}: " + ", ".join(f"{k} {_amount(v, unit)}" for k, v in parts.items() if _size(v))
        + f"; total {_amount(_total(parts.values()), unit)}." for label, parts in rows.items())
    if limit is not None:
        alt += f" Against {limit[0]}: {_amount(limit[1], unit)}."
    return Chart(fig, alt)


def _total(values) -> Bytes | float:
    values = list(values)
    if values and all(isinstance(v, Bytes) for v in values):
        return sum(values, Bytes(0))
    return sum(_size(v) for v in values)


def scatter(groups: Mapping[str, Sequence[tuple[float, float]]], *, title: str, xlabel: str,
            ylabel: str, band: float | None = None,
            colors: Sequence[str] = ("blue", "orange", "green", "red", "purple", "gray"),
            height: float = 4.2) -> Chart:
    """Points (x, y) by group on log axes, the line y = x, and with ``band`` the lines
    y = (1 ± band)·x: predictions against measurements.

    Alt text: "Scatter on log axes of <ylabel> against <xlabel>: <group> n points, from … to …;
    … k of n points within ±band of y = x."
    """
    everything = [pt for pts in groups.values() for pt in pts]
    lo = min(min(x, y) for x, y in everything) / 1.3
    hi = max(max(x, y) for x, y in everything) * 1.3
    fig, ax = figure(height=height)
    with matplotlib.rc_context(_STYLE):
        ax.plot([lo, hi], [lo, hi], color=color("text"), linewidth=1.0)
        if band is not None:
            for f in (1 - band, 1 + band):
                ax.plot([lo, hi], [lo * f, hi * f], color=color("gray"), linewidth=1.0,
                        linestyle="--")
        for (name, pts), c in zip(groups.items(), colors):
            ax.scatter([x for x, _ in pts], [y for _, y in pts], s=18, color=color(c),
                       label=name, zorder=3)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        set_title(ax, title)
        fig.legend(ncols=2, loc="outside lower center", handlelength=1.0, columnspacing=1.2)
    alt = (f"Scatter on log axes of {ylabel} against {xlabel}: " + "; ".join(
        f"{name} {len(pts)} points, from {min(x for x, _ in pts):,.3g} to "
        f"{max(x for x, _ in pts):,.3g}" for name, pts in groups.items()) + ".")
    if band is not None:
        inside = sum(abs(y / x - 1) <= band for x, y in everything)
        alt += f" {inside} of {len(everything)} points within ±{band:.0%} of y = x."
    return Chart(fig, alt)


def line_chart(x: Sequence[float], series: Mapping[str, Sequence[float | Bytes]], *,
               title: str, xlabel: str, ylabel: str, unit: str = "GB", logx: bool = False,
               logy: bool = False, xticks: Sequence[tuple[float, str]] | None = None,
               hline: tuple[str, float | Bytes] | None = None,
               colors: Sequence[str] = ("blue", "orange", "green", "red", "purple", "gray"),
               markers: bool = False, height: float = 3.6) -> Chart:
    """Lines of ``series`` (name -> values at ``x``; ``Bytes`` are drawn in ``unit``), with an
    optional horizontal ``hline`` (a label and a value), e.g. a GPU's memory, named in the
    legend (where no line can cross its label).

    Alt text: "Line chart of <ylabel> against <xlabel>: <name> from <first> at <x> to <last> at
    <x>; ... A line marks <hline>."
    """
    def value(v):
        return v.n / _SCALE[unit] if isinstance(v, Bytes) else float(v)

    def said(v):
        return _amount(v, unit) if isinstance(v, Bytes) else f"{v:,.3g}"

    tick = dict(xticks or ())
    fig, ax = figure(height=height)
    styles = ["-", "--", "-.", ":"]
    marks = ["o", "s", "^", "D", "v", "P"]
    with matplotlib.rc_context(_STYLE):
        for i, (name, values) in enumerate(series.items()):
            ax.plot(x, [value(v) for v in values], styles[i % len(styles)],
                    color=color(colors[i % len(colors)]), label=name,
                    marker=marks[i % len(marks)] if markers else None, markersize=4.5)
        if hline is not None:
            ax.axhline(value(hline[1]), color=color("text"), linestyle="--", linewidth=1.2,
                       label=f"{hline[0]}: {said(hline[1])}")
        if logx:
            ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
            plain_log_ticks(ax.yaxis)
        if xticks:
            ax.set_xticks([t for t, _ in xticks], [label for _, label in xticks])
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.grid(True, which="major", axis="y", linewidth=0.6)
        ax.set_axisbelow(True)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        set_title(ax, title)
        fig.legend(loc="outside lower center", ncols=1 if len(series) > 3 else 2,
                  handlelength=2.2)

    def at(i):
        return tick.get(x[i], f"{x[i]:,}")

    lines = [f"{name} from {said(vals[0])} at {at(0)} to {said(vals[-1])} at {at(-1)}"
             for name, vals in series.items()]
    alt = f"Line chart of {ylabel} against {xlabel}: " + "; ".join(lines) + "."
    if hline is not None:
        alt += f" A dashed line marks {hline[0]}: {said(hline[1])}."
    return Chart(fig, alt)
