"""docs/references.bib: every cited work once, each with what a reader needs to find it, and the
pages cite by key (the lint in conftest.py refuses typed years and arXiv/DOI links)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIB = (ROOT / "docs" / "references.bib").read_text(encoding="utf-8")
ENTRIES = {m["key"]: m["body"] for m in re.finditer(
    r"^@\w+\{(?P<key>[\w-]+),\n(?P<body>.*?)^\}", BIB, re.MULTILINE | re.DOTALL)}


def field(key: str, name: str) -> str | None:
    m = re.search(rf"^\s*{name}\s*=\s*\{{(.*?)\}},?\s*$", ENTRIES[key], re.MULTILINE | re.DOTALL)
    return None if m is None else " ".join(m.group(1).split())


def test_every_entry_has_authors_year_title_and_a_way_to_find_it():
    assert len(ENTRIES) >= 20
    for key in ENTRIES:
        assert field(key, "author") and field(key, "title"), key
        assert re.fullmatch(r"(19|20)\d\d", field(key, "year") or ""), key
        assert field(key, "eprint") or field(key, "doi") or field(key, "url"), key


def test_every_cited_key_is_in_the_bibliography_and_every_entry_is_cited():
    cited = set()
    for page in (ROOT / "docs").glob("*.md"):
        for role in re.finditer(r"\{cite:[tp]\}`([^`]*)`", page.read_text(encoding="utf-8")):
            keys = re.sub(r"\{[^{}]*\}", "", role.group(1))  # pre- and post-text: "{§4.1, eq. 1}"
            cited |= {k.strip() for k in keys.split(",")}
    assert cited <= set(ENTRIES), cited - set(ENTRIES)
    assert set(ENTRIES) <= cited, set(ENTRIES) - cited


def test_the_arxiv_ids_of_the_works_the_issue_corrected():
    """MiCS is arXiv 2205.00119 (Zhang et al. 2022), not 2203.06389; the papers this site leans
    on most carry their own ids."""
    assert field("zhang2022mics", "eprint") == "2205.00119"
    assert field("rajbhandari2020zero", "eprint") == "1910.02054"
    assert field("korthikanti2022reducing", "eprint") == "2205.05198"
    assert field("narayanan2021efficient", "eprint") == "2104.04473"
    assert field("shoeybi2019megatron", "eprint") == "1909.08053"
    assert field("micikevicius2018mixed", "eprint") == "1710.03740"
    assert field("touvron2023llama", "eprint") == "2302.13971"  # LLaMA: Table 2 has the shapes
    assert field("touvron2023llama2", "eprint") == "2307.09288"
