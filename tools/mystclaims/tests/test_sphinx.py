"""The Sphinx extension end to end: a wrong number fails every build until it is fixed."""

import re
import textwrap

import pytest

pytest.importorskip("myst_nb")
from sphinx.cmd.build import build_main  # noqa: E402

CONF = 'extensions = ["myst_nb", "mystclaims.sphinx"]\nnb_execution_mode = "off"\n' \
       'myst_enable_extensions = ["dollarmath"]\nhtml_math_renderer = "mathml"\n'
INDEX = "# Home\n\n```{toctree}\npage\n```\n"
PAGE = textwrap.dedent("""\
    ---
    file_format: mystnb
    kernelspec: {name: python3, display_name: Python 3}
    ---
    ```{code-cell} python
    x = 41 + 1
    n = 64
    print("printed by the cell")
    ```

    # A page about {claim}`42 <x>`

    The answer is {claim}`42 <x>`; the last rank is {claim}`63 <n - 1>`.

    $$ y = \\claim{42}{x} $$
    """)


def build(src, out) -> tuple[int, str]:
    warnings = out.parent / "warnings.txt"
    status = build_main(["-W", "--keep-going", "-q", "-b", "html", "-w", str(warnings),
                         str(src), str(out)])
    return status, warnings.read_text()


@pytest.fixture
def site(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(CONF)
    (src / "index.md").write_text(INDEX)
    (src / "page.md").write_text(PAGE)
    return src, tmp_path / "out" / "html"


def test_a_wrong_claim_fails_every_build_until_it_is_fixed(site):
    src, out = site
    assert build(src, out) == (0, "")
    html = (out / "page.html").read_text()
    assert "printed by the cell" in html  # the cell ran once, in-process, and its output shows
    # the popup shows the arithmetic, substituted, in a template that search never reads
    assert re.search(r'<span class="tm-claim" id="(tm-c-\d+)">63</span><template id="\1-detail">', html)
    assert '<div class="tm-step">= 64 − 1</div>' in html
    assert "where <code>n = 64 (an input)</code>" in html
    # in math, the claim becomes a MathML element with an id, written at build time (no
    # script); in a link, plain text
    assert re.search(r'<mrow class="tm-claim" id="(tm-c-\d+)"><mn>42</mn></mrow>.*?</div>\s*'
                     r'<template id="\1-detail">', html, re.S)
    assert "mathjax" not in html.lower().replace("mathjax_ignore", "")
    assert '<span class="tm-claim-plain">42</span>' in (out / "index.html").read_text()

    (src / "page.md").write_text(PAGE.replace("{claim}`63 <n - 1>`", "{claim}`64 <n - 1>`"))
    message = "page.md:13: WARNING: claim does not hold: stated '64', computed 63 from `n - 1`"
    for _ in range(2):  # the second build reads nothing new, and still fails
        status, warnings = build(src, out)
        assert status != 0 and message in warnings, warnings
    (src / "page.md").write_text(PAGE)
    assert build(src, out) == (0, "")


def test_broken_math_and_failing_code_are_reported_at_their_lines(site):
    src, out = site
    (src / "page.md").write_text(PAGE.replace("$$ y = \\claim{42}{x} $$", "$$ y = \\claim{42}{x $$"))
    status, warnings = build(src, out)
    assert status != 0
    assert "page.md:15: WARNING: claim does not hold: cannot check" in warnings
    assert "of \\claim{42} has no closing brace before the math ends" in warnings
    (src / "page.md").write_text(PAGE.replace("n = 64", "n = 64 / 0"))
    status, warnings = build(src, out)
    assert "page.md:7: WARNING: the page's code failed: ZeroDivisionError" in warnings
    assert "claim '63 <n - 1>' was not evaluated" in warnings
