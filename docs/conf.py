"""Sphinx configuration for trainmath. Pages are MyST notebooks executed by myst-nb."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "trainmath"
author = "The trainmath authors"
copyright = "2026, the trainmath authors"

extensions = [
    "myst_nb",  # loads myst_parser itself; listing both fails
    "sphinx_design",
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "sphinx.ext.githubpages",  # .nojekyll: a Pages branch deploy serves _static/ as it is
    "sphinxcontrib.bibtex",  # one bibliography: docs/references.bib, cited by key
    "mystclaims.sphinx",  # checked numbers: runs each page once, renders the arithmetic
    "trainmath_site",  # docs/_ext: fixes to myst-nb's and furo's markup, the figures' colours
    "trainmath_calculator",  # docs/_ext: the calculator page's form, Pyodide and the wheel
]
mystclaims_library = ["trainmath"]  # popups link to these functions' reference entries
# Every page depends on the library's source, the claim machinery (it writes the math) and this
# site's extension (docs/_ext): an edit to any of them rebuilds every page.
mystclaims_watch = ["../src/trainmath", "../tools/mystclaims/src/mystclaims", "_ext"]

exclude_patterns = ["_build", "jupyter_execute", ".jupyter_cache", "**/.ipynb_checkpoints"]
source_suffix = {".md": "myst-nb"}

# --- MyST and execution ---------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
# mystclaims runs each page's code once, in-process, and hands myst-nb the cell outputs: no
# Jupyter kernel, no cache that could serve numbers from an older library.
nb_execution_mode = "off"
nb_merge_streams = True
nb_render_markdown_format = "myst"  # tables printed by code cells render as tables

# --- Math: MathML written at build time, no script and nothing from a CDN ----------------------
# mystclaims converts each formula's TeX with latex2mathml (\claim{shown}{expr} included) into a
# <math> element the browser draws itself: no MathJax to download (it was 2 MB a page).
html_math_renderer = "mathml"

# --- Bibliography: one BibTeX file, cited by key, rendered author-year ----------------------
# Pages write {cite:t}`key` ("Rajbhandari et al. (2020)") or {cite:p}`key`, with the section,
# table or equation as post-text ({cite:t}`key{§5.1}` -> "Rajbhandari et al. (2020, §5.1)");
# docs/references.md lists every cited work once.
import dataclasses

import sphinxcontrib.bibtex.plugin
from sphinxcontrib.bibtex.style.referencing import BracketStyle
from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle

def _round() -> dataclasses.Field:
    return dataclasses.field(default_factory=lambda: BracketStyle(left="(", right=")"))


@dataclasses.dataclass
class _RoundAuthorYear(AuthorYearReferenceStyle):
    """Author-year citations in round brackets: "Korthikanti et al. (2022, §4.1)"."""

    bracket_parenthetical: BracketStyle = _round()
    bracket_textual: BracketStyle = _round()
    bracket_author: BracketStyle = _round()
    bracket_label: BracketStyle = _round()
    bracket_year: BracketStyle = _round()


sphinxcontrib.bibtex.plugin.register_plugin(
    "sphinxcontrib.bibtex.style.referencing", "author_year_round", _RoundAuthorYear)

bibtex_bibfiles = ["references.bib"]
bibtex_default_style = "plain"
bibtex_reference_style = "author_year_round"

# --- HTML -----------------------------------------------------------------------------
html_theme = "furo"
html_title = "trainmath"
html_static_path = ["_static"]
templates_path = ["_templates"]  # search.html: the page's heading
html_theme_options = {
    "source_edit_link": None,
    "navigation_with_keys": True,
}
html_show_sourcelink = False
nitpicky = True

# --- API reference (docs/reference/): autodoc from the library's docstrings ----------------
autodoc_member_order = "bysource"  # the order each module presents its topics in
autodoc_typehints = "signature"
python_maximum_signature_line_length = 100  # a longer signature: one parameter per line
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True  # defaults as the source writes them: Bytes(0), 1 << 20
add_module_names = False  # "training_state(...)", not "trainmath.memory.recipes.training_state(...)"
python_use_unqualified_type_names = True
# Types from outside the library are shown by name, unlinked (no remote inventories offline).
nitpick_ignore = [
    ("py:class", "fractions.Fraction"),
    ("py:class", "numpy.ndarray"),
    ("py:class", "argparse.ArgumentParser"),
    ("py:class", "argparse.Namespace"),
    ("py:class", "collections.abc.Mapping"),
    ("py:class", "collections.abc.Sequence"),
    ("py:class", "pathlib.Path"),
]
