"""Op-level selective checkpointing under tensor parallelism with sequence parallelism, measured
on one rank of a fake process group, at full size under FakeTensorMode.

One decoder layer of the reference model (``models.Layer``'s weights, norms and rotary
multiplies, ``F.scaled_dot_product_attention`` with native GQA) is laid out in torchtitan's
modules (``attention_norm``, ``attention.wq/wk/wv/wo``, ``ffn_norm``, ``feed_forward.w1/w2/w3``,
the head count read from the local projection's width, ``view(b, s, -1, d)``, as torchtitan's
attention does) so that torchtitan's tensor-parallel plan applies as written: its ``apply_tp``
(``torchtitan/models/llama3/infra/parallelize.py`` at 238fa9953e4a, lines 217-248, the last
commit before the file moved):

- ``attention_norm`` and ``ffn_norm``: ``SequenceParallel()``;
- ``attention`` and ``feed_forward``: ``PrepareModuleInput(input_layouts=Shard(1),
  desired_input_layouts=Replicate())``, the all-gather of the sequence-sharded norm output;
- ``wq``, ``wk``, ``wv``, ``w1``, ``w3``: ``ColwiseParallel()``; ``wo``, ``w2``:
  ``RowwiseParallel(output_layouts=Shard(1))``, a reduce-scatter back to sequence shards.

The layer is parallelised with ``torch.distributed.tensor.parallel.parallelize_module`` on a
one-dimensional mesh of ``tp`` ranks of PyTorch's fake process group (``fake_pg``: collectives
return at once, this process is one rank), wrapped in ``checkpoint(use_reentrant=False,
context_fn=create_selective_checkpoint_contexts(policy))`` with torchtitan's policy
(``checkpointing.torchtitan_policy``, which keeps ``_c10d_functional.reduce_scatter_tensor``'s
output), and run forward on the rank's sequence shard, its input ``b × s/tp × h`` as the layer
before it hands it on. What it keeps is counted as ``checkpointing.measure_op_sac`` counts it:
the storages allocated inside the layer and still alive when its forward pass ends (a DTensor's
local tensor standing for it), its own output included (the next layer's checkpoint input).
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from . import checkpointing
from .models import Norm, _rotate, spec_of

F = nn.functional

METHOD = (
    "One decoder layer of the reference model laid out in torchtitan's modules and parallelised "
    "with torch.distributed.tensor.parallel.parallelize_module by torchtitan's plan (apply_tp, "
    "torchtitan/models/llama3/infra/parallelize.py at 238fa9953e4a: SequenceParallel norms, "
    "PrepareModuleInput Shard(1) -> Replicate for attention and feed_forward, ColwiseParallel "
    "wq/wk/wv/w1/w3, RowwiseParallel(output_layouts=Shard(1)) wo/w2) on a mesh of tp ranks of "
    "PyTorch's fake process group, this process rank 0; the layer under torchtitan's op-level "
    "checkpointing policy (as kind op-sac-saved: checkpoint(use_reentrant=False, "
    "create_selective_checkpoint_contexts), its save set including _c10d_functional."
    "reduce_scatter_tensor, every second mm recomputed); one forward pass at full size under "
    "FakeTensorMode on the rank's sequence shard. Bytes: the storages allocated inside the layer "
    "and alive when its forward ends (a DTensor's local tensor), its output included."
)


class Attention(nn.Module):
    """torchtitan's attention (``models/common/attention.py``): ``wq``, ``wk``, ``wv``, rotary,
    SDPA, ``wo``; heads read from the (local) projection's width, ``view(b, s, -1, d)``."""

    def __init__(self, shape: dict, dtype) -> None:
        super().__init__()
        h, a, kv = shape["hidden"], shape["heads"], shape["kv_heads"]
        self.d = h // a
        self.wq = nn.Linear(h, h, bias=False, dtype=dtype)
        self.wk = nn.Linear(h, kv * self.d, bias=False, dtype=dtype)
        self.wv = nn.Linear(h, kv * self.d, bias=False, dtype=dtype)
        self.wo = nn.Linear(h, h, bias=False, dtype=dtype)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        d = self.d
        q = _rotate(self.wq(x).view(b, s, -1, d).transpose(1, 2), cos, sin)
        k = _rotate(self.wk(x).view(b, s, -1, d).transpose(1, 2), cos, sin)
        v = self.wv(x).view(b, s, -1, d).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=k.shape[1] < q.shape[1])
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    """torchtitan's ``FeedForward``: ``w2(F.silu(w1(x)) * w3(x))``."""

    def __init__(self, shape: dict, dtype) -> None:
        super().__init__()
        h, f = shape["hidden"], shape["ffn"]
        self.w1 = nn.Linear(h, f, bias=False, dtype=dtype)
        self.w2 = nn.Linear(f, h, bias=False, dtype=dtype)
        self.w3 = nn.Linear(h, f, bias=False, dtype=dtype)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """torchtitan's ``TransformerBlock``: ``h = x + attention(attention_norm(x))``,
    ``h + feed_forward(ffn_norm(h))``, with the reference model's fused RMSNorm."""

    def __init__(self, shape: dict, dtype) -> None:
        super().__init__()
        self.attention_norm, self.ffn_norm = Norm(shape, dtype), Norm(shape, dtype)
        self.attention = Attention(shape, dtype)
        self.feed_forward = FeedForward(shape, dtype)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


