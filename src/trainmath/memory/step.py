"""What one device holds over a training step, put together for :mod:`trainmath.memory.peak`.

From the parts of a run (model shape, layout, training setup, batch) and the memory of one
device of a pipeline stage (:class:`~trainmath.memory.stages.DeviceMemory`), these functions
build the :class:`~trainmath.memory.peak.StepInputs`: the states, the gradients as they exist
during backward and at the step, the activations, the loss's logits, ZeRO-3's gathered units
(FSDP2's exact padded units, or even splits for other engines), Transformer Engine's cached fp8
weights, the optimizer's temporaries, and what offload moves to the host. LoRA and QLoRA runs
get their own inputs (only the adapter has gradients and optimizer states).
:func:`trainmath.runs.estimates.estimate` calls them on a checked run.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from typing import Sequence

from .activations import Kernels, LayerActivations, Split, _layer
from .embedding_and_loss import _input, _output, _rotary
from .finetune import (Adapter, AdapterStates, BASE_BYTES, _frozen_output, _lora_layer,
                       adapter_value_bytes, frozen_embedding, matrices)
from .fsdp2 import STEP_BYTES, fsdp2_rank
from .kernels import FP32_BYTES, implementation
from .fp8_activations import fp8_saved
from .loss import _loss_memory
from .peak import GatheredUnits, StepInputs, _temporaries
from .recipes import FP8_WEIGHT_CACHE_BYTES, Recipe, optimizer, recipe
from .stages import DeviceMemory, StageActivations, _stage, layer_mix
from .training import Training
from ..derivations import Derivation, bytes_text
from ..model.shape import ModelShape, distinct_kinds, kind_counts, layer_shape, param_breakdown, param_shapes
from ..parallel.layout import Batch, Layout
from ..parallel.schedules import _in_flight
from ..units import Bytes


def offloaded(d: DeviceMemory, r: Recipe, offload: str) -> tuple[DeviceMemory, Bytes]:
    """``d`` with its offloaded states moved out, and the host bytes they need.

    "optimizer" (ZeRO-Offload, Ren et al. 2021, §4: built on ZeRO-2): the master weights, the
    optimizer states and the gradient partition move, the gradients in the master weights'
    format (fp32 for mixed precision, ``initialize_optimizer_states`` in DeepSpeed's
    ``stage_1_and_2.py``), as :func:`trainmath.memory.sharding.fsdp_memory` counts them; the 16-bit
    weights stay. "parameters" (ZeRO-Infinity, Rajbhandari et al. 2021; FSDP2's
    ``CPUOffloadPolicy``): the weights' shards move too; the GPU keeps the gathered units.
    DeepSpeed's own estimate (``estimate_zero3_model_states_mem_needs`` in
    ``deepspeed/runtime/zero/stage3.py``) gives the same 16 and 18 bytes per parameter of host
    memory, before its allowance of 1.5 times that for buffers.
    """
    zero = Bytes(0)
    if offload == "none":
        return d, zero
    grads = Bytes(Fraction(d.params * max(r.gradients, r.master_weights), d.zero_group))
    host = grads + d.master_weights + d.optimizer_states
    if offload == "optimizer":
        return replace(d, gradients=zero, master_weights=zero, optimizer_states=zero), host
    return (replace(d, weights=zero, gradients=zero, master_weights=zero, optimizer_states=zero),
            host + d.weights)


def offloaded_inputs(i: StepInputs, offload: str) -> StepInputs:
    """A step's inputs with the offloaded states gone from the GPU: the optimizer step runs on
    the CPU (no states, step counters, fp32 gradients or temporaries on the GPU) and each
    gradient partition leaves as it is reduced; with "parameters" the weights' shards leave
    too. Transient GPU buffers (unsharded units and gradients, reduce-scatter inputs) stay;
    DeepSpeed's reduce buckets and pinned staging buffers are not counted."""
    if offload == "none":
        return i
    zero = Bytes(0)
    g = i.gathered
    return replace(i, master_weights=zero, optimizer_states=zero, step_counters=zero,
                   persistent_gradients=zero, backward_gradients=zero, step_gradients=zero,
                   temporaries=zero, weights=zero if offload == "parameters" else i.weights,
                   gathered=None if g is None else replace(g, layer_sharded_grads=zero))


