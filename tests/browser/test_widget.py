"""The pages' small calculators ({calculator-widget}) in Chromium.

On a copy of the calculator page whose own calculator is switched off (so that nothing else
starts Python), and on every built page that carries one: nothing of the runtime loads until
the reader scrolls to a small calculator; then each field changed gives the command's own JSON
(``python -m trainmath estimate``, a new process) and its chart; bad input shows the command's
message beside the field; "Open in the calculator" shows the same result on the calculator
page; without JavaScript the example's chart stays, with a sentence and the link; at 390 px in
the dark theme nothing scrolls sideways and axe-core finds nothing serious; and once loaded the
page works with the server gone.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from suite import SITE, site_pages
from test_calculator import SHOWN, command, open_page

FIXTURE = "widget-only.html"
#: For each preset: the fields to change and the values typed (the rest stay as built).
CHANGES = {
    "memory": [("recipe", "fp32"), ("seq-len", "2048")],
    "zero": [("dp", "64"), ("zero", "1")],
    "distributed": [("tp", "4"), ("pp", "8"), ("gpu", "h200")],
}

WAIT = """
const [id, want] = [arguments[0], arguments[1]];
const done = arguments[arguments.length - 1];
const started = Date.now();
(function wait() {
  const root = document.getElementById(id);
  if (root.dataset.ready === "failed") return done("failed: " + root.querySelector(".tm-w-status").textContent);
  if (Number(root.dataset.runs || 0) >= want && root.dataset.ready === "true") return done("ok");
  if (Date.now() - started > 60000) return done("timeout: " + root.dataset.ready);
  setTimeout(wait, 25);
})();
"""

STATE = """
const root = document.getElementById(arguments[0]);
const out = root.tmLast || {};
return {stdout: out.stdout || "", summary: root.querySelector(".tm-w-summary").textContent,
        chart: root.querySelector(".tm-w-chart").innerHTML, status: root.querySelector(".tm-w-result").dataset.status,
        line: root.querySelector(".tm-w-cmd").textContent, href: root.querySelector(".tm-w-open a").getAttribute("href"),
        errors: [...root.querySelectorAll(".tm-calc-error")].filter(e => e.textContent).map(e => [e.dataset.errorFor, e.textContent]),
        invalid: [...root.querySelectorAll('[aria-invalid="true"]')].map(e => e.name),
        runs: Number(root.dataset.runs || 0), ready: root.dataset.ready || null,
        fixed: JSON.parse(root.dataset.fixed), preset: root.dataset.preset,
        values: [...root.querySelector("form").elements].filter(e => e.name).map(e => [e.name, e.value])};
"""

RUNTIME = """
return performance.getEntriesByType("resource").map(e => e.name)
  .filter(n => /_static\\/(pyodide|calculator)\\/|calculator-runtime|calculator-worker/.test(n));
"""


@pytest.fixture(scope="module")
def copy(site):
    """A copy of the built site with ``widget-only.html``: the calculator page without its
    calculator, so that only the small calculators can start Python."""
    if not (site / "calculator.html").exists():
        pytest.fail(f"{site / 'calculator.html'} is missing: build the site (make docs)")
    with tempfile.TemporaryDirectory(prefix="trainmath-widget-") as tmp:
        out = Path(tmp) / "html"
        shutil.copytree(site, out)
        text = (site / "calculator.html").read_text(encoding="utf-8")
        assert 'id="tm-calculator"' in text and "tm-calc-widget" in text
        (out / FIXTURE).write_text(text.replace('id="tm-calculator"', 'id="tm-calculator-off"'),
                                   encoding="utf-8")
        yield out


@pytest.fixture(scope="module")
def url(copy):
    import check_claims

    server, base = check_claims.serve(copy)
    yield base
    server.shutdown()
    server.server_close()


def widget_ids(driver) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll('.tm-calc-widget')].map(w => w.id)")


def scroll_to(driver, ident: str) -> None:
    driver.execute_script("document.getElementById(arguments[0]).scrollIntoView("
                          "{block: 'center', behavior: 'instant'})", ident)


def wait(driver, ident: str, runs: int = 0) -> None:
    driver.set_script_timeout(90)
    state = driver.execute_async_script(WAIT, ident, runs)
    assert state == "ok", f"{ident}: {state}"


def load_fresh(driver, page_url: str, width: int = 1280, height: int = 800) -> None:
    import check_claims

    check_claims.set_viewport(driver, width, height)
    driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
    driver.get(page_url)
    driver.execute_async_script("""
      const done = arguments[arguments.length - 1];
      if (document.readyState === "complete") setTimeout(done, 300);
      else addEventListener("load", () => setTimeout(done, 300));""")


def set_field(driver, ident: str, name: str, value: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    el = driver.find_element(By.ID, f"{ident}-{name}")
    if el.tag_name == "select":
        Select(el).select_by_value(value)
    else:
        el.clear()
        el.send_keys(value)


def settle(driver, ident: str) -> dict:
    """The small calculator's state once its runs stop (the debounced run of the last key)."""
    time.sleep(0.2)
    last, deadline = -1, time.time() + 20
    state = driver.execute_script(STATE, ident)
    while state["runs"] != last and time.time() < deadline:
        last = state["runs"]
        time.sleep(0.3)
        state = driver.execute_script(STATE, ident)
    return state


