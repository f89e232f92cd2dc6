"""The pages teach: each topic page's main line reads in a quarter of an hour, the detail that
audits rather than teaches sits in "Going deeper" asides, each page sets problems that make the
reader compute (with worked answers hidden until asked), and the site draws its ideas.

Conventions (CONTRIBUTING.md): an aside is a dropdown whose title starts "Going deeper"; a
problem is a dropdown whose title starts "Worked answer" placed after the problem's text, under
a "## Problems" section; a concept figure is a ``trainmath.report.diagrams.Diagram`` shown with
``mystclaims.figures.checked``. The main line is the page's prose outside code cells, asides
and answers, read at 200 words a minute.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mystclaims.reading import WORDS_PER_MINUTE, minutes

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: The explanation pages, in the reading order the index gives
TOPIC_PAGES = ("memory-math", "mixed-precision", "zero-fsdp", "distributed-training",
               "mixture-of-experts", "fine-tuning", "post-training")
#: The most a topic page's main line may take to read, in minutes (issue 27)
MAX_MINUTES = 15
#: Multi-step problems with worked answers a topic page sets, at least
MIN_PROBLEMS = 3

@pytest.mark.parametrize("page", TOPIC_PAGES)
def test_the_main_line_reads_in_a_quarter_of_an_hour(page, monkeypatch):
    monkeypatch.chdir(ROOT)
    took = minutes(page)
    assert took <= MAX_MINUTES, (f"{page}.md: the main line takes {took:.1f} minutes at "
                                 f"{WORDS_PER_MINUTE} words a minute; move detail into "
                                 "'Going deeper' dropdowns")


@pytest.mark.parametrize("page", TOPIC_PAGES)
def test_each_topic_page_sets_problems_with_worked_answers(page):
    text = (DOCS / f"{page}.md").read_text(encoding="utf-8")
    assert "\n## Problems\n" in text, f"{page}.md has no '## Problems' section"
    problems = text.split("\n## Problems\n", 1)[1]
    answers = re.findall(r"^:{3,}\{dropdown\} Worked answer", problems, flags=re.M)
    assert len(answers) >= MIN_PROBLEMS, (f"{page}.md sets {len(answers)} problems with worked "
                                          f"answers; at least {MIN_PROBLEMS}")


def test_the_reading_times_the_index_states_are_the_pages():
    """The index states each page's reading time as a claim on this module's minutes()."""
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    for page in TOPIC_PAGES:
        assert f"minutes('{page}')" in index or f'minutes("{page}")' in index, page
