"""Pipeline schedules: how many micro-batches a stage holds in flight, and the bubble.

1F1B and the interleaved schedule (Narayanan et al. 2021, §2.2.1 and §2.2.2): stage i of pp
runs pp − i forward passes before its first backward (fewer with interleaving, per chunk), and
the pipeline idles (pp − 1)/(m·v) of the ideal step time. The memory of a stage
(:mod:`trainmath.memory.stages`) and the time of a step (:mod:`trainmath.time.step`) read both
from here.

The zero-bubble schedules split each backward into B, the input's gradient, and W, the
weights' gradient, and fill the bubble with the W passes (Qi et al. 2024, *Zero Bubble
(Almost) Pipeline Parallelism*): :data:`SCHEDULES` names the ones PyTorch's
``torch.distributed.pipelining`` ships (torch 2.13), and :func:`in_flight` and
:func:`bubble_idle` give what each holds and idles, as PyTorch's generated orders do
(``validate/measure/pipeline.py`` runs those orders and the tests compare). ``zb-h2`` (Qi et al.
2024 §2.2), which PyTorch does not ship, is checked against an order generated from the
paper's description and run by the same executor.

>>> in_flight(4), bubble_fraction(4, 32)
(Fraction(4, 1), Fraction(3, 32))
>>> in_flight(4, v=2, schedule="dualpipev", microbatches=8)
Fraction(9, 2)
"""

from __future__ import annotations

from fractions import Fraction

from ..problems import Problem
from ..units import positive_int

#: The pipeline schedules, by the name the command takes, and what each is in
#: ``torch.distributed.pipelining`` (torch 2.13): ``1f1b`` is Schedule1F1B, and with v > 1
#: chunks per device ScheduleInterleaved1F1B (Narayanan et al. 2021 §2.2); ``zb-h1``
#: ScheduleInterleavedZeroBubble ("the ZB1P schedule in the paper": ZB-H1 of Qi et al.
#: 2024), one chunk per device or v; ``zb-v`` ScheduleZBVZeroBubble (the V of Qi et al.
#: 2024b, two chunks per device); ``dualpipev`` ScheduleDualPipeV, DeepSeek's DualPipe
#: (DeepSeek-AI 2024, the DeepSeek-V3 report) cut in half: two chunks per device in a V, a
#: forward of one micro-batch overlapped with a backward of another. ``zb-h2`` is ZB-H2 of Qi et
#: al. 2024 (§2.2, "zero bubble schedule"), which torch 2.13 does not ship: 2·pp − 1
#: micro-batches in flight for a parallelogram without bubbles when F = B = W. ``dualpipe`` is
#: DeepSeek's two-way DualPipe (DeepSeek-AI 2024 §3.2.1, deepseek-ai/DualPipe), not in torch
#: 2.13 either: each device holds two stages, i and pp − 1 − i, with 2× the parameters.
SCHEDULES = {
    "1f1b": "1F1B (interleaved 1F1B with v > 1): Megatron-LM's default",
    "zb-h1": "zero bubble ZB-H1: 1F1B with each backward split, weights' gradients late",
    "zb-v": "zero bubble ZB-V: two chunks per device in a V, weights' gradients late",
    "dualpipev": "DualPipeV: two chunks per device in a V, a forward beside a backward",
    "zb-h2": "zero bubble ZB-H2: 2·pp − 1 micro-batches in flight, W passes in the bubbles",
    "dualpipe": "DualPipe: micro-batches from both ends, each device two stages (2× parameters)",
}
#: the schedules the planner searches only when asked for (``schedules=``): not in PyTorch
OPT_IN = ("zb-h2", "dualpipe")
#: the two-way schedules: device i holds stages i and pp − 1 − i, and half the micro-batches
#: enter at each end (DeepSeek-AI 2024 §3.2.1; deepseek-ai/DualPipe ``dualpipe/dualpipe.py``)
TWO_WAY = ("dualpipe",)
#: the schedules that place two model chunks on each device in a V: chunk c of 2·pp on
#: device c for c < pp, else 2·pp − 1 − c
V_SCHEDULES = ("zb-v", "dualpipev")


