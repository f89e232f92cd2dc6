"""Counting bytes of tensor storages under FakeTensorMode: saved for backward, alive, at the peak.

Everything here counts *storages*, each once: a view, a transpose or a ``.float()`` of an fp32
tensor shares its base's storage, and several tensors saved for backward are often views of one
(Q, K and V of a fused projection). Under ``FakeTensorMode`` a storage has no address
(``data_ptr()`` is 0), so a storage is identified by its Python ``UntypedStorage`` object:
PyTorch keeps that object alive exactly as long as the storage (PyObject preservation), which
also makes a weak reference to it a free-notification.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch._guards import active_fake_mode
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16",
               torch.int64: "int64", torch.int32: "int32", torch.bool: "bool", torch.uint8: "uint8",
               torch.float64: "fp64"}


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def local(t: torch.Tensor) -> torch.Tensor:
    """The tensor whose storage holds ``t``'s bytes on this rank (a DTensor's local shard)."""
    return t._local_tensor if isinstance(t, DTensor) else t


def storage(t: torch.Tensor) -> torch.UntypedStorage:
    return local(t).untyped_storage()


def distinct_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (None entries are skipped)."""
    seen: dict[int, int] = {}
    keep = []
    for t in tensors:
        if t is None:
            continue
        st = storage(t)
        keep.append(st)
        seen[id(st)] = st.nbytes()
    return sum(seen.values())


def storage_ids(tensors: Iterable[torch.Tensor | None]) -> set[int]:
    """ids of the storages behind ``tensors``: valid only while those tensors are alive."""
    return {id(storage(t)) for t in tensors if t is not None}


# --------------------------------------------------------------------------------------------
# What a forward pass saves for backward
# --------------------------------------------------------------------------------------------

@dataclass
class SavedStorage:
    """One storage saved for backward: who made it, what it is, and where it was saved."""

    nbytes: int
    op: str  # the aten op that allocated it
    dtype: str
    shape: tuple[int, ...]  # shape of the tensor the op returned
    made_in: str  # scope at allocation
    scopes: list[str] = field(default_factory=list)  # scopes whose ops saved it, in order
    kind: str = "activation"  # activation | parameter | weight copy | input
    order: int = 0


class _Provenance(TorchDispatchMode):
    """Records, for every storage an op allocates, the op, its dtype and shape and the scope."""

    def __init__(self, owner: "SavedTensorCounter") -> None:
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        o = self.owner
        flat, _ = tree_flatten(out)
        for t in flat:
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                if id(st) in o.made or o._is_known(st):
                    continue
                source = None
                if func in (torch.ops.aten._to_copy.default, torch.ops.aten.to.dtype):
                    src = args[0]
                    if isinstance(src, torch.Tensor) and id(src.untyped_storage()) in o.param_ids:
                        source = "weight copy"
                o.made[id(st)] = (func.__name__ if hasattr(func, "__name__") else str(func),
                                  dtype_name(t.dtype), tuple(t.shape), o.scope, source)
                o._refs[id(st)] = weakref.ref(st, o._forget(id(st)))
        return out


class SavedTensorCounter:
    """Every storage saved for backward inside the ``with`` block, each once, by scope.

    ``scope`` is set by the caller (module hooks): the storage's scopes are those whose ops
    saved it (``saved_tensors_hooks`` pack calls). Parameters (registered with ``parameters``)
    are recorded but are not activations; a 16-bit copy of a parameter (``_to_copy`` of a
    parameter's storage, what ``torch.autocast`` makes for every Linear weight) is kind
    "weight copy"; integer inputs the caller registers are kind "input".
    """

    def __init__(self, parameters: Iterable[torch.Tensor] = (), inputs: Iterable[torch.Tensor] = ()):
        self.params = list(parameters)
        self.param_ids = storage_ids(self.params)
        self.inputs = list(inputs)
        self.input_ids = storage_ids(self.inputs)
        self.scope = "outside"
        self.made: dict[int, tuple] = {}
        self._refs: dict[int, weakref.ref] = {}
        self.saved: dict[int, SavedStorage] = {}
        self._keep: list[torch.Tensor] = []  # saved tensors stay alive: ids stay unique

    def _is_known(self, st) -> bool:
        return id(st) in self.param_ids or id(st) in self.input_ids

    def _forget(self, key: int):
        def callback(_ref, made=self.made, refs=self._refs, saved=self.saved):
            if key not in saved:  # a freed temporary: its id may be reused
                made.pop(key, None)
                refs.pop(key, None)
        return callback

    def _pack(self, x: torch.Tensor) -> torch.Tensor:
        self._keep.append(x)
        st = x.untyped_storage()
        key = id(st)
        entry = self.saved.get(key)
        if entry is None:
            if key in self.param_ids:
                kind, op, made_in = "parameter", "parameter", "parameters"
                dtype, shape = dtype_name(x.dtype), tuple(x.shape)
            elif key in self.input_ids:
                kind, op, made_in = "input", "input", "inputs"
                dtype, shape = dtype_name(x.dtype), tuple(x.shape)
            else:
                op, dtype, shape, made_in, source = self.made.get(
                    key, ("unknown", dtype_name(x.dtype), tuple(x.shape), "?", None))
                kind = source or "activation"
            entry = SavedStorage(st.nbytes(), op, dtype, shape, made_in, order=len(self.saved))
            entry.kind = kind
            self.saved[key] = entry
        if not entry.scopes or entry.scopes[-1] != self.scope:
            entry.scopes.append(self.scope)
        return x

    @contextmanager
    def __call__(self) -> Iterator["SavedTensorCounter"]:
        with _Provenance(self), torch.autograd.graph.saved_tensors_hooks(self._pack, lambda x: x):
            yield self

    def release(self) -> None:
        """Drop the saved tensors held for counting (call after backward, or instead of it)."""
        self._keep.clear()


