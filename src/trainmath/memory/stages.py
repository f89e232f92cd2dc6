"""One device of each pipeline stage: its activations (a layer's saved tensors times the
micro-batches in flight, the embedding on the first stage, the loss on the last) and its memory
(model states of the parameters it holds, divided by the ZeRO stage, plus those activations).

:func:`stage_activations` adds the pipeline schedule (:mod:`trainmath.parallel.schedules`;
Korthikanti et al. 2022 §4.2.3) to :func:`trainmath.memory.activations.layer_activations`;
:func:`device_memory` puts :func:`trainmath.parallel.placement.stage_params` through
:func:`trainmath.memory.sharding.zero_states` (ZeRO §5.1–5.3) for every stage, routed experts
with their own ZeRO group.

>>> from trainmath.model.presets import preset
>>> from trainmath.parallel.layout import Layout
>>> [d.stage for d in device_memory(preset("llama-2-7b"), Layout(pp=4))]
[0, 1, 2, 3]
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Sequence

from .activations import LayerActivations, layer_activations
from .embedding_and_loss import input_activations, output_activations, rotary_activations
from .kernels import MASK_BYTES, STAT_BYTES
from .recipes import BytesPerParam, ModelStates, bytes_per_param
from .sharding import Share, _zero_states, check_stage, state_derivations
from ..derivations import Derivation, bytes_text, number_text
from ..model.shape import ModelShape, kind_counts, layer_kinds, layer_shape
from ..parallel.layout import Layout, pipeline_split_problems
from ..problems import check
from ..parallel.placement import _stage_params, stage_params
from ..parallel.schedules import in_flight
from ..units import Bytes, positive_int


@dataclass(frozen=True, kw_only=True)
class DeviceMemory(ModelStates):
    """Memory on one device of one pipeline stage: ZeRO-divided model states plus activations."""

    stage: int
    #: parameters this device holds before ZeRO sharding (its TP/PP share of the model)
    params: int
    zero_stage: int
    #: ranks the model states are sharded over (dp · cp)
    zero_group: int
    activations: Bytes
    #: of ``params``, the routed experts' (a mixture of experts), whose states ZeRO shards over
    #: ``expert_zero_group`` ranks (dp · cp / ep) instead
    expert_params: int = 0
    expert_zero_group: int = 1

    @property
    def total(self) -> Bytes:
        """Model states plus activations: what this device must hold."""
        return self.model_states + self.activations

    def parts(self) -> dict[str, Bytes]:
        """Each kind of state by name, then the activations."""
        return {**super().parts(), "activations": self.activations}


def _per_stage_activations(activations: Bytes | Sequence[Bytes] | None, pp: int) -> tuple[Bytes, ...]:
    if activations is None:
        return (Bytes(0),) * pp
    if isinstance(activations, Bytes):
        return (activations,) * pp
    acts = tuple(activations)
    if len(acts) != pp or not all(isinstance(a, Bytes) for a in acts):
        raise ValueError(
            f"activations must be one Bytes or {pp} Bytes (one per pipeline stage), got {activations!r}"
        )
    return acts


def device_memory(
    model: ModelShape,
    lay: Layout,
    *,
    zero_stage: int = 0,
    precision: str = "bf16-mixed",
    optimizer_name: str = "adamw",
    activations: Bytes | Sequence[Bytes] | None = None,
    grad_bytes: int | None = None,
) -> tuple[DeviceMemory, ...]:
    """Memory of one device of each pipeline stage.

    Model states: :func:`~trainmath.parallel.placement.stage_params` of the stage, divided by ZeRO ``zero_stage`` over
    dp·cp ranks with :func:`trainmath.memory.sharding.zero_states` (ZeRO §5.1-5.3). ``activations``:
    the activation bytes one device of each stage holds (a single ``Bytes`` for all stages or
    one per stage; ``None`` counts model states only). ``grad_bytes`` replaces the precision
    recipe's bytes per gradient: Megatron-LM keeps bf16 parameters with fp32 gradients, 4 bytes
    (its distributed-optimizer guide: 18 bytes per parameter, 6 + 12/d with the distributed
    optimizer, which is ZeRO stage 1 here). Buffers, temporaries and fragmentation are not
    counted.
    """
    check_stage(zero_stage)
    acts = _per_stage_activations(activations, lay.pp)
    stage_params(model, lay)  # checks the layout against the model
    per = bytes_per_param(precision, optimizer_name)
    if grad_bytes is not None:
        per = replace(per, gradients=positive_int("grad_bytes", grad_bytes))
    return _device_memory(model, lay, zero_stage=zero_stage, per=per, acts=acts)


def _device_memory(model: ModelShape, lay: Layout, *, zero_stage: int, per: BytesPerParam,
                   acts: Sequence[Bytes], stages: Sequence[int] | None = None
                   ) -> tuple[DeviceMemory, ...]:
    """:func:`device_memory` on checked inputs, with one activation amount per stage (per stage
    of ``stages``, default all)."""
    params = _stage_params(model, lay)
    if stages is not None:
        params = tuple(params[i] for i in stages)
    result = []
    # the middle stages hold the same parameters: their states are computed once
    states_of: dict[tuple[int, int], tuple[ModelStates, ModelStates]] = {}
    for sp, act in zip(params, acts):
        key = (sp.dense, sp.expert)
        if key not in states_of:
            states_of[key] = (_zero_states(sp.dense, lay.zero_group, zero_stage, per),
                              _zero_states(sp.expert, lay.expert_zero_group, zero_stage, per))
        states, experts = states_of[key]
        result.append(
            DeviceMemory(
                stage=sp.stage, params=sp.total, zero_stage=zero_stage, zero_group=lay.zero_group,
                weights=states.weights + experts.weights,
                gradients=states.gradients + experts.gradients,
                master_weights=states.master_weights + experts.master_weights,
                optimizer_states=states.optimizer_states + experts.optimizer_states,
                activations=act, expert_params=sp.expert,
                expert_zero_group=lay.expert_zero_group,
            )
        )
    return tuple(result)


def fullest(stages: Sequence[DeviceMemory]) -> DeviceMemory:
    """The stage whose device needs the most memory (ties: the earliest)."""
    return max(stages, key=lambda d: (d.total, -d.stage))


def peak_device_memory(model: ModelShape, lay: Layout, **kwargs) -> DeviceMemory:
    """:func:`fullest` of :func:`device_memory`, which takes the same arguments."""
    return fullest(device_memory(model, lay, **kwargs))


@dataclass(frozen=True)
class StageActivations:
    """Activation bytes on one device of one pipeline stage."""

    per_layer: LayerActivations
    layers_on_stage: int
    held: Fraction
    embedding: LayerActivations | None
    embedding_held: int
    output: LayerActivations | None
    #: the rotary tables each forward pass saves once and every layer shares
    rotary: LayerActivations = LayerActivations(())
    #: model chunks per device (interleaved schedule): each chunk's forward makes its own tables
    chunks: int = 1
    #: a model whose layers differ (dense and mixture layers, local and global attention): each
    #: kind's saved tensors and how many of the stage's layers are of it; empty when every layer
    #: is ``per_layer``
    mix: tuple[tuple[LayerActivations, int], ...] = ()

    def _each(self, attribute: str) -> Bytes:
        if not self.mix:
            return getattr(self.per_layer, attribute) * self.layers_on_stage
        return sum((getattr(a, attribute) * n for a, n in self.mix), Bytes(0))

    @property
    def layers(self) -> Bytes:
        """The stage's L/pp layers times the micro-batches in flight."""
        return self._each("total") * self.held

    @property
    def inputs(self) -> Bytes:
        """The embedding's tensors for the micro-batches in flight (first stage only)."""
        return self.embedding.total * self.embedding_held if self.embedding else Bytes(0)

    @property
    def outputs(self) -> Bytes:
        """The final norm, LM head and loss, for one micro-batch (last stage only)."""
        return self.output.total if self.output else Bytes(0)

    @property
    def shared(self) -> Bytes:
        """The rotary tables, one pair per forward pass in flight (per chunk, interleaved)."""
        return self.rotary.total * self.held * self.chunks

    @property
    def weight_copies(self) -> Bytes:
        """The part of :attr:`total` that is autocast's 16-bit weight copies."""
        out = self.output.weight_copies if self.output else Bytes(0)
        return self._each("weight_copies") * self.held + out

    @property
    def total(self) -> Bytes:
        """Everything this stage's device keeps for backward: its layers, inputs, outputs and
        the shared rotary tables."""
        return self.layers + self.inputs + self.outputs + self.shared


