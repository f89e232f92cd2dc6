"""The claim language: what a stated number means, and whether a computed value bears it out.

A claim states ``[qualifier] number [unit]``: ``112 GB``, ``over 100 GB``, ``7B``, ``30%``,
``2^-14``, or a number in words: ``two``, ``Sixteen``, ``twice``, ``half`` (:data:`NUMBER_WORDS`). :func:`parse_statement` reads it exactly (as a :class:`~fractions.Fraction`) and
:func:`check` compares a computed value with it:

- an equality holds when the value rounds to the stated number at its written precision, in
  the stated unit (``112 GB`` accepts 112.4e9 bytes and refuses 112.6e9);
- ``over``/``more than``/``above``, ``under``/``less than``/``below``, ``at least`` and
  ``at most`` compare exactly, with no rounding;
- ``about`` needs a tolerance in the stated unit, and only ``about`` takes one.

Byte units (``GB`` = 10^9 bytes, ``GiB`` = 2^30 bytes, ...) need a value that says it is an
amount of bytes: any object with a ``__claim_bytes__()`` method returning the exact count (an
int or a Fraction). A plain number never passes for bytes, and bytes never pass for a plain
number, so a claim cannot silently compare GB with a bare count.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from fractions import Fraction

#: Bytes in one of each byte unit: decimal prefixes (SI) and binary prefixes (IEC 80000-13).
BYTE_UNITS: dict[str, int] = {
    "bytes": 1, "byte": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50,
}

#: Other units a claim can state, with the factor that turns one of them into base units.
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

#: Count suffixes written straight after the number ("7B") or as a word ("7 billion").
MULTIPLIERS: dict[str, int] = {
    "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12,
    "thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12,
}

#: Numbers a claim may state in words (any case), each exact: "two <len(xs)>", "twice <ratio>".
NUMBER_WORDS: dict[str, Fraction] = {
    **{w: Fraction(i) for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen twenty".split())},
    **{w: Fraction(10 * i) for i, w in enumerate(
        "thirty forty fifty sixty seventy eighty ninety".split(), start=3)},
    "hundred": Fraction(100), "dozen": Fraction(12),
    "once": Fraction(1), "twice": Fraction(2), "thrice": Fraction(3), "half": Fraction(1, 2),
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
_WORDS = re.compile(
    r"^(?:(?P<qual>" + "|".join(sorted(QUALIFIERS, key=len, reverse=True)) + r")\s+)?"
    r"(?P<number>" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + r")\b"
    r"\s*(?P<unit>[^\s\d].*?)?\s*$",
    re.IGNORECASE,
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


def latex_to_text(text: str) -> str:
    """The plain text of a claim written in math: ``112\\,\\text{GB}`` -> ``112 GB``."""
    text = re.sub(r"\\(?:text|mathrm|textrm|mbox)\{([^{}]*)\}", r"\1", text)
    text = text.replace("{,}", ",").replace("\\%", "%").replace("\\times", "×")
    text = re.sub(r"\\[,;:! ]|~", " ", text)
    return " ".join(text.split())


def parse_statement(text: str) -> Statement:
    """Read a claim's stated text, such as ``"over 100 GB"``, ``"7B"`` or ``"2^-14"``.

    >>> s = parse_statement("104.3 GiB")
    >>> s.value, s.unit, s.half_ulp
    (Fraction(1043, 10), 'GiB', Fraction(1, 20))
    """
    plain = latex_to_text(text) if "\\" in text or "{" in text else " ".join(text.split())
    words = _WORDS.match(plain)
    if words:
        return _word_statement(text, words)
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


def _word_statement(text: str, m: re.Match) -> Statement:
    """A number stated in words: exact, so an equality allows no rounding."""
    unit = m["unit"] or ""
    if unit not in PLAIN_UNITS and unit not in BYTE_UNITS:
        known = ", ".join(u for u in [*BYTE_UNITS, *PLAIN_UNITS] if u)
        raise ClaimError(f"unknown unit {unit!r} in {text!r}; accepted: {known}, or none")
    qualifier = QUALIFIERS.get((m["qual"] or "").lower(), "=")
    return Statement(text, qualifier, NUMBER_WORDS[m["number"].lower()], unit, Fraction(0))


# ---------------------------------------------------------------------------------------
# Computed values
# ---------------------------------------------------------------------------------------

def bytes_of(value: object) -> Fraction | None:
    """The exact byte count of a value that is an amount of bytes, else None."""
    method = getattr(type(value), "__claim_bytes__", None)
    return None if method is None else Fraction(method(value))


def as_number(value: object) -> Fraction:
    """A plain computed number as an exact Fraction; a ClaimError for anything else."""
    is_number = isinstance(value, numbers.Real) or hasattr(value, "__float__")
    if isinstance(value, bool) or not is_number or bytes_of(value) is not None:
        raise ClaimError(f"the expression gave {value!r} ({type(value).__name__}), not a number")
    if isinstance(value, (int, Fraction)):
        return Fraction(value)
    try:
        f = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # an array of many values has __float__ but no one value
        raise ClaimError(f"the expression gave {value!r} ({type(value).__name__}), not a number") from None
    if not math.isfinite(f):
        raise ClaimError(f"the expression gave {f}, not a finite number")
    return Fraction(f)


def fmt(x: Fraction) -> str:
    """An exact number for a reader: whole numbers in full with separators, others to 6 figures."""
    if x.denominator == 1:
        return f"{x.numerator:,}"
    return f"{float(x):,.6g}" if abs(x) >= 1e6 or abs(x) < 1e-3 else f"{float(x):,.6f}".rstrip("0")


def describe(value: object) -> str:
    """The exact computed value, spelled out for the reader and for failure messages.

    >>> class B:
    ...     def __claim_bytes__(self): return 112 * 10**9
    >>> describe(B())
    '112,000,000,000 bytes = 112 GB = 104.3081 GiB'
    """
    n = bytes_of(value)
    if n is not None:
        return f"{fmt(n)} bytes = {_short(n / 10**9)} GB = {_short(n / 2**30)} GiB"
    try:
        return fmt(as_number(value))
    except ClaimError:
        return repr(value)


def _short(x: Fraction) -> str:
    """A byte amount in GB or GiB: exact when it is whole, else to four decimals."""
    return f"{x.numerator:,}" if x.denominator == 1 else f"{float(x):,.4f}"


def in_unit(statement: Statement, computed: object) -> Fraction:
    """The computed value expressed in the statement's unit."""
    n = bytes_of(computed)
    if statement.is_bytes:
        if n is None:
            raise ClaimError(
                f"{statement.text!r} states bytes but the expression gave {computed!r}; "
                "return an amount of bytes (an object with __claim_bytes__) so the unit is explicit"
            )
        return n / BYTE_UNITS[statement.unit]
    if n is not None:
        raise ClaimError(
            f"{statement.text!r} states no byte unit but the expression gave {computed}; "
            "state the unit (GB, GiB, bytes, ...)"
        )
    return as_number(computed) / PLAIN_UNITS[statement.unit]


