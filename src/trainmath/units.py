"""Byte quantities that know GB (10^9 bytes) from GiB (2^30 bytes), and input checks.

Decimal prefixes follow SI (BIPM, *The International System of Units*, 9th ed., Table 7);
binary prefixes follow IEC 80000-13:2008. Mixing the two is a 7.4% error at the GB/GiB scale,
and GPU memory mixes them: the "80GB" on an H100's box is 80 GiB of HBM, and ``nvidia-smi``
prints MiB (:class:`trainmath.hardware.GpuMemory`).
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from fractions import Fraction

#: Bytes in one of each unit. Decimal units are powers of 1000, binary ones of 1024.
UNITS: dict[str, int] = {
    "bytes": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "PB": 10**15,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
    "PiB": 2**50,
}

#: Bytes in a gigabyte, 10^9 (SI prefix giga).
GB = UNITS["GB"]
#: Bytes in a gibibyte, 2^30 (IEC 80000-13 prefix gibi).
GiB = UNITS["GiB"]
#: Bytes in a mebibyte, 2^20 (IEC 80000-13 prefix mebi): the unit ``nvidia-smi`` prints.
MiB = UNITS["MiB"]


def _accepted(names) -> str:
    return ", ".join(names)


def check_unit(unit: str) -> int:
    """Bytes in one ``unit``; a ValueError names an unknown unit and the accepted ones."""
    try:
        return UNITS[unit]
    except (KeyError, TypeError):
        raise ValueError(f"unknown byte unit {unit!r}; accepted: {_accepted(UNITS)}") from None


def positive_int(name: str, value: object) -> int:
    """``value`` as an int if it is a whole number > 0, else a ValueError that names it.

    Floats such as ``7e9`` are accepted when they are whole; ``7.5`` and ``True`` are not.
    """
    if type(value) is int and value > 0:  # the common case, first (the planner asks often)
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    if isinstance(value, Fraction) and value.denominator != 1:
        raise ValueError(f"{name} must be a positive whole number, got {value}")
    as_int = int(value)
    if as_int <= 0:
        raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    return as_int


def closest(value: object, accepted) -> str | None:
    """The name of ``accepted`` a mistyped ``value`` most likely means: the same name in another
    case, else the nearest by ``difflib.get_close_matches`` (similarity 0.85 or more), else
    None.

    >>> closest("llama-3-8B", ["llama-3-8b", "llama-3-70b"]), closest("gpt", ["llama-3-8b"])
    ('llama-3-8b', None)
    """
    import difflib  # only when a name is refused: the command starts without it

    names = [str(a) for a in accepted]
    text = str(value)
    for n in names:
        if n.lower() == text.lower():
            return n
    near = difflib.get_close_matches(text.lower(), [n.lower() for n in names], n=1, cutoff=0.85)
    return next((n for n in names if near and n.lower() == near[0]), None)


def unknown(name: str, value: object, accepted) -> str:
    """The refusal of ``value`` as a ``name``: "unknown model preset 'llama-3-8B'; did you mean
    llama-3-8b? accepted: ..." (the guess only when :func:`closest` has one)."""
    guess = closest(value, accepted)
    hint = f"; did you mean {guess}?" if guess is not None else ";"
    return f"unknown {name} {value!r}{hint} accepted: {_accepted(str(a) for a in accepted)}"


def choice(name: str, value: object, accepted) -> str:
    """``value`` if it is one of ``accepted``, else a ValueError listing what is accepted (and
    the name it most likely means, :func:`unknown`)."""
    if value not in accepted:
        raise ValueError(unknown(name, value, accepted))
    return value  # type: ignore[return-value]


