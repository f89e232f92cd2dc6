"""Convert a site built with the old claim markup to the template contract (check_claims.py
--upgrade-legacy), so the browser check can run on the real pages before the Sphinx extension
emits the new markup. Delete this file once it does.

Old:  <span class="tm-claim tm-claim-ok" tabindex="0"><span class="tm-claim-text">112 GB</span>
      <span class="tm-claim-detail" role="tooltip"><span class="tm-claim-label">the arithmetic
      </span><code>state.total</code><span class="tm-claim-value">= 112 GB</span></span></span>
      and \\claim{112}{expr} inside TeX.
New:  <span class="tm-claim" id="tm-c-7">112 GB</span><template id="tm-c-7-detail">...</template>
      and \\class{tm-claim}{\\cssId{tm-c-9}{112}} inside TeX, the template after the math element.
"""

from __future__ import annotations

import re
from pathlib import Path

OLD = re.compile(
    r'<span class="tm-claim tm-claim-(?P<state>ok|failed)" tabindex="0">'
    r'<span class="tm-claim-text">(?P<text>.*?)</span>'
    r'<span class="tm-claim-detail" role="tooltip"><span class="tm-claim-label">[^<]*</span>'
    r"<code>(?P<expr>.*?)</code>"
    r'<span class="tm-claim-value">= (?P<value>.*?)</span></span></span>', re.S)
MATH = re.compile(r'(<(span|div) class="math notranslate nohighlight">)(.*?)(</\2>)', re.S)


def _template(cid, expr, steps):
    body = "".join(f'<div class="tm-step{" tm-value" if i == len(steps) - 1 else ""}">= {s}</div>'
                   for i, s in enumerate(steps))
    return (f'<template id="{cid}-detail"><div class="tm-detail">'
            f'<div class="tm-detail-label">The arithmetic</div>'
            f'<code class="tm-expr">{expr}</code>{body}</div></template>')


def _take_arg(tex, i):
    """The balanced {...} group at tex[i]; returns (inner, end)."""
    assert tex[i] == "{"
    depth, j = 0, i
    while j < len(tex):
        if tex[j] == "\\":
            j += 2
            continue
        if tex[j] == "{":
            depth += 1
        elif tex[j] == "}":
            depth -= 1
            if not depth:
                return tex[i + 1:j], j + 1
        j += 1
    raise ValueError(tex)


def upgrade_page(text: str, counter) -> str:
    start = text.find("<article")
    end = text.find("</article>")

    def inline(match):
        pos = match.start()
        inside_article = start <= pos <= end
        before = text[start:pos] if inside_article else ""
        in_link = before.rfind("<a ") > before.rfind("</a>")
        if not inside_article or in_link:
            return f'<span class="tm-claim-plain">{match["text"]}</span>'
        cid = f"tm-c-{next(counter)}"
        cls = "tm-claim" if match["state"] == "ok" else "tm-claim tm-claim-failed"
        return (f'<span class="{cls}" id="{cid}">{match["text"]}</span>'
                + _template(cid, match["expr"], [match["value"]]))

    text = OLD.sub(inline, text)

    def math(match):
        tex = match[3]
        templates = []
        out, i = [], 0
        while True:
            j = tex.find("\\claim{", i)
            if j < 0:
                out.append(tex[i:])
                break
            stated, k = _take_arg(tex, j + len("\\claim"))
            expr, k = _take_arg(tex, k)
            cid = f"tm-c-{next(counter)}"
            out.append(tex[i:j] + f"\\class{{tm-claim}}{{\\cssId{{{cid}}}{{{stated}}}}}")
            templates.append(_template(cid, expr, [stated]))
            i = k
        return match[1] + "".join(out) + match[4] + "".join(templates)

    return MATH.sub(math, text)


def upgrade_site(root: Path) -> int:
    total = 0
    for page in sorted(root.glob("*.html")):
        text = page.read_text(encoding="utf-8")
        if "tm-claim" not in text:
            continue
        count = iter(range(1, 100000))
        new = upgrade_page(text, count)
        total += next(count) - 1
        page.write_text(new, encoding="utf-8")
    return total
