"""Every page's code, claims, unchecked numbers and ``$ trainmath`` examples run as tests,
and so does every ``>>>`` example in the library's docstrings.

The machinery is the ``mystclaims`` package (``tools/mystclaims``); see CONTRIBUTING.md.
"""

from mystclaims.scanner import Lint
from mystclaims.sybil import collect

from trainmath.cli.command import main

#: The site cites by key from docs/references.bib: a citation year or a link to a paper typed in
#: a page's prose fails, as does a number in words that is not a claim (CONTRIBUTING.md).
LINT = Lint(
    names=frozenset({"1F1B"}),  # the pipeline schedule, a name that starts with a digit
    citation_years=False,
    source_links=(r"arxiv\.org", r"doi\.org"),
)

pytest_collect_file = collect(
    pages=["docs/*.md", "docs/reference/*.md", "docs/reference/**/*.md"],
    guides=["README.md", "CONTRIBUTING.md"],  # their code and claims run; no number lint
    docstrings=["src/trainmath/*.py", "src/trainmath/**/*.py", "src/trainmath/*/*/*.py"],  # imported as trainmath.x, the installed package
    docstring_excludes=["src/trainmath/__main__.py"],
    lint=LINT,
    commands={"trainmath": main},
)
