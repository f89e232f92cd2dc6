"""Pipeline schedules: how many micro-batches a stage holds in flight, and the bubble.

1F1B and the interleaved schedule (Narayanan et al. 2021, §2.2.1 and §2.2.2): stage i of pp
runs pp − i forward passes before its first backward (fewer with interleaving, per chunk), and
the pipeline idles (pp − 1)/(m·v) of the ideal step time. The memory of a stage
(:mod:`trainmath.memory.stages`) and the time of a step (:mod:`trainmath.time.step`) read both
from here.

>>> in_flight(4), bubble_fraction(4, 32)
(Fraction(4, 1), Fraction(3, 32))
"""

from __future__ import annotations

from fractions import Fraction

from ..units import positive_int


# -- pipeline bubble ------------------------------------------------------------------------------
def bubble_fraction(pp: int, m: int, v: int = 1) -> Fraction:
    """Pipeline bubble time over ideal compute time: (pp-1)/m, interleaved (pp-1)/(m·v).

    Narayanan et al. 2021, §2.2.1 (GPipe and 1F1B schedules: t_pb/t_id = (p-1)/m, their p
    being pp) and §2.2.2 (interleaved schedule with v model chunks per device). It is a ratio
    to the *ideal* time: the bubble's share of the whole step is :func:`bubble_share`.

    >>> bubble_fraction(4, 32)
    Fraction(3, 32)
    """
    pp = positive_int("pp (pipeline stages)", pp)
    m = positive_int("m (micro-batches per step)", m)
    v = positive_int("v (model chunks per pipeline device)", v)
    return _bubble(pp, m, v)


def _bubble(pp: int, m: int, v: int) -> Fraction:
    """:func:`bubble_fraction` on checked inputs."""
    return Fraction(pp - 1, m * v)


def bubble_share(pp: int, m: int, v: int = 1) -> Fraction:
    """The bubble's share of a whole step: (pp-1)/(m·v + pp-1) = f/(1+f) for f = bubble_fraction.

    f is bubble time over ideal time (Narayanan et al. 2021, §2.2.1 and §2.2.2); a step lasts
    the ideal time plus the bubble, so the bubble takes f/(1+f) of it.
    """
    f = bubble_fraction(pp, m, v)
    return f / (1 + f)


def in_flight(pp: int, *, v: int = 1, microbatches: int | None = None, stage: int = 0) -> Fraction:
    """Micro-batches' worth of activations a pipeline stage holds for each of its L/pp layers.

    1F1B (Narayanan et al. 2021 §2.2, who write p for pp): stage i of pp (counting from 0) runs
    pp - i forward passes before its first backward, so the first stage holds pp micro-batches
    of its L/pp layers, L layers' worth in all (Korthikanti et al. 2022 §4.2.3, eq. 5).
    Interleaved, with v chunks of L/(pp·v) layers per device, Megatron-LM warms up
    2(pp - i - 1) + (v - 1)pp chunk-micro-batches (``megatron/core/pipeline_parallel/schedules.py``),
    so stage i holds (2(pp - i - 1) + (v - 1)pp + 1)/v micro-batches' worth; for the first
    stage that is pp(1 + (pp-1)/(pp·v)), Korthikanti et al.'s interleaving factor (§4.2.3, their
    m is v). With fewer micro-batches per step (``microbatches`` = m), a stage holds at most m.
    """
    pp = positive_int("pp (pipeline-parallel size)", pp)
    v = positive_int("v (model chunks per pipeline device)", v)
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < pp:
        raise ValueError(f"stage must be a whole number from 0 to pp - 1 = {pp - 1}, got {stage!r}")
    if microbatches is not None:
        microbatches = positive_int("microbatches (m)", microbatches)
    return _in_flight(pp, v, microbatches, stage)


def _in_flight(pp: int, v: int, microbatches: int | None, stage: int) -> Fraction:
    """:func:`in_flight` on checked inputs."""
    if v == 1:
        held = Fraction(pp - stage)
    else:
        held = Fraction(2 * (pp - stage - 1) + (v - 1) * pp + 1, v)
    if microbatches is not None:
        held = min(held, Fraction(microbatches))
    return held