# -- pipeline bubble ------------------------------------------------------------------------------
def bubble_fraction(pp: int, m: int, v: int = 1, schedule: str = "1f1b") -> Fraction:
    """Pipeline bubble time over ideal compute time: (pp-1)/m, interleaved (pp-1)/(m·v).

    Narayanan et al. 2021, §2.2.1 (GPipe and 1F1B schedules: t_pb/t_id = (p-1)/m, their p
    being pp) and §2.2.2 (interleaved schedule with v model chunks per device). It is a ratio
    to the *ideal* time: the bubble's share of the whole step is :func:`bubble_share`. For the
    zero-bubble schedules it is :func:`bubble_idle` over m(F + B + W) with F = B = W, the
    sources' assumption (Qi et al. 2024; the step-time model uses each pass's own time).

    >>> bubble_fraction(4, 32), bubble_fraction(4, 32, schedule="zb-h1")
    (Fraction(3, 32), Fraction(1, 32))
    """
    pp = positive_int("pp (pipeline stages)", pp)
    m = positive_int("m (micro-batches per step)", m)
    v = positive_int("v (model chunks per pipeline device)", v)
    return _bubble(pp, m, v, _check_schedule(schedule))


def _bubble(pp: int, m: int, v: int, schedule: str = "1f1b") -> Fraction:
    """:func:`bubble_fraction` on checked inputs."""
    if schedule == "1f1b":
        return Fraction(pp - 1, m * v)
    third = Fraction(1, 3)
    # DualPipe's device runs m/2 micro-batches' worth of its two stages
    return _bubble_idle(schedule, pp, v, third, third, third) / (
        Fraction(m, 2) if schedule in TWO_WAY else m)


def bubble_share(pp: int, m: int, v: int = 1) -> Fraction:
    """The bubble's share of a whole step: (pp-1)/(m·v + pp-1) = f/(1+f) for f = bubble_fraction.

    f is bubble time over ideal time (Narayanan et al. 2021, §2.2.1 and §2.2.2); a step lasts
    the ideal time plus the bubble, so the bubble takes f/(1+f) of it.
    """
    f = bubble_fraction(pp, m, v)
    return f / (1 + f)


def in_flight(pp: int, *, v: int = 1, microbatches: int | None = None, stage: int = 0,
              schedule: str = "1f1b") -> Fraction:
    """Micro-batches' worth of activations a pipeline stage holds for each of its layers, at
    its peak: the largest count of micro-batches whose forward has run on the stage's device
    and whose activations are not yet freed, in units of the whole device's layers (a chunk of
    one micro-batch is 1/v).

    1F1B (Narayanan et al. 2021 §2.2, who write p for pp): stage i of pp (counting from 0) runs
    pp - i forward passes before its first backward, so the first stage holds pp micro-batches
    of its L/pp layers, L layers' worth in all (Korthikanti et al. 2022 §4.2.3, eq. 5).
    Interleaved, with v chunks of L/(pp·v) layers per device, Megatron-LM warms up
    2(pp - i - 1) + (v - 1)pp chunk-micro-batches (``megatron/core/pipeline_parallel/schedules.py``),
    so stage i holds (2(pp - i - 1) + (v - 1)pp + 1)/v micro-batches' worth; for the first
    stage that is pp(1 + (pp-1)/(pp·v)), Korthikanti et al.'s interleaving factor (§4.2.3, their
    m is v). With fewer micro-batches per step (``microbatches`` = m), a stage holds at most m.

    The zero-bubble schedules keep a micro-batch's activations until its W pass, as PyTorch's
    runtime does (``stage_backward_input`` retains the autograd graph for
    ``stage_backward_weight``): ``zb-h1`` holds pp on every stage (Qi et al. 2024: the
    first stage no more than 1F1B's, the others as many, since W waits), ``zb-v`` 2·pp chunks
    = pp (the authors' repository, sail-sg/zero-bubble-pipeline-parallelism: ZB-V's memory
    equals 1F1B's), ``dualpipev`` 2·pp + 1 chunks =
    pp + ½ (deepseek-ai/DualPipe's README: "PP + 1" stages' worth, their PP being 2·pp chunks):
    once m reaches :func:`schedule_problems`' least, counts PyTorch's orders reproduce.
    ``zb-h2`` holds 2·pp − 1 on every stage (Qi et al. 2024 §2.2: "(2p − 1)M_B"; the first
    stage runs 2p − 1 forwards before its first B, and the later stages defer as many W passes
    to the tail, as the order of ``validate/measure/pipeline.py`` built from the paper's
    description holds). ``dualpipe`` holds (pp + 1)/2: the README of deepseek-ai/DualPipe's
    "PP + 1" micro-batches of one stage, each half of the device's two stages (the order built
    from ``DualPipe.step``'s phase counts holds pp + 1 on every rank).
    """
    pp = positive_int("pp (pipeline-parallel size)", pp)
    v = positive_int("v (model chunks per pipeline device)", v)
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < pp:
        raise ValueError(f"stage must be a whole number from 0 to pp - 1 = {pp - 1}, got {stage!r}")
    if microbatches is not None:
        microbatches = positive_int("microbatches (m)", microbatches)
    _check_schedule(schedule)
    problems = schedule_problems(schedule, pp, v, microbatches)
    if problems:
        raise ValueError("; ".join(p.message for p in problems))
    return _in_flight(pp, v, microbatches, stage, schedule)


