"""This site's Sphinx fixes (docs/_ext/trainmath_site.py): unused CSS, assets per page, markup."""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("sphinx")
SPEC = importlib.util.spec_from_file_location(
    "trainmath_site", Path(__file__).parents[1] / "docs" / "_ext" / "trainmath_site.py")
site = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(site)


def test_purge_keeps_rules_for_used_classes_and_drops_the_rest():
    css = (":root{--x:1}/*! license */.sd-tab-set{a:1}.sd-col-6,.sd-tab-label{b:2}"
           "@media (min-width:576px){.sd-col-6{c:3}.sd-tab-label:hover{d:4}}"
           "@media print{.sd-col-6{e:5}}@keyframes spin{from{f:6}}")
    out = site.purge_css(css, {"sd-tab-set", "sd-tab-label"})
    assert ":root{--x:1}" in out and "/*! license */" in out  # no class: kept
    assert ".sd-tab-set{a:1}" in out and ".sd-tab-label{b:2}" in out  # the used selector only
    assert "sd-col-6" not in out and "@media print" not in out  # an emptied @media goes too
    assert "@media (min-width:576px){.sd-tab-label:hover{d:4}}" in out
    assert "@keyframes spin{from{f:6}}" in out


def test_a_page_loads_only_the_assets_its_content_uses():
    body = '<div class="cell_output"><span class="tm-claim" id="tm-c-1">2</span></div>'
    assert site._needed("_static/mystnb.11b3.css", body, "memory-math")
    assert site._needed("_static/mystclaims.js", body, "memory-math")
    assert not site._needed("_static/sphinx-design.min.css", body, "memory-math")
    assert not site._needed("_static/design-tabs.js", body, "memory-math")
    assert not site._needed("_static/figures.css", body, "memory-math")
    assert site._needed("_static/mystclaims.js", "", "search")  # it cleans the snippets
    assert not site._needed("_static/mystclaims.css", "", "search")
    assert site._needed("_static/styles/furo.css", "", "index")


def test_signature_lines_are_divs_not_a_list_without_terms():
    html = ('<dl>\n<dd><em class="sig-param">a</em>,</dd>\n'
            '<dd><em class="sig-param">b</em>,</dd>\n</dl>')
    out = site._SIG_PARAMS.sub(site._sig_params, html)
    assert out == ('<div class="tm-sig-params"><div class="tm-sig-param"><em class="sig-param">'
                   'a</em>,</div>\n<div class="tm-sig-param"><em class="sig-param">b</em>,'
                   '</div>\n</div>')
