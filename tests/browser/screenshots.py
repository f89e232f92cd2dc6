"""Screenshots of the built site's figures and equations, to look at (not a test).

    .venv/bin/python tests/browser/screenshots.py OUT_DIR [--site docs/_build/html]

For every page with a figure or an equation: each figure and each display equation as its own
PNG (device scale 2), at 390 px in the dark theme and at 1280 px in the light one, plus the top of
each such page in both. It serves the site on 127.0.0.1 and uses Debian's Chromium, like the
suite.
"""

from __future__ import annotations

import argparse
import base64
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import check_claims  # noqa: E402
from suite import SITE  # noqa: E402

CONFIGS = [("dark", 390, 844), ("light", 1280, 800)]


def shoot(driver, path: Path, clip=None) -> None:
    params = {"format": "png", "captureBeyondViewport": True}
    if clip:
        params["clip"] = {**clip, "scale": 1}
    data = driver.execute_cdp_cmd("Page.captureScreenshot", params)["data"]
    path.write_bytes(base64.b64decode(data))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--site", default=str(SITE))
    args = parser.parse_args(argv)
    site, out = Path(args.site), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pages = sorted(p.name for p in site.glob("*.html")
                   if any(m in p.read_text(encoding="utf-8") for m in ("tm-chart", "<math")))
    with tempfile.TemporaryDirectory(prefix="trainmath-shots-") as tmp:
        server, base = check_claims.serve(site)
        driver = check_claims.start_browser(Path(tmp))
        try:
            for theme, width, height in CONFIGS:
                driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
                    "width": width, "height": height, "deviceScaleFactor": 2,
                    "mobile": width < 600})
                driver.get(base + "index.html")
                driver.execute_script("localStorage.setItem('theme', arguments[0]);", theme)
                for page in pages:
                    stem = f"{page[:-5]}-{width}-{theme}"
                    driver.get(base + page)
                    time.sleep(0.3)
                    shoot(driver, out / f"{stem}-top.png",
                          {"x": 0, "y": 0, "width": width, "height": height})
                    boxes = driver.execute_script("""
                      return [...document.querySelectorAll("figure.tm-figure, div.math")].map(el => {
                        const r = el.getBoundingClientRect();
                        return {kind: el.localName === "figure" ? "figure" : "equation",
                                x: Math.max(0, r.left + scrollX - 8), y: r.top + scrollY - 8,
                                width: Math.min(r.width + 16, document.documentElement.clientWidth),
                                height: r.height + 16};
                      });""")
                    counts = {}
                    for box in boxes:
                        kind = box.pop("kind")
                        counts[kind] = counts.get(kind, 0) + 1
                        shoot(driver, out / f"{stem}-{kind}{counts[kind]}.png", box)
                    print(f"{stem}: {counts}")
        finally:
            driver.quit()
            server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
