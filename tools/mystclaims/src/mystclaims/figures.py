"""Figures checked like prose: every number a diagram shows against the value it was drawn from.

A diagram (``trainmath.report.diagrams.Diagram``, or anything with a ``title`` and ``numbers``,
each number having ``text``, ``value`` and an optional ``claim``, the part of the text that
states the value) passes :func:`checked` when each stated number is borne out by its value
under the claim language (:mod:`mystclaims.language`: "2.0 GB" rounds, "over 1 GB" compares).
A page shows ``checked(diagram)``; a label that drifts raises, so the page's cell fails under
the tests and in the build, naming the figure, the label, what it states and what was computed.
"""

from __future__ import annotations

from .language import ClaimError, check, parse_statement


class FigureError(AssertionError):
    """A figure's label that its value does not bear out."""


def problems(diagram) -> list[str]:
    """One line per label of ``diagram`` whose stated number its value does not bear out."""
    out = []
    for label in diagram.numbers:
        stated = label.claim if label.claim is not None else label.text
        try:
            wrong = check(parse_statement(stated), label.value)
        except ClaimError as exc:
            wrong = str(exc)
        if wrong:
            out.append(f"figure {diagram.title!r}: label {label.text!r} states {stated!r}: {wrong}")
    return out


def checked(diagram):
    """``diagram`` itself when every number on it is borne out (:func:`problems`), else a
    :class:`FigureError` listing each that is not."""
    found = problems(diagram)
    if found:
        raise FigureError("\n".join(found))
    return diagram
