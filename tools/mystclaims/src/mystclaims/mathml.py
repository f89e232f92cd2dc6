"""TeX to MathML at build time: equations a browser draws itself, with no script and no fonts.

``to_mathml(tex, display=...)`` converts one formula with ``latex2mathml`` and adds what a page
of claims needs beyond it:

- MathJax's ``\\class{c}{...}`` and ``\\cssId{id}{...}`` (its ``html`` extension) become an
  ``<mrow class="c" id="id">``, so a number in an equation is an element a script can bind, as
  ``mystclaims.sphinx`` writes it: ``\\class{tm-claim}{\\cssId{tm-c-3}{34}}``;
- ``aligned`` (and ``align``, ``align*``, ``split``, ``gathered``) become an ``<mtable>`` with
  their columns aligned right and left in turn, as amsmath sets them;
- macros with arguments (``\\claim{shown}{expr}`` -> ``shown``) are expanded first;
- a command it does not know is a problem it reports, not a red ``\\foo`` on the page.

The ``<math>`` element carries the TeX (claim markup removed) as ``alttext``; search snippets
read it (see ``mystclaims.js``). MathML Core is drawn natively by Chromium (109 and later),
Firefox and Safari.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

MATHML = "http://www.w3.org/1998/Math/MathML"
#: Macros every page may use: name -> (replacement with #1..#9, number of arguments).
DEFAULT_MACROS = {"claim": ("{#1}", 2), "nonclaim": ("{#1}", 1)}
_ALIGNED = ("aligned", "align", "align*", "split", "gathered", "gather", "gather*")
_MARK = "\ue000{}\ue001"  # a private-use placeholder, rendered as one <mi>/<mtext> token
_MARK_RE = re.compile("\ue000(\\d+)\ue001")
_OPERATOR_CHARS = set("±∓×÷·∘⋅−∗∣∥≤≥≠≈≡→←↔⇒⇔∈∉⊂⊆∪∩∑∏∫")



@dataclass
class Rendered:
    """A formula as MathML markup, and what could not be rendered faithfully."""

    html: str
    problems: list[str] = field(default_factory=list)


def _group(tex: str, i: int) -> tuple[str, int] | None:
    """The argument at ``tex[i:]`` (after blanks): ``{...}``'s content or one token; and its end."""
    while i < len(tex) and tex[i] in " \t\n":
        i += 1
    if i >= len(tex):
        return None
    if tex[i] == "{":
        depth = 0
        for j in range(i, len(tex)):
            c = tex[j]
            if c == "\\":
                continue
            if c == "{" and (j == 0 or tex[j - 1] != "\\"):
                depth += 1
            elif c == "}" and tex[j - 1] != "\\":
                depth -= 1
                if depth == 0:
                    return tex[i + 1:j], j + 1
        return None
    if tex[i] == "\\":
        m = re.match(r"\\(?:[A-Za-z]+|.)", tex[i:])
        return m.group(0), i + len(m.group(0))
    return tex[i], i + 1


def _expand(tex: str, macros: dict) -> str:
    """Expand ``macros`` (``\\name{a}{b}``) until none is left."""
    if not macros:
        return tex
    pattern = re.compile(r"\\(" + "|".join(sorted(map(re.escape, macros), key=len, reverse=True))
                         + r")(?![A-Za-z])")
    for _ in range(100):
        m = pattern.search(tex)
        if not m:
            return tex
        body, count = macros[m.group(1)]
        args, end = [], m.end()
        for _ in range(count):
            got = _group(tex, end)
            if got is None:
                return tex  # malformed: leave it for latex2mathml to show
            args.append(got[0])
            end = got[1]
        out = re.sub(r"#([1-9])", lambda a: args[int(a.group(1)) - 1].replace("\\", "\\\\"), body)
        tex = tex[:m.start()] + out + tex[end:]
    return tex


def _split_top(tex: str, sep: str) -> list[str]:
    """Split at ``sep`` (``\\\\`` or ``&``) outside braces and nested environments."""
    parts, depth, env, start, i = [], 0, 0, 0, 0
    while i < len(tex):
        if tex.startswith("\\begin{", i):
            env += 1
        elif tex.startswith("\\end{", i):
            env -= 1
        c = tex[i]
        if c == "\\" and sep == "\\\\" and tex.startswith("\\\\", i) and not depth and not env:
            parts.append(tex[start:i])
            i += 2
            start = i
            continue
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == sep and not depth and not env:
            parts.append(tex[start:i])
            start = i + 1
        i += 1
    parts.append(tex[start:])
    return parts