def _in_flight(pp: int, v: int, microbatches: int | None, stage: int,
               schedule: str = "1f1b") -> Fraction:
    """:func:`in_flight` on checked inputs."""
    if schedule == "dualpipev":
        return Fraction(2 * pp + 1, 2)
    if schedule == "dualpipe":
        return Fraction(pp + 1, 2)
    if schedule == "zb-h2":
        held = Fraction(2 * pp - 1)
    elif schedule in ("zb-h1", "zb-v"):
        held = Fraction(pp)
    elif v == 1:
        held = Fraction(pp - stage)
    else:
        held = Fraction(2 * (pp - stage - 1) + (v - 1) * pp + 1, v)
    if microbatches is not None:
        held = min(held, Fraction(microbatches))
    return held


# -- the zero-bubble schedules: their rules and their idle time -------------------------------
def _check_schedule(schedule: object) -> str:
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule {schedule!r} is not one of {', '.join(SCHEDULES)}")
    return schedule  # type: ignore[return-value]


def schedule_problems(schedule: str, pp: int, v: int, microbatches: int | None = None
                      ) -> list[Problem]:
    """What a schedule needs of the layout and the micro-batches, each a
    :class:`~trainmath.problems.Problem` naming ``schedule`` and the fields:

    - every schedule but 1F1B needs pp ≥ 2 (there is no pipeline to fill otherwise);
    - ``zb-v`` and ``dualpipev`` place exactly two chunks on each device (v = 2): PyTorch's
      ScheduleZBVZeroBubble "requires exactly two stages per rank", and ScheduleDualPipeV
      builds its V from two;
    - ``zb-v`` and ``dualpipev`` need m ≥ 2·pp (ScheduleDualPipeV raises "requires at least as
      many microbatches as stages"; ZB-V's order reaches its steady state only then, and
      idles more below it); ``zb-h1`` needs m ≥ pp, a multiple of pp when v > 1 (its rounds
      of pp micro-batches, ScheduleInterleavedZeroBubble's ``number_of_rounds``);
    - ``zb-h2`` runs one chunk per device (v = 1, Qi et al. 2024's ZB-H2 has no interleaving)
      and needs m ≥ 2·pp − 1: its first stage runs 2p − 1 forwards before its first B (§2.2),
      and with fewer the parallelogram does not close (the generated order idles more);
    - ``dualpipe`` runs one chunk per device (v = 1: the device's two stages are DualPipe's
      own), and ``DualPipe.step`` asserts ``num_ranks % 2 == 0`` and ``num_chunks % 2 == 0 and
      num_chunks >= num_ranks * 2``: pp even, m even and m ≥ 2·pp.
    """
    if schedule == "1f1b":
        return []
    problems = []
    if pp < 2:
        problems.append(Problem(("schedule", "pp"), f"schedule {schedule} needs a pipeline, "
                                f"pp ≥ 2; got pp {pp}"))
    if schedule in V_SCHEDULES and v != 2:
        problems.append(Problem(("schedule", "v"), f"schedule {schedule} places two model chunks "
                                f"on each pipeline device in a V; got v = {v}; accepted: v = 2 "
                                "(--interleave 2)"))
    if schedule in ("zb-h2", "dualpipe") and v != 1:
        problems.append(Problem(("schedule", "v"), f"schedule {schedule} places one model chunk "
                                f"on each pipeline device; got v = {v}; accepted: v = 1 (no "
                                "--interleave)"))
    if schedule == "dualpipe" and pp >= 2 and pp % 2:
        problems.append(Problem(("schedule", "pp"), f"schedule dualpipe pairs stage i with "
                                f"stage pp − 1 − i on one device: pp must be even; got pp {pp}"))
    if microbatches is not None and pp >= 2:
        least, rule = {"zb-h2": (2 * pp - 1, "2 × pp − 1"), "dualpipe": (2 * pp, "2 × pp")}.get(
            schedule, (2 * pp, "2 × pp") if schedule in V_SCHEDULES else (pp, "pp"))
        if microbatches < least:
            problems.append(Problem(("schedule", "global_batch", "pp"), f"schedule {schedule} "
                                    f"needs at least {rule} = {least} "
                                    f"micro-batches a step; got m = {microbatches}"))
        elif schedule == "zb-h1" and v > 1 and microbatches % pp:
            problems.append(Problem(("schedule", "global_batch", "pp", "v"), f"schedule zb-h1 "
                                    f"with v = {v} runs rounds of pp = {pp} micro-batches; got "
                                    f"m = {microbatches}, not a multiple of {pp}"))
        elif schedule == "dualpipe" and microbatches % 2:
            problems.append(Problem(("schedule", "global_batch"), f"schedule dualpipe sends "
                                    f"half the micro-batches from each end: m must be even; got "
                                    f"m = {microbatches}"))
    return problems


