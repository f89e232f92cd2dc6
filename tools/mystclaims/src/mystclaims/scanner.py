"""Scanning a MyST page: its claims, its Python, and the numbers that are neither.

A page writes ``{claim}`112 GB <state.total>```: the stated text, then the Python expression
in angle brackets. Inside math the same is ``\\claim{112\\,\\text{GB}}{state.total}``.
:func:`scan` finds, in document order, every claim, every block of Python the page runs (code
cells, ``python`` fences, ``% invisible-code-block: python`` comments) and every number in the
prose that is neither a claim nor marked ``{nonclaim}`...``` (the lint). A claim that cannot be
read is still returned, with its place and an ``error``, so the caller can report it there.

The lint's rules are a :class:`Lint`: numbers in digits always; numbers in words
(:data:`NUMBER_WORDS`, with :data:`NOT_NUMBERS` for the phrases that are names); and, when a
site asks, citation years and links to sources typed in prose (a site with a bibliography cites
by key instead).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field, replace
from fractions import Fraction

from .language import ClaimError, parse_statement, split_claim

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
    #: the column (1-based) where the claim starts on its line
    column: int = 1

    @property
    def where(self) -> str:
        """``line:column``, for messages."""
        return f"{self.line}:{self.column}"


@dataclass(frozen=True)
class Code:
    """A block of Python the page runs (a code cell, a python fence, an invisible block)."""

    start: int
    end: int
    line: int
    source: str
    #: "cell" (a notebook code cell), "fence" (a python fence) or "invisible" (a hidden block)
    kind: str = "cell"


@dataclass(frozen=True)
class Unchecked:
    """Something in prose the lint reports: by ``kind``, a number in digits ("number") or in
    words ("word") that is neither a claim nor marked as not one, a citation year typed in
    prose ("year"), or a link to a source that the bibliography should hold ("link")."""

    start: int
    end: int
    line: int
    token: str
    context: str
    kind: str = "number"

    def message(self, path: str) -> str:
        where = f"{path}:{self.line}: "
        context = self.context.strip()
        if self.kind == "word":
            return (where + f"number in words {self.token!r} in: {context!r}. Make it a claim "
                    "(claims take number words: {claim}`two <expr>`), reword it, or if it is a "
                    "name mark it {nonclaim}`text`")
        if self.kind == "year":
            return (where + f"citation year {self.token!r} typed in: {context!r}. Cite the work "
                    "by key ({cite:t}`key` or {cite:p}`key`) so its year comes from the "
                    "bibliography")
        if self.kind == "link":
            return (where + f"link to a source {self.token!r} typed in: {context!r}. Put the "
                    "work in the bibliography and cite it by key ({cite:t}`key`)")
        return (where + f"unchecked number {self.token!r} in: {context!r}. Make it a claim "
                "({claim}`text <expr>`), or if it is a name or a citation mark it {nonclaim}`text`")


#: Words the lint reads as numbers (lower case): counts, multiples and fractions. Not "one" or
#: "zero": in prose they are far more often an article, a pronoun or a concept ("one of the
#: GPUs", "rounds to zero") than a count; a count of one that matters is a claim all the same.
#: Ordinals ("first", "second") are positions, not numbers, and are not listed.
NUMBER_WORDS = frozenset("""
    two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
    sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety
    hundred hundreds thousand thousands million millions billion billions trillion trillions
    dozen dozens twice thrice half halves halve halved halving double doubles doubled doubling
    triple triples tripled quadruple quarter quarters
""".split())
#: Phrases with a number word that are names, not numbers (lower case, words joined by one
#: space, or one hyphenated word): the formats "half precision" and "double precision",
#: "double rounding" (the name of rounding twice) and "power of two" (two is the radix).
NOT_NUMBERS = frozenset({
    "half precision", "half-precision", "double precision", "double-precision",
    "double rounding", "double-rounding", "power of two", "power-of-two", "powers of two",
    "powers-of-two",
})


@dataclass(frozen=True)
class Lint:
    """The lint's rules for one site (see the module docstring).

    ``names``: tokens that start with a digit but are names ("1F1B"). ``number_words`` and
    ``not_numbers``: the words read as numbers and the phrases that are names (empty
    ``number_words`` turns the word rule off). ``citation_years``: True lets a year in a
    citation pass ("Korthikanti et al. 2022", "(2022)"); False reports it, for a site whose
    pages cite by key. ``source_links``: regular expressions of link targets that must be cited
    from the bibliography instead (``r"arxiv[.]org"``).
    """

    names: frozenset[str] = frozenset()
    number_words: frozenset[str] = NUMBER_WORDS
    not_numbers: frozenset[str] = NOT_NUMBERS
    citation_years: bool = True
    source_links: tuple[str, ...] = ()


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
#: Names that start with a digit and are never numbers ("3D"); a site adds its own to
#: :func:`scan`'s ``names``.
DIGIT_NAMES = frozenset({"2D", "3D"})
_BIT_FORMAT = re.compile(r"^(?:8|16|32|64)-bit$")
_YEAR = re.compile(r"^(?:19|20)\d\d[a-z]?$")


def _word(raw: str) -> str:
    """A prose token as a lower-case word, without the punctuation around it."""
    return raw.strip("([{\"'“‘*_").rstrip(")]}\"'”’.,;:!?*_").lower()


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
_LINK_TARGET = re.compile(r"\]\((?P<md>[^)\s]*)\)|<(?P<auto>https?://[^>\s]*)>|(?P<bare>https?://[^\s)>\]]+)")
_SIGNS = "±−-~≈+<>≤≥"  # a sign before a number is part of it: "±448" is a number
_MATH_CLAIM = re.compile(r"\\(?P<cmd>claim|nonclaim)\s*\{")
_MATH_NUMBER = re.compile(r"(?<![\w.\\])\d+(?:\.\d+)?")


def _balanced(text: str, open_at: int) -> int | None:
    """Index just past the brace group that opens at ``open_at``; None if it never closes."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


