"""Ring collectives: the share of a buffer each rank sends, defined once for the library.

In a ring of n ranks a reduce-scatter or an all-gather sends (n-1)/n of the full buffer through
every rank, and an all-reduce, a reduce-scatter followed by an all-gather, twice that:
2(n-1)/n (Patarasuk & Yuan 2009, *Bandwidth optimal all-reduce algorithms for clusters of
workstations*; ZeRO §7.1 counts the 2Ψ of data parallelism this way). Each rank receives as
much as it sends. :mod:`trainmath.memory.sharding` (ZeRO and FSDP traffic) and
:mod:`trainmath.parallel.layout` (tensor and context parallel traffic) use these factors.

An all-to-all, where each of n ranks sends a different part of its buffer to every other
(expert parallelism's token dispatch, Lepikhin et al. 2021, *GShard*, §2.3), keeps the 1/n
addressed to itself and sends (n-1)/n of it, when the parts are even.
"""

from __future__ import annotations

from fractions import Fraction

from ..units import positive_int


def ring_gather_factor(n: int) -> Fraction:
    """Bytes each rank sends in a ring all-gather or reduce-scatter, per byte of the full buffer.

    >>> ring_gather_factor(64)
    Fraction(63, 64)
    """
    n = positive_int("n (ranks)", n)
    return Fraction(n - 1, n)


def ring_all_reduce_factor(n: int) -> Fraction:
    """Bytes each rank sends in a ring all-reduce, per byte of the buffer: 2(n-1)/n.

    >>> ring_all_reduce_factor(8)
    Fraction(7, 4)
    """
    return 2 * ring_gather_factor(n)


def all_to_all_factor(n: int) -> Fraction:
    """Bytes each rank sends in an all-to-all with even parts, per byte of its buffer: (n-1)/n.

    >>> all_to_all_factor(8)
    Fraction(7, 8)
    """
    n = positive_int("n (ranks)", n)
    return Fraction(n - 1, n)
