"""The peak of one training step: when each kind of memory is alive, and the largest sum.

The model states and the activations of :func:`trainmath.runs.estimates.estimate` are not all alive at
once, and some memory lives only for a moment. A steady-state step (the second and every later
one: the optimizer's states exist from its start; gradients were set to None by ``zero_grad``)
passes through these moments, on one device:

- **forward, the loss**: every tensor saved for backward, plus the 16-bit logits and their
  fp32 copy (``F.cross_entropy(logits.float(), ...)``, Hugging Face's ``logits.float()``),
  which the loss frees once it has its log-softmax;
- **backward, the loss's gradient**: everything saved, plus two fp32 tensors over the
  vocabulary, the gradient of the log-softmax and of the fp32 logits (``nll_loss_backward``,
  ``_log_softmax_backward_data``); no parameter has a gradient yet;
- with ZeRO-3 or FSDP, **backward, the last layers**: the unit computing and the next one
  prefetched, unsharded, their gradients unsharded, and FSDP2's reduce-scatter input of the
  previous unit, which it holds until the next unit reduces (one buffer in flight by default,
  ``set_reduce_scatter_max_input_buffers``), in the reduce format: with
  ``MixedPrecisionPolicy(reduce_dtype=torch.float32)`` a unit's bf16 gradients are upcast to
  fp32 before the reduce-scatter, 2 + 4 = 6 bytes per parameter of a unit, not 2. FSDP2's root
  unit (the embedding, final norm and LM head) is not resharded after the forward pass (its
  ``reshard_after_forward`` is False for the root), so it stays unsharded until the end of the
  backward pass, its LM head's gradient with it (``torch.distributed.fsdp.fully_shard``);
- **backward, the end**: every gradient backward made (a tied embedding's two contributions and
  their sum at once), or under FSDP the root's unsharded gradients and their reduce-scatter
  input;
- **optimizer step**: the states at the step (a recipe's fp32 gradient copies included,
  :class:`trainmath.memory.recipes.Recipe`) plus the optimizer's temporaries
  (:func:`optimizer_temporaries`).

:func:`trainmath.runs.estimates.estimate` builds these moments for the fullest device and reports the
largest as ``Estimate.peak``; the command's "fits" verdict uses it. Checked against the peak of
a real step of PyTorch at full size, single device and FSDP2 per rank, within 2%
(docs/_data/measurements.json, :mod:`trainmath.checks.measured`). What a CPU does not show (the CUDA
caching allocator's rounding and fragmentation, NCCL's buffers, the CUDA context, kernels'
workspaces) is not counted: the "How we know" page says what each adds, and
:attr:`trainmath.runs.description.Run.overhead` (the command's ``--overhead``) adds an amount for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from .loss import LossMemory
from .recipes import optimizer_impl
from ..derivations import Derivation, bytes_text
from ..units import Bytes, positive_int


#: The phases of a step, in order.
PHASES = ("forward", "backward", "optimizer step")


@dataclass(frozen=True)
class Moment:
    """The memory alive at one moment of a step, by kind."""

    phase: str
    #: what happens then, in words
    when: str
    parts: tuple[tuple[str, Bytes], ...]

    @cached_property  # computed once: the peak compares it for every moment
    def total(self) -> Bytes:
        """Everything alive at this moment."""
        return sum((b for _, b in self.parts), Bytes(0))

    def as_dict(self) -> dict[str, Bytes]:
        """The parts by kind, the zero ones left out."""
        return {k: b for k, b in self.parts if b.n}


@dataclass(frozen=True)
class StepPeak:
    """The moments of one step on one device, and the largest of them."""

    moments: tuple[Moment, ...]

    @cached_property
    def peak(self) -> Moment:
        """The moment with the most memory alive (ties: the earliest)."""
        best = self.moments[0]
        for m in self.moments[1:]:
            if m.total > best.total:
                best = m
        return best

    @property
    def bytes(self) -> Bytes:
        """Bytes alive at the peak."""
        return self.peak.total

    @property
    def phase(self) -> str:
        """The phase the peak falls in: one of :data:`PHASES`."""
        return self.peak.phase

    def derivation(self, where: str = "") -> Derivation:
        """The arithmetic of the peak: everything alive at its moment, added up; ``where`` says
        which pipeline stage (``" on pipeline stage 0"``)."""
        top = self.peak
        alive = top.as_dict()
        total = sum((b.n for b in alive.values()), Fraction(0))
        return Derivation("peak of a step", " + ".join(alive),
                          tuple((k, bytes_text(v.n)) for k, v in alive.items()),
                          " + ".join(bytes_text(v.n) for v in alive.values())
                          + f" = {bytes_text(total)}", top.total, Bytes(total),
                          "trainmath.memory.peak: what is alive at each moment of the step, "
                          "checked against PyTorch", "peak", f"{top.phase}{where}, {top.when}")


def optimizer_temporaries(impl: str, numel: int, largest: int | None = None,
                          value_bytes: int = 4) -> Bytes:
    """Bytes of the temporaries one AdamW step allocates, on one device.

    ``numel`` counts the elements the optimizer steps on this device, ``largest`` the elements
    of its largest tensor and ``value_bytes`` the bytes of a moment (4: fp32). PyTorch's AdamW
    (``torch/optim/adamw.py``, ``_multi_tensor_adamw`` and ``_single_tensor_adamw``): the
    "foreach" path computes ``torch._foreach_sqrt(exp_avg_sqs)`` for every tensor at once, a
    full-size temporary (numel × value_bytes); the "for-loop" path works one tensor at a time
    and holds the square root and its quotient for the largest tensor (2 × largest ×
    value_bytes); a "fused" kernel keeps its intermediates in registers (0). Measured: the
    foreach step of a 7B model peaks exactly 4 bytes per parameter above its states.

    >>> optimizer_temporaries("foreach", 1000), optimizer_temporaries("for-loop", 1000, 300)
    (Bytes(n=4000), Bytes(n=2400))
    """
    impl = optimizer_impl(impl)
    numel = positive_int("numel", numel)
    if largest is not None:
        largest = positive_int("largest", largest)
        if largest > numel:
            raise ValueError(f"largest {largest} exceeds numel {numel}; accepted: at most numel")
    elif impl == "for-loop":
        raise ValueError("the for-loop path needs largest, the elements of the largest tensor")
    return _temporaries(impl, numel, largest, positive_int("value_bytes", value_bytes))


def _temporaries(impl: str, numel: int | Fraction, largest: int | Fraction | None,
                 value_bytes: int) -> Bytes:
    """:func:`optimizer_temporaries` on checked inputs (``largest`` None: not known, 0)."""
    if impl == "foreach":
        return Bytes(numel * value_bytes)
    if impl == "for-loop" and largest is not None:
        return Bytes(2 * largest * value_bytes)
    return Bytes(0)



@dataclass(frozen=True)
class GatheredUnits:
    """What ZeRO-3 or FSDP holds unsharded on one device, per unit (bytes)."""

    #: one decoder layer's parameters, gathered in the compute format
    layer: Bytes
    #: its gradients, unsharded, in the compute format
    layer_grads: Bytes
    #: its reduce-scatter input (FSDP2: the gradients upcast to the reduce format)
    layer_reduce: Bytes
    #: its gradients once reduce-scattered (this device's shard)
    layer_sharded_grads: Bytes
    #: the root unit (embedding, final norm, LM head) gathered; FSDP2 holds it from the forward
    #: to the end of the backward
    root: Bytes
    #: the LM head's and final norm's unsharded gradients (from the loss's gradient on)
    root_head_grads: Bytes
    #: all the root's unsharded gradients, and their reduce-scatter input, at the end
    root_grads: Bytes
    root_reduce: Bytes
    #: units gathered ahead of the one computing (FSDP's default: 1)
    prefetch: int = 1
    #: the stage's units stay gathered, and their gradients unsharded, from the first forward
    #: to the last backward: FSDP2 under a pipeline (torchtitan turns ``reshard_after_forward``
    #: off with pp > 1; PyTorch pipelining syncs gradients on the last micro-batch only)
    resident: bool = False


@dataclass(frozen=True)
class StepInputs:
    """The bytes one device holds, by kind and by when they exist: the moments of a step are
    built from them (:func:`trainmath.runs.estimates.estimate` fills them in)."""

    weights: Bytes
    master_weights: Bytes
    optimizer_states: Bytes
    step_counters: Bytes
    #: gradients in a buffer allocated once (Megatron-LM's main_grad), alive all step
    persistent_gradients: Bytes
    #: backward's gradients at its end (without the persistent ones)
    backward_gradients: Bytes
    #: the gradients alive at the optimizer step (copies included, persistent ones too)
    step_gradients: Bytes
    #: everything saved for backward on this device, and one layer's and the output layer's part
    activations: Bytes
    layer_activations: Bytes
    output_activations: Bytes
    #: one fp32 copy of this device's logits (0 off the last pipeline stage), and the 16-bit ones
    logits: Bytes
    logits16: Bytes
    #: a tied embedding's two gradient contributions, alive with their sum at the end
    tied_gradients: Bytes
    temporaries: Bytes
    layers: int
    gathered: GatheredUnits | None = None
    #: fp8 training (Transformer Engine): the fp8 copy of every linear weight and its transpose,
    #: cast at a step's first micro-batch and kept in the module between steps
    fp8_weight_cache: Bytes = Bytes(0)
    #: what the loss holds at its two moments (:class:`trainmath.memory.loss.LossMemory`); None:
    #: the standard loss's ``logits16 + logits`` and ``2 × logits``
    loss: LossMemory | None = None
    #: activations offloaded to host memory (:mod:`trainmath.memory.act_offload`): one layer's
    #: saved tensors, back on the device for its backward, and the gradients alive then (all
    #: but that layer's and the embedding's); 0 without offload
    offload_layer: Bytes = Bytes(0)
    offload_gradients: Bytes = Bytes(0)


def _step_peak(i: StepInputs) -> StepPeak:
    """The moments of one step (see the module docstring) from what one device holds."""
    z0 = Bytes(0)
    persistent = (("parameters", i.weights), ("master weights", i.master_weights),
                  ("optimizer states", i.optimizer_states), ("step counters", i.step_counters),
                  ("gradients", i.persistent_gradients))
    if i.fp8_weight_cache.n:
        persistent += (("fp8 weight copies", i.fp8_weight_cache),)
    g = i.gathered
    moments = []

    def held(layers_gathered: int, *, root: bool = True) -> tuple[tuple[str, Bytes], ...]:
        if g is None:
            return ()
        if g.resident:
            layers_gathered = i.layers
        return (("gathered parameters", (g.root if root else z0) + g.layer * layers_gathered),)

    unsharded = (g.layer_grads * (i.layers if g.resident else 1)) if g is not None else z0

    if i.activations.n or i.logits.n:  # with a sequence: the loss and what is saved for it
        if i.loss is None:
            fwd, fwd_when = i.logits16 + i.logits, "the loss: the logits and their fp32 copy"
            bwd, bwd_when = i.logits * 2, "the loss's gradient: two fp32 tensors over the vocabulary"
        else:
            fwd, fwd_when, bwd, bwd_when = (i.loss.forward, i.loss.forward_when, i.loss.backward,
                                            i.loss.backward_when)
        moments.append(Moment("forward", fwd_when, (
            *persistent, *held(0), ("activations", i.activations), ("logits", fwd))))
        moments.append(Moment("backward", bwd_when, (
            *persistent, *held(g.prefetch if g else 0), ("activations", i.activations),
            ("logits", bwd))))
    if i.offload_layer.n and g is None:
        moments.append(Moment("backward", "the first layer's backward: its saved tensors back "
                              "from host memory", (
            *persistent, ("gradients", i.offload_gradients), ("activations", i.offload_layer))))
    if g is not None:
        in_flight = 1 + g.prefetch
        rest = i.activations - i.output_activations + i.offload_layer
        moments.append(Moment("backward", "the last layer's backward: its gradients unsharded", (
            *persistent, *held(in_flight), ("activations", rest),
            ("unsharded gradients", g.root_head_grads + unsharded))))
        if i.layers > 1:
            moments.append(Moment(
                "backward", "the next layer's backward, the last layer's reduce-scatter input held", (
                    *persistent, ("gradients", g.layer_sharded_grads), *held(in_flight),
                    ("activations", rest - i.layer_activations),
                    ("unsharded gradients", g.root_head_grads + unsharded),
                    ("reduce-scatter buffers", g.layer_reduce))))
        moments.append(Moment("backward", "the end: the root's gradients and their reduce-scatter", (
            *persistent, ("gradients", g.layer_sharded_grads * i.layers),
            ("unsharded gradients", g.root_grads), ("reduce-scatter buffers", g.root_reduce))))
    else:
        moments.append(Moment("backward", "the end: every gradient", (
            *persistent, ("gradients", i.backward_gradients + i.tied_gradients))))
    at_step = tuple((k, i.step_gradients if k == "gradients" else b) for k, b in persistent)
    moments.append(Moment("optimizer step", "the step: its gradients and temporaries", (
        *at_step, ("optimizer temporaries", i.temporaries))))
    return StepPeak(tuple(moments))