class _Scanner:
    def __init__(self, text: str, lint: Lint) -> None:
        self.text = text
        self.lint = lint
        self.names = DIGIT_NAMES | lint.names
        self.links = [re.compile(pattern) for pattern in lint.source_links]
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
        code_start: tuple[int, str] | None = None  # (offset of first body line, code kind)
        math_start: int | None = None
        while i < len(lines):
            line, off = lines[i], offsets[i]
            fence = _FENCE.match(line)
            top = stack[-1] if stack else None
            if top and top[2] in ("cell", "fence", "literal", "math"):
                if fence and fence["fence"][0] == top[0] and len(fence["fence"]) >= top[1] and not fence["info"]:
                    stack.pop()
                    if code_start:
                        self.add_code(code_start[0], off, code_start[1])
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
                if kind in ("cell", "fence"):
                    code_start = (body_start, kind)
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
            python = arg.split()[:1] and arg.split()[0] in PYTHON_LANGUAGES
            if name == "code-cell" and python:
                kind = "cell"
            elif name in ("code-block", "code", "sourcecode") and python:
                kind = "fence"
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
            kind = "fence" if language in PYTHON_LANGUAGES else "literal"
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
            self.page.code.append(Code(start, end, self.line_of(start), "".join(body), "invisible"))
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

    def add_code(self, start: int, end: int, kind: str) -> None:
        self.page.code.append(Code(start, end, self.line_of(start), self.text[start:end], kind))

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
        if self.links:
            self.lint_links(text)
        for pattern in _MASKED:
            for m in pattern.finditer(text):
                mask(m.start(), m.end())
        self.lint_prose("".join(blank))

    def add_claim(self, start: int, end: int, raw: str, in_math: bool,
                  error: str | None = None) -> None:
        text, expr, tolerance = raw, "", None
        if error is None:
            try:
                text, expr, tolerance = split_claim(raw)
                parse_statement(text)
            except ClaimError as exc:
                error = str(exc)
        line = self.line_of(start)
        column = start - self.line_starts[line - 1] + 1
        self.page.claims.append(
            Claim(start, end, line, raw, text, expr, tolerance, in_math, error, column)
        )

    def lint_links(self, text: str) -> None:
        """Report the links to sources that the site cites by key instead (``source_links``)."""
        for m in _LINK_TARGET.finditer(text):
            url = m["md"] or m["auto"] or m["bare"]
            if any(pattern.search(url) for pattern in self.links):
                group = next(g for g in ("md", "auto", "bare") if m[g])
                self.unchecked(m.start(group), m.end(group), url, "link")

    def lint_prose(self, text: str) -> None:
        tokens = list(re.finditer(r"\S+", text))
        for k, m in enumerate(tokens):
            raw = m.group()
            if not any(c.isdigit() for c in raw):
                self.lint_word(tokens, k)
                continue
            token = raw.strip("([{\"'“‘*_").rstrip(")]}\"'”’.,;:!?*_").lstrip(_SIGNS)
            previous = tokens[k - 1].group().strip("([{\"'“‘*_").lower() if k else ""
            if (
                not token
                or not token[0].isdigit()  # fp16, H100, ZeRO-3, Llama-2-7B, §5
                or token in self.names
                or _BIT_FORMAT.match(token)
                or previous in REFERENCE_WORDS
            ):
                continue
            if _YEAR.match(token) and (raw.startswith("(") or _cites(tokens[k - 1].group() if k else "")):
                if not self.lint.citation_years:
                    self.unchecked(m.start(), m.end(), raw, "year")
                continue
            self.unchecked(m.start(), m.end(), raw, "number")

    def lint_word(self, tokens: list[re.Match], k: int) -> None:
        """Report a number written as a word (``number_words``) unless it is part of a name."""
        words = self.lint.number_words
        if not words:
            return
        raw = tokens[k].group()
        token = _word(raw)
        if not any(part in words for part in token.split("-")):
            return
        if token in self.lint.not_numbers or self.in_phrase(tokens, k):
            return
        self.unchecked(tokens[k].start(), tokens[k].end(), raw, "word")

    def in_phrase(self, tokens: list[re.Match], k: int) -> bool:
        """Is token ``k`` part of one of the rules' ``not_numbers`` phrases?"""
        for phrase in self.lint.not_numbers:
            words = phrase.split()
            for offset in range(len(words)):
                first = k - offset
                window = tokens[max(first, 0):first + len(words)]
                if first >= 0 and [_word(w.group()) for w in window] == words:
                    return True
        return False

    def unchecked(self, start: int, end: int, token: str, kind: str = "number") -> None:
        line = self.line_of(start)
        a = self.line_starts[line - 1]
        b = self.text.find("\n", a)
        context = self.text[a : b if b >= 0 else len(self.text)]
        self.page.unchecked.append(Unchecked(start, end, line, token, context, kind))

    def math_regions(self) -> None:
        for start, end in self.math:
            body = self.text[start:end]
            blank = list(body)
            pos = 0
            while (m := _MATH_CLAIM.search(body, pos)) is not None:
                end_at = self.math_claim(body, start, m)
                blank[m.start():end_at] = " " * (end_at - m.start())
                pos = end_at
            masked = re.sub(r"\\[A-Za-z]+", lambda x: " " * len(x.group()), "".join(blank))
            masked = re.sub(r"[\^_]\s*(\{[^{}]*\}|\d)", lambda x: " " * len(x.group()), masked)
            for n in _MATH_NUMBER.finditer(masked):
                self.unchecked(start + n.start(), start + n.end(), n.group())

    def math_claim(self, body: str, start: int, m: re.Match) -> int:
        """Record the ``\\claim{shown}{expr}`` (or ``\\nonclaim{shown}``) at ``m``; return its end.

        A claim whose braces do not close, or that lacks its expression, is recorded with an
        error at its own line rather than aborting the page.
        """
        found = math_claim_at(body, m)
        if found.cmd == "claim" or found.error:
            raw = found.raw if found.error else f"{found.shown} <{found.expr}>"
            self.add_claim(start + found.start, start + found.end, raw, True, found.error)
        return found.end


