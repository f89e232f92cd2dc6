"""Per-device memory and traffic under data parallelism, ZeRO and PyTorch FSDP.

Rajbhandari et al. 2020, *ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models*, §5.1–5.3 and Figure 1: with Ψ parameters, N_d data-parallel ranks and K bytes of
optimizer-side state per parameter (K = 12 for mixed-precision Adam), each rank holds

- stage 0, plain data parallelism: 2Ψ + 2Ψ + KΨ;
- stage 1, P_os (optimizer states sharded): 2Ψ + 2Ψ + KΨ/N_d;
- stage 2, P_os+g (gradients too): 2Ψ + (2 + K)Ψ/N_d;
- stage 3, P_os+g+p (parameters too): (2 + 2 + K)Ψ/N_d.

The 2s and K come from :func:`trainmath.memory.recipes.bytes_per_param`, so every recipe and optimizer
there is covered: the formulas above are the bf16/fp16-mixed Adam case. A recipe's fp32 copy of
the gradients that the optimizer steps from (``BytesPerParam.gradient_copy``: DeepSpeed's fp32
gradient partition, a hand-written master's ``.grad``) lives beside the master weights and is
sharded with them from stage 1, which gives DeepSpeed's own 2 + 18/N at stage 2.

Also here: the smallest N_d that fits a GPU (:func:`min_ranks`); PyTorch FSDP's strategies,
gathered units, prefetch, FSDP2's root unit and fp32 reduce-scatter input, and CPU offload
(:func:`fsdp_memory`; Zhao et al. 2023, *PyTorch FSDP*, §3.2-3.3; Ren et al. 2021,
*ZeRO-Offload*, §4). The bytes these stages send per step are ZeRO's traffic,
:func:`trainmath.time.communication.zero_traffic` and
:func:`trainmath.time.communication.step_traffic`; FSDP2's exact per-rank bytes with its
dim-0 padding (:func:`trainmath.memory.fsdp2.fsdp2_rank`, checked against torch by validate/test_fsdp.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Sequence

from .recipes import BytesPerParam, ModelStates, bytes_per_param, recipe
from ..derivations import Derivation, bytes_text, number_text
from ..units import Bytes, positive_int


#: ZeRO stages: 0 is plain data parallelism (nothing sharded).
STAGES = (0, 1, 2, 3)

#: What each stage shards (ZeRO §5.1–5.3: P_os, P_g, P_p).
STAGE_NAMES = {
    0: "data parallel (DDP)",
    1: "ZeRO-1 (P_os)",
    2: "ZeRO-2 (P_os+g)",
    3: "ZeRO-3 (P_os+g+p)",
}


def check_stage(stage: object) -> int:
    """``stage`` if it is 0, 1, 2 or 3, else a ValueError naming it and what is accepted."""
    if isinstance(stage, bool) or stage not in STAGES:
        raise ValueError(f"unknown ZeRO stage {stage!r}; accepted: 0, 1, 2, 3 (0 = plain data parallelism)")
    return int(stage)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class ShardedState(ModelStates):
    """Model-state memory on one device (no activations, buffers or temporaries).

    ``optimizer_side`` is ZeRO's KΨ, sharded from stage 1 on.
    """

    params: int
    n_d: int
    stage: int


def zero_states(
    params: int,
    n_d: int,
    stage: int,
    precision: str = "bf16-mixed",
    optimizer_name: str = "adamw",
) -> ShardedState:
    """Per-device model-state bytes for ZeRO ``stage`` (0-3) over ``n_d`` ranks (ZeRO §5.1–5.3).

    Sharded amounts are exact: Ψ/N_d may be a Fraction of a byte (the paper's idealised
    even split; :func:`trainmath.memory.fsdp2.fsdp2_rank` models the padding a real engine adds).

    >>> str(zero_states(7_500_000_000, 64, 1).total)        # ZeRO Figure 1: 31.4 GB
    '31.4 GB'
    """
    psi = positive_int("params", params)
    n = positive_int("n_d", n_d)
    s = check_stage(stage)
    return _zero_states(psi, n, s, bytes_per_param(precision, optimizer_name))


@lru_cache(maxsize=4096)  # pure; the planner asks again for each setting of a layout
def _zero_states(psi: int, n: int, stage: int, per: BytesPerParam) -> ShardedState:
    """:func:`zero_states` on checked inputs, from the bytes per parameter ``per``."""

    def share(per_param: int | Fraction, sharded: bool) -> Bytes:
        amount = Fraction(per_param) * psi
        return Bytes(amount / n if sharded else amount)

    return ShardedState(
        params=psi,
        n_d=n,
        stage=stage,
        weights=share(per.weights, stage >= 3),
        gradients=share(per.gradients, stage >= 2) + share(per.gradient_copy, stage >= 1),
        master_weights=share(per.master_weights, stage >= 1),
        optimizer_states=share(per.optimizer_states, stage >= 1),
    )


# -- capacity ---------------------------------------------------------------------------------


def min_ranks(
    params: int,
    stage: int,
    capacity: Bytes,
    reserved: Bytes = Bytes(0),
    precision: str = "bf16-mixed",
    optimizer_name: str = "adamw",
    *,
    limit: int = 1 << 20,
) -> int | None:
    """Smallest N_d at which ZeRO ``stage``'s model state fits in ``capacity - reserved``.

    ``reserved`` holds what is not model state (activations, gathered units, buffers). Returns
    None when no N_d up to ``limit`` fits: the unsharded part (2Ψ + 2Ψ at stage 1, 2Ψ at
    stage 2, everything at stage 0) does not shrink with N_d. ZeRO §5.1–5.3's per-device totals
    (see :func:`zero_states`), solved for N_d.
    """
    if not isinstance(capacity, Bytes) or not isinstance(reserved, Bytes):
        raise ValueError(f"capacity and reserved must be Bytes, got {capacity!r} and {reserved!r}")
    room = capacity.n - reserved.n
    s = check_stage(stage)
    psi = positive_int("params", params)
    per = bytes_per_param(precision, optimizer_name)
    # total(N_d) = fixed + sharded / N_d: the unsharded kinds stay whole on every rank.
    fixed = psi * ((per.weights if s < 3 else 0) + (per.gradients if s < 2 else 0)
                   + (per.optimizer_side + per.gradient_copy if s < 1 else 0))
    sharded = psi * per.total - fixed
    if room <= 0 or fixed >= room:
        return None
    n = max(1, math.ceil(Fraction(sharded) / (room - fixed)))
    if n > limit:
        return None
    return n


# -- PyTorch FSDP -----------------------------------------------------------------------------

#: FSDP1's ``ShardingStrategy`` names (FSDP2: ``fully_shard`` arguments) and the ZeRO stage each
#: one's memory matches while forward and backward run (torch.distributed.fsdp.ShardingStrategy
#: docstring; Zhao et al. 2023, *PyTorch FSDP*, §3.2).
FSDP_STRATEGIES: dict[str, int] = {
    "NO_SHARD": 0,        # FSDP2: replicate(), or a mesh whose shard dim is 1 (DDP)
    "SHARD_GRAD_OP": 2,   # FSDP2: fully_shard(reshard_after_forward=False)
    "FULL_SHARD": 3,      # FSDP2: fully_shard(reshard_after_forward=True), the default
    "HYBRID_SHARD": 3,    # FSDP2: fully_shard(mesh=2-D (replicate, shard) DeviceMesh)
}

#: What can live in host (CPU) memory instead of the accelerator.
#: "optimizer": ZeRO-Offload (Ren et al. 2021: the CPU/GPU split is derived in §3, the
#: partitioned multi-GPU setup is §4.2): fp32 master weights, optimizer states and the
#: gradient partition move to the CPU and the optimizer step runs there; the 16-bit weights
#: stay. DeepSpeed keeps the offloaded gradient partition in the master weights' format, fp32
#: (``initialize_optimizer_states`` in ``deepspeed/runtime/zero/stage_1_and_2.py``).
#: "parameters": FSDP2's CPUOffloadPolicy and DeepSpeed's offload_param (ZeRO-Infinity,
#: Rajbhandari et al. 2021): every sharded state moves; the accelerator keeps only gathered units.
OFFLOADS = ("none", "optimizer", "parameters")
#: Short names of :data:`OFFLOADS` that every entry point accepts: "params" is "parameters"
#: (the command's ``--offload params``).
OFFLOAD_ALIASES = {"params": "parameters"}


def _check_strategy(strategy: object) -> str:
    if strategy not in FSDP_STRATEGIES:
        raise ValueError(
            f"unknown FSDP sharding strategy {strategy!r}; accepted: {', '.join(FSDP_STRATEGIES)}"
        )
    return strategy  # type: ignore[return-value]


@dataclass(frozen=True)
class FsdpMemory:
    """Memory of one rank under an FSDP strategy: persistent state, transient units, host."""

    strategy: str
    n_d: int
    #: ranks one parameter is sharded over (n_d, or the hybrid shard group's size)
    shard_group: int
    #: model state that stays on the accelerator (ZeRO's accounting, see :func:`zero_states`)
    device: ShardedState
    #: model state moved to host memory by ``offload``
    host: Bytes
    #: unsharded parameters held at once: the unit computing plus ``prefetch`` more, and the
    #: root unit, which FSDP2 keeps unsharded from the forward to the end of the backward
    gathered_params: Bytes
    #: one unit's unsharded gradients before they are reduce-scattered (backward only), and the
    #: LM head's, which wait for the root's reduce-scatter at the end of the backward
    unsharded_grads: Bytes
    #: the reduce-scatter input of the unit before, in the reduce format, which FSDP2 holds
    #: until the next unit reduces (0 when the gradients are reduced in their own format)
    reduce_buffer: Bytes = Bytes(0)

    @property
    def transient(self) -> Bytes:
        """Gathered parameters, unsharded gradients and the reduce-scatter input: what a unit's
        backward holds beyond the sharded state."""
        return self.gathered_params + self.unsharded_grads + self.reduce_buffer

    @property
    def peak(self) -> Bytes:
        """Accelerator bytes of model state at the worst moment of backward."""
        return self.device.total + self.transient


def fsdp_memory(
    params: int,
    n_d: int,
    strategy: str = "FULL_SHARD",
    *,
    shard_group: int | None = None,
    unit_params: int = 0,
    prefetch: int = 1,
    offload: str = "none",
    precision: str = "bf16-mixed",
    optimizer_name: str = "adamw",
    reduce_dtype: str | None = None,
    root_params: int = 0,
    head_params: int = 0,
) -> FsdpMemory:
    """Per-rank memory of an FSDP strategy, in ZeRO's accounting (ZeRO §5.1–5.3; FSDP §3.2).

    - ``NO_SHARD`` is ZeRO stage 0; ``SHARD_GRAD_OP`` keeps every unsharded parameter from the
      forward to the end of the backward, so its peak is ZeRO-2's; ``FULL_SHARD`` is ZeRO-3;
      ``HYBRID_SHARD`` is ZeRO-3 over a shard group of ``shard_group`` ranks (a node), replicated
      across the n_d / shard_group groups.
    - Under FULL_SHARD and HYBRID_SHARD a unit (the parameters one ``fully_shard`` call groups,
      usually a layer) is all-gathered before it computes and freed after; with ``prefetch``
      more units in flight (FSDP §3.3: the next all-gather overlaps this unit's compute), the
      transient is (1 + prefetch) × ``unit_params`` × the weights' bytes. Pass the largest unit.
      Backward adds that unit's unsharded gradients until they are reduce-scattered.
    - ``reduce_dtype`` (a key of :data:`DTYPE_BYTES`) is FSDP2's
      ``MixedPrecisionPolicy(reduce_dtype=...)``: when it is wider than the gradients, each
      unit's gradients are copied into a reduce-scatter input of that format (``chunk_cat`` in
      ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``), and FSDP2 holds that input
      until the next unit reduces (one buffer in flight, ``set_reduce_scatter_max_input_buffers``):
      with bf16 gradients and ``reduce_dtype=torch.float32`` a unit's backward holds 2 + 4 = 6
      bytes per parameter of a unit, not 2.
    - ``root_params`` is the root unit of ``fully_shard(model)``: the parameters outside every
      wrapped layer (the embedding, the final norm, the LM head). FSDP2 does not reshard the
      root after the forward pass (its ``reshard_after_forward`` is False), so it stays gathered
      until the end of the backward; ``head_params`` of it (the LM head and final norm) have
      their gradients from the loss's backward on, unsharded until the root reduces last.
    - ``offload`` (see :data:`OFFLOADS`) moves sharded state to host memory. With
      ``"optimizer"`` the gradient partition on the host is in the master weights' format
      (fp32 for mixed precision), as DeepSpeed keeps it; DeepSpeed's pinned 16-bit copy-back
      buffer for the updated weights is not counted.
    """
    psi = positive_int("params", params)
    n = positive_int("n_d", n_d)
    strategy = _check_strategy(strategy)
    if offload not in OFFLOADS:
        raise ValueError(f"unknown offload {offload!r}; accepted: {', '.join(OFFLOADS)}")
    group = _shard_group(strategy, n, shard_group)
    if isinstance(unit_params, bool) or not isinstance(unit_params, int) or not 0 <= unit_params <= psi:
        raise ValueError(f"unit_params must be a whole number from 0 to params ({psi}), got {unit_params!r}")
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
        raise ValueError(f"prefetch must be a whole number >= 0, got {prefetch!r}")
    stage = FSDP_STRATEGIES[strategy]
    if offload == "parameters" and stage != 3:
        raise ValueError(
            f"offload 'parameters' needs sharded parameters (FULL_SHARD or HYBRID_SHARD), got {strategy}"
        )
    for name, value in (("root_params", root_params), ("head_params", head_params)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= psi:
            raise ValueError(f"{name} must be a whole number from 0 to params ({psi}), got {value!r}")
    if head_params > root_params:
        raise ValueError(f"head_params {head_params} exceeds root_params {root_params}; the LM "
                         "head is part of the root")
    state = zero_states(psi, group, stage, precision, optimizer_name)
    per = bytes_per_param(precision, optimizer_name)
    r = recipe(precision)
    w = g = r.compute  # gathered units, and backward's unsharded gradients, in the compute format
    reduce_bytes = g if reduce_dtype is None else DTYPE_BYTES[_dtype(reduce_dtype)]
    gathered = Bytes(0)
    unsharded_grads = Bytes(0)
    reduce_buffer = Bytes(0)
    if stage == 3:
        gathered = Bytes((1 + prefetch) * unit_params * w + root_params * w)
    if stage >= 2:
        unsharded_grads = Bytes((unit_params + head_params) * g)
        if reduce_bytes > g:
            reduce_buffer = Bytes(unit_params * reduce_bytes)
    zero = Bytes(0)
    if offload == "optimizer":  # the gradient partition in the master weights' format
        host_grads = Bytes(Fraction(psi * max(per.gradients, per.master_weights), group))
        host = host_grads + state.master_weights + state.optimizer_states
        state = ShardedState(params=psi, n_d=group, stage=stage, weights=state.weights,
                             gradients=zero, master_weights=zero, optimizer_states=zero)
    elif offload == "parameters":
        host = state.total
        state = ShardedState(params=psi, n_d=group, stage=stage, weights=zero, gradients=zero,
                             master_weights=zero, optimizer_states=zero)
    else:
        host = zero
    return FsdpMemory(strategy, n, group, state, host, gathered, unsharded_grads, reduce_buffer)


# -- communication ----------------------------------------------------------------------------

#: Bytes per element of the formats collectives move.
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


def _shard_group(strategy: object, n: int, shard_group: object) -> int:
    """Ranks that shard one copy: ``shard_group`` under HYBRID_SHARD (it must divide n_d), else n_d."""
    if strategy == "HYBRID_SHARD":
        if shard_group is None:
            raise ValueError("HYBRID_SHARD needs shard_group, the ranks in one shard group (a node)")
        group = positive_int("shard_group", shard_group)
        if n % group:
            raise ValueError(f"shard_group {group} does not divide n_d {n}; accepted: a divisor of {n}")
        return group
    if shard_group is not None:
        raise ValueError(f"shard_group is only for HYBRID_SHARD, got shard_group={shard_group!r} with {strategy}")
    return n


def _dtype(name: object) -> str:
    if name not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {name!r}; accepted: {', '.join(DTYPE_BYTES)}")
    return name  # type: ignore[return-value]


# -- the arithmetic of a device's model states, written where the ZeRO formulas live --------------
_ZERO = "Rajbhandari et al. 2020 (ZeRO), §5.1–5.3"
#: The ZeRO stage from which each kind of state is sharded (ZeRO §5.1–5.3: P_os, P_g, P_p).
SHARDED_FROM = {"weights": 3, "gradients": 2, "gradient copy": 1, "master weights": 1,
                "optimizer states": 1}


@dataclass(frozen=True)
class Share:
    """Parameters one device holds of one kind, and the ranks that shard their states: a dense
    model's parameters over dp·cp, a mixture's routed experts over dp·cp/ep."""

    params: int
    ranks: int
    symbol: str = "P"
    ranks_symbol: str = "n"
    what: str = "parameters on this device"
    ranks_what: str = "ZeRO group dp·cp"


def _share_terms(shares, per_param, symbol, stage, shards_from):
    """For one kind of state: each share's formula, arithmetic, amount and whether it is sharded."""
    sharded = stage >= shards_from
    formula, arithmetic, amount = [], [], Fraction(0)
    for s in shares:
        got = Fraction(per_param) * s.params / (s.ranks if sharded else 1)
        amount += got
        formula.append(f"{s.symbol} × {symbol}" + (f" ÷ {s.ranks_symbol}" if sharded else ""))
        arithmetic.append(f"{s.params:,} × {number_text(per_param)} B"
                          + (f" ÷ {s.ranks}" if sharded else ""))
    return formula, arithmetic, amount, sharded