class _Renderer:
    def __init__(self) -> None:
        self.pieces: list[ET.Element] = []  # what each placeholder stands for
        self.problems: list[str] = []

    def mark(self, element: ET.Element) -> str:
        self.pieces.append(element)
        return "{\\text{" + _MARK.format(len(self.pieces) - 1) + "}}"

    def lift(self, tex: str) -> str:
        """Replace \\class, \\cssId and alignment environments by placeholders, innermost first."""
        out, i = [], 0
        pattern = re.compile(r"\\(class|cssId)(?![A-Za-z])|\\begin\{([a-z]+\*?)\}")
        while True:
            m = pattern.search(tex, i)
            if not m:
                out.append(tex[i:])
                return "".join(out)
            out.append(tex[i:m.start()])
            if m.group(1):  # \class{c}{body} or \cssId{id}{body}
                first = _group(tex, m.end())
                second = first and _group(tex, first[1])
                if not second:
                    self.problems.append(f"\\{m.group(1)} needs two arguments")
                    out.append(m.group(0))
                    i = m.end()
                    continue
                row = ET.Element("mrow")
                for child in self.render(second[0]):
                    row.append(child)
                if m.group(1) == "class":
                    row.set("class", first[0].strip())
                else:
                    row.set("id", first[0].strip())
                out.append(self.mark(row))
                i = second[1]
                continue
            env = m.group(2)
            end = tex.find(f"\\end{{{env}}}", m.end())
            if env not in _ALIGNED or end < 0:
                out.append(m.group(0))
                i = m.end()
                continue
            out.append(self.mark(self.table(tex[m.end():end], env)))
            i = end + len(f"\\end{{{env}}}")

    def table(self, body: str, env: str) -> ET.Element:
        table = ET.Element("mtable")
        gather = env.startswith("gather")
        aligns = []
        for line in _split_top(body, "\\\\"):
            if not line.strip():
                continue
            tr = ET.SubElement(table, "mtr")
            for col, cell in enumerate(_split_top(line, "&")):
                align = "center" if gather else ("right" if col % 2 == 0 else "left")
                if len(aligns) <= col:
                    aligns.append(align)
                td = ET.SubElement(tr, "mtd")
                # Chromium aligns a cell's MathML by -webkit-left/right only (right: centred);
                # other browsers keep the plain value, and Firefox reads columnalign too.
                td.set("style", f"text-align: {align}; text-align: -webkit-{align}; "
                       "padding: 0.25em 0" if align != "center" else "padding: 0.25em 0")
                # A left cell goes on from the right one: "{}= x" keeps "=" a binary relation.
                for child in self.render(("{}" if align == "left" else "") + cell):
                    td.append(child)
        table.set("columnalign", " ".join(aligns))
        table.set("displaystyle", "true")
        return table

    def render(self, tex: str) -> list[ET.Element]:
        """The MathML children (of an mrow) for a TeX fragment."""
        from latex2mathml.converter import convert_to_element

        lifted = self.lift(tex)
        try:
            math = convert_to_element(lifted)
        except Exception as exc:  # noqa: BLE001 - latex2mathml raises many kinds
            self.problems.append(f"{type(exc).__name__}: {exc}")
            bad = ET.Element("mtext")
            bad.text = tex
            return [bad]
        self.splice(math)
        children = list(math)
        if len(children) == 1 and children[0].tag == "mrow":
            return list(children[0])
        return children

    def splice(self, root: ET.Element) -> None:
        """Put each placeholder's element where its token landed; tidy the tokens."""
        for parent in list(root.iter()):
            for index, child in enumerate(list(parent)):
                if child.text:  # latex2mathml writes characters as entity text: "&#x0003D;"
                    child.text = html.unescape(child.text)
                text = child.text or ""
                m = _MARK_RE.fullmatch(text)
                if m and len(child) == 0:
                    parent.remove(child)
                    parent.insert(index, self.pieces[int(m.group(1))])
                    continue
                local = child.tag
                if local == "mi" and text.startswith("\\"):
                    self.problems.append(f"unknown command {text}")
                elif local == "mi" and text == "&":
                    self.problems.append("'&' outside an alignment environment")
                elif local == "mi" and text in _OPERATOR_CHARS:
                    child.tag = "mo"


_MROW = "mrow"


def _simplify(element: ET.Element) -> None:
    """Fold the mrows that group one thing: ``<mrow><mrow id=x><mn>2</mn></mrow></mrow>``."""
    for child in element:
        _simplify(child)
    for index, child in enumerate(list(element)):
        if child.tag != _MROW or len(child) != 1:
            continue
        only = child[0]
        if not child.attrib:  # a plain group of one: the one itself
            element.remove(child)
            element.insert(index, only)
        elif only.tag == _MROW and not (set(only.attrib) & set(child.attrib) - {"class"}):
            # \class{c}{\cssId{id}{...}}: one mrow with both
            classes = " ".join(filter(None, (child.get("class"), only.get("class"))))
            child.attrib.update(only.attrib)
            if classes:
                child.set("class", classes)
            child.remove(only)
            child.extend(list(only))


def _strip_markup(tex: str) -> str:
    """The TeX a reader wrote: ``\\class{c}{\\cssId{id}{34}}`` -> ``34``."""
    while True:
        m = re.search(r"\\(class|cssId)(?![A-Za-z])", tex)
        if not m:
            while re.search(r"\{\{([^{}]*)\}\}", tex):
                tex = re.sub(r"\{\{([^{}]*)\}\}", r"{\1}", tex)
            # {2}\Psi -> 2\Psi, e-{1} -> e-1; never an argument (\frac{a}{b}) or a script (^{30})
            return re.sub(r"(?<![\^_A-Za-z}])\{([\w.]+)\}", r"\1", tex)
        first = _group(tex, m.end())
        second = first and _group(tex, first[1])
        if not second:
            return tex
        tex = tex[:m.start()] + "{" + second[0] + "}" + tex[second[1]:]


def to_mathml(tex: str, display: bool = False, macros: dict | None = None) -> Rendered:
    """One formula as a ``<math>`` element (markup), with the problems met converting it."""
    macros = DEFAULT_MACROS if macros is None else macros
    renderer = _Renderer()
    tex = tex.strip()
    expanded = _expand(tex, macros)
    math = ET.Element("math", xmlns=MATHML)
    if display:
        math.set("display", "block")
    row = ET.SubElement(math, "mrow")
    for child in renderer.render(expanded):
        row.append(child)
    _simplify(math)
    alt = " ".join(_strip_markup(expanded).split())
    math.set("alttext", alt)
    markup = ET.tostring(math, encoding="unicode", short_empty_elements=False)
    return Rendered(markup, renderer.problems)