def stage_activations(
    model: ModelShape, s: int, b: int, *, tp: int = 1, sequence_parallel: bool = False,
    cp: int = 1, pp: int = 1, v: int = 1, microbatches: int | None = None,
    stage: int = 0, recompute: str = "none", attention: str | None = None, value_bytes: int = 2,
    mask_bytes: int = MASK_BYTES, stat_bytes: int = STAT_BYTES, mlp_kernel: str = "eager",
    implementation: str | None = None, autocast: bool = False, stages: tuple[int, ...] = (),
) -> StageActivations:
    """Activations on one device of pipeline stage ``stage`` (0, the first, holds the most).

    Its L/pp layers (or its share of ``stages``, the layers of each model chunk) times :func:`~trainmath.parallel.schedules.in_flight` micro-batches; on the first stage the embedding's
    tensors for its pp micro-batches in flight (Korthikanti et al. 2022 §4.3: sbhp/t for the
    embedding dropout mask, their p and t being pp and tp); on the last stage the output
    layer's for one micro-batch (in 1F1B the last stage runs each backward right after its
    forward). With pp = 1 the one stage has both. ``v`` is the interleaved schedule's model
    chunks per device. ``implementation`` and ``autocast`` as in :func:`~trainmath.memory.activations.layer_activations`.
    """
    pp = positive_int("pp (pipeline-parallel size)", pp)
    v = positive_int("v (model chunks per pipeline device)", v)
    check(pipeline_split_problems(model, pp, v, stages))
    held = in_flight(pp, v=v, microbatches=microbatches, stage=stage)
    indices = Layout(pp=pp, v=v, stages=stages).device_layer_indices(model.layers)[stage]
    common = dict(tp=tp, sequence_parallel=sequence_parallel, cp=cp)
    kernels = dict(implementation=implementation, autocast=autocast)
    kinds = layer_kinds(model)
    each = {k: layer_activations(layer_shape(model, k), s, b, **common, recompute=recompute,
                                 attention=attention, value_bytes=value_bytes,
                                 mask_bytes=mask_bytes, stat_bytes=stat_bytes,
                                 mlp_kernel=mlp_kernel, **kernels)
            for k in {kinds[j] for j in indices} or {kinds[-1]}}
    per_layer, mix = layer_mix(each, dict(kind_counts(model, indices)))
    embedding = input_activations(model, s, b, **common, mask_bytes=mask_bytes) if stage == 0 else None
    output = (output_activations(model, s, b, **common, value_bytes=value_bytes, stat_bytes=stat_bytes,
                                 **kernels)
              if stage == pp - 1 else None)
    rotary = rotary_activations(model, s, cp=cp, value_bytes=value_bytes, autocast=autocast)
    return _stage(model, per_layer, embedding=embedding, output=output, pp=pp,
                  microbatches=microbatches, held=held, rotary=rotary, v=v, layers=len(indices),
                  mix=mix)


