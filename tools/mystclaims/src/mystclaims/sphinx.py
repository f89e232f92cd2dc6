"""The Sphinx side: run each page once, render checked numbers with their arithmetic.

Add ``"mystclaims.sphinx"`` to ``extensions`` (after ``"myst_nb"``). Then:

- ``{claim}`112 GB <state.total>``` renders "112 GB"; hovering or focusing it shows the
  arithmetic (the expression, its inputs' values substituted, the exact value in GB and GiB,
  and links to the reference entries of the library functions that computed it). Inside math,
  ``\\claim{112}{expr}`` renders the same way. ``{nonclaim}`Table 2``` renders its text.
- Each page's Python runs exactly once per build, in-process, in document order: code cells
  (whose outputs myst-nb then renders, so no Jupyter kernel starts), ``python`` fences and
  invisible blocks, with every claim checked after the code above it.
- A claim that does not hold is a build warning (an error under ``-W``) naming the file, line,
  stated and computed values, and the page is read again by every later build until it holds:
  an incremental build or ``sphinx-autobuild`` never passes over a page it built with a wrong
  number.
- Popup text, TeX and the source of hidden code cells stay out of the search index.

Configuration: ``mystclaims_library`` (package names whose functions a popup links to, e.g.
``["trainmath"]``), ``mystclaims_watch`` (folders, relative to ``conf.py``, whose ``.py`` files
every page depends on: the library the pages import).
"""

from __future__ import annotations

import base64
import contextlib
import html
import io
import re
import sys
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

from docutils import nodes
from sphinx.util import logging

from .arithmetic import Arithmetic
from .runner import Result, run_code, run_page
from .scanner import _MATH_CLAIM, Code, math_claim_at, scan

logger = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"


# -- evaluation ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shown:
    """What a rendered claim needs from its result (picklable: it lives in the doctree)."""

    stated: str
    expr: str
    ok: bool
    reason: str | None
    arithmetic: Arithmetic | None

    @classmethod
    def of(cls, result: Result) -> Shown:
        return cls(result.claim.text, result.claim.expr, result.ok,
                   None if result.ok else result.reason(), result.arithmetic)


@dataclass
class PageRun:
    """What one page's single run produced."""

    results: dict[str, deque] = field(default_factory=lambda: defaultdict(deque))
    outputs: list[list[dict]] = field(default_factory=list)  # per code cell, nbformat outputs
    failed: bool = False
    counter: int = 0  # ids handed out to this page's claims

    def next_id(self) -> str:
        self.counter += 1
        return f"tm-c-{self.counter}"


class _Shell:
    """An in-process IPython shell whose display outputs are captured cell by cell."""

    def __init__(self) -> None:
        from IPython.core.displayhook import DisplayHook
        from IPython.core.interactiveshell import InteractiveShell

        class Publishing(DisplayHook):  # the last expression's value becomes a display output
            def write_output_prompt(self):
                pass

            def write_format_data(self, format_dict, md_dict=None):
                self.shell.display_pub.publish(data=format_dict, metadata=md_dict or {})

            def finish_displayhook(self):
                pass

        self.shell = InteractiveShell.instance()
        hook = Publishing(shell=self.shell, cache_size=0)
        self.shell.displayhook = hook
        self.shell.display_trap.hook = hook
        self.shell.enable_gui = lambda gui=None: None  # no event loop: figures go inline
        self.shell.enable_matplotlib("inline")

    def fresh(self) -> dict:
        self.shell.reset(new_session=False)
        return self.shell.user_ns

    def cell(self, source: str) -> tuple[list[dict], BaseException | None]:
        from IPython.utils.capture import capture_output

        with capture_output(stdout=True, stderr=True, display=True) as cap:
            result = self.shell.run_cell(source, store_history=False)
        error = result.error_before_exec or result.error_in_exec
        outputs: list[dict] = []
        for name, text in (("stdout", cap.stdout), ("stderr", cap.stderr)):
            if text and not error:
                outputs.append({"output_type": "stream", "name": name, "text": text})
        for rich in cap.outputs:
            data = {mime: base64.b64encode(v).decode() if isinstance(v, bytes) else v
                    for mime, v in rich.data.items()}
            outputs.append({"output_type": "display_data", "data": data,
                            "metadata": rich.metadata or {}})
        return outputs, error


_SHELL: _Shell | None = None


