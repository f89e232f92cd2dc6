"""Scanning a MyST page: claims, code and unchecked numbers, each with its place."""

from mystclaims.scanner import scan

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

```python
w = x + 1
```

% invisible-code-block: python
%
% z = 2 * x

A last {claim}`84 <z>`, and 1F1B is a name here.
"""


def test_scan_finds_code_claims_and_unchecked_numbers():
    page = scan(PAGE, names={"1F1B"})
    assert [(c.source.strip(), c.kind) for c in page.code] == [
        ("x = 41 + 1", "cell"), ("w = x + 1", "fence"), ("z = 2 * x", "invisible")]
    assert [(c.text, c.expr, c.in_math) for c in page.claims] == [
        ("42", "x", False), ("42", "x", False), ("42", "x", True), ("42", "x", False),
        ("84", "z", False),
    ]
    assert [(u.token, u.line) for u in page.unchecked] == [
        ("(1)", 4), ("13", 17), ("3", 19), ("43?", 21), ("6", 22), ("7.", 22),
    ]
    assert (page.claims[0].line, page.claims[0].column) == (11, 15)
    assert all(c.error is None for c in page.claims)


def test_names_that_start_with_a_digit_are_the_site_s_to_declare():
    assert [u.token for u in scan("Schedule 1F1B and 3D.\n").unchecked] == ["1F1B"]
    assert scan("Schedule 1F1B and 3D.\n", names={"1F1B"}).unchecked == []


def test_two_claims_on_one_line_have_their_own_columns():
    page = scan("First {claim}`1 <a>` then {claim}`2 <b>`.\n")
    assert [c.where for c in page.claims] == ["1:7", "1:27"]


def test_a_math_claim_whose_braces_never_close_is_an_error_at_its_line():
    page = scan("Intro.\n\n$$ y = \\claim{42}{x $$\n\nAfter {claim}`1 <a>`.\n")
    broken, after = page.claims
    assert broken.line == 3 and broken.in_math
    assert "do not close" in broken.error or "no closing brace" in broken.error
    assert after.error is None and after.line == 5  # the rest of the page still scans


def test_a_math_claim_without_an_expression_says_so():
    page = scan("$$ y = \\claim{42} + 1 $$\n")
    (claim,) = page.claims
    assert claim.error == "\\claim{42} has no expression: write \\claim{42}{python expression}"
    assert claim.line == 1


def test_a_claim_that_cannot_be_read_is_kept_with_its_error():
    page = scan("Para.\n\nIt needs {claim}`112 GiGs <x>` here.\n")
    (claim,) = page.claims
    assert claim.where == "3:10" and "unknown unit 'GiGs'" in claim.error
    (claim,) = scan("Bad {claim}`112 GB` role.\n").claims
    assert "written 'stated text <expression>'" in claim.error


# -- numbers in words, citation years and source links --------------------------------------------
from mystclaims.scanner import NUMBER_WORDS, Lint  # noqa: E402


def _reported(text, lint=None):
    return [(u.kind, u.token, u.line) for u in scan(text, lint=lint).unchecked]


def test_a_number_in_words_is_reported_like_a_number_in_digits():
    text = "We use two GPUs.\nThe library knows four recipes and five optimizers.\n"
    assert _reported(text) == [("word", "two", 1), ("word", "four", 2), ("word", "five", 2)]
    message = scan(text).unchecked[0].message("docs/p.md")
    assert message.startswith("docs/p.md:1: number in words 'two' in: 'We use two GPUs.'")
    assert "{claim}`two <expr>`" in message


def test_multiples_fractions_and_hyphenated_counts_are_numbers_too():
    text = "Twice as many, half the size, it doubles, a two-way split, a few dozen.\n"
    assert [t for _, t, _ in _reported(text)] == ["Twice", "half", "doubles,", "two-way", "dozen."]


def test_one_zero_ordinals_and_names_are_not_numbers_in_words():
    text = ("One of the GPUs, the first and second stages, no one, rounds to zero.\n"
            "Half-precision and double precision are formats; double rounding is a name, and a "
            "power of two or a power-of-two scale names the radix.\n")
    assert _reported(text) == []
    assert {"one", "zero", "first", "second"}.isdisjoint(NUMBER_WORDS)


def test_number_words_in_claims_code_and_nonclaims_are_not_reported():
    text = "It saves {claim}`two <x>` and `two` and {nonclaim}`Two Towers`.\n\n```text\ntwo\n```\n"
    assert _reported(text) == []


def test_the_word_rule_is_configurable():
    text = "Three GPUs and a pair of nodes.\n"
    assert _reported(text, Lint(number_words=frozenset())) == []
    assert _reported(text, Lint(number_words=frozenset({"pair"}))) == [("word", "pair", 1)]
    assert _reported("Three times.\n", Lint(not_numbers=frozenset({"three times"}))) == []


def test_citation_years_pass_by_default_and_fail_for_a_site_that_cites_by_key():
    text = "As Korthikanti et al. 2022 show, and (2022), and Kingma & Ba 2015.\n"
    assert _reported(text) == []
    by_key = Lint(citation_years=False)
    assert _reported(text, by_key) == [("year", "2022", 1), ("year", "(2022),", 1),
                                       ("year", "2015.", 1)]
    (first,) = scan("Per Korthikanti et al. 2022.\n", lint=by_key).unchecked
    assert first.message("p.md").startswith("p.md:1: citation year '2022.' typed in:")
    assert "{cite:t}`key`" in first.message("p.md")
    # a year outside a citation is an unchecked number either way
    assert _reported("Released in 2024.\n", by_key) == [("number", "2024.", 1)]


def test_source_links_are_reported_where_the_site_asks():
    text = ("See [ZeRO](https://arxiv.org/abs/1910.02054), <https://doi.org/10.1109/x> and\n"
            "https://arxiv.org/pdf/2205.05198 but [the docs](https://pytorch.org/docs) and "
            "`https://arxiv.org/abs/1` in code are fine.\n")
    assert _reported(text) == []
    lint = Lint(source_links=(r"arxiv\.org", r"doi\.org"))
    assert _reported(text, lint) == [
        ("link", "https://arxiv.org/abs/1910.02054", 1), ("link", "https://doi.org/10.1109/x", 1),
        ("link", "https://arxiv.org/pdf/2205.05198", 2)]
    assert "cite it by key" in scan(text, lint=lint).unchecked[0].message("p.md")


def test_a_sign_before_a_number_does_not_hide_it():
    assert [t for _, t, _ in _reported("It saturates to ±448 or −57,344.\n")] == ["±448", "−57,344."]


def test_one_reader_of_math_claims_never_pairs_a_claim_with_a_later_brace():
    import re

    from mystclaims.scanner import _MATH_CLAIM, math_claim_at

    body = "y = \\claim{42} + x^{2} + \\claim{7}{n}"
    first, second = (math_claim_at(body, m) for m in _MATH_CLAIM.finditer(body))
    assert first.expr is None and "has no expression" in first.error
    assert (second.shown, second.expr, body[second.start:second.end]) == ("7", "n", "\\claim{7}{n}")
    assert re.fullmatch(r"\\claim\{42\}", first.raw)
