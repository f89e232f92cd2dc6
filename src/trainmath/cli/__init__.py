"""Entry points: the ``trainmath`` command and the calculator page's Python side."""

from .command import main

__all__ = ["main"]
