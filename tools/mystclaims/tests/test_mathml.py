"""TeX to MathML at build time, with the claims' markup (mystclaims.mathml)."""

import re
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("latex2mathml")
from mystclaims.mathml import MATHML, to_mathml  # noqa: E402


def tree(markup: str) -> ET.Element:
    root = ET.fromstring(markup)
    for el in root.iter():  # plain tag names, as an HTML page has them
        el.tag = el.tag.replace(f"{{{MATHML}}}", "")
    return root


def test_a_claim_is_one_mrow_with_its_class_and_id():
    got = to_mathml(r"\class{tm-claim}{\cssId{tm-c-3}{34}} + 5")
    assert got.problems == []
    assert '<mrow class="tm-claim" id="tm-c-3"><mn>34</mn></mrow><mo>+</mo><mn>5</mn>' in got.html
    assert got.html.startswith(f'<math xmlns="{MATHML}"')
    assert 'display="block"' not in got.html


def test_a_claim_can_carry_a_superscript_and_sit_in_a_fraction():
    got = to_mathml(r"\class{tm-claim}{\cssId{tm-c-1}{2}}^{E-b} = "
                    r"\frac{(\class{tm-claim tm-claim-failed}{\cssId{tm-c-2}{2}} + K)\Psi}{N_d}",
                    display=True)
    root = tree(got.html)
    sup = root.find(".//msup")
    assert sup[0].get("id") == "tm-c-1" and sup[0].findtext("mn") == "2"
    frac = root.find(".//mfrac")
    assert len(frac) == 2
    failed = frac.find(".//mrow[@id='tm-c-2']")
    assert failed.get("class") == "tm-claim tm-claim-failed"
    assert root.get("display") == "block"


def test_macros_expand_and_alttext_is_the_readers_tex():
    got = to_mathml(r"A = sbh\left(\claim{34}{SBH} + \nonclaim{5}\,\frac{as}{h}\right)")
    root = tree(got.html)
    assert root.get("alttext") == r"A = sbh\left(34 + 5\,\frac{as}{h}\right)"
    assert "SBH" not in got.html
    assert root.find(".//mo[@stretchy='true']") is not None  # \left( stretches


def test_aligned_is_a_table_aligned_right_then_left():
    got = to_mathml(r"\begin{aligned} b &= 2^{e-1} - 1 \\ x_\text{max} &= (2 - 2^{-m})\,2^{E} "
                    r"\end{aligned}", display=True)
    assert got.problems == []
    table = tree(got.html).find(".//mtable")
    rows = table.findall("mtr")
    assert len(rows) == 2 and all(len(r.findall("mtd")) == 2 for r in rows)
    assert table.get("columnalign") == "right left"
    assert "text-align: right" in rows[0][0].get("style")
    assert rows[0][1][1].tag == "mo" and rows[0][1][1].text == "="  # "{}=": a relation, spaced


def test_characters_are_characters_not_entity_text():
    got = to_mathml(r"\pm x \times \Psi")
    assert "&amp;" not in got.html and "±" in got.html and "Ψ" in got.html
    assert re.search(r"<mo>±</mo>", got.html)  # an operator, as TeX spaces it


def test_what_it_cannot_render_is_a_problem_not_a_silent_mark():
    assert to_mathml(r"\foo{x} + 1").problems == [r"unknown command \foo"]
    assert to_mathml(r"a & b").problems == ["'&' outside an alignment environment"]
    assert to_mathml(r"\class{c}").problems  # one argument short
