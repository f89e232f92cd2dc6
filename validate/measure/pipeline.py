"""PyTorch's pipeline schedules, run: each rank's order of passes as ``torch.distributed.pipelining``
generates it, executed pass by pass, counting what each rank holds and how long it idles.

Every schedule class of ``torch/distributed/pipelining/schedules.py`` computes
``pipeline_order``, the order of actions of *every* rank, in its constructor from the stages'
attributes alone (stage index, number of stages, group size and rank), so a stand-in stage
with those attributes and no module or process group gives PyTorch's own order; the classes
with one stage per rank take one stage, the others a list (stages r, r + pp, ... interleaved;
r and 2·pp − 1 − r for the V schedules, as PyTorch's docs place them). The actions are F
(forward), I (the input's gradient), W (the weights' gradient), B (both) and OVERLAP_F_B
(DualPipeV: a forward beside a backward, its sub-actions run one after the other here).

- **in flight**: a (stage, micro-batch) becomes live at its F and is freed at its W or B (PyTorch
  keeps the autograd graph from ``stage_backward_input`` to ``stage_backward_weight``); the peak
  count of live chunk-micro-batches on each rank, and the peak if they were freed at I.
- **runtime**: PyTorch's own runtime keeps what the order says: ``Schedule.step`` run rank by
  rank on a fake process group, the saved tensors counted (``pipeline_runtime.py``).
- **idle**: each rank runs its actions in order; an action starts when the rank is free and
  what it needs is done (F of the previous stage for an F; F of its own stage and I or B of the
  next for an I or B; its own I for a W), communication taking no time; F takes f, I takes b,
  W takes w and B takes b + w time units per chunk. The step lasts until the last rank ends;
  idle is that span less one rank's work (every rank has the same), for each (f, b, w).

ZB-H2 (Qi et al. 2024, *Zero Bubble Pipeline Parallelism*, ICLR 2024, §2.2) and two-way
DualPipe (DeepSeek-AI 2024, §3.2.1) are not in torch 2.13: :func:`zb_h2_order` builds ZB-H2's
order from the paper's description and :func:`dualpipe_order` DualPipe's from the phase counts
of deepseek-ai/DualPipe's ``DualPipe.step``, and the same executor runs them
(:data:`GENERATED`; a DualPipe rank's stages are r and pp − 1 − r, its chunk-micro-batches
stage-micro-batches). Its records add, per (f, b, w), ``stage_units``: the
largest idle of one rank between its own first and last pass, the bubble of the paper's
parallelogram once its optimizer post-validation (§4) lets the next step start early.
"""

from __future__ import annotations

#: The schedules run: (trainmath's name, PyTorch's class name, pp, m, v).
CASES = (
    ("1f1b", "Interleaved1F1B", 4, 8, 2),
    ("zb-h1", "InterleavedZeroBubble", 4, 8, 1),
    ("zb-h1", "InterleavedZeroBubble", 8, 16, 1),
    ("zb-h1", "InterleavedZeroBubble", 4, 8, 2),
    ("zb-v", "ZBVZeroBubble", 4, 8, 2),
    ("zb-v", "ZBVZeroBubble", 8, 16, 2),
    ("dualpipev", "DualPipeV", 4, 8, 2),
    ("dualpipev", "DualPipeV", 8, 16, 2),
)
#: The (f, b, w) time units per chunk each order is executed with: equal, and the backward's
#: input gradient larger than its weights' (as attention's backward makes it in a transformer).
TIMES = ((1, 1, 1), (1, 2, 1), (2, 3, 1))
#: more (f, b, w) for the generated orders: W below F and B at F
GENERATED_TIMES = ((2, 2, 1), (3, 4, 2))

#: Schedules torch 2.13 does not ship, run from a generated order: (name, generator, pp, m).
GENERATED = (
    ("zb-h2", "zb_h2_order", 4, 7),
    ("zb-h2", "zb_h2_order", 4, 12),
    ("zb-h2", "zb_h2_order", 8, 16),
    ("dualpipe", "dualpipe_order", 4, 8),
    ("dualpipe", "dualpipe_order", 8, 16),
    ("dualpipe", "dualpipe_order", 8, 20),
)

METHOD = " ".join(__doc__.split())


class _Stage:
    """The attributes a schedule reads from a pipeline stage, and nothing else."""

    def __init__(self, stage_index: int, num_stages: int, group_size: int):
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = 0
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1
        self.submod = None
        self.stage_index_to_group_rank = {}


def pipeline_order(cls_name: str, pp: int, m: int, v: int) -> dict:
    """PyTorch's order of actions of every rank for one schedule."""
    from torch.distributed.pipelining import schedules as S
    cls = S.get_schedule_class(cls_name)
    if issubclass(cls, S.PipelineScheduleSingle):
        return cls(_Stage(0, pp, pp), m).pipeline_order
    first = [0, 2 * pp - 1] if cls_name in ("ZBVZeroBubble", "DualPipeV") else \
        [c * pp for c in range(v)]
    return cls([_Stage(i, pp * v, pp) for i in first], m).pipeline_order


