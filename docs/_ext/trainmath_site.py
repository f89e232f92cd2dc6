"""This site's fixes to what myst-nb and furo write, and the figures' colours.

- myst-nb's "Show code cell source" toggle is a ``<summary aria-label="Toggle hidden content">``:
  a name that is not its visible text (axe: label-content-name-mismatch). It is written here
  without the aria-label, so its name is what it shows.
- The figures' colours in both themes (``trainmath.report.plots.theme_css``) go into ``figures.css``,
  so the palette has one definition, in the library.
- Each page loads only the stylesheets and scripts its content uses: myst-nb's (44 KB) where
  there are notebook cells, sphinx-design's (55 KB) where there are dropdowns, tabs or cards, the
  claims' where there are claims (and on the search page, whose snippets they clean), the
  figures' where there are figures. Every first load counts against the page's weight budget.
- The stylesheets of sphinx-design (55 KB) and myst-nb (43 KB) are mostly rules for classes no
  page uses (grid utilities, widget outputs): pages load ``sphinx-design.purged.css`` and
  ``mystnb.purged.css`` instead, which keep only the rules whose classes appear in the site's
  HTML or scripts (``purge_css``), written from the packages' originals on every build.
- Markup axe-core finds invalid: docutils' bibliography entries (``role="doc-biblioentry"``
  inside ``role="list"``: aria-required-children) become list items, and Sphinx's
  one-parameter-per-line signatures (a ``<dl>`` with ``<dd>`` and no ``<dt>``:
  definition-list) become ``<div>`` lines; an empty table header cell becomes a ``<td>``
  (empty-table-header); furo's two ``<aside>`` drawers get names (landmark-unique).
"""

from __future__ import annotations

import re
from html import escape
from pathlib import Path


def visit_hide_cell(self, node) -> None:
    classes = " ".join(node["classes"])
    self.body.append(f'<details class="admonition hide {classes}">\n<summary>\n')
    self.body.append(f'<p class="collapsed admonition-title">{escape(node["prompt_show"])}</p>\n')
    self.body.append(f'<p class="expanded admonition-title">{escape(node["prompt_hide"])}</p>\n')
    self.body.append("</summary>\n")


def depart_hide_cell(self, node) -> None:
    self.body.append("</details>\n")


def write_figure_css(app) -> None:
    if app.builder.format != "html":
        return
    from trainmath.report.plots import theme_css

    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    (static / "figures.css").write_text(theme_css(), encoding="utf-8")


#: asset file name (start) -> what in a page's body needs it
_NEEDS = {
    "mystnb.": ("cell_output", "cell_input", 'class="cell '),
    "sphinx-design.": ('class="sd-', " sd-"),
    "design-tabs.js": ("sd-tab-set",),
    "mystclaims.": ('id="tm-c-',),
    "figures.css": ("tm-chart", 'id="tm-calculator"'),
    "calculator.": ('id="tm-calculator"',),
}