def check(statement: Statement, computed: object, tolerance: Fraction | None = None) -> str | None:
    """None when the statement holds for ``computed``, else why not, in one sentence.

    >>> check(parse_statement("over 100"), 112) is None
    True
    >>> check(parse_statement("113"), 112)
    'computed 112, which does not round to the stated value'
    """
    got = in_unit(statement, computed)
    stated = statement.value
    unit = f" {statement.unit}" if statement.unit and statement.unit != "%" else statement.unit
    shown = f"{fmt(got)}{unit}"
    q = statement.qualifier
    if q == "~":
        if tolerance is None:
            raise ClaimError(
                f"{statement.text!r} says 'about' but gives no tolerance; write <expr ± t> "
                "with t in the stated unit"
            )
        ok = abs(got - stated) <= tolerance * statement.scale
        return None if ok else (
            f"computed {shown}, more than ±{fmt(tolerance * statement.scale)} from {fmt(stated)}"
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
    return None if ok else f"computed {shown}, which is not {q} {fmt(stated)}"


_ROLE_BODY = re.compile(r"^(?P<text>[^<]*?)\s*<(?P<expr>.*)>\s*$", re.DOTALL)


def split_claim(raw: str) -> tuple[str, str, Fraction | None]:
    """``"about 30% <frac ± 5>"`` -> (stated text, expression, tolerance or None).

    >>> split_claim("about 30% <frac ± 5>")
    ('about 30%', 'frac', Fraction(5, 1))
    """
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
