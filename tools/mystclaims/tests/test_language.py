"""The claim language: reading stated text, and checking computed values against it."""

from fractions import Fraction

import pytest

from mystclaims.language import ClaimError, check, describe, parse_statement, split_claim

GB = 10**9


@pytest.mark.parametrize(
    ("text", "qualifier", "value", "unit"),
    [
        ("112 GB", "=", 112, "GB"),
        ("104.3 GiB", "=", Fraction("104.3"), "GiB"),
        ("over 100 GB", ">", 100, "GB"),
        ("under 80 GB", "<", 80, "GB"),
        ("at least 2", ">=", 2, ""),
        ("about 30%", "~", 30, "%"),
        ("7B", "=", 7 * 10**9, ""),
        ("175 billion", "=", 175 * 10**9, ""),
        ("6,738,415,616", "=", 6738415616, ""),
        ("1e-8", "=", Fraction(1, 10**8), ""),
        ("2^-14", "=", Fraction(1, 2**14), ""),
        ("2^{16}", "=", 2**16, ""),
        ("1.5×", "=", Fraction(3, 2), "×"),
        ("989 TFLOP/s", "=", 989, "TFLOP/s"),
        ("112\\,\\text{GB}", "=", 112, "GB"),
    ],
)
def test_parse_statement(text, qualifier, value, unit):
    s = parse_statement(text)
    assert (s.qualifier, s.value, s.unit) == (qualifier, value, unit)


@pytest.mark.parametrize(
    ("text", "message"),
    [("lots", "cannot read the stated text 'lots'"), ("112 GiGs", "unknown unit 'GiGs'"),
     ("7B GB", "both a count suffix and a unit")],
)
def test_parse_statement_rejects(text, message):
    with pytest.raises(ClaimError, match=message):
        parse_statement(text)


def verdict(text, value, tolerance=None):
    return check(parse_statement(text), value, tolerance)


def test_equality_holds_at_the_written_precision(B):
    assert verdict("112 GB", B(112 * GB)) is None
    assert verdict("112 GB", B(112_400_000_000)) is None
    assert "does not round" in verdict("112 GB", B(112_600_000_000))
    assert verdict("112.6 GB", B(112_600_000_000)) is None
    assert "does not round" in verdict("112.0 GB", B(112_400_000_000))


def test_units_are_respected(B):
    assert verdict("104.3 GiB", B(112 * GB)) is None
    assert verdict("112 GiB", B(112 * GB)) is not None  # GiB is not GB
    assert verdict("75%", 0.75) is None
    assert verdict("75%", 75) is not None  # a percentage states a fraction
    assert verdict("7B", 7e9) is None and verdict("8B", 7e9) is not None
    assert verdict("2^-14", 2.0**-14) is None and verdict("2^-14", 2.0**-13) is not None


def test_comparisons_compare_exactly(B):
    assert verdict("over 100 GB", B(112 * GB)) is None
    assert "not > 100" in verdict("over 100 GB", B(100 * GB))
    assert verdict("under 80 GB", B(79_999_999_999)) is None
    assert verdict("under 80 GB", B(80 * GB)) is not None
    assert verdict("at most 80 GB", B(80 * GB)) is None


def test_about_needs_a_stated_tolerance(B):
    assert verdict("about 30%", 0.33, Fraction(5)) is None
    assert "more than ±5" in verdict("about 30%", 0.36, Fraction(5))
    # a tolerance is in the stated unit, count suffix included: "about 0.45M ± 0.01" is ±10,000
    assert verdict("about 0.45M", 452_452, Fraction(1, 100)) is None
    assert verdict("about 0.45M", 470_000, Fraction(1, 100)) is not None
    with pytest.raises(ClaimError, match="gives no tolerance"):
        verdict("about 30%", 0.3)
    with pytest.raises(ClaimError, match="a tolerance is only for 'about'"):
        verdict("112 GB", B(112 * GB), Fraction(1))


def test_bytes_claims_need_byte_values_and_back(B):
    with pytest.raises(ClaimError, match="states bytes but the expression gave 112000000000.0"):
        verdict("112 GB", 112e9)
    with pytest.raises(ClaimError, match="state the unit"):
        verdict("112", B(112))
    with pytest.raises(ClaimError, match="not a number"):
        verdict("1", True)
    with pytest.raises(ClaimError, match="not a finite number"):
        verdict("1", float("nan"))


def test_split_claim():
    assert split_claim("about 30% <frac ± 5>") == ("about 30%", "frac", Fraction(5))
    assert split_claim("112 GB <state.total>") == ("112 GB", "state.total", None)
    assert split_claim("1 <a < b>") == ("1", "a < b", None)
    with pytest.raises(ClaimError, match="written 'stated text <expression>'"):
        split_claim("112 GB")
    with pytest.raises(ClaimError, match="tolerance 'x' in"):
        split_claim("about 1 <y ± x>")


def test_describe_spells_out_bytes_in_both_units(B):
    assert describe(B(112 * GB)) == "112,000,000,000 bytes = 112 GB = 104.3081 GiB"
    assert describe(B(2**30)) == "1,073,741,824 bytes = 1.0737 GB = 1 GiB"
    assert describe(Fraction(3, 4)) == "0.75"
    assert describe("text") == "'text'"


@pytest.mark.parametrize(("text", "value", "unit"), [
    ("two", 2, ""), ("Sixteen", 16, ""), ("twice", 2, ""), ("half", Fraction(1, 2), ""),
    ("ninety", 90, ""), ("four bytes", 4, "bytes"), ("over twenty", 20, ""),
])
def test_a_claim_can_state_a_number_in_words(text, value, unit):
    s = parse_statement(text)
    assert (s.value, s.unit, s.half_ulp) == (value, unit, 0)  # exact: no rounding allowed
    assert check(parse_statement("two"), 2) is None
    assert check(parse_statement("two"), Fraction(21, 10)) == (
        "computed 2.1, which does not round to the stated value")


def test_number_words_need_a_known_unit_and_whole_words():
    with pytest.raises(ClaimError, match="unknown unit 'apples'"):
        parse_statement("two apples")
    with pytest.raises(ClaimError, match="cannot read the stated text 'twentyfour'"):
        parse_statement("twentyfour")
