"""Claims: numbers in prose that are checked against the expression that computes them.

A page writes ``{claim}`112 GB <state.total>``` : the stated text, then the Python expression
in angle brackets. Inside math the same is ``\\claim{112\\,\\text{GB}}{state.total}``.
The stated text is read by :func:`parse_statement` and checked by :func:`check`:

- ``112 GB`` holds when the computed value rounds to 112 at the written precision, in GB
  (so 112.4e9 bytes passes and 112.6e9 fails); ``104.3 GiB`` compares in GiB to one decimal.
- ``over``/``more than``/``above``, ``under``/``less than``/``below``, ``at least`` and
  ``at most`` compare exactly against the stated number, with no rounding.
- ``about 30%`` needs a tolerance in the stated unit: ``{claim}`about 30% <frac ± 5>```.
  Equality claims take no tolerance: a number is either right at its precision or wrong.

:func:`scan` finds the claims, the Python code and the unchecked numbers of a MyST page; the
Sphinx extension and the sybil parser share it, so both see the same page.
"""

from __future__ import annotations

import bisect
import doctest
import math
import numbers
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction

from .units import UNITS, Bytes

# ---------------------------------------------------------------------------------------
# The stated text
# ---------------------------------------------------------------------------------------

#: Non-byte units a claim can state, with the factor that turns one of them into base units.
#: Byte units come from :data:`trainmath.units.UNITS` and need a :class:`Bytes` value.
PLAIN_UNITS: dict[str, Fraction] = {
    "": Fraction(1),
    "%": Fraction(1, 100),  # the computed value is a fraction: 0.3 states as 30%
    "×": Fraction(1),
    "x": Fraction(1),
    "FLOP": Fraction(1),
    "FLOPs": Fraction(1),
    "GFLOP": Fraction(10**9),
    "TFLOP": Fraction(10**12),
    "PFLOP": Fraction(10**15),
    "EFLOP": Fraction(10**18),
    "ZFLOP": Fraction(10**21),
    "FLOP/s": Fraction(1),
    "GFLOP/s": Fraction(10**9),
    "TFLOP/s": Fraction(10**12),
    "PFLOP/s": Fraction(10**15),
    "EFLOP/s": Fraction(10**18),
    "s": Fraction(1),
    "seconds": Fraction(1),
    "ms": Fraction(1, 1000),
    "minutes": Fraction(60),
    "hours": Fraction(3600),
    "days": Fraction(86400),
}
BYTE_UNITS: dict[str, int] = {**UNITS, "byte": 1}

#: Count suffixes written straight after the number ("7B") or as a word ("7 billion").
MULTIPLIERS: dict[str, int] = {
    "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12,
    "thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12,
}

QUALIFIERS: dict[str, str] = {
    "over": ">", "more than": ">", "above": ">",
    "under": "<", "less than": "<", "below": "<",
    "at least": ">=", "at most": "<=",
    "about": "~", "roughly": "~", "around": "~", "approximately": "~",
}

_NUMBER = (
    r"(?P<sign>[-−])?(?:"
    r"(?P<base>\d+)\^\{?(?P<exp>[-−]?\d+)\}?"  # 2^-14, 2^{16}
    r"|(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<frac>\d+))?(?:[eE](?P<sci>[-+−]?\d+))?"
    r")"
)
_STATEMENT = re.compile(
    r"^(?:(?P<qual>" + "|".join(sorted(QUALIFIERS, key=len, reverse=True)) + r")\s+)?"
    + _NUMBER
    + r"(?:(?P<suffix>[KMBT])\b|\s*(?P<word>thousand|million|billion|trillion)\b)?"
    r"\s*(?P<unit>[^\s\d].*?)?\s*$"
)


class ClaimError(ValueError):
    """A claim that cannot be read: bad syntax, an unknown unit, a missing tolerance."""