def split_of(layout: Layout, batch: Batch) -> Split:
    """One micro-batch of ``batch`` on one device of ``layout``."""
    return Split(batch.seq_len, batch.micro_batch, layout.tp, layout.sequence_parallel, layout.cp,
                 layout.ep, layout.etp, layout.cp_kind)


def kernels_of(training: Training, value_bytes: int | None = None, autocast: bool | None = None
               ) -> Kernels:
    """How ``training``'s layers run: its recomputation, attention and kernels, in its recipe's
    compute format (or ``value_bytes``), under autocast when its recipe is."""
    r = recipe(training.recipe)
    return Kernels(recompute=training.recompute, attention=training.attention,
                   family=implementation(training.implementation).family,
                   mlp_kernel=training.mlp_kernel,
                   value_bytes=r.compute if value_bytes is None else value_bytes,
                   autocast=r.autocast if autocast is None else autocast,
                   routing=training.routing, policy=training.recompute_policy,
                   compiled=training.compiled)


def activations(*, shape: ModelShape, layout: Layout, training: Training, batch: Batch,
                microbatches: int | None, stages: Sequence[int] | None = None
                ) -> tuple[LayerActivations, dict[int, StageActivations]]:
    """One layer's saved tensors, and the activations on one device of each stage (of
    ``stages``, default all), by stage."""
    sp, k = split_of(layout, batch), kernels_of(training)
    kinds = distinct_kinds(shape)
    each = {kind: _layer(layer_shape(shape, kind), sp, k) for kind in kinds}
    if recipe(training.recipe).fp8_gemms and k.family == "megatron":  # Transformer Engine's fp8
        each = {kind: fp8_saved(a, attention=training.attention, value_bytes=k.value_bytes)
                for kind, a in each.items()}
    layer = max(each.values(), key=lambda a: a.total.n)  # the peak holds one more of the largest
    embedding = _input(shape, sp, k)
    output = _output(shape, sp, k, training.loss, training.chunks,
                     recipe(training.recipe).weights)
    rotary = _rotary(shape, sp, k)
    pp, v, m = layout.pp, layout.v, microbatches
    indices = layout.device_layer_indices(shape.layers)
    stage_acts = {}
    for i in (range(pp) if stages is None else stages):
        if len(kinds) == 1:
            per_layer, mix = layer, ()
        else:
            per_layer, mix = layer_mix(each, dict(kind_counts(shape, indices[i])))
        stage_acts[i] = _stage(shape, per_layer,
                               embedding=embedding if layout.holds_first(i) else None,
                               output=output if layout.holds_last(i) else None, pp=pp, microbatches=m,
                               held=_in_flight(pp, v, m, i, layout.schedule), rotary=rotary, v=v,
                               layers=len(indices[i]), mix=mix)
    return layer, stage_acts


def adapter_activations(*, shape: ModelShape, adapter: Adapter, training: Training, batch: Batch
                        ) -> tuple[LayerActivations, StageActivations]:
    """A LoRA or QLoRA run's saved tensors: each layer's, through the frozen base (16-bit; QLoRA
    dequantises to bf16) with the adapter's own tensors,
    and the one device's, with the frozen embedding and output layer."""
    compute = BASE_BYTES  # the frozen base computes in 16-bit (QLoRA: bf16, dequantised)
    sp = Split(batch.seq_len, batch.micro_batch)
    k = kernels_of(training, value_bytes=compute, autocast=False)
    layer = _layer(shape, sp, k)
    if training.recompute != "full":
        layer = _lora_layer(layer, shape, adapter, tokens=sp.seq_len * sp.micro_batch,
                            compute_bytes=compute,
                            adapter_bytes=adapter_value_bytes(recipe(training.recipe)),
                            mask_bytes=k.mask_bytes)
    output = _frozen_output(_output(shape, sp, k))
    stage = _stage(shape, layer, embedding=frozen_embedding(), output=output, pp=1,
                   microbatches=None, held=_in_flight(1, 1, None, 0), rotary=_rotary(shape, sp, k),
                   v=1)
    return layer, stage


def fsdp2_device(*, shape: ModelShape, layout: Layout, training: Training, device: DeviceMemory
                 ) -> DeviceMemory:
    """Rank 0's states under FSDP2, exactly (:func:`trainmath.memory.fsdp2.fsdp2_rank`); Adam's
    step counters are left out of the optimizer states, as everywhere in the estimate."""
    lay, t, d = layout, training, device
    units = param_shapes(shape).units()
    rank = fsdp2_rank(units, lay.zero_group, 0, t.recipe, t.optimizer)
    counters = param_shapes(shape).tensors * STEP_BYTES.get(t.optimizer, 0)
    return replace(d, weights=rank.parameters, gradients=rank.gradients,
                   master_weights=Bytes(0), optimizer_states=rank.optimizer_states - Bytes(counters))