def layer_mix(each: dict, counts: dict) -> tuple[LayerActivations, tuple]:
    """(the largest layer's saved tensors, the mix of kinds) for a stage with ``counts`` layers
    of each kind, with ``each`` kind's saved tensors: the mix is empty when they are all alike."""
    largest = max(each.values(), key=lambda a: a.total.n)
    if len(counts) <= 1:
        return (each[next(iter(counts))] if counts else largest), ()
    largest = max((each[k] for k in counts), key=lambda a: a.total.n)
    return largest, tuple((each[k], n) for k, n in counts.items())


def _stage(model: ModelShape, per_layer: LayerActivations, *, embedding: LayerActivations | None,
           output: LayerActivations | None, pp: int, microbatches: int | None, held: Fraction,
           rotary: LayerActivations = LayerActivations(()), v: int = 1,
           layers: int | None = None, mix: tuple = ()) -> StageActivations:
    """One stage's activations from its parts: the one place they are put together. ``layers``:
    the layers on this stage's device (default L/pp); ``mix``: each kind of layer's tensors and
    count, where the stage's layers differ (:func:`layer_mix`)."""
    embedding_held = pp if microbatches is None else min(pp, microbatches)
    on_stage = model.layers // pp if layers is None else layers
    return StageActivations(per_layer=per_layer, layers_on_stage=on_stage, held=held,
                            embedding=embedding, embedding_held=embedding_held, output=output,
                            rotary=rotary, chunks=v, mix=mix)


