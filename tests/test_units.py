from fractions import Fraction

import pytest

from trainmath.units import GB, Bytes, GiB, parse_bytes, positive_int


def test_gb_and_gib_are_exact():
    assert GB == 10**9
    assert GiB == 2**30
    assert Bytes(112 * GB).gib == pytest.approx(104.308128)


@pytest.mark.parametrize(
    ("n", "unit", "digits", "text"),
    [
        (112 * 10**9, "GB", None, "112 GB"),
        (112 * 10**9, "GiB", 1, "104.3 GiB"),
        (80 * 10**9, "GiB", 1, "74.5 GiB"),
        (956_301_312, "GB", None, "1.0 GB"),
        (956_301_312, "GB", 2, "0.96 GB"),
        (2**30, "GiB", None, "1 GiB"),
        (1234 * 10**9, "GB", None, "1,234 GB"),
    ],
)
def test_format(n, unit, digits, text):
    assert Bytes(n).format(unit, digits) == text


def test_arithmetic_stays_exact():
    assert Bytes(7) + Bytes(5) == Bytes(12)
    assert sum([Bytes(1), Bytes(2)]) == Bytes(3)
    assert Bytes(10) * 3 == Bytes(30) == 3 * Bytes(10)
    assert Bytes(10) / 4 == Bytes(Fraction(5, 2))
    assert Bytes(10) / Bytes(4) == Fraction(5, 2)
    assert Bytes(Fraction(8, 2)).n == 4 and isinstance(Bytes(Fraction(8, 2)).n, int)


@pytest.mark.parametrize(
    ("text", "n"),
    [("80GB", 80 * 10**9), ("80 GB", 80 * 10**9), ("141 GiB", 141 * 2**30), ("1e9 bytes", 10**9),
     ("0.5 KiB", 512)],
)
def test_parse_bytes(text, n):
    assert parse_bytes(text) == Bytes(n)


@pytest.mark.parametrize(
    ("text", "message"),
    [("80", "cannot read '80'"), ("80 GiGs", "unknown byte unit 'GiGs'"), ("0GB", "must be positive"),
     ("-5GB", "cannot read '-5GB'")],
)
def test_parse_bytes_rejects(text, message):
    with pytest.raises(ValueError, match=message):
        parse_bytes(text)


def test_bytes_rejects_bad_counts():
    with pytest.raises(ValueError, match="cannot be negative, got -1"):
        Bytes(-1)
    with pytest.raises(ValueError, match="int or Fraction count of bytes, got 1.5"):
        Bytes(1.5)
    with pytest.raises(ValueError, match="unknown byte unit 'gb'; accepted: bytes, KB"):
        Bytes(1).to("gb")


@pytest.mark.parametrize("bad", [0, -3, 2.5, float("nan"), "7", True, None, Fraction(1, 2)])
def test_positive_int_rejects(bad):
    with pytest.raises(ValueError, match=r"layers must be a positive whole number, got"):
        positive_int("layers", bad)


def test_positive_int_accepts_whole_floats():
    assert positive_int("params", 7e9) == 7_000_000_000