def args_of(state: dict) -> list[str]:
    from trainmath.cli.calculator import to_argv

    return to_argv("estimate", state["values"] + state["fixed"])[1:-1]


def test_nothing_loads_until_the_reader_scrolls_to_it(url, driver):
    load_fresh(driver, url + FIXTURE)
    time.sleep(1.0)
    assert driver.execute_script(RUNTIME) == [], "the runtime loaded before the reader came"
    ids = widget_ids(driver)
    assert len(ids) == len(CHANGES)
    for ident in ids:
        state = driver.execute_script(STATE, ident)
        assert state["ready"] is None
        assert driver.execute_script(
            "return document.getElementById(arguments[0]).querySelector('fieldset').disabled",
            ident) is False, "the script did not enable the fields"
        assert "Peak of a step" in state["summary"] and 'role="img"' in state["chart"]
    scroll_to(driver, ids[0])
    wait(driver, ids[0])
    assert any("calculator-worker" in n for n in driver.execute_script(RUNTIME))  # Python's worker


def test_each_field_changed_gives_the_commands_result(url, driver):
    load_fresh(driver, url + FIXTURE)
    for ident in widget_ids(driver):
        scroll_to(driver, ident)
        wait(driver, ident)
        preset = driver.execute_script(STATE, ident)["preset"]
        for name, value in CHANGES[preset]:
            before = driver.execute_script(STATE, ident)["runs"]
            set_field(driver, ident, name, value)
            state = settle(driver, ident)
            assert state["runs"] > before, f"{ident}: changing {name} ran nothing"
            expected = command(args_of(state))
            assert expected.returncode == 0, expected.stderr
            assert state["status"] == "0" and not state["errors"], state["errors"]
            assert state["stdout"] == expected.stdout, f"{preset}: {name}={value}: not the command's JSON"
            data = json.loads(expected.stdout)
            gb = f"{data['peak']['bytes'] / 1e9:.2f} GB"
            assert gb in state["summary"], (gb, state["summary"])
            for kind, n in data["peak"]["parts"].items():
                assert f"{kind.replace('_', ' ')} {n / 1e9:.2f} GB" in state["chart"]
            assert state["line"] == "trainmath estimate " + " ".join(args_of(state))
            assert f"{name}={value}" in state["href"]


def test_bad_input_gives_the_commands_message_beside_the_field(url, driver):
    load_fresh(driver, url + FIXTURE)
    (ident,) = [i for i in widget_ids(driver) if driver.execute_script(STATE, i)["preset"] == "zero"]
    scroll_to(driver, ident)
    wait(driver, ident)
    set_field(driver, ident, "dp", "0")
    state = settle(driver, ident)
    expected = command(args_of(state))
    assert expected.returncode == 2 and state["status"] == "2"
    assert state["errors"] == [["dp", expected.stderr.strip()]]
    assert state["invalid"] == ["dp"]
    assert 'role="img"' in state["chart"] and driver.execute_script(  # the last good one, dimmed
        "return document.getElementById(arguments[0]).querySelector('.tm-w-result')"
        ".classList.contains('tm-calc-stale')", ident)
    set_field(driver, ident, "dp", "8")
    state = settle(driver, ident)
    assert state["status"] == "0" and not state["errors"] and not state["invalid"]


def test_open_in_the_calculator_shows_the_same_result(url, driver):
    load_fresh(driver, url + FIXTURE)
    ids = widget_ids(driver)
    ident = ids[-1]
    scroll_to(driver, ident)
    wait(driver, ident)
    set_field(driver, ident, "pp", "8")
    state = settle(driver, ident)
    assert state["href"].startswith("calculator.html#cmd=estimate&")
    driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": False})
    open_page(driver, url + state["href"])
    shown = driver.execute_script(SHOWN)
    assert shown["json"] == state["stdout"], "the calculator shows another result"