def zb_h2_order(pp: int, m: int) -> dict[int, list[tuple[str, int, int]]]:
    """ZB-H2's order of passes on every rank, as (kind, stage, micro-batch) with kind F, I (the
    input's gradient, the paper's B) or W, from Qi et al. 2024 §2.2 and its Figure 3: "more
    F passes in the warm-up phase", 2p − 1 − 2i on stage i, so that the first stage's first B
    comes when its warm-up ends; then 1F1B with each B followed by its W while m − 2p + 1
    micro-batches remain ahead of the parallelogram's edge, and by the next F alone after, the
    W passes left "reordered to the tail" (2i + 1 on stage i), which closes the parallelogram
    (the stage i busy from i·T_F on, without a gap, when T_F = T_B = T_W). Needs m ≥ 2p − 1."""
    if m < 2 * pp - 1:
        raise ValueError(f"ZB-H2 needs m ≥ 2·pp − 1 = {2 * pp - 1}; got m = {m}")
    out = {}
    for i in range(pp):
        n = 2 * (pp - i) - 1
        acts = [("F", i, k) for k in range(n)]
        pending: list[int] = []
        steady = m - 2 * pp + 1  # gaps between B passes that hold an F and a W
        for k in range(m):
            acts.append(("I", i, k))
            pending.append(k)
            if k == m - 1:
                break
            if k < steady:
                acts.append(("W", i, pending.pop(0)))
            if n < m:
                acts.append(("F", i, n))
                n += 1
            elif k >= steady:
                acts.append(("W", i, pending.pop(0)))
        out[i] = acts + [("W", i, k) for k in pending]
    return out


def dualpipe_order(pp: int, m: int) -> dict[int, list[tuple[str, int, int]]]:
    """DualPipe's two-way order (DeepSeek-AI 2024, §3.2.1), from the phase counts of
    ``DualPipe.step`` in deepseek-ai/DualPipe ``dualpipe/dualpipe.py`` (steps 1 to 8: nF0,
    nF0F1, nB1W1F1, nF0B1F1B0, nB1F1B0, nB1B0, nWB0, nW), as (kind, stage, micro-batch): rank r
    runs stage r for the m/2 micro-batches that enter at rank 0 (numbered 0 to m/2 − 1) and
    stage pp − 1 − r for the m/2 that enter at rank pp − 1 (numbered m/2 on); an overlapped
    forward and backward runs forward first; a backward "with zero bubble" is I with its W
    queued, run first-in first-out at each W."""
    if pp % 2 or m % 2 or m < 2 * pp:
        raise ValueError(f"DualPipe needs pp even and m even and ≥ 2·pp; got pp {pp}, m {m}")
    half, per = pp // 2, m // 2
    out = {}
    for r in range(pp):
        h = min(r, pp - 1 - r)
        # phase 0: the direction in which rank r comes early; phase 1: the other
        stage = [r, pp - 1 - r] if r < half else [pp - 1 - r, r]
        base = [0, per] if r < half else [per, 0]
        nf, nb, queue, acts = [0, 0], [0, 0], [], []

        def fwd(p):
            acts.append(("F", stage[p], base[p] + nf[p]))
            nf[p] += 1

        def bwd(p, zb=False):
            key = (stage[p], base[p] + nb[p])
            nb[p] += 1
            acts.append(("I" if zb else "B",) + key)
            if zb:
                queue.append(key)

        def wgt():
            acts.append(("W",) + queue.pop(0))

        for _ in range(2 * (half - h - 1)):
            fwd(0)
        for _ in range(h + 1):
            fwd(0)
            fwd(1)
        for _ in range(half - h - 1):
            bwd(1, True)
            wgt()
            fwd(1)
        for _ in range(per - pp + h + 1):
            fwd(0)
            bwd(1)
            fwd(1)
            bwd(0)
        for _ in range(half - h - 1):
            bwd(1)
            fwd(1)
            bwd(0)
        zb = False
        for i in range(h + 1):
            if i == (h + 1) // 2 and h % 2 == 1:
                zb = True
            bwd(1, zb)
            if i == (h + 1) // 2 and h % 2 == 0:
                zb = True
            bwd(0, zb)
        for _ in range(half - h - 1):
            wgt()
            bwd(0, True)
        for _ in range(h + 1):
            wgt()
        assert not queue and nf == [per, per] and nb == [per, per]
        out[r] = acts
    return out


