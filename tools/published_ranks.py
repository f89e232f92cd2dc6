"""Where each published run's layout ranks in the planner, written to docs/_data/published-ranks.json
(`python tools/published_ranks.py`), or checked against it (`--check`: `make published`, in CI).

The page "Plan a training run" reads the file rather than running some hundred plans at every
build; `--check` reruns them all and fails, naming the run, the recorded rank and the computed
one, when the planner no longer gives what the file says.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from trainmath.checks.published import calibration_part, layout_rank, runs

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs/_data/throughput.json"
OUT = ROOT / "docs/_data/published-ranks.json"


def compute() -> dict:
    data = json.loads(DATA.read_text())
    rows = []
    for r in runs(data, calibration_part(data)):
        k = layout_rank(r)
        rows.append({"id": r.id, "rank": k.rank, "of": k.of, "best": k.best, "reason": k.reason})
    return {"about": "Computed by tools/published_ranks.py from throughput.json and the planner; "
                     "checked by `make published`.", "ranks": rows}


def main(argv: list[str]) -> int:
    got = compute()
    if "--check" not in argv:
        OUT.write_text(json.dumps(got, indent=1) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}: {len(got['ranks'])} runs")
        return 0
    recorded = {r["id"]: r for r in json.loads(OUT.read_text())["ranks"]}
    bad = [f"{r['id']}: recorded rank {recorded.get(r['id'], {}).get('rank')} of "
           f"{recorded.get(r['id'], {}).get('of')}, computed {r['rank']} of {r['of']}"
           for r in got["ranks"] if recorded.get(r["id"]) != r]
    if len(recorded) != len(got["ranks"]):
        bad.append(f"{OUT.name} has {len(recorded)} runs, throughput.json {len(got['ranks'])}")
    for line in bad:
        print(line, file=sys.stderr)
    print(f"{len(got['ranks']) - len(bad)} of {len(got['ranks'])} published layouts rank as "
          f"{OUT.name} records")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