@dataclass(frozen=True, order=True)
class Bytes:
    """An amount of memory. ``n`` is the exact count of bytes (an int or a Fraction).

    >>> Bytes(112 * 10**9).format("GB")
    '112 GB'
    >>> Bytes(112 * 10**9).format("GiB", 1)
    '104.3 GiB'
    """

    n: int | Fraction

    def __post_init__(self) -> None:
        n = self.n
        if type(n) is int:  # the common case, checked first: planners make millions
            if n < 0:
                raise ValueError(f"Bytes cannot be negative, got {n}")
            return
        if isinstance(n, bool) or not isinstance(n, (int, Fraction)):
            raise ValueError(f"Bytes needs an int or Fraction count of bytes, got {n!r}")
        if n < 0:
            raise ValueError(f"Bytes cannot be negative, got {n}")
        if isinstance(n, Fraction) and n.denominator == 1:
            object.__setattr__(self, "n", int(n))

    # -- conversion -----------------------------------------------------------------
    def to(self, unit: str) -> float:
        """The amount in ``unit`` (``"GB"``, ``"GiB"``, ...), as a float."""
        return float(Fraction(self.n) / check_unit(unit))

    @property
    def gb(self) -> float:
        """Gigabytes, 10^9 bytes each."""
        return self.to("GB")

    @property
    def gib(self) -> float:
        """Gibibytes, 2^30 bytes each."""
        return self.to("GiB")

    def format(self, unit: str = "GB", digits: int | None = None) -> str:
        """The amount as prose writes it: ``"112 GB"``, ``"104.3 GiB"``.

        With ``digits=None`` a whole amount prints without decimals and any other with one.
        """
        value = self.to(unit)
        if digits is None:
            digits = 0 if Fraction(self.n) % check_unit(unit) == 0 else 1
        if digits < 0:
            raise ValueError(f"digits must be >= 0, got {digits}")
        return f"{value:,.{digits}f} {unit}"

    def __str__(self) -> str:
        return self.format("GB")

    def __claim_bytes__(self) -> int | Fraction:
        """The exact count: a checked claim states this in a byte unit, never as a bare number."""
        return self.n

    # -- arithmetic -----------------------------------------------------------------
    def __add__(self, other: Bytes) -> Bytes:
        if type(other) is Bytes or isinstance(other, Bytes):
            return Bytes(self.n + other.n)
        if other == 0:  # lets sum() start from 0
            return self
        return NotImplemented

    __radd__ = __add__

    def __sub__(self, other: Bytes) -> Bytes:
        if isinstance(other, Bytes):
            return Bytes(self.n - other.n)
        return NotImplemented

    def __mul__(self, k: int | Fraction) -> Bytes:
        if isinstance(k, bool) or not isinstance(k, (int, Fraction)):
            return NotImplemented
        return Bytes(self.n * k)

    __rmul__ = __mul__

    def __truediv__(self, other: Bytes | int | Fraction):
        """``Bytes / Bytes`` is a plain ratio; ``Bytes / k`` is exact (a Fraction if needed)."""
        if isinstance(other, Bytes):
            return Fraction(self.n) / other.n
        if isinstance(other, bool) or not isinstance(other, (int, Fraction)):
            return NotImplemented
        if other == 0:
            raise ZeroDivisionError("Bytes divided by zero")
        return Bytes(Fraction(self.n) / other)


_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]+)\s*$")


def parse_bytes(text: str) -> Bytes:
    """``"80GB"``, ``"80 GB"``, ``"141 GiB"`` or ``"1e9 bytes"`` as an exact Bytes.

    >>> parse_bytes("80GB").n
    80000000000
    """
    match = _QUANTITY.match(text) if isinstance(text, str) else None
    if not match:
        raise ValueError(
            f"cannot read {text!r} as an amount of memory; write a number and a unit "
            f"such as '80GB' or '141 GiB' (units: {_accepted(UNITS)})"
        )
    number, unit = match.groups()
    scale = check_unit(unit)
    amount = Fraction(number) * scale
    if amount <= 0:
        raise ValueError(f"an amount of memory must be positive, got {text!r}")
    return Bytes(amount if amount.denominator != 1 else int(amount))