def bubble_idle(schedule: str, pp: int, v: int, *, forward: float, backward_input: float,
                backward_weight: float) -> float:
    """Seconds a step idles beyond m micro-batches' work, for stages alike that each take
    ``forward`` + ``backward_input`` + ``backward_weight`` seconds a micro-batch (F, B and W of
    Qi et al. 2024, the whole device's layers):

    - ``1f1b``: (pp − 1)(F + B + W)/v (Narayanan et al. 2021 §2.2.1, §2.2.2);
    - ``zb-h1``: (pp − 1)·max(B, F + B − W)/v: Qi et al. 2024's ZB-H1, (p − 1)(T_F + T_B −
      T_W), a third of 1F1B's when F = B = W, where W ≤ F; with W > F the W passes fill no
      more than F's gap, and the stages idle (pp − 1)B/v;
    - ``zb-v``: (pp − 1)·max(B/2, B − W), the fill of its V, each chunk half a device;
    - ``dualpipev``: with f, b, w a chunk's (half of F, B, W) and k = min(pp − 1, 4),
      (pp − 1)(2b − w) − min(f, k(b − f)), with no credit for the overlap of a forward and a
      backward (the F&B of deepseek-ai/DualPipe's README);
    - ``zb-h2``: (pp − 1)·max(F, F + B − 2W). Qi et al. 2024 (Table of §2, ZB-H2) give
      (p − 1)(T_F + T_B − 2T_W), each stage's own idle in the parallelogram, which the
      generated order reproduces; a step whose optimizer waits for every stage (a global
      gradient norm) also waits for the parallelogram's slant, (p − 1)T_F, which the paper
      hides with its optimizer post-validation (§4: the next step starts before the check),
      not modelled here. Valid for W ≤ F (a transformer's forward holds attention, its W
      does not); with W > F the generated order idles more;
    - ``dualpipe``: deepseek-ai/DualPipe's README, (PP/2 − 1)(F&B + B − 3W), their F, B, W a
      stage's (half these: F/2, ...), their B the whole backward (B + W here) and F&B a
      forward beside a backward taken as F + B, no credit for the overlap:
      (pp/2 − 1)(F + 2B − W)/2. The order built from ``DualPipe.step``'s phase counts, run
      with the forward and backward of each F&B one after the other, idles less (by about
      (pp/2 − 1)F/2; ``validate/measure/pipeline.py``); this is the README's figure, an upper
      bound of it.

    The forms for ``zb-h1``, ``zb-v`` and ``dualpipev`` are what PyTorch's own orders idle
    when each pass takes these times (``validate/measure/pipeline.py`` runs them, torch 2.13,
    and ``validate/test_measurements.py`` checks every form on a grid of pass times and pp 2 to
    12), for F ≤ B and W ≤ B, as in a transformer layer (B also holds attention's backward),
    and m at least :func:`schedule_problems`' least; read off those runs, they are exact there
    (the F + B − W forms of the papers hold only where W ≤ F and, for the V schedules, at
    F = B = W). deepseek-ai/DualPipe's README writes DualPipeV's bubble
    (PP/2 − 1)(F&B + B − 3W), their B the whole backward.

    >>> bubble_idle("zb-h1", 4, 1, forward=1, backward_input=1, backward_weight=1)
    3.0
    >>> bubble_idle("1f1b", 4, 1, forward=1, backward_input=1, backward_weight=1)
    9.0
    """
    _check_schedule(schedule)
    pp = positive_int("pp (pipeline-parallel size)", pp)
    v = positive_int("v (model chunks per pipeline device)", v)
    return _bubble_idle(schedule, pp, v, float(forward), float(backward_input),
                        float(backward_weight))


