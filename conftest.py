"""Every page's code, claims, unchecked numbers and ``$ trainmath`` examples run as tests,
and so does every ``>>>`` example in the library's docstrings.

The machinery is the ``mystclaims`` package (``tools/mystclaims``); see CONTRIBUTING.md.
"""

from mystclaims.sybil import collect

from trainmath.cli import main

pytest_collect_file = collect(
    pages=["docs/*.md", "docs/reference/*.md"],
    guides=["README.md", "CONTRIBUTING.md"],  # their code and claims run; no number lint
    docstrings=["src/trainmath/*.py"],  # imported as trainmath.x, the installed package
    docstring_excludes=["src/trainmath/__main__.py"],
    names={"1F1B"},  # the pipeline schedule, a name that starts with a digit
    commands={"trainmath": main},
)
