"""Running a page in document order, and the arithmetic a reader sees."""

from fractions import Fraction

from mystclaims.arithmetic import explain, short
from mystclaims.runner import definitions_in, run_page
from mystclaims.scanner import scan



class Bytes(int):
    """An amount of bytes as a library would mark it (an int subclass keeps this short)."""

    def __claim_bytes__(self):
        return int(self)


def test_run_in_document_order():
    text = "```python\nx = 41 + 1\n```\n\nIt is {claim}`42 <x>`.\n\n```python\nx = 0\n```\n\n" \
           "Now {claim}`0 <x>` and {claim}`1 <x>`.\n"
    results = list(run_page(scan(text), {}))
    assert [r.ok for r in results] == [True, True, False]
    assert results[2].message("p.md") == (
        "p.md:11:24: stated '1', computed 0 from `x`: computed 0, which does not round to "
        "the stated value")


def test_a_claim_that_raises_or_cannot_be_read_fails_with_its_place():
    text = "Zero {claim}`1 <1 / 0>`.\nBad {claim}`1 parsec <1>`.\n"
    raised, unreadable = run_page(scan(text), {})
    assert raised.message("p.md") == ("p.md:1:6: cannot check '1 <1 / 0>': `1 / 0` raised "
                                      "ZeroDivisionError: division by zero")
    assert unreadable.message("p.md").startswith("p.md:2:5: cannot check '1 parsec <1>': unknown unit")


def test_definitions_are_the_page_s_assignments():
    assert definitions_in("a = 1\nb: int = f(a)\nc, d = 1, g(2)\ne, f = h()\n") == {
        "a": "1", "b": "f(a)", "c": "1", "d": "g(2)"}
    assert definitions_in(">>> n = 3 * 4\n") == {"n": "3 * 4"}


def test_arithmetic_substitutes_the_inputs():
    a = explain("N_PAPER - 1", {"N_PAPER": 64}, 63)
    assert (a.expr, a.steps, a.value) == ("N_PAPER − 1", ("64 − 1",), "63")


class Parts:
    """A result type with a derived total, as a library would write it."""

    def __init__(self):
        self.weights, self.gradients, self.master, self.moments = 2, 2, 4, 8

    @property
    def total(self):
        return self.weights + self.gradients + self.master + self.moments

    @property
    def everything(self):
        """A property that only renames another."""
        return self.total


def test_arithmetic_opens_a_one_line_property():
    ns = {"bpp": Parts()}
    a = explain("bpp.total", ns, 16)
    assert a.steps == ("weights + gradients + master + moments", "2 + 2 + 4 + 8")
    assert explain("bpp.everything", ns, 16).steps == a.steps
    assert a.sources == (f"{__name__}.Parts.total",)


def make_state(n):
    return Bytes(n * 16)


def test_arithmetic_shows_what_a_name_was_defined_as_and_who_computed_it():
    ns = {"N": 7 * 10**9, "make_state": make_state}
    ns["state"] = make_state(ns["N"])
    a = explain("state", ns, ns["state"], {"state": "make_state(N)"})
    assert a.steps == ("make_state(N)", "make_state(7,000,000,000)")
    assert a.value == "112,000,000,000 bytes = 112 GB = 104.3081 GiB"
    assert a.sources == (f"{__name__}.make_state",)
    # only the library's functions are sources when a library is named
    assert explain("state", ns, ns["state"], {"state": "make_state(N)"}, ("trainmath",)).sources == ()


def test_short_keeps_numbers_exact():
    assert short(Bytes(14 * 10**9)) == "14 GB"
    assert short(Bytes(262_144)) == "262,144 bytes"
    assert short(Fraction(3, 4)) == "0.75"
    assert short(Fraction(1, 3)) == "0.333333"
    assert short(7_000_000_000) == "7,000,000,000"
    assert short("x") is None and short(True) is None


def test_arithmetic_says_where_each_name_comes_from():
    ns = {"bpp": Parts(), "N": 7}
    defs = {"bpp": "Parts()", "N": "7", "GB": "from units import GB"}
    a = explain("bpp.weights * N", ns, 14, defs)
    assert a.steps == ("2 × 7",)
    assert a.where == ("bpp = Parts()", "N = 7 (an input)")
    ns["GB"] = 10**9
    assert explain("GB", ns, 10**9, defs).where == ("from units import GB",)
    assert explain("N", ns, 7, defs).where == ("N = 7 (an input)",)


def test_the_readme_example_page_holds_and_passes_the_lint():
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    page = readme.split("````markdown\n", 1)[1].split("````", 1)[0]
    scanned = scan(page)
    assert [r.ok for r in run_page(scanned, {})] == [True, True, True]
    assert scanned.unchecked == []


def test_arithmetic_leaves_non_numbers_as_written():
    class Many:
        def __float__(self):
            raise TypeError("only one-element arrays can be converted")

    a = explain("len(xs) + f(arr)", {"xs": [1, 2], "arr": Many(), "f": lambda _: 1}, 3)
    assert a.steps == ("2 + 1",)