@dataclass(frozen=True)
class Statement:
    """What a claim's text states: ``qualifier`` number ``unit``, read exactly."""

    text: str
    qualifier: str  # "=", ">", "<", ">=", "<=" or "~"
    value: Fraction  # in the stated unit, after any count multiplier
    unit: str
    #: half a unit in the last written place: the rounding an equality claim allows
    half_ulp: Fraction
    #: the count multiplier written after the number ("7B": 10^9); tolerances scale with it
    scale: int = 1

    @property
    def is_bytes(self) -> bool:
        return self.unit in BYTE_UNITS


def _latex_to_text(text: str) -> str:
    """The plain text of a claim written in math: ``112\\,\\text{GB}`` -> ``112 GB``."""
    text = re.sub(r"\\(?:text|mathrm|textrm|mbox)\{([^{}]*)\}", r"\1", text)
    text = text.replace("{,}", ",").replace("\\%", "%").replace("\\times", "×")
    text = re.sub(r"\\[,;:! ]|~", " ", text)
    return " ".join(text.split())


def parse_statement(text: str) -> Statement:
    """Read a claim's stated text, such as ``"over 100 GB"``, ``"7B"`` or ``"2^-14"``."""
    plain = _latex_to_text(text) if "\\" in text or "{" in text else " ".join(text.split())
    m = _STATEMENT.match(plain)
    if not m:
        raise ClaimError(
            f"cannot read the stated text {text!r}: write [qualifier] number [unit], "
            f"e.g. '112 GB', 'over 100 GB', '7B', '30%', '2^-14'"
        )
    unit = m["unit"] or ""
    if unit not in PLAIN_UNITS and unit not in BYTE_UNITS:
        known = ", ".join(u for u in [*BYTE_UNITS, *PLAIN_UNITS] if u)
        raise ClaimError(f"unknown unit {unit!r} in {text!r}; accepted: {known}, or none")
    sign = -1 if m["sign"] else 1
    if m["base"]:
        value = Fraction(int(m["base"])) ** int(m["exp"].replace("−", "-"))
        half_ulp = Fraction(0)  # a power of two is exact
    else:
        digits = m["int"].replace(",", "") + "." + (m["frac"] or "0")
        exponent = int((m["sci"] or "0").replace("−", "-"))
        value = Fraction(digits) * Fraction(10) ** exponent
        half_ulp = Fraction(1, 2) * Fraction(10) ** (exponent - len(m["frac"] or ""))
    scale = MULTIPLIERS.get(m["suffix"] or m["word"] or "", 1)
    if scale != 1 and unit:
        raise ClaimError(f"{text!r} has both a count suffix and a unit; write one of them")
    qualifier = QUALIFIERS.get(m["qual"] or "", "=")
    return Statement(text, qualifier, sign * value * scale, unit, half_ulp * scale, scale)


# ---------------------------------------------------------------------------------------
# The computed value
# ---------------------------------------------------------------------------------------

def _as_fraction(value: object) -> Fraction:
    is_number = isinstance(value, (numbers.Real, Bytes)) or hasattr(value, "__float__")
    if isinstance(value, bool) or not is_number:
        raise ClaimError(f"the expression gave {value!r} ({type(value).__name__}), not a number")
    if isinstance(value, Bytes):
        return Fraction(value.n)
    if isinstance(value, (int, Fraction)):
        return Fraction(value)
    f = float(value)  # type: ignore[arg-type]
    if not math.isfinite(f):
        raise ClaimError(f"the expression gave {f}, not a finite number")
    return Fraction(f)


def _fmt(x: Fraction) -> str:
    if x.denominator == 1:
        return f"{x.numerator:,}"
    return f"{float(x):,.6g}" if abs(x) >= 1e6 or abs(x) < 1e-3 else f"{float(x):,.6f}".rstrip("0")