# --------------------------------------------------------------------------------------------
# Every storage alive, over a whole training step
# --------------------------------------------------------------------------------------------

#: Categories of live memory, highest priority first: a storage with several roles takes the first.
CATEGORIES = (
    "parameters",
    "reference weights",  # a frozen reference model's (post_training.py)
    "master weights",
    "gradients",
    "optimizer states",
    "step counters",
    "FSDP gathered parameters",
    "FSDP reduce-scatter buffers",
    "logits",
    "weight copies",
    "activations",
    "temporaries",
)


class _Info:
    __slots__ = ("nbytes", "tags", "op", "phase", "shape", "dtype", "__weakref__")

    def __init__(self, nbytes: int, op: str, phase: str, shape, dtype) -> None:
        self.nbytes = nbytes
        self.tags: set[str] = set()
        self.op = op
        self.phase = phase
        self.shape = shape
        self.dtype = dtype

    def category(self) -> str:
        for c in CATEGORIES:
            if c in self.tags:
                return c
        return "temporaries"


class AllocationTracker(TorchDispatchMode):
    """Bytes of every live storage, op by op; the peak, its phase and what was alive then.

    A ``TorchDispatchMode`` under ``FakeTensorMode`` sees every aten op (composite ops are
    already decomposed) and registers each output storage it has not seen; a weak reference
    to the storage's Python object removes it when PyTorch frees it. ``UntypedStorage.resize_``
    (FSDP2 frees and re-allocates unsharded parameters with it, bypassing the dispatcher) is
    wrapped for the duration. Allocations inside a single kernel (workspaces) are not seen.

    Roles are tags the caller and hooks attach (``tag``); a storage's category is the first of
    :data:`CATEGORIES` among its tags, given for its whole life (a tensor saved for backward is
    an activation from its allocation on). Storages never tagged are temporaries.
    """

    def __init__(self, vocab: int | None = None) -> None:
        super().__init__()
        self.vocab = vocab
        self.live: dict[int, _Info] = {}
        self._refs: dict[int, weakref.ref] = {}
        self.current = 0
        self.peak = 0
        self.peak_phase = "start"
        self.peak_op = ""
        self.peak_live: list[tuple[_Info, int]] = []
        self.phase = "start"
        self.phase_peaks: dict[str, int] = {}
        self.ops = 0
        self._pending = False
        self._propagating = 0
        self._orig_resize = None

    # -- registration -----------------------------------------------------------------------
    def _register(self, st: torch.UntypedStorage, op: str, shape=(), dtype="") -> _Info:
        key = id(st)
        info = self.live.get(key)
        if info is not None and self._refs[key]() is st:
            return info
        info = _Info(st.nbytes(), op, self.phase, shape, dtype)
        if self.vocab and shape and shape[-1] == self.vocab:
            info.tags.add("logits")
        self.live[key] = info
        self.current += info.nbytes

        def freed(_ref, key=key, info=info, self=self):
            if self.live.get(key) is info:
                self._settle()
                del self.live[key]
                del self._refs[key]
                self.current -= info.nbytes

        self._refs[key] = weakref.ref(st, freed)
        return info

    def tag(self, tensors: Iterable[torch.Tensor | None] | torch.Tensor, role: str) -> None:
        if role not in CATEGORIES:
            raise ValueError(f"unknown role {role!r}; accepted: {', '.join(CATEGORIES)}")
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        for t in tensors:
            if t is None:
                continue
            lt = local(t)
            info = self._register(lt.untyped_storage(), "existing", tuple(lt.shape), dtype_name(lt.dtype))
            info.tags.add(role)
        self._check_peak("tag")

    def _check_peak(self, op: str) -> None:
        if self.current > self.phase_peaks.get(self.phase, -1):
            self.phase_peaks[self.phase] = self.current
        if self.current > self.peak:
            self.peak = self.current
            self.peak_phase = self.phase
            self.peak_op = op
            self._pending = True

    def _settle(self) -> None:
        """Copy the live set at the peak, lazily: just before the first free after it.

        Until something is freed or shrinks, the live set only grows, and growth past the peak
        is a new peak: so the set before the first decrease is the set at the peak.
        """
        if self._pending:
            self.peak_live = [(i, i.nbytes) for i in self.live.values()]
            self._pending = False

    def reset_peak(self) -> None:
        """Forget the peak so far: the next one is measured from the bytes alive now."""
        self._settle()
        self.peak = -1
        self.phase_peaks = {}
        self._check_peak(f"start of {self.phase}")

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self._check_peak(f"start of {phase}")

    # -- the dispatch mode ------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(t is DTensor for t in types):  # let DTensor desugar into local ops first
            return NotImplemented
        if func is torch.ops._c10d_functional.wait_tensor.default:
            out = args[0]  # the fake kernel returns a new tensor; eager waits in place
        else:
            out = func(*args, **(kwargs or {}))
        if self._propagating or active_fake_mode() is not self._fake_mode:
            # DTensor's sharding propagation runs each new op once on global-shape placeholders
            # under a FakeTensorMode (ours, if one is active) to learn the output's shape: no
            # memory on a device. fsdp2_mem_tracker skips them by the mode's identity only,
            # which cannot tell them apart under an outer FakeTensorMode; the propagation
            # method is wrapped instead (see __enter__).
            return out
        self.ops += 1
        name = getattr(func, "__name__", str(func))
        flat, _ = tree_flatten(out)
        if kwargs and isinstance(kwargs.get("out"), torch.Tensor):
            flat.append(kwargs["out"])  # ops that write into an out= buffer return nothing
        for t in flat:
            if isinstance(t, torch.Tensor):
                info = self._register(t.untyped_storage(), name, tuple(t.shape), dtype_name(t.dtype))
                if func is torch.ops.aten._to_copy.default and isinstance(args[0], torch.Tensor):
                    src = self.live.get(id(args[0].untyped_storage()))
                    if src is not None and src.tags & {"parameters", "master weights"}:
                        info.tags.add("weight copies")
                if "all_gather" in name or "allgather" in name:
                    info.tags.add("FSDP gathered parameters")
                elif "chunk_cat" in name or "reduce_scatter" in name:
                    info.tags.add("FSDP reduce-scatter buffers")
        self._check_peak(name)
        return out

    def __enter__(self):
        from torch.distributed.tensor._sharding_prop import ShardingPropagator

        self._fake_mode = active_fake_mode()  # None with real tensors
        orig = self._orig_resize = torch.UntypedStorage.resize_
        tracker = self
        propagate = self._orig_propagate = ShardingPropagator._propagate_tensor_meta_non_cached

        def propagate_tensor_meta(prop, *args, **kwargs):
            tracker._propagating += 1
            try:
                return propagate(prop, *args, **kwargs)
            finally:
                tracker._propagating -= 1

        ShardingPropagator._propagate_tensor_meta_non_cached = propagate_tensor_meta

        def resize_(st, size):
            before = st.nbytes()
            result = orig(st, size)
            info = tracker.live.get(id(st))
            if info is None:
                info = tracker._register(st, "resize_")
            after = st.nbytes()
            if after < before:
                tracker._settle()
            if after != before:
                tracker.current += after - info.nbytes
                info.nbytes = after
                if after > before:
                    info.tags.add("FSDP gathered parameters")
                tracker._check_peak("resize_")
            return result

        torch.UntypedStorage.resize_ = resize_
        return super().__enter__()

    def __exit__(self, *exc):
        from torch.distributed.tensor._sharding_prop import ShardingPropagator

        torch.UntypedStorage.resize_ = self._orig_resize
        ShardingPropagator._propagate_tensor_meta_non_cached = self._orig_propagate
        return super().__exit__(*exc)

    # -- results ----------------------------------------------------------------------------
    def by_category(self, entries: Iterable[tuple[_Info, int]]) -> dict[str, int]:
        out = dict.fromkeys(CATEGORIES, 0)
        for info, nbytes in entries:
            out[info.category()] += nbytes
        return {k: v for k, v in out.items() if v}

    def now(self) -> dict[str, int]:
        return self.by_category((i, i.nbytes) for i in self.live.values())

    def peak_largest(self, n: int = 8) -> list[list]:
        """The ``n`` largest storages alive at the peak: [category, op, dtype, shape, bytes, phase]."""
        self._settle()
        top = sorted(self.peak_live, key=lambda e: -e[1])[:n]
        return [[i.category(), i.op, i.dtype, list(i.shape), nbytes, i.phase] for i, nbytes in top]

    def peak_breakdown(self) -> dict[str, int]:
        self._settle()
        return self.by_category(self.peak_live)
