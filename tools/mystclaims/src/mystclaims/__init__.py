"""mystclaims: numbers in MyST pages that are checked against the code that computes them.

A page states ``{claim}`112 GB <state.total>```; the tests (:mod:`mystclaims.sybil`) and the
build (:mod:`mystclaims.sphinx`) both evaluate ``state.total`` after the page's code above it
and fail when it does not round to 112 GB. The pieces:

- :mod:`mystclaims.language`: what a stated number means and when a value bears it out;
- :mod:`mystclaims.scanner`: a page's claims, code and unchecked numbers, with their places;
- :mod:`mystclaims.runner`: running a page in document order, one result per claim;
- :mod:`mystclaims.arithmetic`: the steps a reader sees in a claim's popup;
- :mod:`mystclaims.sybil`: the parsers that make each claim a test;
- :mod:`mystclaims.sphinx`: the Sphinx extension.
"""

from .arithmetic import Arithmetic, explain
from .language import ClaimError, Statement, check, describe, parse_statement, split_claim
from .runner import Result, check_claim, run_page
from .scanner import Claim, Code, Page, Unchecked, scan

__all__ = [
    "Arithmetic", "Claim", "ClaimError", "Code", "Page", "Result", "Statement", "Unchecked",
    "check", "check_claim", "describe", "explain", "parse_statement", "run_page", "scan",
    "split_claim",
]
