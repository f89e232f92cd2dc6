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


def _actions(order: dict) -> dict[int, list]:
    from torch.distributed.pipelining import schedules as S
    kept = (S.FORWARD, S.FULL_BACKWARD, S.BACKWARD_INPUT, S.BACKWARD_WEIGHT)
    out = {}
    for rank, acts in order.items():
        flat = []
        for a in acts:
            if a is None:
                continue
            if a.computation_type == S.OVERLAP_F_B and a.sub_actions:
                flat.extend(a.sub_actions)
            elif a.computation_type in kept:
                flat.append(a)
        out[rank] = flat
    return out


def in_flight(order: dict) -> tuple[list[int], list[int]]:
    """Per rank, the peak of live chunk-micro-batches freed at W or B, and freed at I or B."""
    from torch.distributed.pipelining import schedules as S
    until_w, until_i = [], []
    for rank, acts in sorted(_actions(order).items()):
        live_w, live_i, peak_w, peak_i = set(), set(), 0, 0
        for a in acts:
            key, ct = (a.stage_index, a.microbatch_index), a.computation_type
            if ct == S.FORWARD:
                live_w.add(key)
                live_i.add(key)
            elif ct == S.FULL_BACKWARD:
                live_w.discard(key)
                live_i.discard(key)
            elif ct == S.BACKWARD_INPUT:
                live_i.discard(key)
            else:
                live_w.discard(key)
            peak_w, peak_i = max(peak_w, len(live_w)), max(peak_i, len(live_i))
        until_w.append(peak_w)
        until_i.append(peak_i)
    return until_w, until_i


def idle(order: dict, stages: int, f: int, b: int, w: int) -> int | float:
    """The step's span less one rank's work, each rank running its actions in order."""
    from torch.distributed.pipelining import schedules as S
    acts = _actions(order)
    took = {S.FORWARD: f, S.FULL_BACKWARD: b + w, S.BACKWARD_INPUT: b, S.BACKWARD_WEIGHT: w}
    done: dict[tuple, float] = {}
    at = dict.fromkeys(acts, 0)
    free = dict.fromkeys(acts, 0.0)
    moved = True
    while moved:
        moved = False
        for r, todo in acts.items():
            while at[r] < len(todo):
                a = todo[at[r]]
                s, mb, ct = a.stage_index, a.microbatch_index, a.computation_type
                if ct == S.FORWARD:
                    needs = [("F", s - 1, mb)] if s > 0 else []
                    mine = ("F", s, mb)
                elif ct == S.BACKWARD_WEIGHT:
                    needs, mine = [("B", s, mb)], ("W", s, mb)
                else:
                    needs = [("F", s, mb)] + ([("B", s + 1, mb)] if s < stages - 1 else [])
                    mine = ("B", s, mb)
                if any(n not in done for n in needs):
                    break
                end = max([free[r]] + [done[n] for n in needs]) + took[ct]
                done[mine], free[r] = end, end
                at[r] += 1
                moved = True
    if any(at[r] < len(todo) for r, todo in acts.items()):
        raise RuntimeError("the order deadlocks")
    work = {r: sum(took[a.computation_type] for a in todo) for r, todo in acts.items()}
    assert len(set(work.values())) == 1, "every rank does the same work"
    span = max(free.values()) - next(iter(work.values()))
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
    return out