def run(app, docname: str, text: str) -> PageRun:
    """Run a page's code and check its claims, once; warn for each claim that fails."""
    global _SHELL
    page = scan(text)
    state = PageRun()
    if not page.claims and not page.code:
        return state
    if _SHELL is None:
        _SHELL = _Shell()
    namespace = _SHELL.fresh()
    path = str(app.env.doc2path(docname))

    last: list[Code] = []

    def execute(code: Code, ns: dict) -> None:
        last[:] = [code]
        if code.kind != "cell":
            with contextlib.redirect_stdout(io.StringIO()):
                run_code(code.source, ns, f"{path}:{code.line}")
            return
        outputs, error = _SHELL.cell(code.source)
        state.outputs.append(outputs)
        if error is not None:
            raise error

    library = tuple(app.config.mystclaims_library)
    results = run_page(page, namespace, path, execute, library)
    try:
        for result in results:
            if not result.ok:
                state.failed = True
                logger.warning("claim does not hold: %s (column %d)", result.reason(),
                               result.claim.column, location=(docname, result.claim.line))
            state.results[result.claim.raw.strip()].append(Shown.of(result))
    except Exception as exc:  # noqa: BLE001 - the page's code failed: a build error, with place
        state.failed = True
        line = last[0].line + _line_in_cell(exc, f"{path}:{last[0].line}") - 1 if last else None
        logger.warning("the page's code failed: %s: %s", type(exc).__name__, exc,
                       location=(docname, line))
    finally:
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")
    return state


def _line_in_cell(exc: BaseException, filename: str) -> int:
    """The line of the block's own statement that raised (1 when it cannot be told).

    A cell runs under IPython's ``<ipython-input-...>`` name, other blocks under ``filename``.
    """
    if isinstance(exc, SyntaxError) and exc.lineno:
        return exc.lineno
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name.startswith("<ipython-input-") or name == filename:
            return tb.tb_lineno
        tb = tb.tb_next
    return 1


def on_source_read(app, docname: str, source: list[str]) -> None:
    env = app.env
    for folder in app.config.mystclaims_watch:
        for path in sorted((Path(app.confdir) / folder).resolve().rglob("*.py")):
            env.note_dependency(str(path))
    runs = _runs(env)
    runs[docname] = run(app, docname, source[0])


def _runs(env) -> dict[str, PageRun]:
    if not hasattr(env, "mystclaims_runs"):
        env.mystclaims_runs = {}
    return env.mystclaims_runs


def on_outdated(app, env, added, changed, removed) -> list[str]:
    """Pages whose last build had a failing claim or failing code are read again."""
    return [d for d, r in _runs(env).items() if r.failed and d not in removed and d in env.found_docs]


def on_purge(app, env, docname: str) -> None:
    _runs(env).pop(docname, None)


# -- myst-nb: cell outputs from the single run, no kernel --------------------------------------

def _install_client(app) -> None:
    try:
        import myst_nb.sphinx_ as mystnb_sphinx
        from myst_nb.core.execute import NotebookClientBase
    except ImportError:  # myst-nb is optional: pages are then plain MyST
        return
    import nbformat

    class InProcess(NotebookClientBase):
        """Fills each code cell's outputs from the page's single in-process run."""

        def start_client(self):
            docname = app.env.path2doc(str(self.path)) if self.path else None
            state = _runs(app.env).get(docname)
            cells = [c for c in self.notebook.cells if c.cell_type == "code"]
            outputs = state.outputs if state else []
            self.notebook.metadata["language_info"] = {  # what a Python kernel would report
                "name": "python", "pygments_lexer": "ipython3", "file_extension": ".py"}
            for count, (cell, captured) in enumerate(zip(cells, outputs), start=1):
                cell.outputs = [nbformat.from_dict(o) for o in captured]
                cell.execution_count = count
            if state:
                state.outputs = []  # handed over: the environment need not pickle the images
            self.exec_metadata = {"mtime": 0.0, "runtime": 0.0, "method": "mystclaims",
                                  "succeeded": not (state and state.failed), "error": None,
                                  "traceback": None}

    original = mystnb_sphinx.create_client

    def create_client(notebook, source, nb_config, logger_, read_fmt=None):
        if not any(c.cell_type == "code" for c in notebook.cells):
            return original(notebook, source, nb_config, logger_, read_fmt)
        path = Path(source) if Path(source).is_file() else None
        return InProcess(notebook, path, nb_config, logger_)

    mystnb_sphinx.create_client = create_client


# -- nodes and roles ---------------------------------------------------------------------------

class claim_node(nodes.inline):
    """A checked number: the stated text, with its result."""


class claim_detail_node(nodes.Element):
    """The popup content of claims inside a math node, rendered after it."""


def _take(env, raw: str) -> tuple[str, Shown | None]:
    state = _runs(env).setdefault(env.docname, PageRun())
    queue = state.results.get(raw.strip())
    return state.next_id(), (queue.popleft() if queue else None)


