"""Every claim's popup on hover and focus, at 1280 and 390 px, light and dark (check_claims.py).

The hand-made fixture page first (the claims' HTML contract, tests/browser/fixture/), then each
page of the built site that has claims. A failure names the page, the configuration, the claim
and what went wrong.
"""

from __future__ import annotations

import argparse

import check_claims
import pytest
from suite import HERE, SITE

ARGS = argparse.Namespace(full_pointer=False, screenshots=None)


def claim_pages() -> list[str]:
    if not SITE.is_dir():
        return []
    return sorted(p.name for p in SITE.glob("*.html")
                  if p.name not in check_claims.SKIP_PAGES
                  and 'id="tm-c-' in p.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def probe() -> str:
    return (HERE / "probe.js").read_text(encoding="utf-8")


def failures_of(report) -> list[str]:
    return [f"{page} [{config}] {claim or '-'}: {what}"
            for page, claim, config, what in report.failures]


def test_fixture(site, driver, probe, tmp_browser_dir):
    """The claims' HTML contract on the hand-made page, with mystclaims' files as they are."""
    root = check_claims.fixture_root(site, tmp_browser_dir)
    server, url = check_claims.serve(root)
    report = check_claims.Report()
    try:
        check_claims.check_target(driver, url, root, ["index.html"], report, ARGS, probe, True)
    finally:
        server.shutdown()
        server.server_close()
    failures = failures_of(report)
    assert report.claims, "the fixture has no claims"
    assert not failures, "\n  ".join(["fixture:"] + failures)


@pytest.mark.parametrize("page", claim_pages())
def test_claims(page, site, base, driver, probe):
    report = check_claims.Report()
    check_claims.check_target(driver, base, site, [page], report, ARGS, probe, False,
                              search=False)
    failures = failures_of(report)
    assert not failures, "\n  ".join([f"{page}:"] + failures)