@dataclass(frozen=True)
class MathClaim:
    """A ``\\claim{shown}{expr}`` or ``\\nonclaim{shown}`` in a formula, as offsets into it."""

    cmd: str
    start: int
    end: int
    shown: str
    expr: str | None
    raw: str
    error: str | None = None


def math_claim_at(body: str, m: re.Match) -> MathClaim:
    """Read the claim macro that :data:`_MATH_CLAIM` matched at ``m`` in ``body``.

    The one reader of claims in math: the scanner and the Sphinx extension both use it, so
    they agree on what a formula claims and on what is an error.
    """
    cmd = m["cmd"]
    first_end = _balanced(body, m.end() - 1)
    if first_end is None:
        return MathClaim(cmd, m.start(), len(body), "", None, body[m.start():].strip(),
                         f"the braces of \\{cmd}{{...}} do not close before the math ends")
    shown = body[m.end():first_end - 1]
    if cmd == "nonclaim":
        return MathClaim(cmd, m.start(), first_end, shown, None, body[m.start():first_end])
    after = re.match(r"\s*\{", body[first_end:])
    if after is None:
        return MathClaim(cmd, m.start(), first_end, shown, None, f"\\claim{{{shown}}}",
                         f"\\claim{{{shown}}} has no expression: write "
                         f"\\claim{{{shown}}}{{python expression}}")
    brace = first_end + after.end() - 1
    end_at = _balanced(body, brace)
    if end_at is None:
        return MathClaim(cmd, m.start(), len(body), shown, None, body[m.start():].strip(),
                         f"the expression of \\claim{{{shown}}} has no closing brace before "
                         "the math ends")
    return MathClaim(cmd, m.start(), end_at, shown, body[brace + 1:end_at - 1],
                     body[m.start():end_at])

def scan(text: str, names: frozenset[str] | set[str] = frozenset(),
         lint: Lint | None = None) -> Page:
    """Find the claims, the Python code and what the lint reports on a MyST page.

    ``lint`` holds the site's rules (:class:`Lint`; the defaults when None). ``names`` are
    tokens that start with a digit but are names, never numbers (``1F1B``), added to the
    rules' own.
    """
    lint = lint or Lint()
    if names:
        lint = replace(lint, names=lint.names | frozenset(names))
    scanner = _Scanner(text, lint)
    scanner.blocks()
    scanner.inline()
    scanner.math_regions()
    page = scanner.page
    page.claims.sort(key=lambda c: c.start)
    page.code.sort(key=lambda c: c.start)
    page.unchecked.sort(key=lambda u: u.start)
    return page
