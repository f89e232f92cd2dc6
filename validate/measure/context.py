"""Context parallelism measured: DeepSpeed-Ulysses' attention as DeepSpeed runs it, per rank.

**Ulysses** (Jacobs et al. 2023, *DeepSpeed Ulysses*, §3.1): each of the cp ranks holds s/cp
tokens of every sequence; before attention an all-to-all turns Q, K and V from (s/cp tokens,
all heads) into (all s tokens, heads/cp heads), each rank runs ordinary attention over the
whole sequence for its heads, and a second all-to-all turns the output back. This module runs
DeepSpeed's own class for it, ``deepspeed.sequence.layer.DistributedAttention`` (the pinned
deepspeed, ``scatter_idx=2, gather_idx=1, batch_dim_idx=0``: tensors laid out (b, s, heads,
d)), in every decoder layer of the reference model (models.py) with the model's SDPA as its
local attention, on a fake process group of cp ranks
(``torch.testing._internal.distributed.fake_pg``, as validate/test_fsdp.py does; its
collectives return without moving data, which is all shapes and bytes need) under
FakeTensorMode at full size. Rank ``rank`` runs its s/cp tokens through the embedding, every
layer, the final norm, the LM head and the loss; what its forward pass saves for backward is
counted as saved.py counts it (kind "cp-saved"), and two whole training steps as step.py
measures them (kind "cp-step": the states and the peak).

**Ring attention** (torch's ``torch.distributed.tensor.experimental.context_parallel``) does
not run here: see :func:`ring_attempt`, which records why.
"""

from __future__ import annotations

import contextlib
import types
from unittest import mock

import torch
import torch.distributed as dist

from .models import decoder_layers
from .saved import measure_saved

F = torch.nn.functional

#: The context-parallel kinds measured here (trainmath's --cp-kind names), and what runs them.
IMPLEMENTATIONS = {"ulysses": "deepspeed.sequence.layer.DistributedAttention"}
CP_KINDS = tuple(IMPLEMENTATIONS)

METHOD = (
    "DeepSpeed-Ulysses as DeepSpeed implements it: deepspeed.sequence.layer.DistributedAttention "
    "(all-to-all of Q, K and V from s/cp tokens and all heads to all tokens and heads/cp, the "
    "local attention, an all-to-all of the output back; scatter_idx 2, gather_idx 1, "
    "batch_dim_idx 0) around the reference model's F.scaled_dot_product_attention in every "
    "decoder layer, rotary embeddings applied before the all-to-all at the rank's positions, "
    "on a fake process group of cp ranks (torch.testing._internal.distributed.fake_pg: "
    "collectives return without moving data) under FakeTensorMode at full size. One rank's "
    "s/cp tokens go through the embedding, every layer, the final norm, the LM head and the "
    "loss; what its forward pass saves for backward is counted as kind 'saved' counts it, and "
    "(kind 'cp-step') two training steps of that rank as kind 'step' measures them, with no "
    "gradient reduction over the cp ranks (DeepSpeed's reduces the gradients after the backward)."
)


def _ulysses_attend(self, x, rope, mask):
    """The reference layer's attention (models.Layer._attend) with DeepSpeed's
    DistributedAttention around SDPA: ``x`` holds this rank's s/cp tokens."""
    b, s, _ = x.shape
    a, kvh, d = self.a, self.kv_heads, self.d
    cos, sin = rope
    q = _rotate(self.q(x).view(b, s, a, d), cos, sin)
    k = _rotate(self.k(x).view(b, s, kvh, d), cos, sin)
    v = self.v(x).view(b, s, kvh, d)
    o = self.distributed_attention(q, k, v, 0)  # batch_dim_idx 0: (b, s, heads, d)
    return self.o(o.reshape(b, s, self.h))