def tp_plan() -> dict:
    """torchtitan's per-block plan (``apply_tp``, lines 218-241 at 238fa9953e4a)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel)

    return {
        "attention_norm": SequenceParallel(),
        "attention": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                        desired_input_layouts=(Replicate(), None, None)),
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),),
                                           desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
        "feed_forward.w3": ColwiseParallel(),
    }


@contextlib.contextmanager
def _mesh(tp: int, rank: int = 0):
    """A one-dimensional mesh of ``tp`` ranks of the fake process group, this process ``rank``."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=rank, world_size=tp, store=FakeStore())
    try:
        yield init_device_mesh("cpu", (tp,))
    finally:
        dist.destroy_process_group()


def _collective(func) -> str | None:
    """The name of a functional collective (``_c10d_functional.all_gather_into_tensor``, ...);
    None for any other op, its wait and its autograd wrapping (``_wrap_tensor_autograd``, on real
    tensors) among them."""
    name = str(func)
    if not name.startswith("_c10d_functional."):
        return None
    name = name.split(".")[1]
    return None if name.startswith("_") or name == "wait_tensor" else name


class _Collectives(TorchDispatchMode):
    """The functional collectives run while it is active, counted by name."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = _collective(func)
        if name:
            self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


class _LocalAlive(checkpointing._Alive):
    """:class:`checkpointing._Alive` counting a DTensor by its local tensor's storage, and the
    collectives run."""

    def __init__(self, parameters=()) -> None:
        super().__init__(parameters)
        self.collectives: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch.distributed.tensor import DTensor
        from torch.utils._pytree import tree_flatten

        name = _collective(func)
        if name:
            self.collectives[name] = self.collectives.get(name, 0) + 1
        out = func(*args, **(kwargs or {}))
        flat, _ = tree_flatten(out)
        local = [t._local_tensor if isinstance(t, DTensor) else t for t in flat]
        self._record(func, local)
        return out


def measure_op_sac_tp(model: str | dict, s: int, tp: int, b: int = 1,
                      policy: str = "torchtitan", fake: bool = True, log=None) -> dict:
    """What one layer of ``model`` keeps on one rank of ``tp`` under op-level checkpointing
    with torchtitan's tensor- and sequence-parallel plan (module docstring). ``fake=False``
    runs real tensors (small shapes: the tests compare the two); ``log(func)``, if given, sees
    every op the checkpointing policy decides on."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import parallelize_module

    spec = spec_of(model, s)
    if s % tp:
        raise ValueError(f"s = {s} is not a multiple of tp = {tp}")
    with _mesh(tp) as mesh, (FakeTensorMode() if fake else contextlib.nullcontext()):
        torch.manual_seed(0)
        block = Block(spec, torch.bfloat16)
        parallelize_module(block, mesh, tp_plan())
        wrapped = checkpointing.Checkpointed(block, policy)
        d = spec["hidden"] // spec["heads"]
        cos, sin = (torch.randn(s, d, dtype=torch.bfloat16) for _ in range(2))
        x = torch.randn(b, s // tp, spec["hidden"], dtype=torch.bfloat16, requires_grad=True)
        params = [p._local_tensor if isinstance(p, DTensor) else p for p in block.parameters()]
        alive = _LocalAlive([*params, cos, sin, x])
        alive.scope = "layer 0"
        with alive:
            out = wrapped(x, cos, sin)
        entries = list(alive.live.values())
        result = {
            "per_layer": [sum(e[1] for e in entries)],
            "layer_shown": 0,
            "layer_tensors": [[op, list(shape), nbytes] for _scope, nbytes, op, shape in entries],
        }
        with _Collectives() as backward:
            out.sum().backward()
        result["collectives"] = {"forward": alive.collectives, "backward": backward.counts}
        missing = [n for n, p in block.named_parameters() if p.grad is None]
        assert not missing, f"no gradient reached {missing[:3]}"
        assert x.grad is not None
        return result