def _bubble_idle(schedule: str, pp: int, v: int, f: float, b: float, w: float) -> float:
    """:func:`bubble_idle` on checked inputs."""
    if schedule == "1f1b":
        return (pp - 1) * (f + b + w) / v
    if schedule == "zb-h1":
        return (pp - 1) * max(b, f + b - w) / v
    if schedule == "zb-v":
        return (pp - 1) * max(b / 2, b - w)
    if schedule == "zb-h2":
        return (pp - 1) * max(f, f + b - 2 * w)
    if schedule == "dualpipe":
        return (pp // 2 - 1) * (f + 2 * b - w) / 2
    fc, bc, wc = f / 2, b / 2, w / 2  # dualpipev: a chunk's passes
    return (pp - 1) * (2 * bc - wc) - min(fc, min(pp - 1, 4) * (bc - fc))


def schedule_bubble(schedule: str, pp: int, m: int, v: int = 1, *, weight_share: float = 1 / 3
                    ) -> float:
    """The bubble over the ideal time m(F + B + W), with W ``weight_share`` of a micro-batch's
    work and F and B splitting the rest evenly (a third each by default, the "T_F = T_B = T_W"
    of Qi et al. 2024): :func:`bubble_idle` / (m(F + B + W)).

    >>> round(schedule_bubble("zb-h1", 4, 32), 4), round(schedule_bubble("1f1b", 4, 32), 4)
    (0.0313, 0.0938)
    """
    m = positive_int("m (micro-batches per step)", m)
    if not 0 <= weight_share < 1:
        raise ValueError(f"weight_share must be from 0 to below 1, got {weight_share!r}")
    rest = (1 - weight_share) / 2
    idle = bubble_idle(schedule, pp, v, forward=rest, backward_input=rest,
                       backward_weight=weight_share)
    return idle / m