def _share(amount: Fraction | int, n: int, sharded: bool) -> Bytes:
    return Bytes(Fraction(amount) / n if sharded else Fraction(amount))


def count_only_inputs(*, params: int, layout: Layout, training: Training, device: DeviceMemory
                      ) -> StepInputs:
    """The step of a run known by its parameter count: no activations, no tensor shapes."""
    t, d, psi = training, device, params
    n, z, r = layout.zero_group, t.zero_stage, recipe(t.recipe)
    zero = Bytes(0)
    persistent = d.gradients if r.persistent_gradients else zero
    backward = zero if r.persistent_gradients else _share(psi * r.gradients, n, z >= 2)
    step = d.gradients + _share(psi * r.step_copy, n, z >= 1)
    numel = Fraction(psi, n) if z >= 1 else Fraction(psi)
    temps = _temporaries(t.optimizer_impl, numel, None, _state_value(r, t))
    return StepInputs(weights=d.weights, master_weights=d.master_weights,
                      optimizer_states=d.optimizer_states, step_counters=zero,
                      persistent_gradients=persistent, backward_gradients=backward,
                      step_gradients=step, activations=zero, layer_activations=zero,
                      output_activations=zero, logits=zero, logits16=zero, tied_gradients=zero,
                      temporaries=temps, layers=0)


def _state_value(r: Recipe, t: Training) -> int:
    o = optimizer(t.optimizer)
    return r.state_value if o.state_bytes is None else o.state_bytes


