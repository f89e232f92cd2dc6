"""The claim language, the page scanner and the drift check itself."""

import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from trainmath import claims
from trainmath.claims import ClaimError, check, parse_statement, scan, split_claim
from trainmath.units import GB, Bytes

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md"))


# -- the stated text ------------------------------------------------------------------------
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


# -- checking -------------------------------------------------------------------------------
def verdict(text, value, tolerance=None):
    return check(parse_statement(text), value, tolerance)


def test_equality_holds_at_the_written_precision():
    assert verdict("112 GB", Bytes(112 * GB)) is None
    assert verdict("112 GB", Bytes(112_400_000_000)) is None
    assert "does not round" in verdict("112 GB", Bytes(112_600_000_000))
    assert verdict("112.6 GB", Bytes(112_600_000_000)) is None
    assert "does not round" in verdict("112.0 GB", Bytes(112_400_000_000))


def test_units_are_respected():
    assert verdict("104.3 GiB", Bytes(112 * GB)) is None
    assert verdict("112 GiB", Bytes(112 * GB)) is not None  # GiB is not GB
    assert verdict("75%", 0.75) is None
    assert verdict("75%", 75) is not None  # a percentage states a fraction
    assert verdict("7B", 7e9) is None and verdict("8B", 7e9) is not None
    assert verdict("2^-14", 2.0**-14) is None and verdict("2^-14", 2.0**-13) is not None


def test_comparisons_compare_exactly():
    assert verdict("over 100 GB", Bytes(112 * GB)) is None
    assert "not > 100" in verdict("over 100 GB", Bytes(100 * GB))
    assert verdict("under 80 GB", Bytes(79_999_999_999)) is None
    assert verdict("under 80 GB", Bytes(80 * GB)) is not None
    assert verdict("at most 80 GB", Bytes(80 * GB)) is None


def test_about_needs_a_stated_tolerance():
    assert verdict("about 30%", 0.33, Fraction(5)) is None
    assert "more than ±5" in verdict("about 30%", 0.36, Fraction(5))
    # a tolerance is in the stated unit, count suffix included: "about 0.45M ± 0.01" is ±10,000
    assert verdict("about 0.45M", 452_452, Fraction(1, 100)) is None
    assert verdict("about 0.45M", 470_000, Fraction(1, 100)) is not None
    with pytest.raises(ClaimError, match="gives no tolerance"):
        verdict("about 30%", 0.3)
    with pytest.raises(ClaimError, match="a tolerance is only for 'about'"):
        verdict("112 GB", Bytes(112 * GB), Fraction(1))


def test_bytes_claims_need_byte_values_and_back():
    with pytest.raises(ClaimError, match="return a trainmath.units.Bytes"):
        verdict("112 GB", 112e9)
    with pytest.raises(ClaimError, match="state the unit"):
        verdict("112", Bytes(112))


def test_split_claim():
    assert split_claim("about 30% <frac ± 5>") == ("about 30%", "frac", Fraction(5))
    assert split_claim("112 GB <state.total>") == ("112 GB", "state.total", None)
    assert split_claim("1 <a < b>") == ("1", "a < b", None)
    with pytest.raises(ClaimError, match="written 'stated text <expression>'"):
        split_claim("112 GB")


# -- scanning -------------------------------------------------------------------------------
PAGE = """\
---
kernelspec: {name: python3}
---
# A sample (1)

```{code-cell} python
:tags: [hide-input]
x = 41 + 1
```

The answer is {claim}`42 <x>` and fp16, bf16, H100, ZeRO-3, Llama-2-7B, e4m3 are names.
Rajbhandari et al. 2020 and (2022) and Table 2, eq. 1, §3.1 and 16-bit are citations or formats.
See `code 123` and {nonclaim}`Figure-ish 7` and [a link](https://x.org/1910.02054).

| a | b |
|---|---|
| {claim}`42 <x>` | 13 |

$$ y = \\claim{42}{x} + 3h^2 + W_1 $$

```{dropdown} Why {claim}`42 <x>` and not 43?
Because 6 × 7.
```

```text
99 bottles in a literal block
```

% invisible-code-block: python
%
% z = 2 * x

A last {claim}`84 <z>`.
"""


def test_scan_finds_code_claims_and_unchecked_numbers():
    page = scan(PAGE)
    assert [c.source.strip() for c in page.code] == ["x = 41 + 1", "z = 2 * x"]
    assert [(c.text, c.expr, c.in_math) for c in page.claims] == [
        ("42", "x", False), ("42", "x", False), ("42", "x", True), ("42", "x", False),
        ("84", "z", False),
    ]
    assert [(u.token, u.line) for u in page.unchecked] == [
        ("(1)", 4), ("13", 17), ("3", 19), ("43?", 21), ("6", 22), ("7.", 22),
    ]
    assert page.claims[0].line == 11


def test_run_in_document_order():
    results = list(claims.evaluate(scan(PAGE), {}))
    assert [failure for _, _, failure in results] == [None] * 5


# -- the pages themselves -------------------------------------------------------------------
def _page_results(path):
    return list(claims.evaluate(scan(path.read_text()), {"__name__": "page"}, str(path)))


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_equality_claim_fails_when_its_number_drifts(path):
    """Change the last digit of any stated number and its claim must fail."""
    for claim, value, failure in _page_results(path):
        assert failure is None, claim.failure(str(path), value, failure)
        statement = parse_statement(claim.text)
        if statement.qualifier != "=":
            continue
        plain = claims._latex_to_text(claim.text)
        m = list(re.finditer(r"\d", plain))[-1]
        drifted = plain[: m.start()] + str((int(m.group()) + 1) % 10) + plain[m.end():]
        assert check(parse_statement(drifted), value, claim.tolerance) is not None, (
            f"{path.name}:{claim.line}: {claim.text!r} still holds as {drifted!r}"
        )


def test_drift_fails_make_test_with_file_line_stated_and_computed(tmp_path):
    """End to end: the failure a contributor sees names the file, line, text, value, expression."""
    page = (ROOT / "docs" / "memory-math.md").read_text()
    assert "{claim}`56 GB <state.optimizer_states>`" in page
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "page.md").write_text(
        page.replace("{claim}`56 GB <state.optimizer_states>`", "{claim}`57 GB <state.optimizer_states>`")
        + "\nA new sentence says 300 GPUs.\n"
    )
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text())
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "docs/page.md"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 1, run.stdout
    line = page[: page.index("{claim}`56 GB")].count("\n") + 1
    assert (f"docs/page.md:{line}: stated '57 GB', computed 56,000,000,000 bytes = 56.0000 GB"
            in run.stdout), run.stdout
    assert "from `state.optimizer_states`" in run.stdout
    assert "unchecked number '300' in: 'A new sentence says 300 GPUs.'" in run.stdout
    assert "2 failed" in run.stdout