def claim_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    env = inliner.document.settings.env
    claim_id, result = _take(env, text)
    if result is None:
        logger.warning("claim %r was not evaluated: is the page's code above it failing?", text,
                       location=(env.docname, lineno))
        stated = text.split("<", 1)[0].strip() or text
        return [claim_node(rawtext, stated, stated=stated, claim_id=claim_id, result=None)], []
    return [claim_node(rawtext, result.stated, stated=result.stated, claim_id=claim_id,
                       result=result)], []


def nonclaim_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    return [nodes.inline(rawtext, text, classes=["tm-nonclaim"])], []


def on_doctree_read(app, doctree) -> None:
    """Claims in math become ``\\class``/``\\cssId`` (one MathML ``<mrow>`` each: mathml.py);
    hidden code leaves search."""
    env = app.env
    for node in list(doctree.findall(lambda n: isinstance(n, (nodes.math, nodes.math_block)))):
        latex = node.astext()
        details, rewritten = [], []
        pos = 0
        for m in _MATH_CLAIM.finditer(latex):
            if m.start() < pos:
                continue
            found = math_claim_at(latex, m)
            if found.cmd != "claim" or found.error:
                continue  # a non-claim, or an error the scanner reported: TeX as written
            claim_id, result = _take(env, f"{found.shown} <{found.expr}>")
            css = "tm-claim" if result and result.ok else "tm-claim tm-claim-failed"
            rewritten.append(latex[pos:m.start()])
            rewritten.append(f"\\class{{{css}}}{{\\cssId{{{claim_id}}}{{{found.shown}}}}}")
            pos = found.end
            details.append(claim_detail_node(claim_id=claim_id, result=result))
        if not details:
            node["classes"].append("no-search")
            continue
        rewritten.append(latex[pos:])
        node.children = [nodes.Text("".join(rewritten))]
        node["classes"].append("no-search")
        parent = node.parent
        at = parent.index(node) + 1
        for offset, detail in enumerate(details):
            parent.insert(at + offset, detail)
    for node in doctree.findall(nodes.container):
        if "cell_input" in node["classes"]:
            cell_classes = node.parent["classes"] if node.parent is not None else []
            if any(c in cell_classes for c in ("tag_hide-input", "tag_remove-input")):
                node["classes"].append("no-search")


# -- HTML ----------------------------------------------------------------------------------

def _stated_html(text: str) -> str:
    escaped = html.escape(text)
    return re.sub(r"(\d+)\^\{?([-−]?\d+)\}?",
                  lambda m: f"{m[1]}<sup>{m[2].replace('-', '−')}</sup>", escaped)


def _source_link(translator, name: str) -> str:
    domain = translator.builder.env.get_domain("py")
    candidates = [name]
    while "." in candidates[-1]:
        candidates.append(candidates[-1].rsplit(".", 1)[0])
    for candidate in candidates[:3]:
        entry = domain.objects.get(candidate)
        if entry is not None:
            uri = translator.builder.get_relative_uri(translator.builder.current_docname,
                                                      entry.docname)
            return (f'<a href="{html.escape(uri)}#{html.escape(entry.node_id)}">'
                    f"<code>{html.escape(name)}</code></a>")
    return f"<code>{html.escape(name)}</code>"


def _detail_html(translator, claim_id: str, result: Shown | None) -> str:
    # mystclaims.js adds the "The arithmetic" label: one copy in a script, not one per claim.
    parts = [f'<template id="{claim_id}-detail"><div class="tm-detail">']
    if result is None:
        parts.append('<div class="tm-failure">not evaluated: the page\'s code failed above it</div>')
    else:
        a = result.arithmetic
        parts.append(f'<code class="tm-expr">{html.escape(a.expr if a else result.expr)}</code>')
        if a is not None:
            for step in a.steps:
                parts.append(f'<div class="tm-step">= {html.escape(step)}</div>')
            parts.append(f'<div class="tm-step tm-value">= {html.escape(a.value)}</div>')
            for line in a.where:
                parts.append(f'<div class="tm-where">where <code>{html.escape(line)}</code></div>')
        if not result.ok:
            parts.append(f'<div class="tm-failure">{html.escape(result.reason or "")}</div>')
        if a is not None and a.sources:
            links = ", ".join(_source_link(translator, s) for s in a.sources)
            parts.append(f'<div class="tm-source">computed by {links}</div>')
    parts.append("</div></template>")
    return "".join(parts)


def _inside_link(node: nodes.Node) -> bool:
    parent = node.parent
    while parent is not None:
        if isinstance(parent, nodes.reference):
            return True
        parent = parent.parent
    return False