def _rotate(x, cos, sin):
    """models._rotate for tensors laid out (b, s, heads, d): cos and sin are (s, d)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos[:, None] + torch.cat([-x2, x1], dim=-1) * sin[:, None]


def local_sdpa(q, k, v):
    """The local attention DistributedAttention calls: (b, s, heads/cp, d) in and out, SDPA
    (PyTorch's CPU flash kernel) with native grouped-query attention, causal."""
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                       is_causal=True, enable_gqa=k.shape[2] < q.shape[2])
    return o.transpose(1, 2)


class _LocalAttention(torch.nn.Module):
    def forward(self, q, k, v):
        return local_sdpa(q, k, v)


@contextlib.contextmanager
def fake_group(cp: int, rank: int):
    """A fake process group of ``cp`` ranks, this process being ``rank``, and DeepSpeed's
    communication layer on it (``deepspeed.comm.init_distributed`` takes the group that is
    already there)."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=rank, world_size=cp, store=FakeStore())
    try:
        import deepspeed.comm as ds_comm
        # DeepSpeed's CPU backend JIT-builds a shared-memory all-reduce kernel (a C++ build);
        # all_to_all_single goes straight to torch.distributed, so the build is skipped
        with mock.patch("deepspeed.comm.torch.build_shm_op", lambda: None):
            ds_comm.init_distributed(dist_backend="fake", auto_mpi_discovery=False,
                                     dist_init_required=False)
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def ulysses(net, group) -> None:
    """Every decoder layer of the reference ``net`` attends through DeepSpeed's
    DistributedAttention over ``group``."""
    from deepspeed.sequence.layer import DistributedAttention

    for layer in decoder_layers(net):
        if layer.gpt:
            raise ValueError("the Ulysses measurement runs Llama-style layers (q, k, v and rope)")
        layer.distributed_attention = DistributedAttention(_LocalAttention(), group,
                                                           scatter_idx=2, gather_idx=1)
        layer._attend = types.MethodType(_ulysses_attend, layer)


def measure_cp_step(model: str | dict, s: int, cp: int, b: int = 1, *, recipe: str = "zero-bf16",
                    kind: str = "ulysses", rank: int = 0, layers: int | None = None,
                    fake: bool = True) -> dict:
    """Two training steps of rank ``rank`` of ``cp`` (its s/cp tokens) with ``kind`` context
    parallelism, as :func:`.step.measure_step` measures a step: the states and the peak."""
    from .step import measure_step

    if kind not in CP_KINDS:
        raise ValueError(f"cp kind {kind!r}; accepted: {', '.join(CP_KINDS)}")
    if s % cp:
        raise ValueError(f"s {s} is not divisible by cp {cp}")
    with fake_group(cp, rank) as group:
        return measure_step(model, "reference-sdpa", recipe, s // cp, b, layers=layers,
                            fake=fake, prepare=lambda net: ulysses(net, group))


def measure_cp_saved(model: str | dict, s: int, cp: int, b: int = 1, *, kind: str = "ulysses",
                     rank: int = 0, precision: str = "bf16", layers: int | None = None,
                     backward: bool = False, fake: bool = True) -> dict:
    """What rank ``rank`` of ``cp`` saves for backward in one forward pass of the reference
    ``model`` at sequence length ``s`` (its s/cp tokens) with ``kind`` context parallelism; the
    record as :func:`.saved.measure_saved` gives it. ``backward`` runs the backward pass too
    (every parameter must get a gradient); ``fake=False`` on real tensors (small shapes)."""
    if kind not in CP_KINDS:
        raise ValueError(f"cp kind {kind!r}; accepted: {', '.join(CP_KINDS)}")
    if s % cp:
        raise ValueError(f"s {s} is not divisible by cp {cp}")
    with fake_group(cp, rank) as group:
        result = measure_saved(model, "reference-sdpa", s // cp, b, precision, layers=layers,
                               backward=backward, fake=fake,
                               prepare=lambda net: ulysses(net, group))
    # the attention kernels alone, as the cp- records list them (not the loss's log-softmax)
    result["attention_ops"] = [op for op in result["attention_ops"] if "attention" in op]
    return result