def describe(value: object) -> str:
    """The exact computed value, spelled out for the reader and for failure messages."""
    if isinstance(value, Bytes):
        return f"{_fmt(Fraction(value.n))} bytes = {value.gb:,.4f} GB = {value.gib:,.4f} GiB"
    try:
        return _fmt(_as_fraction(value))
    except ClaimError:
        return repr(value)


def in_unit(statement: Statement, computed: object) -> Fraction:
    """The computed value expressed in the statement's unit."""
    if statement.is_bytes:
        if not isinstance(computed, Bytes):
            raise ClaimError(
                f"{statement.text!r} states bytes but the expression gave {computed!r}; "
                "return a trainmath.units.Bytes so the unit is explicit"
            )
        return Fraction(computed.n) / BYTE_UNITS[statement.unit]
    if isinstance(computed, Bytes):
        raise ClaimError(
            f"{statement.text!r} states no byte unit but the expression gave {computed}; "
            "state the unit (GB, GiB, bytes, ...)"
        )
    return _as_fraction(computed) / PLAIN_UNITS[statement.unit]


def check(statement: Statement, computed: object, tolerance: Fraction | None = None) -> str | None:
    """None when the statement holds for ``computed``, else why not, in one sentence."""
    got = in_unit(statement, computed)
    stated = statement.value
    unit = f" {statement.unit}" if statement.unit and statement.unit != "%" else statement.unit
    shown = f"{_fmt(got)}{unit}"
    q = statement.qualifier
    if q == "~":
        if tolerance is None:
            raise ClaimError(
                f"{statement.text!r} says 'about' but gives no tolerance; write <expr ± t> "
                "with t in the stated unit"
            )
        ok = abs(got - stated) <= tolerance * statement.scale
        return None if ok else (
            f"computed {shown}, more than ±{_fmt(tolerance * statement.scale)} from {_fmt(stated)}"
        )
    if tolerance is not None:
        raise ClaimError(
            f"{statement.text!r} is an equality or a comparison; a tolerance is only for 'about'"
        )
    if q == "=":
        slack = statement.half_ulp + abs(stated) * Fraction(1, 10**12)
        if abs(got - stated) <= slack:
            return None
        return f"computed {shown}, which does not round to the stated value"
    ok = {">": got > stated, "<": got < stated, ">=": got >= stated, "<=": got <= stated}[q]
    return None if ok else f"computed {shown}, which is not {q} {_fmt(stated)}"


# ---------------------------------------------------------------------------------------
# Claims as written on a page
# ---------------------------------------------------------------------------------------

_ROLE_BODY = re.compile(r"^(?P<text>[^<]*?)\s*<(?P<expr>.*)>\s*$", re.DOTALL)


def split_claim(raw: str) -> tuple[str, str, Fraction | None]:
    """``"about 30% <frac ± 5>"`` -> (stated text, expression, tolerance or None)."""
    m = _ROLE_BODY.match(raw.strip())
    if not m or not m["text"].strip() or not m["expr"].strip():
        raise ClaimError(f"a claim is written 'stated text <expression>', got {raw!r}")
    expr, _, tol = m["expr"].partition("±")
    tolerance = None
    if tol.strip():
        try:
            tolerance = Fraction(tol.strip())
        except ValueError:
            raise ClaimError(f"tolerance {tol.strip()!r} in {raw!r} is not a number") from None
    return m["text"].strip(), " ".join(expr.split()), tolerance


@dataclass(frozen=True)
class Claim:
    """A claim found on a page: offsets into the page text, its line, and its parts."""

    start: int
    end: int
    line: int
    raw: str
    text: str
    expr: str
    tolerance: Fraction | None
    in_math: bool = False
    #: why the claim cannot be read, if it cannot
    error: str | None = None

    def verify(self, namespace: dict) -> tuple[object, str | None]:
        """Evaluate the expression in ``namespace``; return (value, failure message or None).

        Raises ClaimError for a claim that cannot be read, and whatever the expression raises.
        """
        if self.error:
            raise ClaimError(self.error)
        statement = parse_statement(self.text)
        value = eval(self.expr, namespace)  # noqa: S307 - the page's own expression
        return value, check(statement, value, self.tolerance)

    def failure(self, path: str, value: object, reason: str) -> str:
        return (
            f"{path}:{self.line}: stated {self.text!r}, computed {describe(value)} "
            f"from `{self.expr}`: {reason}"
        )


