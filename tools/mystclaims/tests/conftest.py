"""Shared fixtures: a stand-in for a library's byte type."""

from dataclasses import dataclass
from fractions import Fraction

import pytest


@dataclass(frozen=True)
class Bytes:
    """An amount of bytes, as a library would define it: it says so with __claim_bytes__."""

    n: int | Fraction

    def __claim_bytes__(self):
        return self.n


@pytest.fixture
def B():
    return Bytes
