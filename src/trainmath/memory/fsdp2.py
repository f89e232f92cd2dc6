"""FSDP2, tensor by tensor: the exact shard one rank holds of each parameter, padding included.

PyTorch's ``fully_shard`` (FSDP2) splits each parameter on dim 0 over the ranks as
``torch.chunk`` does (:func:`dim0_rows`), pads every rank's shard to the same size, and keeps
the sharded parameter, its gradient and AdamW's two states per rank in the dtypes of its
``MixedPrecisionPolicy`` (:func:`fsdp2_dtypes`); :func:`fsdp2_rank` gives one rank's bytes,
unit by unit, which ``make validate`` checks against FSDP2 on a fake process group
(validate/test_fsdp.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from ..units import Bytes, positive_int
from .recipes import bytes_per_param, recipe


# -- FSDP2, tensor by tensor ------------------------------------------------------------------
# PyTorch's fully_shard (torch 2.13, torch/distributed/fsdp/_fully_shard/_fsdp_param.py and
# _fsdp_collectives.py) shards each parameter on dim 0 with torch.chunk: every rank gets
# ceil(d0/N) rows until the rows run out, so trailing ranks can get fewer or none. Each rank
# allocates rank 0's (padded) chunk for its parameter, and the reduce-scatter output that holds
# a unit's gradients is padded the same way; optimizer states are made with zeros_like (or
# clone) of the unpadded local shard. Adam and AdamW add a float32 ``step`` per tensor.

#: Bytes of the per-tensor step counter each torch.optim optimizer keeps (a float32 scalar).
STEP_BYTES = {"adam": 4, "adamw": 4, "sgd": 0, "sgd-momentum": 0}


def dim0_rows(rows: int, n: int) -> tuple[int, ...]:
    """Rows of dim 0 that each of ``n`` ranks holds, as ``torch.chunk`` splits them.

    ceil(rows/n) rows per rank until they run out: FSDP2's dim-0 sharding (torch 2.13,
    ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``; checked by validate/test_fsdp.py).

    >>> dim0_rows(5, 4)
    (2, 2, 1, 0)
    """
    rows = positive_int("rows", rows)
    n = positive_int("n", n)
    chunk = -(-rows // n)
    return tuple(max(0, min(chunk, rows - r * chunk)) for r in range(n))


def _shape(shape: object) -> tuple[int, ...]:
    if not isinstance(shape, (tuple, list)) or not shape:
        raise ValueError(f"a parameter shape must be a non-empty tuple of sizes, got {shape!r}")
    return tuple(positive_int("parameter dimension", d) for d in shape)


@dataclass(frozen=True)
class Fsdp2Rank:
    """What one rank holds after an optimizer step under FSDP2 (``fully_shard``)."""

    shard_rank: int
    shard_size: int
    #: elements of this rank's shards (no padding)
    numel: int
    #: elements allocated for them (padded to rank 0's chunk)
    padded_numel: int
    parameters: Bytes
    gradients: Bytes
    optimizer_states: Bytes
    #: bytes of each unit's unsharded parameters while it computes (padded, compute dtype)
    unsharded_units: tuple[Bytes, ...]

    @property
    def total(self) -> Bytes:
        """Parameters, gradients and optimizer states on this rank (gathered units not included)."""
        return self.parameters + self.gradients + self.optimizer_states

    @property
    def padding(self) -> Bytes:
        """Bytes of parameters and gradients that pad this rank's shards to rank 0's size."""
        return (self.parameters + self.gradients) * Fraction(self.padded_numel - self.numel,
                                                               self.padded_numel or 1)


def fsdp2_dtypes(precision: str = "fp32") -> tuple[int, int]:
    """(bytes of a stored sharded parameter and its gradient, bytes of a gathered one).

    Under ``MixedPrecisionPolicy(param_dtype=bf16)`` the fp32 parameter is itself the master
    copy: FSDP2 stores fp32 shards and fp32 gradients and casts to 16 bits (the recipe's
    compute format) when it all-gathers (torch 2.13's ``fully_shard``; checked by
    validate/test_fsdp.py). The ``fsdp2`` recipe is that setup: ``fsdp2_dtypes("fsdp2")`` is
    ``fsdp2_dtypes("bf16-mixed")``.
    """
    r = recipe(precision)
    return (r.master_weights or r.weights, r.compute)


def fsdp2_rank(
    units: list[list[tuple[int, ...]]],
    shard_size: int,
    shard_rank: int,
    precision: str = "fp32",
    optimizer_name: str = "adamw",
) -> Fsdp2Rank:
    """Bytes one rank holds after ``fully_shard`` on each unit and one optimizer step.

    ``units`` lists each ``fully_shard`` group's parameter shapes; ``shard_size`` is the mesh's
    shard dimension (all ranks for FULL_SHARD, one node for HYBRID_SHARD) and ``shard_rank``
    this rank's place in it. Exact for torch 2.13 on the CPU (checked by validate/test_fsdp.py).
    """
    n = positive_int("shard_size", shard_size)
    if isinstance(shard_rank, bool) or not isinstance(shard_rank, int) or not 0 <= shard_rank < n:
        raise ValueError(f"shard_rank must be a whole number from 0 to {n - 1}, got {shard_rank!r}")
    if optimizer_name not in STEP_BYTES:
        raise ValueError(
            f"unknown optimizer {optimizer_name!r} for FSDP2; accepted: {', '.join(STEP_BYTES)}"
        )
    stored, gathered = fsdp2_dtypes(precision)
    state_bytes = bytes_per_param(precision, optimizer_name).optimizer_states
    numel = padded = tensors = 0
    unit_bytes = []
    for unit in units:
        unit_padded = 0
        for shape in unit:
            dims = _shape(shape)
            rest = math.prod(dims[1:])
            rows = dim0_rows(dims[0], n)
            numel += rows[shard_rank] * rest
            unit_padded += rows[0] * rest
            tensors += 1
        padded += unit_padded
        unit_bytes.append(Bytes(unit_padded * n * gathered))
    return Fsdp2Rank(
        shard_rank=shard_rank,
        shard_size=n,
        numel=numel,
        padded_numel=padded,
        parameters=Bytes(padded * stored),
        gradients=Bytes(padded * stored),
        optimizer_states=Bytes(numel * state_bytes + tensors * STEP_BYTES[optimizer_name]),
        unsharded_units=tuple(unit_bytes),
    )