@dataclass(frozen=True)
class Code:
    """A block of Python the page runs (a code cell, a python fence, an invisible block)."""

    start: int
    end: int
    line: int
    source: str


@dataclass(frozen=True)
class Unchecked:
    """A number in prose that is neither a claim nor marked as not a claim."""

    start: int
    end: int
    line: int
    token: str
    context: str

    def message(self, path: str) -> str:
        return (
            f"{path}:{self.line}: unchecked number {self.token!r} in: {self.context.strip()!r}. "
            "Make it a claim ({claim}`text <expr>`), or if it is a name or a citation mark it "
            "{nonclaim}`text`"
        )


@dataclass
class Page:
    """What :func:`scan` finds on a page, each list in document order."""

    claims: list[Claim] = field(default_factory=list)
    code: list[Code] = field(default_factory=list)
    unchecked: list[Unchecked] = field(default_factory=list)

    def items(self) -> list[Claim | Code]:
        """Claims and code merged in document order: the order they run in."""
        return sorted([*self.claims, *self.code], key=lambda item: item.start)


# ---------------------------------------------------------------------------------------
# Scanning a MyST page
# ---------------------------------------------------------------------------------------

#: Directives whose body is code or data, not prose.
LITERAL_DIRECTIVES = {
    "code-cell", "code-block", "code", "sourcecode", "raw", "eval-rst", "mermaid", "toctree",
    "literalinclude", "include", "glossary",
}
#: Directives whose argument is prose (a title); other directives' arguments are markup.
PROSE_ARGUMENT_DIRECTIVES = {
    "dropdown", "card", "grid-item-card", "tab-item", "admonition", "topic", "sidebar",
    "rubric", "tip", "note", "warning", "important", "hint", "attention", "caution", "seealso",
}
PYTHON_LANGUAGES = {"python", "ipython3"}

#: References to a place in a source: "Table 2", "eq. 1", "Section 5".
REFERENCE_WORDS = {
    "table", "figure", "fig.", "eq.", "eqs.", "equation", "section", "sections", "§",
    "appendix", "chapter", "algorithm", "page", "p.", "pp.", "line", "step",
}
#: Names that start with a digit.
DIGIT_NAMES = {"1F1B", "2D", "3D"}
_BIT_FORMAT = re.compile(r"^(?:8|16|32|64)-bit$")
_YEAR = re.compile(r"^(?:19|20)\d\d[a-z]?$")


def _cites(previous: str) -> bool:
    """Is ``previous`` the author part of a citation year: "et al.", "Ba", "(Kingma & Ba"?"""
    word = previous.lstrip("([")
    return word in ("al.", "al.,") or (word[:1].isupper() and word.isalpha())

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,}|:{3,})[ \t]*(?P<info>.*?)\s*$")
_DIRECTIVE = re.compile(r"^\{(?P<name>[\w:-]+)\}\s*(?P<arg>.*)$")
_OPTION = re.compile(r"^[ \t]*:[\w-]+:")
_INLINE = re.compile(
    r"(?:\{(?P<role>[\w:-]+)\})?(?<!`)(?P<ticks>`+)(?!`)(?P<body>.+?)(?<!`)(?P=ticks)(?!`)", re.DOTALL
)
_DISPLAY_MATH_INLINE = re.compile(r"\$\$(?P<body>.+?)\$\$", re.DOTALL)
_INLINE_MATH = re.compile(r"(?<![\\$\w])\$(?=\S)(?P<body>[^$\n]+?)(?<=\S)\$(?![\w$])")
_MASKED = [
    re.compile(r"<!--.*?-->", re.DOTALL),
    re.compile(r"\]\([^)\s]*\)"),  # link targets
    re.compile(r"<https?://[^>]*>|https?://\S+"),
    re.compile(r"\[\^[^\]]+\]"),  # footnote references
    re.compile(r"</?[A-Za-z][^>\n]*>"),  # HTML tags
    re.compile(r"^[ \t]*(?:[-*+][ \t]+)?\d+[.)][ \t]", re.MULTILINE),  # ordered-list markers
    re.compile(r"^[ \t]*\[\^[^\]]+\]:", re.MULTILINE),  # footnote definitions
]
_MATH_CLAIM = re.compile(r"\\(?P<cmd>claim|nonclaim)\s*\{")
_MATH_NUMBER = re.compile(r"(?<![\w.\\])\d+(?:\.\d+)?")


