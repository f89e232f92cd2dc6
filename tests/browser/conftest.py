"""The browser suite: the built site in Debian's Chromium (``make browser``).

It runs only when ``TRAINMATH_BROWSER=1`` (``make browser`` sets it), so ``make test`` never
needs a browser. ``TRAINMATH_SITE`` picks the built site (default ``docs/_build/html``);
``TRAINMATH_BROWSER_REPORT`` where the table of page weights and axe results is written
(default ``docs/_build/browser-report.md``).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from suite import AXE, REPORT, RESULTS, SITE  # noqa: E402 - after the path that finds it

if os.environ.get("TRAINMATH_BROWSER") != "1":
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def site() -> Path:
    if not (SITE / "index.html").exists():
        pytest.fail(f"{SITE} has no index.html: build the site first (make docs)")
    return SITE


@pytest.fixture(scope="session")
def tmp_browser_dir():
    with tempfile.TemporaryDirectory(prefix="trainmath-browser-") as name:
        yield Path(name)


@pytest.fixture(scope="session")
def driver(tmp_browser_dir):
    import check_claims

    drv = check_claims.start_browser(tmp_browser_dir)
    yield drv
    drv.quit()


@pytest.fixture(scope="session")
def base(site):
    import check_claims

    server, url = check_claims.serve(site)
    yield url
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def axe_source() -> str:
    if not AXE.exists():
        pytest.fail(f"{AXE} is missing: run `npm ci` in tests/browser (make browser does)")
    return AXE.read_text(encoding="utf-8")


def _kb(n: float) -> str:
    return f"{n / 1000:,.1f}"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not RESULTS:
        return
    lines = ["| page | kind | bytes (KB) | gzip (KB) | requests | budget (KB) | axe serious/critical "
             "(light 1280, dark 390) |", "|---|---|---:|---:|---:|---:|---|"]
    for page in sorted(RESULTS):
        r = RESULTS[page]
        axe = r.get("axe", {})
        axe_text = ", ".join(f"{cfg}: {n}" for cfg, n in sorted(axe.items())) or "-"
        lines.append(f"| {page} | {r.get('kind', '-')} | {_kb(r.get('bytes', 0))} | "
                     f"{_kb(r.get('gzip', 0))} | {r.get('requests', 0)} | "
                     f"{_kb(r.get('budget', 0))} | {axe_text} |")
    for page in sorted(RESULTS):  # the calculator's timings (test_calculator.py)
        r = RESULTS[page]
        if "first_result_ms" in r:
            lines.append(f"\n{page}: first result {r['first_result_ms'] / 1000:.1f} s after "
                         f"navigation (Python up at {r['python_ms'] / 1000:.1f} s), later results "
                         f"{r.get('later_result_ms', '-')} ms (median); runtime loaded after the "
                         f"page: {_kb(r.get('deferred', 0))} KB")
    table = "\n".join(lines)
    try:
        REPORT.parent.mkdir(parents=True, exist_ok=True)
        REPORT.write_text(f"# Browser report: {SITE}\n\n{table}\n", encoding="utf-8")
        REPORT.with_suffix(".json").write_text(json.dumps(RESULTS, indent=1, sort_keys=True),
                                               encoding="utf-8")
    except OSError:
        pass
    terminalreporter.write_sep("-", "first load, empty cache: bytes, gzip, requests; axe")
    terminalreporter.write_line(table)
    terminalreporter.write_line(f"(written to {REPORT})")