def _needed(name: str, body: str, pagename: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    for prefix, marks in _NEEDS.items():
        if base.startswith(prefix):
            if pagename == "search" and prefix == "mystclaims." and base.endswith(".js"):
                return True  # it cleans the search snippets
            return any(mark in body for mark in marks)
    return True


_SIG_PARAMS = re.compile(r"<dl>\s*(<dd><em class=\"sig-param\">.*?)</dl>", re.S)


#: A table cell holding one paragraph and nothing else.
_CELL_P = re.compile(r"(<t[dh][^>]*>)<p>((?:(?!</?p[ >]|</t[dh]>).)*)</p>(</t[dh]>)", re.S)


def _sig_params(match: re.Match) -> str:
    inner = re.sub(r"<dd>(.*?)</dd>", r'<div class="tm-sig-param">\1</div>', match.group(1),
                   flags=re.S)
    return f'<div class="tm-sig-params">{inner}</div>'


#: viewcode's module index: a package's <li>, closed, then its modules' <ul>
_NESTED_UL = re.compile(r"(<li><a [^>]*>[^<]*</a>)</li>\s*(<ul>.*?</ul>)", re.S)


def page_context(app, pagename, templatename, context, doctree) -> None:
    body = context.get("body", "")
    if body:
        body = body.replace('role="doc-biblioentry"', 'role="listitem"')
        body = _SIG_PARAMS.sub(_sig_params, body)
        body = body.replace('<th class="head"><p></p></th>', '<td class="head"></td>')
        body = body.replace('<th class="head"></th>', '<td class="head"></td>')
        # a table cell of one paragraph needs no <p>: the page's long tables lose a sixth
        body = _CELL_P.sub(r"\1\2\3", body)
        if pagename == "_modules/index":  # viewcode puts a package's modules' <ul> beside its
            body = _NESTED_UL.sub(r"\1\2</li>", body)  # <li>, not in it: axe's "list" rule
        context["body"] = body
    for key in ("css_files", "script_files"):
        if key in context:
            context[key] = [f for f in context[key]
                            if _needed(str(getattr(f, "filename", f)), body, pagename)]
    if "css_files" in context:
        context["css_files"] = [_purged(f) for f in context["css_files"]]


# -- unused CSS -------------------------------------------------------------------------------

#: the stylesheet's name (its start) -> the purged copy pages load instead
_PURGED = {"sphinx-design.": "sphinx-design.purged.css", "mystnb.": "mystnb.purged.css"}


def _originals() -> dict[str, Path]:
    """Purged stylesheet -> the package's own file it is made from."""
    import myst_nb
    import sphinx_design

    return {"sphinx-design.purged.css":
            Path(sphinx_design.__file__).parent / "static" / "sphinx-design.min.css",
            "mystnb.purged.css": Path(myst_nb.__file__).parent / "static" / "mystnb.css"}


def _purged(asset):
    """The purged copy's entry for one of the stylesheets in ``_PURGED``, or the asset as is."""
    name = str(getattr(asset, "filename", asset))
    folder, _, base = name.rpartition("/")
    for prefix, purged in _PURGED.items():
        if base.startswith(prefix) and base.endswith(".css"):
            extra = {k: v for k, v in asset.attributes.items() if k not in ("rel", "type")}
            return type(asset)(f"{folder}/{purged}" if folder else purged,
                               priority=asset.priority, **extra)
    return asset


_CLASS = re.compile(r"\.(-?[_a-zA-Z][\w-]*)")


def _blocks(css: str):
    """Top-level ``prelude{body}`` blocks of a stylesheet, and bare statements (``@import ...;``)."""
    i, start, depth = 0, 0, 0
    while i < len(css):
        c = css[i]
        if c == "{":
            if depth == 0:
                brace = i
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                yield css[start:brace].strip(), css[brace + 1:i]
                start = i + 1
        elif c == ";" and depth == 0:
            yield css[start:i + 1].strip(), None
            start = i + 1
        i += 1


def purge_css(css: str, used: set[str]) -> str:
    """``css`` without the rules whose every selector names a class outside ``used``."""
    css = re.sub(r"/\*(?!!).*?\*/", "", css, flags=re.S)
    out = []
    for prelude, body in _blocks(css):
        if body is None:
            out.append(prelude)
        elif prelude.startswith(("@media", "@supports", "@layer", "@container")):
            inner = purge_css(body, used)
            if inner.strip():
                out.append(f"{prelude}{{{inner}}}")
        elif prelude.startswith("@"):
            out.append(f"{prelude}{{{body}}}")
        else:
            kept = [sel for sel in prelude.split(",")
                    if all(name in used for name in _CLASS.findall(sel))]
            if kept:
                out.append(f"{','.join(kept)}{{{body}}}")
    return "\n".join(out)


def _used_classes(outdir: Path) -> set[str]:
    used: set[str] = set()
    for page in outdir.rglob("*.html"):
        for value in re.findall(r'class="([^"]*)"', page.read_text(encoding="utf-8")):
            used.update(value.split())
    for script in (outdir / "_static").rglob("*.js"):  # classes a script adds
        used.update(re.findall(r"[\w-]+", script.read_text(encoding="utf-8", errors="ignore")))
    return used


#: furo's drawers are both <aside> (complementary) landmarks: each gets its own name.
_LANDMARKS = {'<aside class="sidebar-drawer">':
              '<aside class="sidebar-drawer" aria-label="Site navigation">',
              '<aside class="toc-drawer': '<aside aria-label="On this page" class="toc-drawer'}


def name_landmarks(outdir: Path) -> None:
    for page in outdir.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        named = text
        for old, new in _LANDMARKS.items():
            named = named.replace(old, new)
        if named != text:
            page.write_text(named, encoding="utf-8")


def purge_unused_css(app, exception) -> None:
    if exception or app.builder.format != "html":
        return
    name_landmarks(Path(app.outdir))
    static = Path(app.outdir) / "_static"
    used = _used_classes(Path(app.outdir))
    for purged, original in _originals().items():
        (static / purged).write_text(purge_css(original.read_text(encoding="utf-8"), used),
                                     encoding="utf-8")


def setup(app):
    from myst_nb.sphinx_ import HideCodeCellNode

    app.add_node(HideCodeCellNode, override=True, html=(visit_hide_cell, depart_hide_cell))
    app.add_css_file("figures.css")
    app.add_css_file("trainmath.css")
    app.add_js_file("trainmath.js", defer="defer")
    app.connect("builder-inited", write_figure_css)
    app.connect("html-page-context", page_context)
    app.connect("build-finished", purge_unused_css)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
