"""Sphinx side of trainmath's claims.

- ``{claim}`112 GB <state.total>``` renders the stated text "112 GB"; hovering or focusing it
  shows the arithmetic: the expression and its exact value.
- ``{nonclaim}`Table 2``` renders its text: a number that is a name or a citation.
- Each page's Python (code cells, python fences, invisible blocks) runs in-process in document
  order, so every claim is evaluated in the same namespace sybil gives it. A claim that does not
  hold is a build warning (an error under ``-W``), so the site can never show a wrong number.
- Pages depend on the library's source, so editing ``src/trainmath`` rebuilds them.
- After the build, any page that loads a script, stylesheet or image from the network is a
  warning (the site must work offline), and so is MyST markup that reached the HTML as text.
"""

from __future__ import annotations

import contextlib
import html
import io
import re
import sys
from collections import defaultdict, deque
from pathlib import Path

from docutils import nodes
from sphinx.util import logging

from trainmath import claims

logger = logging.getLogger(__name__)
LIBRARY = Path(claims.__file__).parent


class claim_node(nodes.inline):
    """A checked number: the stated text, with the arithmetic behind it."""


def _stated_html(text: str) -> str:
    escaped = html.escape(text)
    return re.sub(
        r"(\d+)\^\{?([-−]?\d+)\}?",
        lambda m: f"{m[1]}<sup>{m[2].replace('-', '−')}</sup>",
        escaped,
    )


def visit_claim_html(self, node: claim_node) -> None:
    state = "ok" if node["ok"] else "failed"
    self.body.append(
        f'<span class="tm-claim tm-claim-{state}" tabindex="0">'
        f'<span class="tm-claim-text">{_stated_html(node["stated"])}</span>'
        f'<span class="tm-claim-detail" role="tooltip">'
        f'<span class="tm-claim-label">the arithmetic</span>'
        f"<code>{html.escape(node['expr'])}</code>"
        f'<span class="tm-claim-value">= {html.escape(node["value"])}</span>'
        f"</span></span>"
    )
    raise nodes.SkipNode


def visit_claim_plain(self, node: claim_node) -> None:
    self.visit_inline(node)


def depart_claim_plain(self, node: claim_node) -> None:
    self.depart_inline(node)


def evaluate_page(app, docname: str, source: list[str]) -> None:
    """Run the page's Python and evaluate its claims, in document order."""
    env = app.env
    if not hasattr(env, "tm_claims"):
        env.tm_claims = {}
    for path in sorted(LIBRARY.glob("*.py")):
        env.note_dependency(str(path))
    page = claims.scan(source[0])
    results: dict[str, deque] = defaultdict(deque)
    env.tm_claims[docname] = results
    if not page.claims:
        return
    if "matplotlib" not in sys.modules:  # draw off-screen here; the kernel keeps its own backend
        import matplotlib

        matplotlib.use("Agg")
    namespace: dict = {"__name__": f"trainmath_page_{docname}"}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            for claim, value, failure in claims.evaluate(page, namespace, env.doc2path(docname)):
                if failure:
                    logger.warning("claim %r does not hold: %s", claim.text, failure,
                                   location=(docname, claim.line))
                shown = claims.describe(value) if value is not None else "(not computed)"
                results[claim.raw.strip()].append((claim.text, claim.expr, shown, not failure))
    except Exception as exc:  # noqa: BLE001 - the page's code failed: a build warning
        logger.warning("the page's code failed: %s: %s", type(exc).__name__, exc,
                       location=docname)
    finally:
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")


def claim_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    env = inliner.document.settings.env
    queue = getattr(env, "tm_claims", {}).get(env.docname, {}).get(text.strip())
    if queue:
        stated, expr, shown, ok = queue.popleft()
    else:  # the role's text was not found by the scanner: say so rather than guess
        try:
            stated, expr, _ = claims.split_claim(text)
        except claims.ClaimError as exc:
            msg = inliner.reporter.warning(str(exc), line=lineno)
            return [inliner.problematic(rawtext, rawtext, msg)], [msg]
        shown, ok = "(not evaluated)", False
        logger.warning("claim %r was not evaluated", text, location=(env.docname, lineno))
    node = claim_node(rawtext, stated, stated=stated, expr=expr, value=shown, ok=ok)
    return [node], []


def nonclaim_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    return [nodes.inline(rawtext, text, classes=["tm-nonclaim"])], []


_EXTERNAL = re.compile(
    r"<(?:script|link|img|iframe|source)\b[^>]*?\b(?:src|href)=\"(?:https?:)?//[^\"]+\"", re.I
)


#: A directive that reached the HTML as text: a fence the parser did not take (for example a
#: backtick fence whose opening line holds backticks, such as a claim in a dropdown title).
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
        if "_sources" not in name.parts:
            for match in _UNRENDERED.finditer(re.sub(r"<pre>.*?</pre>", "", text, flags=re.S)):
                logger.warning("%s shows unrendered markup %r: use a ::: fence for a directive "
                               "whose first line holds backticks", name, match.group(0))


def purge(app, env, docname) -> None:
    getattr(env, "tm_claims", {}).pop(docname, None)


def setup(app):
    plain = (visit_claim_plain, depart_claim_plain)
    app.add_node(claim_node, html=(visit_claim_html, None), text=plain, latex=plain,
                 man=plain, texinfo=plain)
    app.add_role("claim", claim_role)
    app.add_role("nonclaim", nonclaim_role)
    app.connect("source-read", evaluate_page)
    app.connect("env-purge-doc", purge)
    app.connect("build-finished", check_html)
    app.add_css_file("claims.css")
    return {"version": "1.0", "parallel_read_safe": False, "parallel_write_safe": True,
            "env_version": 1}
