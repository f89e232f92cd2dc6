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
    "sphinx.ext.mathjax",
    "trainmath_sphinx",
]

exclude_patterns = ["_build", "jupyter_execute", ".jupyter_cache", "**/.ipynb_checkpoints"]
source_suffix = {".md": "myst-nb"}

# --- MyST and execution ---------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "force"  # the library changes under the pages: never serve cached numbers
nb_execution_raise_on_error = True
nb_execution_timeout = 60
nb_merge_streams = True
nb_render_markdown_format = "myst"  # tables printed by code cells render as tables

# --- Offline: MathJax is vendored, nothing comes from a CDN ---------------------------------
mathjax_path = "mathjax/tex-svg.js"
mathjax3_config = {
    "tex": {"macros": {"claim": ["{#1}", 2], "nonclaim": ["{#1}", 1]}},
    "svg": {"fontCache": "global"},
    # Equations are not tab stops of their own: the numbers in them are (see claims.js).
    "options": {"menuOptions": {"settings": {"inTabOrder": False}}},
}

# --- HTML -----------------------------------------------------------------------------
html_theme = "furo"
html_title = "trainmath"
html_static_path = ["_static"]
# The claims' popups, keyboard and search snippets (the extension adds claims.css).
html_js_files = ["claims.js"]
html_theme_options = {
    "source_edit_link": None,
    "navigation_with_keys": True,
}
html_show_sourcelink = False
nitpicky = True
