"""Activations offloaded to host memory: which saved tensors move, what stays on the device,
the host memory they take, and the time their copies cost over the host link
(:data:`trainmath.memory.kernels.ACTIVATION_OFFLOADS`).

The rules are torchtune's and TRL's ``OffloadActivations``
(``torchtune/training/_activation_offloading.py``, ``trl/models/activation_offloading.py``),
saved-tensor hooks (``torch.autograd.graph.saved_tensors_hooks``) around the model's forward:

- every tensor saved for backward by the embedding, the decoder layers (the rotary tables
  they share among them) and the final norm moves to host memory, once per storage (TRL
  deduplicates by storage);
- what stays on the device: a saved tensor under ``min_offload_size`` = 1024 bytes
  (:data:`MIN_OFFLOAD_BYTES`), a parameter, and everything the output head and the loss save
  (torchtune wraps ``model.output`` in a ``NoOpManager``: "we actually use more memory if we
  offload it as it interferes with chunkedCE"; TRL: "All but the last output Linear in every
  step will be offloaded");
- in the backward each tensor comes back when the node that saved it runs: a decoder layer's
  backward holds its own tensors again (:attr:`trainmath.memory.peak.StepInputs.offload_layer`).

``torch.autograd.graph.save_on_cpu`` and transformers' ``gradient_checkpointing_kwargs=
{"offload": True}`` (which wraps the checkpointed layers in ``save_on_cpu(pin_memory=True)``)
move the same tensors but copy a storage once per save: their host memory can be larger than
:func:`offloaded_activations` counts. Under ``recompute="full"`` a layer saves only its input,
so that is what moves.

The copies cross the host link (PCIe, :data:`trainmath.hardware.HOST_LINKS`) once each way
per micro-batch: "sync" copies on the compute stream (``save_on_cpu``; transformers: "Both
copies run on the compute stream"), so they add to the step; "overlap" copies on a side
stream (torchtune's ``use_streams=True``), exposed only where a direction's copies outlast
the compute they overlap (:func:`offload_seconds`).

Measured in a whole step of Llama-3-8B at s 8192 with saved-tensor hooks that follow these
rules (docs/_data/measurements.json, ``act-offload-step/``): the bytes left on the device, the
host bytes and the step's peak.
"""

from __future__ import annotations

from dataclasses import replace

from .activations import LayerActivations
from .kernels import ACTIVATION_OFFLOADS
from .stages import StageActivations
from ..units import Bytes, choice

#: torchtune's and TRL's ``min_offload_size``: a saved tensor smaller than this stays on the
#: device ("we don't want to bother with small tensors").
MIN_OFFLOAD_BYTES = 1024


def _kept(layer: LayerActivations, *, head: bool = False) -> LayerActivations:
    """The tensors of ``layer`` that stay on the device: those under :data:`MIN_OFFLOAD_BYTES`
    and, with ``head``, the output head's and the loss's (all but the final norm's)."""
    return LayerActivations(tuple(
        t for t in layer.tensors
        if t.bytes.n < MIN_OFFLOAD_BYTES or (head and "final " not in t.name)))


def offloaded_activations(stage: StageActivations) -> tuple[StageActivations, Bytes]:
    """``stage`` as the device keeps it with its activations offloaded, and the host bytes the
    offloaded ones take (module docstring).

    >>> from trainmath.memory.stages import stage_activations
    >>> from trainmath.model.presets import preset
    >>> acts = stage_activations(preset("llama-3-8b"), 8192, 1, implementation="megatron-te")
    >>> device, host = offloaded_activations(acts)
    >>> device.total + host == acts.total, device.total < acts.total
    (True, True)
    """
    if not isinstance(stage, StageActivations):
        raise ValueError(f"stage must be a trainmath.memory.stages.StageActivations, got {stage!r}")
    device = replace(
        stage, per_layer=_kept(stage.per_layer),
        embedding=None if stage.embedding is None else _kept(stage.embedding),
        output=None if stage.output is None else _kept(stage.output, head=True),
        rotary=_kept(stage.rotary), mix=tuple((_kept(a), n) for a, n in stage.mix))
    return device, stage.total - device.total


def offload_seconds(mode: str, *, moved: float, link: float, forward: float,
                    backward: float) -> float:
    """Seconds the copies of one micro-batch's offloaded activations add to its step: ``moved``
    bytes to the host in the forward and back in the backward over a ``link`` of that many
    bytes/s each way; "sync" waits for both, "overlap" only for what outlasts the ``forward``
    and ``backward`` compute it runs beside.

    >>> offload_seconds("sync", moved=64e9, link=64e9, forward=0.5, backward=1.0)
    2.0
    >>> offload_seconds("overlap", moved=64e9, link=64e9, forward=0.5, backward=1.0)
    0.5
    """
    mode = choice("activation_offload", mode, ACTIVATION_OFFLOADS)
    if link <= 0:
        raise ValueError(f"link {link!r} bytes/s; accepted: a positive rate")
    if mode == "none" or moved <= 0:
        return 0.0
    each_way = moved / link
    if mode == "sync":
        return 2 * each_way
    return max(0.0, each_way - forward) + max(0.0, each_way - backward)