def test_without_javascript_the_examples_chart_stays_with_a_link(url, driver):
    from selenium.webdriver.common.by import By

    from trainmath.cli.calculator import to_argv

    driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    try:
        driver.get(url + FIXTURE)
        time.sleep(1.0)
        roots = driver.find_elements(By.CSS_SELECTOR, ".tm-calc-widget")
        assert len(roots) == len(CHANGES)
        for root in roots:  # read with WebDriver alone: the page's scripts do not run
            fieldset = root.find_element(By.TAG_NAME, "fieldset")
            assert fieldset.get_attribute("disabled") is not None
            status = root.find_element(By.CSS_SELECTOR, ".tm-w-status").text
            assert "needs JavaScript" in status, status
            summary = root.find_element(By.CSS_SELECTOR, ".tm-w-summary").text
            assert root.find_elements(By.CSS_SELECTOR, '.tm-w-chart [role="img"]')
            href = root.find_element(By.CSS_SELECTOR, ".tm-w-open a").get_attribute("href")
            assert re.match(r".*/calculator\.html#cmd=estimate&model=", href), href
            values = [(el.get_attribute("name"), el.get_attribute("value")) for el in
                      fieldset.find_elements(By.CSS_SELECTOR, "[name]")]
            fixed = json.loads(root.get_attribute("data-fixed"))
            expected = command(to_argv("estimate", values + fixed)[1:-1])
            data = json.loads(expected.stdout)
            assert f"{data['peak']['bytes'] / 1e9:.2f} GB" in summary, summary
    finally:
        driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})


@pytest.mark.parametrize("theme,width,height", [("light", 1280, 800), ("dark", 390, 844)])
def test_phone_and_dark_theme(url, driver, axe_source, theme, width, height):
    import check_claims
    from test_site import IMPACTS, SIDEWAYS, run_axe

    check_claims.set_viewport(driver, width, height)
    driver.get(url + "index.html")
    driver.execute_script(f"localStorage.setItem('theme', '{theme}')")
    load_fresh(driver, url + FIXTURE, width, height)
    assert driver.execute_script("return document.body.dataset.theme") == theme
    shots = Path(tempfile.gettempdir()) / "trainmath-widget-shots"
    shots.mkdir(exist_ok=True)
    for ident in widget_ids(driver):
        scroll_to(driver, ident)
        wait(driver, ident)
        driver.save_screenshot(str(shots / f"{theme}-{width}-{ident}.png"))
    bad = [v for v in run_axe(driver, axe_source) if v["impact"] in IMPACTS]
    assert not bad, [(v["id"], v["nodes"]) for v in bad]
    if width < 600:
        assert driver.execute_script(SIDEWAYS) is None
    check_claims.set_viewport(driver, 1280, 800)


def test_works_offline_once_loaded(copy, driver):
    import check_claims

    server, base = check_claims.serve(copy)
    driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": False})
    try:
        driver.get(base + FIXTURE)  # the reader asks to keep it offline (the calculator's box)
        driver.execute_script("localStorage.setItem('tm-offline', 'yes')")
        for _ in range(2):  # the second time, through the service worker
            driver.get(base + FIXTURE)
            ident = widget_ids(driver)[0]
            scroll_to(driver, ident)
            wait(driver, ident)
            driver.execute_async_script("""
              const done = arguments[arguments.length - 1];
              navigator.serviceWorker.ready.then(() => done(true));""")
        assert driver.execute_script("return !!navigator.serviceWorker.controller")
    finally:
        server.shutdown()
        server.server_close()
    try:
        driver.get(base + FIXTURE)
        ident = widget_ids(driver)[0]
        scroll_to(driver, ident)
        wait(driver, ident)
        set_field(driver, ident, "seq-len", "1024")
        state = settle(driver, ident)
        assert state["stdout"] == command(args_of(state)).stdout
    finally:
        from test_calculator import forget_offline

        forget_offline(driver)


@pytest.mark.parametrize("page", [p for p in site_pages(SITE) if p != "calculator.html"
                                  and "tm-calc-widget" in (SITE / p).read_text(encoding="utf-8")]
                         or [pytest.param("-", marks=pytest.mark.skip(
                             reason="no page but the calculator carries a small calculator yet"))])
def test_every_page_with_one(base, driver, page):
    """A topic page's small calculators: nothing loads before the reader scrolls, and then each
    gives the command's result."""
    load_fresh(driver, base + page)
    time.sleep(0.5)
    if driver.execute_script("return window.scrollY") == 0:
        assert driver.execute_script(RUNTIME) == []
    for ident in widget_ids(driver):
        scroll_to(driver, ident)
        time.sleep(0.5)
        if driver.execute_script(STATE, ident)["ready"] is None:
            # on the page's first screen it waits for the reader: touch its first field
            from selenium.webdriver.common.by import By

            driver.find_element(By.CSS_SELECTOR, f"#{ident} [name]").click()
        wait(driver, ident, 0)
        state = driver.execute_script(STATE, ident)
        name, value = CHANGES[state["preset"]][0]
        set_field(driver, ident, name, value)
        state = settle(driver, ident)
        assert state["stdout"] == command(args_of(state)).stdout, f"{page} {ident}"