def _balanced(text: str, open_at: int) -> int:
    """Index just past the brace group that opens at ``open_at``."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ClaimError("unbalanced braces in a \\claim")


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.page = Page()
        self.prose = [" "] * len(text)  # characters of prose, the rest blanked
        self.math: list[tuple[int, int]] = []

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset)

    def keep_prose(self, start: int, end: int) -> None:
        self.prose[start:end] = self.text[start:end]

    # -- block structure ------------------------------------------------------------
    def blocks(self) -> None:
        lines = self.text.splitlines(keepends=True)
        offsets = self.line_starts[: len(lines)]
        i = 0
        if lines and lines[0].strip() == "---":  # front matter
            for j in range(1, len(lines)):
                if lines[j].strip() == "---":
                    i = j + 1
                    break
        stack: list[tuple[str, int, str]] = []  # (fence char, length, kind)
        code_start: tuple[int, str] | None = None  # (offset of first body line, language)
        math_start: int | None = None
        while i < len(lines):
            line, off = lines[i], offsets[i]
            fence = _FENCE.match(line)
            top = stack[-1] if stack else None
            if top and top[2] in ("code", "literal", "math"):
                if fence and fence["fence"][0] == top[0] and len(fence["fence"]) >= top[1] and not fence["info"]:
                    stack.pop()
                    if top[2] == "code" and code_start:
                        self.add_code(code_start[0], off)
                    if top[2] == "math" and math_start is not None:
                        self.math.append((math_start, off))
                    code_start = math_start = None
                i += 1
                continue
            if fence and top and not fence["info"] and fence["fence"][0] == top[0] and len(fence["fence"]) >= top[1]:
                stack.pop()  # a container closes
                i += 1
                continue
            if fence:
                kind, body_start, i = self.open_fence(fence, lines, offsets, i)
                stack.append((fence["fence"][0], len(fence["fence"]), kind))
                if kind == "code":
                    code_start = (body_start, "python")
                elif kind == "math":
                    math_start = body_start
                continue
            stripped = line.strip()
            if stripped.startswith("%"):
                i = self.percent_comment(lines, offsets, i)
                continue
            if stripped.startswith("$$"):
                i = self.display_math(lines, offsets, i)
                continue
            if re.match(r"^\([\w.:-]+\)=\s*$", stripped) or _OPTION.match(line) and self.after_opening(lines, i):
                i += 1
                continue
            self.keep_prose(off, off + len(line))
            i += 1

    def after_opening(self, lines: list[str], i: int) -> bool:
        """Is line ``i`` in the option block straight after a directive's opening line?"""
        j = i - 1
        while j >= 0 and _OPTION.match(lines[j]):
            j -= 1
        return j >= 0 and bool(_FENCE.match(lines[j])) and "{" in lines[j]

    def open_fence(self, fence, lines, offsets, i) -> tuple[str, int, int]:
        info = fence["info"]
        off = offsets[i]
        directive = _DIRECTIVE.match(info)
        j = i + 1
        if directive:
            name, arg = directive["name"], directive["arg"]
            if name in ("code-cell", "code-block", "code", "sourcecode") and arg.split()[:1] and arg.split()[0] in PYTHON_LANGUAGES:
                kind = "code"
            elif name == "math":
                kind = "math"
            elif name in LITERAL_DIRECTIVES:
                kind = "literal"
            else:
                kind = "container"
                if arg and name in PROSE_ARGUMENT_DIRECTIVES:
                    arg_start = off + lines[i].index(arg)
                    self.keep_prose(arg_start, arg_start + len(arg))
            # options (:key: value) and a YAML block (--- ... ---) are markup
            while j < len(lines) and _OPTION.match(lines[j]):
                j += 1
            if j < len(lines) and lines[j].strip() == "---":
                j += 1
                while j < len(lines) and lines[j].strip() != "---":
                    j += 1
                j += 1
        else:
            language = info.split()[0] if info else ""
            kind = "code" if language in PYTHON_LANGUAGES else "literal"
        body_start = offsets[j] if j < len(offsets) else len(self.text)
        return kind, body_start, j

    def percent_comment(self, lines, offsets, i) -> int:
        """Skip a ``%`` comment; collect an ``invisible-code-block: python`` as code."""
        m = re.match(r"^\s*%\s*invisible-code-block:\s*(\S+)\s*$", lines[i])
        j = i + 1
        if not m:
            return j
        body: list[str] = []
        while j < len(lines) and lines[j].lstrip().startswith("%"):
            content = lines[j].lstrip()[1:]
            body.append(content[1:] if content.startswith(" ") else content)
            j += 1
        if m[1] in PYTHON_LANGUAGES:
            start = offsets[i + 1] if i + 1 < len(offsets) else len(self.text)
            end = offsets[j] if j < len(offsets) else len(self.text)
            self.page.code.append(Code(start, end, self.line_of(start), "".join(body)))
        return j

    def display_math(self, lines, offsets, i) -> int:
        start = offsets[i]
        if lines[i].strip() != "$$" and lines[i].strip().endswith("$$") and len(lines[i].strip()) > 4:
            self.math.append((start, start + len(lines[i])))
            return i + 1
        j = i + 1
        while j < len(lines) and "$$" not in lines[j]:
            j += 1
        end = offsets[j] + len(lines[j]) if j < len(lines) else len(self.text)
        self.math.append((start, end))
        return j + 1

    def add_code(self, start: int, end: int) -> None:
        self.page.code.append(Code(start, end, self.line_of(start), self.text[start:end]))

    # -- inline structure -----------------------------------------------------------
    def inline(self) -> None:
        prose = "".join(self.prose)
        blank = list(prose)

        def mask(a: int, b: int) -> None:
            blank[a:b] = " " * (b - a)

        for m in _INLINE.finditer(prose):
            role = m["role"]
            if role == "claim":
                self.add_claim(m.start(), m.end(), m["body"], in_math=False)
            elif role == "math":
                self.math.append((m.start("body"), m.end("body")))
            mask(m.start(), m.end())
        text = "".join(blank)
        for pattern in (_DISPLAY_MATH_INLINE, _INLINE_MATH):
            for m in pattern.finditer(text):
                self.math.append((m.start("body"), m.end("body")))
                mask(m.start(), m.end())
            text = "".join(blank)
        for pattern in _MASKED:
            for m in pattern.finditer(text):
                mask(m.start(), m.end())
        self.lint_prose("".join(blank))

    def add_claim(self, start: int, end: int, raw: str, in_math: bool) -> None:
        try:
            text, expr, tolerance = split_claim(raw)
            error = None
        except ClaimError as exc:
            text, expr, tolerance, error = raw, "", None, str(exc)
        self.page.claims.append(
            Claim(start, end, self.line_of(start), raw, text, expr, tolerance, in_math, error)
        )

    def lint_prose(self, text: str) -> None:
        tokens = list(re.finditer(r"\S+", text))
        for k, m in enumerate(tokens):
            raw = m.group()
            if not any(c.isdigit() for c in raw):
                continue
            token = raw.strip("([{\"'“‘*_").rstrip(")]}\"'”’.,;:!?*_")
            previous = tokens[k - 1].group().strip("([{\"'“‘*_").lower() if k else ""
            if (
                not token
                or not token[0].isdigit()  # fp16, H100, ZeRO-3, Llama-2-7B, §5
                or token in DIGIT_NAMES
                or _BIT_FORMAT.match(token)
                or previous in REFERENCE_WORDS
                or (_YEAR.match(token) and (raw.startswith("(") or _cites(tokens[k - 1].group() if k else "")))
            ):
                continue
            self.unchecked(m.start(), m.end(), raw)

    def unchecked(self, start: int, end: int, token: str) -> None:
        line = self.line_of(start)
        a = self.line_starts[line - 1]
        b = self.text.find("\n", a)
        context = self.text[a : b if b >= 0 else len(self.text)]
        self.page.unchecked.append(Unchecked(start, end, line, token, context))

    def math_regions(self) -> None:
        for start, end in self.math:
            body = self.text[start:end]
            blank = list(body)
            pos = 0
            while (m := _MATH_CLAIM.search(body, pos)) is not None:
                first_end = _balanced(body, m.end() - 1)
                end_at = first_end
                if m["cmd"] == "claim":
                    brace = body.find("{", first_end)
                    end_at = _balanced(body, brace)
                    raw = f"{body[m.end():first_end - 1]} <{body[brace + 1:end_at - 1]}>"
                    self.add_claim(start + m.start(), start + end_at, raw, in_math=True)
                blank[m.start():end_at] = " " * (end_at - m.start())
                pos = end_at
            masked = re.sub(r"\\[A-Za-z]+", lambda x: " " * len(x.group()), "".join(blank))
            masked = re.sub(r"[\^_]\s*(\{[^{}]*\}|\d)", lambda x: " " * len(x.group()), masked)
            for n in _MATH_NUMBER.finditer(masked):
                self.unchecked(start + n.start(), start + n.end(), n.group())


