"""Two memory techniques measured in a whole training step: a chunked loss and activation
offloading to host memory (issue 24).

**Chunked loss** (``loss="chunked"``): torchtune's ``LinearCrossEntropyLoss``
(``torchtune/modules/loss/cross_entropy_loss.py``) as it runs: the model stops at the final
norm (``skip_output_layer``), the hidden states are ``tensor_split`` into ``chunks`` pieces
along the sequence, and each piece is projected by the LM head and goes through
``F.cross_entropy(logits.float(), target, reduction="sum")``; the chunks' losses are summed and
divided by the number of targets, and one backward runs through all of them. torchtune's
masking of ignored tokens (``hidden_chunk[mask_chunk]``) is left out: every token is a target
here, and a boolean mask's data-dependent shape does not run under fake tensors.

**Activation offloading** (``offload=True``): saved-tensor hooks
(``torch.autograd.graph.saved_tensors_hooks``) that copy each tensor saved for backward to
host memory in the forward pass and bring it back when the backward needs it, with the rules
of torchtune's and TRL's ``OffloadActivations`` (``torchtune/training/_activation_offloading.py``,
``trl/models/activation_offloading.py``): a tensor under ``min_offload_size`` = 1024 bytes and
a parameter stay on the device, and the output head is not offloaded (torchtune's
``NoOpManager`` around ``model.output``): the hooks cover the embedding, the decoder layers and
the final norm. Each storage is copied once (TRL deduplicates by storage; later saves of it
share the host copy). The device is the CPU here, so the host copies are CPU tensors as
well, which :class:`HostTracker` counts apart as host memory (they are registered with it as
they are made); the device's own bytes are what PyTorch's autograd frees once the copy holds
the value. The copies are synchronous (no side stream: the stream overlap is a
question of time, not of what is alive once each copy is done).

Both are measured at full size under ``FakeTensorMode`` through :func:`.step.measure_step`,
which gives the states and the peak; this module adds what stays saved on the device, and
the host bytes.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn

from .tracking import AllocationTracker, _Info

F = nn.functional

#: torchtune's and TRL's ``min_offload_size``: smaller saved tensors stay on the device.
MIN_OFFLOAD_BYTES = 1024
#: torchtune's ``LinearCrossEntropyLoss(num_output_chunks=8)`` default.
DEFAULT_CHUNKS = 8

METHOD = (
    "A whole training step as kind 'step' measures it (validate/measure/step.py), with the "
    "loss or the saved-tensor hooks of validate/measure/techniques.py: torchtune's "
    "LinearCrossEntropyLoss (hidden states tensor_split into chunks along the sequence, each "
    "projected and put through F.cross_entropy(logits.float(), reduction='sum'), one backward) "
    "without its ignored-token masking; activation offloading by saved-tensor hooks that copy "
    "every saved tensor of at least 1024 bytes that is not a parameter, of the embedding, the "
    "decoder layers and the final norm (not the output head: torchtune's NoOpManager), once "
    "per storage, to host memory (CPU tensors counted apart from the device's), and bring "
    "it back in the backward. 'saved' counts the distinct storages saved for backward that "
    "stay on the device (parameters left out), 'host' the host copies after the forward pass "
    "and at their most."
)


class HostTracker(AllocationTracker):
    """:class:`.tracking.AllocationTracker` that counts the host copies of :class:`SavedOnDevice`
    (:meth:`to_host`) apart from the device's storages: not in :attr:`current` nor the peak,
    but in :attr:`host` and :attr:`host_peak`. (Every storage is a CPU one here,
    so the copies are told apart by being registered here.)"""

    def __init__(self, vocab: int | None = None) -> None:
        super().__init__(vocab=vocab)
        self.host = 0
        self.host_peak = 0
        self._host: dict[int, tuple[weakref.ref, int]] = {}

    def _register(self, st: torch.UntypedStorage, op: str, shape=(), dtype="") -> _Info:
        known = self._host.get(id(st))
        if known is not None and known[0]() is st:
            return _Info(st.nbytes(), op, self.phase, shape, dtype)  # host memory, not counted
        return super()._register(st, op, shape, dtype)

    def to_host(self, t: torch.Tensor) -> None:
        """Count ``t``'s storage (just allocated) as host memory instead of the device's."""
        st = t.untyped_storage()
        key, n = id(st), st.nbytes()
        info = self.live.pop(key, None)
        if info is not None:
            self._refs.pop(key, None)
            self.current -= info.nbytes

        def freed(_ref, key=key, n=n, self=self):
            if key in self._host and self._host[key][0] is _ref:
                del self._host[key]
                self.host -= n

        self._host[key] = (weakref.ref(st, freed), n)
        self.host += n
        self.host_peak = max(self.host_peak, self.host)


class SavedOnDevice:
    """The pack and unpack hooks of one forward pass: every saved tensor tagged "activations"
    for the tracker, the distinct storages that stay saved on the device counted (parameters
    left out), and with ``offload`` the tensors :data:`MIN_OFFLOAD_BYTES` or larger copied to
    the host once per storage."""

    def __init__(self, tracker: AllocationTracker, parameters, offload: bool = False) -> None:
        self.tracker = tracker
        self.params = {id(p.untyped_storage()) for p in parameters}
        self.offload = offload
        self._kept: dict[int, tuple[weakref.ref, int]] = {}
        self._copies: dict[int, tuple[weakref.ref, weakref.ref]] = {}
        self.host_after_forward = 0

    def saved(self) -> int:
        """Bytes of the distinct storages saved for backward that are on the device now."""
        return sum(n for ref, n in self._kept.values() if ref() is not None)

    def pack(self, x: torch.Tensor):
        self.tracker.tag(x, "activations")
        st = x.untyped_storage()
        key = id(st)
        if key in self.params:
            return x
        if not self.offload or st.nbytes() < MIN_OFFLOAD_BYTES:
            known = self._kept.get(key)
            if known is None or known[0]() is not st:
                self._kept[key] = (weakref.ref(st), st.nbytes())
            return x
        cached = self._copies.get(key)
        host = cached[1]() if cached is not None and cached[0]() is st else None
        if host is None:  # the first save of this storage: one copy of all of it
            n = st.nbytes() // x.element_size()
            host = torch.empty(n, dtype=x.dtype)
            self.tracker.to_host(host)
            host.copy_(torch.as_strided(x, (n,), (1,), 0))
            self._copies[key] = (weakref.ref(st), weakref.ref(host))
        return host, tuple(x.shape), x.stride(), x.storage_offset()

    @staticmethod
    def unpack(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        host, shape, stride, offset = packed
        back = torch.empty_like(host)  # a new device tensor: the copy back from host memory
        back.copy_(host)
        return back.as_strided(shape, stride, offset)

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)


def chunked_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                          chunks: int = DEFAULT_CHUNKS) -> torch.Tensor:
    """torchtune's ``LinearCrossEntropyLoss.forward`` for ``hidden`` (b, s, h) and ``targets``
    (b, s), every token a target (module docstring)."""
    total = 0.0
    for hc, yc in zip(hidden.tensor_split(chunks, dim=1), targets.tensor_split(chunks, dim=1)):
        logits = F.linear(hc, weight)
        total = total + F.cross_entropy(logits.float().flatten(0, 1), yc.flatten(),
                                        reduction="sum")
    return total / targets.numel()


def loss_with(loss: str, chunks: int, offload: bool, record: dict):
    """A ``loss_of`` for :func:`.step.measure_step`: the reference model's loss, standard or
    chunked, under :class:`SavedOnDevice`'s hooks (offloading the embedding, layers and final
    norm when ``offload``); what it saw after each forward pass goes into ``record``."""
    if loss not in ("standard", "chunked"):
        raise ValueError(f"loss {loss!r}; accepted: standard, chunked")

    def loss_of(net, tokens, targets, tracker):
        params = [*net.parameters(), *net.buffers()]
        saving = SavedOnDevice(tracker, params, offload=offload)
        outer = SavedOnDevice(tracker, params, offload=False)  # the output head stays
        outer._kept = saving._kept  # one count of distinct storages
        with saving.hooks():
            hidden = net.hidden_states(tokens)
        with outer.hooks():
            if loss == "chunked":
                out = chunked_cross_entropy(hidden, net.head_weight(), targets, chunks)
            else:
                b, s = tokens.shape
                logits = F.linear(hidden, net.head_weight())
                out = F.cross_entropy(logits.float().view(b * s, -1), targets.view(b * s))
        del hidden
        record["saved"] = saving.saved()
        record["host_after_forward"] = getattr(tracker, "host", 0)
        record["tracker"] = tracker
        return out

    return loss_of


def measure_technique(model: str, implementation: str, recipe: str, s: int, b: int = 1, *,
                      loss: str = "standard", chunks: int = DEFAULT_CHUNKS,
                      offload: bool = False, layers: int | None = None,
                      fake: bool = True) -> dict:
    """One training step of the reference ``model`` (:func:`.step.measure_step`) with ``loss``
    and, with ``offload``, its activations offloaded; the step's record plus ``saved`` (bytes
    saved for backward left on the device, after the second forward pass) and ``host`` (host
    bytes after that forward pass, and their most over the step)."""
    from .step import measure_step

    if not implementation.startswith("reference-"):
        raise ValueError(f"implementation {implementation!r}; accepted: reference-sdpa, "
                         "reference-eager (the model whose head the loss takes)")
    record: dict = {}
    out = measure_step(model, implementation, recipe, s, b, layers=layers, fake=fake,
                       loss_fn=loss_with(loss, chunks, offload, record),
                       tracker_class=HostTracker)
    out["saved"] = record["saved"]
    out["host"] = {"after_forward": record["host_after_forward"],
                   "peak": record["tracker"].host_peak}
    return out