def _actions(order: dict) -> dict[int, list[tuple[str, int, int]]]:
    """Each rank's passes as (kind, stage, micro-batch), kind F, B (the whole backward), I or
    W: PyTorch's actions (OVERLAP_F_B's sub-actions in their order), or a generated order."""
    out = {}
    for rank, acts in order.items():
        if all(isinstance(a, tuple) and isinstance(a[0], str) for a in acts):
            out[rank] = list(acts)
            continue
        from torch.distributed.pipelining import schedules as S
        kinds = {S.FORWARD: "F", S.FULL_BACKWARD: "B", S.BACKWARD_INPUT: "I",
                 S.BACKWARD_WEIGHT: "W"}
        flat = []
        for a in acts:
            if a is None:
                continue
            subs = a.sub_actions if a.computation_type == S.OVERLAP_F_B and a.sub_actions \
                else [a]
            flat += [(kinds[x.computation_type], x.stage_index, x.microbatch_index)
                     for x in subs if x.computation_type in kinds]
        out[rank] = flat
    return out


def in_flight(order: dict) -> tuple[list[int], list[int]]:
    """Per rank, the peak of live chunk-micro-batches freed at W or B, and freed at I or B."""
    until_w, until_i = [], []
    for rank, acts in sorted(_actions(order).items()):
        live_w, live_i, peak_w, peak_i = set(), set(), 0, 0
        for ct, s, mb in acts:
            key = (s, mb)
            if ct == "F":
                live_w.add(key)
                live_i.add(key)
            elif ct == "B":
                live_w.discard(key)
                live_i.discard(key)
            elif ct == "I":
                live_i.discard(key)
            else:
                live_w.discard(key)
            peak_w, peak_i = max(peak_w, len(live_w)), max(peak_i, len(live_i))
        until_w.append(peak_w)
        until_i.append(peak_i)
    return until_w, until_i


def idle(order: dict, stages: int, f: int, b: int, w: int, *, per_rank: bool = False
         ) -> int | float:
    """The step's span less one rank's work, each rank running its actions in order; with
    ``per_rank``, the largest idle of one rank between its own first and last pass."""
    acts = _actions(order)
    took = {"F": f, "B": b + w, "I": b, "W": w}
    done: dict[tuple, float] = {}
    at = dict.fromkeys(acts, 0)
    free = dict.fromkeys(acts, 0.0)
    first: dict[int, float] = {}
    moved = True
    while moved:
        moved = False
        for r, todo in acts.items():
            while at[r] < len(todo):
                ct, s, mb = todo[at[r]]
                if ct == "F":
                    needs = [("F", s - 1, mb)] if s > 0 else []
                    mine = ("F", s, mb)
                elif ct == "W":
                    needs, mine = [("B", s, mb)], ("W", s, mb)
                else:
                    needs = [("F", s, mb)] + ([("B", s + 1, mb)] if s < stages - 1 else [])
                    mine = ("B", s, mb)
                if any(n not in done for n in needs):
                    break
                start = max([free[r]] + [done[n] for n in needs])
                first.setdefault(r, start)
                end = start + took[ct]
                done[mine], free[r] = end, end
                at[r] += 1
                moved = True
    if any(at[r] < len(todo) for r, todo in acts.items()):
        raise RuntimeError("the order deadlocks")
    work = {r: sum(took[a[0]] for a in todo) for r, todo in acts.items()}
    assert len(set(work.values())) == 1, "every rank does the same work"
    span = max(free.values()) - next(iter(work.values()))
    if per_rank:
        span = max(free[r] - first[r] - work[r] for r in acts)
    return int(span) if span == int(span) else span


def case_id(schedule: str, pp: int, m: int, v: int) -> str:
    return f"pp-schedule-{schedule}/pp{pp}-m{m}-v{v}"


def records() -> list[dict]:
    """One record per case of :data:`CASES`: PyTorch's order run (module docstring)."""
    import torch

    from . import pipeline_runtime
    out = []
    for schedule, cls_name, pp, m, v in CASES:
        order = pipeline_order(cls_name, pp, m, v)
        until_w, until_i = in_flight(order)
        out.append({
            "id": case_id(schedule, pp, m, v), "schedule": schedule,
            "torch_class": f"torch.distributed.pipelining.schedules.Schedule{cls_name}",
            "torch": torch.__version__, "pp": pp, "m": m, "v": v,
            "measured": {
                "in_flight_chunks": until_w, "in_flight_chunks_until_input_grad": until_i,
                "runtime_in_flight_chunks": pipeline_runtime.in_flight(cls_name, pp, m, v),
                "idle": [{"f": f, "b": b, "w": w, "units": idle(order, pp * v, f, b, w)}
                         for f, b, w in TIMES]},
        })
    for schedule, generator, pp, m in GENERATED:
        order = globals()[generator](pp, m)
        until_w, until_i = in_flight(order)
        out.append({
            "id": case_id(schedule, pp, m, 1), "schedule": schedule,
            "generator": f"validate/measure/pipeline.py {generator}", "pp": pp, "m": m, "v": 1,
            "measured": {
                "in_flight_chunks": until_w, "in_flight_chunks_until_input_grad": until_i,
                "idle": [{"f": f, "b": b, "w": w, "units": idle(order, pp, f, b, w),
                          "stage_units": idle(order, pp, f, b, w, per_rank=True)}
                         for f, b, w in TIMES + GENERATED_TIMES]},
        })
    return out