def visit_claim_html(self, node: claim_node) -> None:
    stated = _stated_html(node["stated"])
    if _inside_link(node):  # a table of contents, a link's text: plain, not interactive
        self.body.append(f'<span class="tm-claim-plain">{stated}</span>')
        raise nodes.SkipNode
    result = node["result"]
    css = "tm-claim" if result is not None and result.ok else "tm-claim tm-claim-failed"
    self.body.append(f'<span class="{css}" id="{node["claim_id"]}">{stated}</span>')
    self.body.append(_detail_html(self, node["claim_id"], result))
    raise nodes.SkipNode


def visit_detail_html(self, node: claim_detail_node) -> None:
    self.body.append(_detail_html(self, node["claim_id"], node["result"]))
    raise nodes.SkipNode


def _skip(self, node) -> None:
    raise nodes.SkipNode


def _plain_visit(self, node) -> None:
    self.visit_inline(node)


def _plain_depart(self, node) -> None:
    self.depart_inline(node)


_EXTERNAL = re.compile(
    r"<(?:script|link|img|iframe|source)\b[^>]*?\b(?:src|href)=\"(?:https?:)?//[^\"]+\"", re.I
)
#: A directive that reached the HTML as text: a fence the parser did not take.
_UNRENDERED = re.compile(r"(?:`{3,}|:{3,})\{[\w:-]+\}")


def check_html(app, exception) -> None:
    """Warn about a page that loads a resource from the network or shows raw MyST markup."""
    if exception or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(app.outdir)
        for match in _EXTERNAL.finditer(text):
            logger.warning("%s loads a network resource: %s", name, match.group(0)[:160])
        if "_sources" not in name.parts and "_modules" not in name.parts:
            for match in _UNRENDERED.finditer(re.sub(r"<pre>.*?</pre>", "", text, flags=re.S)):
                logger.warning("%s shows unrendered markup %r: use a ::: fence for a directive "
                               "whose first line holds backticks", name, match.group(0))


# -- math: MathML at build time ----------------------------------------------------------------

def _render_math(self, node, tex: str, display: bool) -> str:
    from .mathml import to_mathml

    rendered = to_mathml(tex, display=display, macros=self.builder.config.mystclaims_math_macros)
    for problem in rendered.problems:
        logger.warning("math %r: %s", " ".join(tex.split())[:80], problem, location=node)
    return rendered.html


def visit_math_mathml(self, node) -> None:
    """Inline math as a ``<math>`` element (``html_math_renderer = "mathml"``)."""
    self.body.append(self.starttag(node, "span", "", CLASS="math notranslate nohighlight"))
    self.body.append(_render_math(self, node, node.astext(), False))
    self.body.append("</span>")
    raise nodes.SkipNode


def visit_displaymath_mathml(self, node) -> None:
    """Display math: one ``<math display="block">`` per equation (a blank line parts them)."""
    from sphinx.locale import _
    from sphinx.util.math import get_node_equation_number

    self.body.append(self.starttag(node, "div", CLASS="math notranslate nohighlight"))
    if node.get("number"):
        self.body.append(f'<span class="eqno">({get_node_equation_number(self, node)})')
        self.add_permalink_ref(node, _("Link to this equation"))
        self.body.append("</span>")
    for part in (p for p in node.astext().split("\n\n") if p.strip()):
        self.body.append(_render_math(self, node, part, True))
    self.body.append("</div>\n")
    raise nodes.SkipNode


def _add_static(app, config) -> None:
    config.html_static_path.append(str(STATIC))


def setup(app):
    app.add_config_value("mystclaims_library", [], "env")
    app.add_config_value("mystclaims_watch", [], "env")
    # \\name{a}{b} in math, expanded before it becomes MathML: name -> (body with #1.., arguments)
    app.add_config_value("mystclaims_math_macros", {"claim": ("{#1}", 2),
                                                    "nonclaim": ("{#1}", 1)}, "env")
    app.add_html_math_renderer("mathml", (visit_math_mathml, None),
                               (visit_displaymath_mathml, None))
    plain = (_plain_visit, _plain_depart)
    app.add_node(claim_node, html=(visit_claim_html, None), text=plain, latex=plain,
                 man=plain, texinfo=plain)
    app.add_node(claim_detail_node, html=(visit_detail_html, None), text=(_skip, None),
                 latex=(_skip, None), man=(_skip, None), texinfo=(_skip, None))
    app.add_role("claim", claim_role)
    app.add_role("nonclaim", nonclaim_role)
    app.connect("builder-inited", _install_client)
    app.connect("config-inited", _add_static)
    app.connect("source-read", on_source_read)
    app.connect("doctree-read", on_doctree_read)
    app.connect("env-get-outdated", on_outdated)
    app.connect("env-purge-doc", on_purge)
    app.connect("build-finished", check_html)
    app.add_css_file("mystclaims.css")
    app.add_js_file("mystclaims.js")
    return {"version": "1.0", "parallel_read_safe": False, "parallel_write_safe": True,
            "env_version": 2}
