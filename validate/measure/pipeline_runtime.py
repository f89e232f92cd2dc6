"""PyTorch's pipeline schedules run by their own runtime, on a fake process group: what each rank
keeps for backward, at its highest.

:mod:`.pipeline` executes the order of actions a schedule class generates; this module runs the
schedule itself. For each rank in turn, the process joins a fake process group of ``pp`` ranks
(``torch.testing._internal.distributed.fake_pg``: collectives and point-to-point transfers
return at once and move no data), builds that rank's ``torch.distributed.pipelining.
PipelineStage`` objects (stage r; stages r, r + pp, ... interleaved; r and 2·pp − 1 − r for the V
schedules) around small MLP chunks, and calls ``Schedule.step``: PyTorch's runtime runs the
rank's forwards, input-gradient and weight-gradient passes (``stage_backward_input`` keeps the
autograd graph for ``stage_backward_weight``), sends and receives. Saved-tensor hooks count the
distinct storages the chunks save for backward while they are alive (parameters apart); the peak
over the step, over one chunk-micro-batch's bytes, is the rank's peak count of chunk-micro-batches
in flight. The loss (``out.sum()``) saves nothing.

Two things stand in for the ranks that do not run: each stage is given its input's and output's
shapes (``input_args``, ``output_args``, ``output_grads``, ``input_grads``), so the runtime needs
no shape exchange; and the ranks' vote on that (``_warmup_backward_result``, a tensor received
from the next rank) returns what every rank votes when it has the shapes, which a fake process
group cannot carry. A stage's received input requires grad (``input_args``), as a real previous
stage's output does: without it ``stage_backward_input`` finds no path to the weights and the
weight-gradient passes do nothing.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn

#: Width and rows of a micro-batch of the MLP chunks; the counts do not depend on them.
WIDTH, ROWS = 64, 8


class _Chunk(nn.Module):
    """A model chunk: a linear layer, SiLU, a linear layer (what a transformer's MLP saves: each
    projection's input and the activation's input). ``x * 1.0`` gives the chunk's first saved
    tensor a storage of its own, not a slice of the step's input."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(WIDTH, WIDTH, bias=False)
        self.b = nn.Linear(WIDTH, WIDTH, bias=False)

    def forward(self, x):
        return self.b(torch.nn.functional.silu(self.a(x * 1.0)))


class _Saved:
    """The bytes of the distinct storages saved for backward and alive, and their peak."""

    def __init__(self, parameters) -> None:
        self.params = {p.untyped_storage().data_ptr() for p in parameters}
        self.live: dict[int, int] = {}
        self.now = self.peak = 0

    def pack(self, t):
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in self.params and key not in self.live:
            self.live[key] = storage.nbytes()
            self.now += storage.nbytes()
            self.peak = max(self.peak, self.now)
            weakref.finalize(storage, self._free, key)
        # a detached alias, not the tensor: a saved output handed back as itself would keep its
        # own grad_fn alive through the saved variable (a cycle), and nothing would be freed
        return t.detach()

    def _free(self, key: int) -> None:
        self.now -= self.live.pop(key)


def chunk_bytes() -> int:
    """Bytes one chunk saves for one micro-batch."""
    chunk = _Chunk()
    saved = _Saved(chunk.parameters())
    x = torch.zeros(ROWS, WIDTH, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t):
        out = chunk(x)
    del out
    return saved.peak


def stage_indices(cls_name: str, pp: int, v: int, rank: int) -> list[int]:
    """The stages rank ``rank`` holds, as PyTorch's docs place them."""
    from torch.distributed.pipelining import schedules as S

    if cls_name in ("ZBVZeroBubble", "DualPipeV"):
        return [rank, 2 * pp - 1 - rank]
    if issubclass(S.get_schedule_class(cls_name), S.PipelineScheduleSingle):
        return [rank]
    return [rank + c * pp for c in range(v)]


def rank_peak(cls_name: str, pp: int, m: int, v: int, rank: int) -> int:
    """The most bytes rank ``rank`` keeps for backward during one ``Schedule.step`` (module
    docstring)."""
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules as S
    from torch.distributed.pipelining import stage as stage_module
    from torch.testing._internal.distributed.fake_pg import FakeStore

    cls = S.get_schedule_class(cls_name)
    stages_in_all = pp * v
    indices = stage_indices(cls_name, pp, v, rank)
    vote = stage_module.PipelineStage._warmup_backward_result

    def voted(self, received_result=None):
        vote(self, received_result)
        return torch.ones(1, dtype=torch.int32)  # "every stage has its shapes": static

    dist.init_process_group("fake", rank=rank, world_size=pp, store=FakeStore())
    stage_module.PipelineStage._warmup_backward_result = voted
    try:
        chunks = [_Chunk() for _ in indices]
        example = torch.zeros(ROWS, WIDTH)
        stages = [PipelineStage(chunk, i, stages_in_all, torch.device("cpu"),
                                input_args=(example.clone().requires_grad_(i > 0),),
                                output_args=(example.clone().requires_grad_(True),),
                                output_grads=(example,), input_grads=(example,),
                                group=dist.group.WORLD)
                  for chunk, i in zip(chunks, indices)]
        single = issubclass(cls, S.PipelineScheduleSingle)
        schedule = cls(stages[0] if single else stages, m, loss_fn=lambda out, target: out.sum())
        saved = _Saved([p for c in chunks for p in c.parameters()])
        args = (torch.zeros(ROWS * m, WIDTH),) if 0 in indices else ()
        kwargs = {"target": torch.zeros(ROWS * m, WIDTH)} if stages_in_all - 1 in indices else {}
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t):
            schedule.step(*args, **kwargs)
        missing = [i for i, c in zip(indices, chunks) for p in c.parameters() if p.grad is None]
        if missing:
            raise RuntimeError(f"{cls_name}: no weight gradient reached stage {missing[0]}")
        return saved.peak
    finally:
        stage_module.PipelineStage._warmup_backward_result = vote
        dist.destroy_process_group()


def in_flight(cls_name: str, pp: int, m: int, v: int) -> list[int]:
    """Per rank, the peak count of chunk-micro-batches whose saved tensors PyTorch's runtime
    keeps (each rank's peak bytes over :func:`chunk_bytes`)."""
    unit = chunk_bytes()
    out = []
    for rank in range(pp):
        peak = rank_peak(cls_name, pp, m, v, rank)
        if peak % unit:
            raise RuntimeError(f"{cls_name} rank {rank}: {peak} bytes is not a whole number of "
                               f"chunk-micro-batches of {unit} bytes")
        out.append(peak // unit)
    return out
