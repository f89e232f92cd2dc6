"""python -m validate.measure [--only REGEX] [--output PATH] | --report [PATH] | --list"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validate.measure", description=__doc__)
    parser.add_argument("--only", metavar="REGEX",
                        help="re-measure only the configurations whose id matches; keep the rest")
    parser.add_argument("--output", type=Path, default=None,
                        help="where to write (default docs/_data/measurements.json)")
    parser.add_argument("--report", action="store_true",
                        help="print the recorded figures as Markdown tables and exit")
    parser.add_argument("--list", action="store_true", help="list the configuration ids and exit")
    args = parser.parse_args(argv)

    if args.report:  # no torch needed
        from . import report
        path = args.output or report.DEFAULT
        print(report.render(json.loads(path.read_text())))
        return 0

    from . import configs
    out = args.output or configs.OUTPUT
    todo = configs.configurations()
    if args.list:
        print("\n".join(c.id + ("  (fast)" if c.fast else "") for c in todo))
        return 0
    previous = {}
    if args.only:
        pattern = re.compile(args.only)
        if not out.exists():
            parser.error(f"--only updates {out}, which does not exist; measure everything first")
        previous = {c["id"]: c["measured"] for c in json.loads(out.read_text())["configurations"]}
        chosen = [c for c in todo if pattern.search(c.id)]
        if not chosen:
            parser.error(f"no configuration id matches {args.only!r}")
    else:
        chosen = todo
    start = time.perf_counter()
    results = configs.measure_all(chosen, log=lambda line: print(line, file=sys.stderr, flush=True))
    missing = [c.id for c in todo if c.id not in results and c.id not in previous]
    if missing:
        parser.error(f"no measurement recorded for {missing[:3]}...; run without --only")
    merged = {c.id: results.get(c.id, previous.get(c.id)) for c in todo}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(configs.dumps(configs.document(merged, todo)))
    print(f"measured {len(chosen)} configurations in {time.perf_counter() - start:.0f} s; "
          f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