# -- the arithmetic of one device's memory, written where it is computed -------------------------
def state_derivations_of(d: DeviceMemory, per: BytesPerParam, recipe_name: str,
                         optimizer_name: str, *, values: ModelStates | None = None,
                         padded: bool = False, where: str = "") -> tuple[Derivation, ...]:
    """The arithmetic of ``d``'s four kinds of model state (``values``: other figures for them,
    FSDP2's exact shards): its dense parameters over the dp·cp ranks and, for a mixture of
    experts, its routed experts' over the expert data-parallel group
    (:func:`trainmath.memory.sharding.state_derivations`)."""
    if d.expert_params:
        shares = [Share(d.params - d.expert_params, d.zero_group,
                        what="dense parameters on this device"),
                  Share(d.expert_params, d.expert_zero_group, "Pₑ", "nₑ",
                        "routed experts' parameters on this device",
                        "expert data-parallel group dp·cp/ep")]
    else:
        shares = [Share(d.params, d.zero_group)]
    return state_derivations(shares, stage=d.zero_stage, per=per,
                             values=d if values is None else values, recipe_name=recipe_name,
                             optimizer_name=optimizer_name, padded=padded, where=where)


def activation_derivation(sa: StageActivations, stage: int, run_text: str, pipelined: bool
                          ) -> Derivation:
    """The arithmetic of one stage's activations: a layer's saved tensors times the layers on
    the stage times the micro-batches in flight, plus the embedding's, the output layer's and
    the rotary tables (Korthikanti et al. 2022 §4; Narayanan et al. 2021 §2.2). ``run_text``
    says how the layer runs (``"s = 8192, b = 1, megatron-te kernels, recompute none"``)."""
    if sa.mix:
        inputs = [(f"A{i + 1}", f"one layer of kind {i + 1}'s saved tensors for one micro-batch "
                                f"({run_text}): {bytes_text(a.total.n)}; layers of it on this "
                                f"pipeline stage: L{i + 1} = {n}")
                  for i, (a, n) in enumerate(sa.mix)]
        inputs.append(("k", f"micro-batches in flight on stage {stage}: {number_text(sa.held)}"))
        formula = "(" + " + ".join(f"A{i + 1} × L{i + 1}" for i in range(len(sa.mix))) + ") × k"
        arithmetic = ("(" + " + ".join(f"{bytes_text(a.total.n)} × {n}" for a, n in sa.mix)
                      + f") × {number_text(sa.held)}")
    else:
        A = sa.per_layer.total.n
        inputs = [("A", f"one layer's saved tensors for one micro-batch ({run_text}): "
                        f"{bytes_text(A)}"),
                  ("L", f"layers on this pipeline stage: {sa.layers_on_stage}"),
                  ("k", f"micro-batches in flight on stage {stage}: {number_text(sa.held)}")]
        formula = "A × L × k"
        arithmetic = f"{bytes_text(A)} × {sa.layers_on_stage} × {number_text(sa.held)}"
    got = sa.layers.n
    if sa.embedding is not None:
        inputs.append(("E", f"the embedding's tensors, for {sa.embedding_held} micro-batch(es) "
                            f"in flight: {bytes_text(sa.embedding.total.n)} each"))
        formula += " + E × e"
        arithmetic += f" + {bytes_text(sa.embedding.total.n)} × {sa.embedding_held}"
        got += sa.inputs.n
    if sa.output is not None:
        inputs.append(("O", f"final norm, LM head and loss, one micro-batch: "
                            f"{bytes_text(sa.outputs.n)}"))
        formula += " + O"
        arithmetic += f" + {bytes_text(sa.outputs.n)}"
        got += sa.outputs.n
    if sa.rotary.total.n:
        inputs.append(("R", "rotary tables, one pair per forward in flight and model chunk: "
                            f"{bytes_text(sa.rotary.total.n)}"))
        formula += " + R × k × v"
        arithmetic += f" + {bytes_text(sa.rotary.total.n)} × {number_text(sa.held)} × {sa.chunks}"
        got += sa.shared.n
    return Derivation("activations", formula, tuple(inputs), arithmetic + f" = {bytes_text(got)}",
                      sa.total, Bytes(got), "Korthikanti et al. 2022, §4 (tensor by tensor, "
                      "trainmath.memory.activations); Narayanan et al. 2021, §2.2 (micro-batches "
                      "in flight)", "pipeline" if pipelined else "activations")