def scan(text: str) -> Page:
    """Find the claims, the Python code and the unchecked numbers of a MyST page."""
    scanner = _Scanner(text)
    scanner.blocks()
    scanner.inline()
    scanner.math_regions()
    page = scanner.page
    page.claims.sort(key=lambda c: c.start)
    page.code.sort(key=lambda c: c.start)
    page.unchecked.sort(key=lambda u: u.start)
    return page


# ---------------------------------------------------------------------------------------
# Running a page
# ---------------------------------------------------------------------------------------

def run_code(source: str, namespace: dict, filename: str) -> None:
    """Run one block of a page's Python (a doctest block runs example by example)."""
    if source.lstrip().startswith(">>>"):
        for example in doctest.DocTestParser().get_examples(source):
            exec(compile(example.source, filename, "single"), namespace)  # noqa: S102
    else:
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102


def evaluate(page: Page, namespace: dict, filename: str = "<page>") -> Iterator[
    tuple[Claim, object, str | None]
]:
    """Run the page's code and check its claims in document order, as sybil does.

    Yields (claim, computed value, failure or None); a claim whose expression raises yields
    the exception's text as its failure. An exception in the page's code propagates.
    """
    for item in page.items():
        if isinstance(item, Code):
            run_code(item.source, namespace, f"{filename}:{item.line}")
            continue
        try:
            value, failure = item.verify(namespace)
        except Exception as exc:  # noqa: BLE001 - reported as the claim's failure
            value, failure = None, f"{type(exc).__name__}: {exc}"
        yield item, value, failure
