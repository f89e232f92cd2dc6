"""Every page of the built site in Chromium: weight, console, network, layout, widgets, axe.

For each page: a first load with an empty cache at 1280 px in the light theme counts every
request and its bytes, raw and compressed, and holds the compressed bytes (gzip level 6: what a
reader downloads from any static host, which compresses HTML, CSS and JavaScript) to the budget
(a page with math, a source listing or the search page: 150 KB; any other: 100 KB), fails on a console error or a request that leaves 127.0.0.1, and runs axe-core (pinned
in package.json); a load at 390 px in the dark theme runs axe-core again, fails when the page
scrolls sideways, and opens every dropdown and tab. A failure names the page, the check and the
element. Search has its own test; the claims' popups are test_claims.py's.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from suite import RESULTS, SITE, site_pages

#: compressed bytes, first load, every request. The raw bytes are reported beside them: a page
#: of inline SVG diagrams and checked numbers' popups is large raw and compresses about 7×
TEXT_BUDGET = 100_000
#: What the calculator page loads after it is usable (Pyodide and the trainmath wheel, started
#: by its load event): reported beside the first load as "deferred", not counted against it.
DEFERRED = ("_static/pyodide/", "_static/calculator/")
MATH_BUDGET = 150_000
#: axe-core's every impact: a page has no violation of any (issue 25).
IMPACTS = ("minor", "moderate", "serious", "critical")
CONFIGS = [("light", 1280, 800), ("dark", 390, 844), ("dark", 1280, 800), ("light", 390, 844)]


def is_math_page(site: Path, page: str) -> bool:
    """A page with an equation: MathML, or (an older build) a MathJax script."""
    text = (site / page).read_text(encoding="utf-8")
    return "<math" in text or re.search(r"<script[^>]*mathjax", text, re.I) is not None


WAIT_QUIET = """
const done = arguments[arguments.length - 1];
const started = Date.now();
let last = -1, since = Date.now();
(function wait() {
  if (Date.now() - started > 30000) return done("timeout");
  if (document.readyState !== "complete") return setTimeout(wait, 25);
  const mj = window.MathJax;  // a site that still typesets with MathJax: wait for it
  if (document.querySelector('script[src*="mathjax"]') && !(mj && mj.startup && mj.startup.promise))
    return setTimeout(wait, 25);
  const n = performance.getEntriesByType("resource").length;
  if (n !== last) { last = n; since = Date.now(); }
  if (Date.now() - since < 250) return setTimeout(wait, 25);
  const ready = mj && mj.startup && mj.startup.promise ? mj.startup.promise : Promise.resolve();
  ready.then(() => done("ok"), (e) => done("mathjax: " + e));
})();
"""


def load(driver, base, page, theme, width, height):
    """Load ``page`` in ``theme`` at ``width``, with an empty cache; the network events."""
    import check_claims

    check_claims.set_viewport(driver, width, height)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
    driver.execute_cdp_cmd("Network.clearBrowserCache", {})
    # furo reads the theme from localStorage as the page starts: set it before any script runs
    script = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {
        "source": f"localStorage.setItem('theme', {json.dumps(theme)});"})
    driver.get_log("browser")
    driver.get_log("performance")
    try:
        driver.get(base + page)
    finally:
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument",
                               {"identifier": script["identifier"]})
    state = driver.execute_async_script(WAIT_QUIET)
    events = []
    for entry in driver.get_log("performance"):
        try:
            events.append(json.loads(entry["message"])["message"])
        except (KeyError, ValueError):
            continue
    return state, events


def weigh(site: Path, base: str, events: list[dict]) -> dict:
    """Requests, bytes and gzip bytes of the first load, from the Network events."""
    urls, transferred = {}, {}
    for e in events:
        params = e.get("params", {})
        if e.get("method") == "Network.requestWillBeSent":
            urls[params["requestId"]] = params["request"]["url"]
        elif e.get("method") == "Network.loadingFinished":
            transferred[params["requestId"]] = params.get("encodedDataLength", 0)
    raw = packed = deferred = 0
    files = []
    for request_id, url in urls.items():
        parts = urlsplit(url)
        if parts.scheme in ("data", "blob", "about"):
            continue
        path = site / unquote(parts.path.lstrip("/"))
        if url.startswith(base) and parts.path.lstrip("/").startswith(DEFERRED):
            deferred += path.stat().st_size if path.is_file() else 0
            continue
        if path.is_dir():
            path = path / "index.html"
        data = path.read_bytes() if url.startswith(base) and path.is_file() else b""
        raw += len(data)
        packed += len(gzip.compress(data, 6, mtime=0)) if data else 0
        files.append((url[len(base):] if url.startswith(base) else url, len(data)))
    return {"requests": len([f for f in files]), "bytes": raw, "gzip": packed, "deferred": deferred,
            "transferred": sum(transferred.values()), "files": sorted(files, key=lambda f: -f[1])}


def describe_node(target) -> str:
    return " ".join(target) if isinstance(target, list) else str(target)


AXE_RUN = """
const done = arguments[arguments.length - 1];
axe.run(document, {resultTypes: ["violations"]}).then(r => done(r.violations.map(v => ({
  id: v.id, impact: v.impact, help: v.help, count: v.nodes.length,
  nodes: v.nodes.slice(0, 4).map(n => n.target.map(String).join(" "))
})))).catch(e => done({error: String(e)}));
"""


def run_axe(driver, axe_source) -> list[dict] | dict:
    driver.execute_script(axe_source)
    return driver.execute_async_script(AXE_RUN)


SIDEWAYS = """
const root = document.documentElement, vw = root.clientWidth;
if (root.scrollWidth <= vw + 1 && document.body.scrollWidth <= vw + 1) return null;
function clipped(el) {  // inside something that scrolls or clips sideways by itself
  for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
    const o = getComputedStyle(p).overflowX;
    if (o === "auto" || o === "scroll" || o === "hidden" || o === "clip") return true;
  }
  return false;
}
const out = [];
for (const el of document.body.querySelectorAll("*")) {
  const r = el.getBoundingClientRect();
  if (r.right > vw + 1 && r.width && !clipped(el)) {
    out.push(el.localName + (el.id ? "#" + el.id : "") +
      (typeof el.className === "string" && el.className ? "." + el.className.split(/\\s+/).join(".") : "") +
      " (right edge " + Math.round(r.right) + " px): " + (el.textContent || "").trim().slice(0, 60));
    if (out.length >= 5) break;
  }
}
return {scrollWidth: root.scrollWidth, width: vw, culprits: out};
"""

WIDGETS = """
const out = [];
function name(el) { return (el.textContent || "").replace(/\\s+/g, " ").trim().slice(0, 60); }
function shown(el) { return !!el && el.getClientRects().length > 0 && el.offsetHeight > 0; }
let dropdowns = 0, tabs = 0;
for (const d of document.querySelectorAll("details")) {
  const summary = d.querySelector(":scope > summary");
  if (!summary || d.closest(".tm-popup")) continue;
  if (!shown(summary)) continue;  // inside a closed dropdown or another tab: reached later
  dropdowns++;
  const was = d.open;
  if (was) summary.click();
  summary.click();
  const body = [...d.children].find(c => c !== summary);
  if (!d.open) out.push("dropdown '" + name(summary) + "': a click did not open it");
  else if (body && !shown(body)) out.push("dropdown '" + name(summary) + "': open, its content is not shown");
}
for (const set of document.querySelectorAll(".sd-tab-set")) {
  for (const label of set.querySelectorAll(":scope > label")) {
    if (!shown(label)) continue;
    tabs++;
    label.click();
    const input = document.getElementById(label.getAttribute("for"));
    let content = label.nextElementSibling;
    while (content && !content.classList.contains("sd-tab-content")) content = content.nextElementSibling;
    if (!input || !input.checked) out.push("tab '" + name(label) + "': a click did not select it");
    else if (!shown(content)) out.push("tab '" + name(label) + "': selected, its content is not shown");
  }
}
return {failures: out, dropdowns: dropdowns, tabs: tabs};
"""


def console_and_network(driver, base) -> list[str]:
    out = []
    for entry in driver.get_log("browser"):
        if entry.get("level") == "SEVERE":
            out.append(f"console error: {entry.get('message', '')[:240]}")
    return out


def left_localhost(events, base) -> list[str]:
    out = []
    for e in events:
        if e.get("method") != "Network.requestWillBeSent":
            continue
        url = e["params"]["request"]["url"]
        if urlsplit(url).scheme in ("data", "blob", "about", "chrome-extension", "devtools"):
            continue
        if not url.startswith(base):
            out.append(f"a request left 127.0.0.1: {url[:200]}")
    return out


@pytest.mark.parametrize("page", site_pages())
def test_page(page, site, base, driver, axe_source):
    failures: list[str] = []
    record = RESULTS.setdefault(page, {})
    math = is_math_page(site, page)
    # a module's highlighted source (Sphinx's viewcode, linked from each [source]) is a code
    # listing, not a page to read: it gets the larger budget, like a page with math
    source = page.startswith("_modules/trainmath/")
    # the search page loads the site's search index, every page's words: it grows with the
    # site, and gets the larger budget too
    source = source or page == "search.html"
    budget = MATH_BUDGET if (math or source) else TEXT_BUDGET
    record.update(kind="math" if math else "source" if source else "text", budget=budget, axe={})

    for theme, width, height in CONFIGS:
        config = f"{theme} {width}"
        state, events = load(driver, base, page, theme, width, height)
        if state != "ok":
            failures.append(f"[{config}] load: the page did not settle: {state}")
        failures += [f"[{config}] network: {m}" for m in left_localhost(events, base)]
        failures += [f"[{config}] console: {m}" for m in console_and_network(driver, base)]
        got = driver.execute_script("return document.body.dataset.theme")
        if got != theme:
            failures.append(f"[{config}] theme: furo's theme is {got!r}, not {theme!r}")
        if theme == "light":
            weight = weigh(site, base, events)
            record.update({k: weight[k] for k in ("requests", "bytes", "gzip", "transferred",
                                                  "deferred")})
            record["largest"] = weight["files"][:5]
            if weight["gzip"] >= budget:
                top = ", ".join(f"{name} {size / 1000:.0f} KB" for name, size in weight["files"][:4])
                failures.append(f"[{config}] weight: {weight['gzip'] / 1000:.0f} KB compressed "
                                f"({weight['bytes'] / 1000:.0f} KB raw) in "
                                f"{weight['requests']} requests, over the "
                                f"{budget // 1000} KB budget of a {record['kind']} page "
                                f"(largest, raw: {top})")
        if width < 600:
            sideways = driver.execute_script(SIDEWAYS)
            if sideways:
                failures.append(f"[{config}] sideways scroll: the page is "
                                f"{sideways['scrollWidth']} px wide in a {sideways['width']} px "
                                f"viewport; past the edge: " + "; ".join(sideways["culprits"]))
        violations = run_axe(driver, axe_source)
        if isinstance(violations, dict):
            failures.append(f"[{config}] axe: did not run: {violations.get('error')}")
            violations = []
        bad = [v for v in violations if v["impact"] in IMPACTS]
        record["axe"][config] = len(bad)
        record.setdefault("axe_rules", {})[config] = [
            f"{v['id']} ({v['impact']}, {v['count']})" for v in violations]
        for v in bad:
            failures.append(f"[{config}] axe {v['id']} ({v['impact']}, {v['count']} elements: "
                            f"{v['help']}): " + " | ".join(v["nodes"]))
        if width < 600:
            widgets = driver.execute_script(WIDGETS)
            record["dropdowns"], record["tabs"] = widgets["dropdowns"], widgets["tabs"]
            failures += [f"[{config}] widgets: {m}" for m in widgets["failures"]]
            failures += [f"[{config}] console: {m}" for m in console_and_network(driver, base)]

    assert not failures, f"{page}:\n  " + "\n  ".join(failures)


def test_search(site, base, driver):
    """Search for ZeRO: results, each with a snippet free of popup text, TeX and hidden code."""
    import check_claims

    if not (site / "search.html").exists():
        pytest.skip("the site has no search page")
    report = check_claims.Report()
    check_claims.set_viewport(driver, 1280, 800)
    check_claims.check_search(driver, base, site, report, "1280x800 light")
    failures = [f"{page} [{config}] {claim or '-'}: {what}"
                for page, claim, config, what in report.failures]
    assert not failures, "search:\n  " + "\n  ".join(failures)


def test_pages_found():
    assert site_pages(), f"no pages under {SITE}: build the site first (make docs)"


#: Explanatory figures the built site must have at least (issue 27)
MIN_FIGURES = 40


def test_the_site_draws_its_ideas(site):
    """At least MIN_FIGURES concept diagrams (trainmath.report.diagrams, shown checked), each an
    inline SVG image with a title that states what it shows and colours from the theme."""
    figures = {}
    for page in site_pages(site):
        html = (site / page).read_text(encoding="utf-8")
        found = re.findall(r'<figure class="tm-figure tm-explain">(.*?)</figure>', html, re.S)
        for svg in found:
            assert 'role="img"' in svg and "<title" in svg, f"{page}: a diagram without alt text"
            assert "#000" not in svg and "black" not in svg, f"{page}: a colour the dark theme loses"
        if found:
            figures[page] = len(found)
    total = sum(figures.values())
    assert total >= MIN_FIGURES, f"{total} explanatory figures ({figures}); at least {MIN_FIGURES}"