def stage_inputs(*, shape: ModelShape, layout: Layout, training: Training, batch: Batch,
                 device: DeviceMemory, activations: StageActivations | None, fsdp2: bool,
                 brought_back: Bytes = Bytes(0)) -> StepInputs:
    """What one device of one pipeline stage holds over the step (:mod:`trainmath.memory.peak`):
    ``device``'s states, ``activations`` (None without a sequence; offloaded ones left out),
    with ``fsdp2`` FSDP2's exact padded units for ZeRO-3, and ``brought_back``, one layer's
    offloaded tensors back on the device for its backward (:mod:`trainmath.memory.act_offload`)."""
    lay, t, d, acts = layout, training, device, activations
    r = recipe(t.recipe)
    n, z, tp, pp = lay.zero_group, t.zero_stage, lay.tp, lay.pp
    first, last = lay.holds_first(d.stage), lay.holds_last(d.stage)
    shapes = param_shapes(shape)
    h, V = shape.hidden, shape.vocab
    zero = Bytes(0)
    P = d.params
    Pe, ne = d.expert_params, d.expert_zero_group  # routed experts: their own ZeRO group
    Pd = P - Pe
    # the parameter tensors on this device, for Adam's step counters and the largest one
    # (3-D tensors are a mixture's routed experts, split ep·etp ways)
    layer_tensors = [Fraction(math.prod(s), (lay.expert_tp * lay.ep if len(s) == 3 else tp)
                              if len(s) > 1 else 1) for s in shapes.layer]
    root_first = [Fraction(V * h, tp)] + ([Fraction(shape.positions * h)] if shape.positions else [])
    norms = 2 if shape.norm == "layernorm" else 1
    root_last = [Fraction(h)] * norms + ([Fraction(V * h, tp)] if not shape.tied_embeddings or pp > 1 else [])
    on_stage = lay.device_layers(shape.layers)[d.stage]
    tensors = (d.params and (len(layer_tensors) * on_stage
                             + (len(root_first) if first else 0) + (len(root_last) if last else 0)))
    counters = Bytes(STEP_BYTES.get(t.optimizer, 0) * tensors)
    largest = max(layer_tensors + (root_first if first else []) + (root_last if last else []))
    # gradients: persistent (Megatron's buffer), at the end of backward, at the step
    persistent = d.gradients if r.persistent_gradients else zero
    backward = zero if r.persistent_gradients else (
        _share(Pd * r.gradients, n, z >= 2) + _share(Pe * r.gradients, ne, z >= 2))
    step = d.gradients + _share(Pd * r.step_copy, n, z >= 1) + _share(Pe * r.step_copy, ne, z >= 1)
    sharded_opt = z >= 1
    numel = Fraction(Pd, n) + Fraction(Pe, ne) if sharded_opt else Fraction(P)
    local_largest = -(-largest // n) if sharded_opt else largest
    temps = _temporaries(t.optimizer_impl, numel, local_largest, _state_value(r, t))
    tied = zero
    if shape.tied_embeddings and pp == 1 and z < 3 and not r.persistent_gradients:
        tied = Bytes(2 * r.gradients * Fraction(V * h, tp))  # two contributions, then their sum
    if acts is None:
        A = layer_A = out_A = logits = zero
    else:
        A = acts.total
        layer_A = acts.per_layer.total
        out_A = acts.outputs
        tokens = Fraction(batch.seq_len * batch.micro_batch, lay.cp)
        logits = Bytes(FP32_BYTES * tokens * Fraction(V, tp)) if last else zero
    logits16 = logits * Fraction(r.compute, FP32_BYTES)
    loss = None
    if acts is not None and last:
        loss = _loss_memory(t.loss, tokens, Fraction(V, tp), h, r.compute, t.chunks)
    offload_grads = zero
    if brought_back.n:  # the first layer's backward: every gradient but its own and the embedding's
        layer_params = sum(x for x, sh in zip(layer_tensors, shapes.layer))
        early = layer_params + (root_first[0] if first else 0)
        # (0 with Megatron's persistent buffer, which the moment holds whole)
        offload_grads = Bytes(max(0, backward.n - _share(early * r.gradients, n, z >= 2).n))
    gathered = (_gathered(shape=shape, layout=lay, training=t, last=last, fsdp2=fsdp2)
                if z == 3 else None)
    # fp8 (Transformer Engine): each decoder layer's matrices, on this device, once in fp8 and
    # once transposed (1 + 1 bytes a weight: TE's FP8 weight caching and "Handling transposes")
    fp8_cache = zero
    if r.fp8_gemms and d.params:
        matrices = sum(x for x, s in zip(layer_tensors, shapes.layer) if len(s) > 1)
        fp8_cache = Bytes(FP8_WEIGHT_CACHE_BYTES * matrices * on_stage)
    return StepInputs(weights=d.weights, master_weights=d.master_weights,
                      optimizer_states=d.optimizer_states, step_counters=counters,
                      persistent_gradients=persistent, backward_gradients=backward,
                      step_gradients=step, activations=A, layer_activations=layer_A,
                      output_activations=out_A, logits=logits, logits16=logits16,
                      tied_gradients=tied, temporaries=temps, layers=on_stage,
                      gathered=gathered, fp8_weight_cache=fp8_cache, loss=loss,
                      offload_layer=brought_back, offload_gradients=offload_grads)


def _gathered(*, shape: ModelShape, layout: Layout, training: Training, last: bool,
              fsdp2: bool) -> GatheredUnits:
    """ZeRO-3's unsharded units on one device: FSDP2's exact padded units (one per decoder
    layer and the root, which FSDP2 holds from the forward to the end of the backward), or for
    other ZeRO-3 engines a decoder layer and the LM head, even splits. FSDP2 under a pipeline
    keeps the stage's layers gathered through the step (:attr:`GatheredUnits.resident`)."""
    lay, t = layout, training
    r = recipe(t.recipe)
    n, tp = lay.zero_group, lay.tp
    c = r.compute
    reduce = r.reduce_bytes or c
    h, V = shape.hidden, shape.vocab
    norms = 2 if shape.norm == "layernorm" else 1
    if fsdp2:
        shapes = param_shapes(shape)
        layer_rank = fsdp2_rank([list(shapes.layer)], n, 0, t.recipe, t.optimizer)
        root_rank = fsdp2_rank([list(shapes.root)], n, 0, t.recipe, t.optimizer)
        layer = layer_rank.unsharded_units[0]  # padded, in the compute format
        root = root_rank.unsharded_units[0]
        head = Bytes(c * (V * h + norms * h))  # the LM head's (or tied embedding's) and norm's
        return GatheredUnits(layer=layer, layer_grads=layer, layer_reduce=layer * Fraction(reduce, c),
                             layer_sharded_grads=layer_rank.gradients, root=root,
                             root_head_grads=head, root_grads=root,
                             root_reduce=root * Fraction(reduce, c))
    parts = param_breakdown(shape)
    routed = parts.per_layer_routed  # a mixture's experts: ep·etp ways
    dense = Fraction(parts.per_layer - routed, tp)  # a typical (the largest) layer's unit
    experts = Fraction(routed, lay.ep * lay.expert_tp)
    layer = Bytes(c * (dense + experts))
    head = Bytes(c * Fraction(V * h, tp)) if last else Bytes(0)
    grads = Bytes(r.gradients * (dense / n + experts / lay.expert_zero_group))
    return GatheredUnits(layer=layer, layer_grads=layer, layer_reduce=layer * Fraction(reduce, c),
                         layer_sharded_grads=grads, root=head, root_head_grads=head,
                         root_grads=head, root_reduce=head * Fraction(reduce, c),
                         resident=r.name == "fsdp2" and lay.pp > 1)


def adapter_inputs(*, shape: ModelShape, adapter: Adapter, training: Training, batch: Batch,
                   states: AdapterStates, activations: StageActivations | None) -> StepInputs:
    """What one device holds over a step of an adapter run: only the adapter has gradients,
    step counters, a step copy and optimizer temporaries."""
    t, acts, r = training, activations, recipe(training.recipe)
    n = states.trainable
    zero = Bytes(0)
    counters = Bytes(STEP_BYTES.get(t.optimizer, 0) * states.trainable_tensors)
    backward = states.gradients
    step = states.gradients + Bytes(n * r.step_copy)
    largest = max(adapter.rank * max(d_in, d_out)
                  for d_in, d_out in (matrices(shape)[m] for m in adapter.targets))
    temps = _temporaries(t.optimizer_impl, n, largest, _state_value(r, t))
    if acts is None:
        A = layer_A = out_A = logits = zero
    else:
        A, layer_A, out_A = acts.total, acts.per_layer.total, acts.outputs
        logits = Bytes(FP32_BYTES * batch.seq_len * batch.micro_batch * shape.vocab)
    logits16 = logits * Fraction(BASE_BYTES, FP32_BYTES)
    return StepInputs(weights=states.weights, master_weights=states.master_weights,
                      optimizer_states=states.optimizer_states, step_counters=counters,
                      persistent_gradients=zero, backward_gradients=backward, step_gradients=step,
                      activations=A, layer_activations=layer_A, output_activations=out_A,
                      logits=logits, logits16=logits16, tied_gradients=zero, temporaries=temps,
                      layers=shape.layers)


def offload_derivations(kinds: Sequence[Derivation], *, before: DeviceMemory, after: DeviceMemory,
                        r: Recipe, offload: str, host: Bytes
                        ) -> tuple[tuple[Derivation, ...], Derivation]:
    """The arithmetic of :func:`offloaded`: each kind it moved is 0 on the GPU and its formula's
    amount in host memory; and the host memory itself, the gradient partition in the master
    weights' format, the master weights and the optimizer states (and the weights' shards with
    "parameters")."""
    source = "; offload: Ren et al. 2021 (ZeRO-Offload), Rajbhandari et al. 2021 (ZeRO-Infinity)"
    moved = []
    for k, was, now in zip(kinds, before.parts().values(), after.parts().values()):
        if was == now:
            moved.append(k)
            continue
        moved.append(Derivation(k.name, f"0 on the GPU ({k.formula} in host memory)", k.inputs,
                                f"{k.arithmetic} in host memory (offload {offload}); on the GPU: "
                                "0 B", now, now, k.source + source, "offload", k.note))
    g = max(r.gradients, r.master_weights)
    P, n = before.params, before.zero_group
    formula = "P × max(g, m) ÷ n + master weights + optimizer states"
    arithmetic = (f"{P:,} × {g} B ÷ {n} + {bytes_text(before.master_weights.n)} + "
                  f"{bytes_text(before.optimizer_states.n)}")
    if offload != "optimizer":
        formula += " + weights"
        arithmetic += f" + {bytes_text(before.weights.n)}"
    return tuple(moved), Derivation(
        "host memory", formula,
        (("P", f"parameters on this device: {P:,}"),
         ("g, m", f"gradient and master-weight bytes: {r.gradients} B and {r.master_weights} B "
                  "per parameter"),
         ("n", f"ZeRO group dp·cp: {n}")),
        arithmetic + f" = {bytes_text(host.n)}", host, host,
        "Ren et al. 2021 (ZeRO-Offload), §4; Rajbhandari et al. 2021 (ZeRO-Infinity); "
        "DeepSpeed's estimate_zero3_model_states_mem_needs", "offload")
