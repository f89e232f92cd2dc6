"""What the browser suite's modules share: where the site is, its pages, the results table."""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SITE = Path(os.environ.get("TRAINMATH_SITE", ROOT / "docs" / "_build" / "html")).resolve()
REPORT = Path(os.environ.get("TRAINMATH_BROWSER_REPORT",
                             ROOT / "docs" / "_build" / "browser-report.md"))
AXE = HERE / "node_modules" / "axe-core" / "axe.min.js"

#: What each page measured, for the report: page -> {"bytes", "gzip", "requests", "axe", ...}.
RESULTS: dict[str, dict] = {}


def site_pages(site: Path = SITE) -> list[str]:
    """Every HTML page of the built site (its source listings under _sources excluded)."""
    if not (site / "index.html").exists():
        return []
    return sorted(str(p.relative_to(site)) for p in site.rglob("*.html")
                  if "_sources" not in p.parts)