def _share_inputs(shares, stage, shards_from, sharded, where=""):
    inputs = []
    for s in shares:
        inputs.append((s.symbol, f"{s.what}: {s.params:,}{where}"))
    for s in shares:
        if sharded:
            inputs.append((s.ranks_symbol, f"{s.ranks_what}: {s.ranks} (stage {stage} shards this "
                           f"from stage {shards_from})"))
        elif s.ranks > 1:
            inputs.append((s.ranks_symbol, f"{s.ranks_what}: {s.ranks}, not dividing this: stage "
                           f"{stage} shards it only from stage {shards_from}"))
    return inputs


def state_derivations(shares: Sequence[Share], *, stage: int, per: BytesPerParam,
                      values: ModelStates, recipe_name: str, optimizer_name: str,
                      padded: bool = False, where: str = "") -> tuple[Derivation, ...]:
    """The arithmetic of a device's weights, gradients, master weights and optimizer states:
    each share's parameters times the recipe's bytes per parameter, divided by its ranks from
    the ZeRO stage that shards that kind (:data:`SHARDED_FROM`). ``values`` are the figures;
    with ``padded`` (FSDP2's exact shards) a figure may exceed its formula by the padding, and
    says so. ``where`` follows each share's parameter count (``" of 70,553,706,496 (tp 8)"``).

    >>> from trainmath.memory.recipes import bytes_per_param
    >>> per = bytes_per_param("bf16-mixed", "adamw")
    >>> states = zero_states(7_500_000_000, 64, 3)
    >>> d = state_derivations([Share(7_500_000_000, 64)], stage=3, per=per, values=states,
    ...                       recipe_name="bf16-mixed", optimizer_name="adamw")
    >>> d[0].formula, d[0].arithmetic
    ('P × w ÷ n', '7,500,000,000 × 2 B ÷ 64 = 234,375,000 B')
    """
    name = recipe(recipe_name).name
    kinds = (("weights", per.weights, "w", f"weight bytes in recipe {name}", values.weights),
             ("master weights", per.master_weights, "m", f"fp32 master copy in recipe {name}",
              values.master_weights),
             ("optimizer states", per.optimizer_states, "o",
              f"{optimizer_name}'s states in recipe {name}", values.optimizer_states))
    out = {}
    for kind, per_param, symbol, meaning, value in kinds:
        formula, arithmetic, amount, sharded = _share_terms(shares, per_param, symbol, stage,
                                                            SHARDED_FROM[kind])
        inputs = [*_share_inputs(shares, stage, SHARDED_FROM[kind], sharded, where)]
        inputs.insert(len(shares), (symbol, f"{meaning}: {number_text(per_param)} B per parameter"))
        out[kind] = _derivation(kind, formula, arithmetic, amount, inputs, value, padded, "states")
    # gradients: backward's (sharded from stage 2) and an fp32 copy for the step (from stage 1)
    g, c = per.gradients, per.gradient_copy
    fg, ag, amount, sharded_g = _share_terms(shares, g, "g", stage, SHARDED_FROM["gradients"])
    if not c:
        inputs = _share_inputs(shares, stage, SHARDED_FROM["gradients"], sharded_g, where)
        inputs.insert(len(shares), ("g", f"gradient bytes the recipe keeps: {number_text(g)} B per "
                                    "parameter"))
        grads = _derivation("gradients", fg, ag, amount, inputs, values.gradients, padded, "states")
    else:
        fc, ac, copy, sharded_c = _share_terms(shares, c, "c", stage, SHARDED_FROM["gradient copy"])
        inputs = [(s.symbol, f"{s.what}: {s.params:,}{where}") for s in shares]
        inputs += [("g", f"backward's gradients: {number_text(g)} B per parameter"),
                   ("c", f"the fp32 copy the optimizer steps from: {number_text(c)} B per "
                         "parameter")]
        inputs += [(s.ranks_symbol, f"{s.ranks_what}: {s.ranks} (stage {stage}: g sharded from "
                    "stage 2, c from 1)") for s in shares]
        grads = _derivation("gradients", fg + fc, ag + ac, amount + copy, inputs, values.gradients,
                            padded, "frameworks")
    return out["weights"], grads, out["master weights"], out["optimizer states"]


def _derivation(kind, formula, arithmetic, amount, inputs, value, padded, topic) -> Derivation:
    note = ""
    if padded and Bytes(amount) != value:
        note = ("FSDP2 pads each layer's flat parameter to a multiple of n, so rank 0 holds "
                f"{bytes_text(value.n)}, the formula's value rounded up to whole elements")
    return Derivation(kind, " + ".join(formula), tuple(inputs),
                      " + ".join(arithmetic) + f" = {bytes_text(amount)}", value, Bytes(amount),
                      _ZERO, "fsdp2" if note else topic, note)
