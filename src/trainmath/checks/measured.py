"""The library's prediction for every configuration measured in real PyTorch, side by side.

``docs/_data/measurements.json`` records what real training code keeps at full size (PyTorch
under ``FakeTensorMode``, Hugging Face transformers; ``validate/measure``, whose module
docstring is the file's schema): bytes saved for backward per layer and per model, model states
after an AdamW step, and the peak of a whole step. This module maps each configuration to the
library's vocabulary (:data:`MEASURED_IMPLEMENTATIONS`, :data:`MEASURED_RECIPES`,
:data:`MEASURED_PRECISIONS`), predicts it through the one entry point
(:func:`trainmath.runs.estimates.estimate`) and compares, quantity by quantity (:func:`compare`):

- model states to the byte (:data:`TOLERANCES`), each kind, and Adam's per-tensor step
  counters, which the measurement reports apart;
- activations within 1%, one layer and the whole model;
- the peak of a step within 2%, and its phase.

``make test`` runs :func:`compare` on every recorded configuration (tests/test_measured.py),
so a library change that stops agreeing with PyTorch fails even where torch is not installed;
the "How we know" page prints the same comparisons. The file is data, read by the caller: this
module does no I/O.

Records of today's families (Qwen3, DeepSeek-V3, Gemma 2 and 3, gpt-oss, OLMo 2, Llama 4) carry
the ``config`` they were built from instead of a ``shape``: its keys, read as the published
config.json is (:func:`trainmath.model.hfconfig.shape_from_config`), give the shape. Their
layers differ (dense and mixture, local and global), so each group of alike layers is compared
with the prediction for its kind. A record marked ``not_compared`` (PyTorch's CPU fallback for
latent attention under SDPA, which no GPU takes) says why and is not predicted
(:func:`comparable`).

Records of kinds ``op-sac-saved`` and ``op-sac-step`` ran the reference model's layers under
op-level selective checkpointing with a policy (``policy``: torchtitan's, or "attention", the
attention kernel's outputs alone), ``compile-saved`` and ``compile-step`` with its layers split
by torch.compile's min-cut partitioner, ``compile-op-saved`` with both (the policy, then
compiled, as torchtitan applies them) (validate/measure/checkpointing.py); they are predicted
with ``recompute="op"`` and that policy, or ``compiled=True``, or both
(:mod:`trainmath.memory.checkpointing`), and compared as the saved and step kinds are.

Records of kinds ``cp-saved`` and ``cp-step`` are one rank of a context-parallel group:
DeepSpeed-Ulysses' ``DistributedAttention`` in every layer of the reference model on a fake
process group (validate/measure/context.py); they are predicted with their ``context_parallel``
size and kind and compared as the saved and step kinds are.

Records of kind ``op-sac-tp-saved`` ran one layer on one rank of torchtitan's tensor- and
sequence-parallel plan under its policy (validate/measure/tensor_parallel.py): their one layer
is compared with the prediction at that ``tp`` with sequence parallelism.

Records of kinds ``dpo-step`` (one DPO step as TRL's DPOTrainer runs it, a frozen bf16
reference model resident) and ``logprob-pass`` (the no-grad log-prob pass of GRPO/PPO through
the policy and the reference) measure post-training's trainer side
(validate/measure/post_training.py). They are recorded but not predicted yet
(:data:`POST_TRAINING`, left out by :func:`comparable`): the library's post-training estimate
is to be compared with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..memory.finetune import Adapter
from ..memory.fsdp2 import fsdp2_rank
from ..memory.activations import LayerActivations, layer_activations
from ..model.hfconfig import shape_from_config
from ..model.shape import ModelShape, layer_kinds, layer_shape, param_shapes
from ..parallel.schedules import TWO_WAY, bubble_idle, in_flight
from ..runs.description import run
from ..runs.estimates import Estimate, estimate
from ..units import Bytes


#: The implementations measured, by the library's profile that models each
#: (:data:`trainmath.memory.kernels.IMPLEMENTATIONS`): validate/measure's reference model runs the
#: Megatron-style kernels the library documents.
MEASURED_IMPLEMENTATIONS = {
    "reference-sdpa": "megatron-te",
    "reference-eager": "megatron-eager",
    "hf-sdpa": "hf-sdpa",
    "hf-eager": "hf-eager",
}
#: The step recipes measured, by the library's recipe (:data:`trainmath.memory.recipes.RECIPES`).
MEASURED_RECIPES = {
    "zero-bf16": "bf16-mixed",
    "zero-fp16": "fp16-mixed",
    "megatron-bf16": "megatron",
    "bf16-master-naive": "bf16-master",
    "bf16-master-free-grads": "bf16-master-free",
    "autocast-fp32": "amp",
    "fsdp2-bf16": "fsdp2",
}
#: The precisions of the saved-tensor measurements, by the recipe whose activations they are:
#: bf16 parameters, or fp32 parameters under ``torch.autocast``.
MEASURED_PRECISIONS = {"bf16": "bf16-mixed", "autocast-bf16": "amp"}
#: The op-level policies measured, by the library's policy (:func:`trainmath.memory.checkpointing.parse_policy`).
MEASURED_POLICIES = {"torchtitan": "torchtitan", "attention": "attention"}
#: Kinds of record of a whole step with a memory technique (validate/measure/techniques.py): a
#: chunked loss, activations offloaded to host memory.
TECHNIQUES = ("chunked-loss-step", "act-offload-step")
#: Kinds of record of one context-parallel rank (validate/measure/context.py: DeepSpeed-Ulysses'
#: ``DistributedAttention``), its saved tensors and a whole step, compared as kinds "saved" and
#: "step" are, with its cp and kind.
CONTEXT_PARALLEL = ("cp-saved", "cp-step")
#: Kinds of record of post-training's trainer side (validate/measure/post_training.py): a DPO
#: step with a frozen reference model, the GRPO/PPO log-prob pass. Recorded, not predicted yet:
#: :func:`comparable` leaves them out until the library's post-training estimate is compared.
POST_TRAINING = ("dpo-step", "logprob-pass")
#: Relative tolerance of each kind of quantity: states to the byte, activations 1%, peaks 2%;
#: a pipeline schedule's counts and idle time exactly.
TOLERANCES = {"states": Fraction(0), "activations": Fraction(1, 100), "peak": Fraction(2, 100),
              "schedule": Fraction(0)}

_SHAPE_KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "mlp", "norm", "bias",
               "tied_embeddings", "positions", "dropout")


@dataclass(frozen=True)
class Comparison:
    """One measured quantity of one configuration beside the library's prediction."""

    config: str
    #: "states", "activations", "peak" or "schedule" (which tolerance applies)
    kind: str
    #: what is compared, e.g. "gradients", "one layer", "whole model", "peak"
    quantity: str
    measured: int
    predicted: int
    #: the measured phase and the predicted one, for a peak
    phases: tuple[str, str] | None = None

    @property
    def ratio(self) -> Fraction | None:
        """measured / predicted (None when both are zero)."""
        if self.predicted == 0:
            return None if self.measured == 0 else Fraction(self.measured)
        return Fraction(self.measured, self.predicted)

    @property
    def ok(self) -> bool:
        """Whether the prediction is within the kind's tolerance of the measurement."""
        if self.predicted == self.measured:
            return True
        return abs(self.measured - self.predicted) <= TOLERANCES[self.kind] * abs(self.measured)

    def describe(self) -> str:
        """One line: the configuration, the quantity, the measured and the predicted bytes."""
        ratio = "n/a" if self.ratio is None else f"{float(self.ratio):.4f}"
        unit = "" if self.kind == "schedule" else " bytes"
        return (f"{self.config}: {self.quantity}: measured {self.measured:,}{unit}, predicted "
                f"{self.predicted:,} (ratio {ratio}, tolerance "
                f"{float(TOLERANCES[self.kind]):.0%})")


def comparable(config: dict) -> bool:
    """Whether the library predicts a recorded configuration: all but those marked
    ``not_compared``, whose record says why, and those of :data:`POST_TRAINING` (not yet)."""
    return "not_compared" not in config and config["kind"] not in POST_TRAINING


def shape_of(config: dict) -> ModelShape:
    """The :class:`~trainmath.model.shape.ModelShape` a configuration measured: its ``shape``, or
    the keys of its ``config`` as :func:`~trainmath.model.hfconfig.shape_from_config` reads a
    config.json."""
    if "config" in config:
        return shape_from_config(config["config"]["keys"], name=config["model"],
                                 source=f"config.json at {config['config']['file']}")
    s = config["shape"]
    return ModelShape(name=s["name"], source=s.get("source", ""),
                      sliding_window=s.get("sliding_window") or 0,
                      experts=s.get("experts", 0), experts_per_token=s.get("experts_per_token", 0),
                      **{k: s[k] for k in _SHAPE_KEYS})


def estimate_of(config: dict) -> Estimate:
    """The library's estimate of one configuration, through :func:`trainmath.runs.estimates.estimate`."""
    kw = dict(seq_len=config["s"], micro_batch=config["b"], optimizer="adamw",
              implementation=MEASURED_IMPLEMENTATIONS[config["implementation"]])
    kind = config["kind"]
    if kind.startswith("compile-op-"):
        kw |= dict(recompute="op", recompute_policy=MEASURED_POLICIES[config["policy"]],
                   compiled=True)
    elif kind.startswith("op-sac-"):
        kw |= dict(recompute="op", recompute_policy=MEASURED_POLICIES[config["policy"]])
        if kind == "op-sac-tp-saved":  # one rank of torchtitan's tensor-parallel plan
            kw |= dict(tp=config["tp"], sequence_parallel=config["sequence_parallel"])
    elif kind.startswith("compile-"):
        kw |= dict(compiled=True)
    kind = kind.rpartition("-")[2] if kind.startswith(("op-sac-", "compile-")) else kind
    if kind == "finetune":
        return estimate(run(shape_of(config), adapter=adapter_of(config), recipe="fp32",
                            optimizer_impl="foreach" if config["optimizer"]["foreach"] else "for-loop",
                            **kw))
    if kind in CONTEXT_PARALLEL:  # one rank of cp: validate/measure/context.py
        cp = config["context_parallel"]
        kw |= dict(cp=cp["cp"], cp_kind=cp["kind"])
        kind = kind.removeprefix("cp-")
    if kind == "saved":
        return estimate(run(shape_of(config), recipe=MEASURED_PRECISIONS[config["precision"]],
                            **kw))
    impl = "foreach" if config["optimizer"]["foreach"] else "for-loop"
    if config["kind"] in TECHNIQUES:
        kw |= technique_of(config)
    return estimate(run(shape_of(config), recipe=MEASURED_RECIPES[config["recipe"]],
                        dp=config["dp"], optimizer_impl=impl, **kw))


def technique_of(config: dict) -> dict:
    """The ``run`` keywords of a record of :data:`TECHNIQUES`: its loss and chunks, and its
    activations offloaded ("sync": validate/measure copies on the compute stream)."""
    loss = config["loss"]
    return {"loss": loss["kind"], "loss_chunks": loss["chunks"],
            "activation_offload": "sync" if config["offload_activations"] else "none"}


def _layer_of(config: dict, m: ModelShape, index: int) -> LayerActivations:
    """The library's tensors for decoder layer ``index`` of a "saved" configuration of shape
    ``m``: those of its kind (:func:`~trainmath.model.shape.layer_shape`)."""
    return layer_activations(layer_shape(m, layer_kinds(m)[index]), config["s"], config["b"],
                             implementation=MEASURED_IMPLEMENTATIONS[config["implementation"]],
                             autocast=config["precision"] == "autocast-bf16")


def _layers_named(indices: list[int]) -> str:
    """"layer 3" or "layers 0–2" (consecutive) or "layers 0, 2, 4"."""
    if len(indices) == 1:
        return f"layer {indices[0]}"
    if indices == list(range(indices[0], indices[-1] + 1)):
        return f"layers {indices[0]}–{indices[-1]}"
    if len(indices) > 4:
        return f"layers {indices[0]}, {indices[1]}, … {indices[-1]} ({len(indices)})"
    return "layers " + ", ".join(map(str, indices))


def adapter_of(config: dict) -> Adapter:
    """The :class:`~trainmath.memory.finetune.Adapter` a "finetune" configuration measured (peft's
    LoRA with fp32 adapters: the recipe "fp32")."""
    a = config["adapter"]
    return Adapter(a["method"], a["r"], tuple(a["targets"]), a["dropout"])


def _whole(b: Bytes) -> int:
    return -(-b.n // 1) if isinstance(b.n, Fraction) else int(b.n)


def compare(config: dict) -> list[Comparison]:
    """Every quantity of one recorded configuration beside the library's prediction; a
    ValueError for one the library cannot predict yet (see :func:`comparable`)."""
    if not comparable(config):
        why = config.get("not_compared") or (f"kind {config['kind']!r} of POST_TRAINING is "
                                              "recorded, not predicted yet")
        raise ValueError(f"{config['id']} is not compared ({why}); accepted: a configuration "
                         "without 'not_compared', of a kind other than "
                         f"{', '.join(POST_TRAINING)} (comparable())")
    e = estimate_of(config)
    cid, m = config["id"], config["measured"]
    if config["kind"] == "op-sac-tp-saved":  # one layer on one rank, the layer alone measured
        return [Comparison(cid, "activations", "one layer", m["per_layer"][m["layer_shown"]],
                           _whole(e.layer.total))]
    if config["kind"] == "op-sac-saved":  # no weight copies: bf16 parameters, no autocast
        return [Comparison(cid, "activations", "one layer", m["per_layer"][m["layer_shown"]],
                           _whole(e.layer.total)),
                Comparison(cid, "activations", "whole model", m["total"], _whole(e.activations))]
    if config["kind"] in ("saved", "compile-saved", "compile-op-saved", "cp-saved"):
        if "layer_groups" in m:  # layers of several kinds: each group against its kind
            shape = e.run.shape
            layers = [Comparison(cid, "activations", _layers_named(g["layers"]), g["bytes"],
                                 _whole(_layer_of(config, shape, g["layers"][0]).total))
                      for g in m["layer_groups"]]
        else:
            layers = [Comparison(cid, "activations", "one layer", m["per_layer"][m["layer_shown"]],
                                 _whole(e.layer.total))]
        return layers + [
            Comparison(cid, "activations", "whole model", m["total"], _whole(e.activations)),
            Comparison(cid, "activations", "of which weight copies", m["weight_copies"],
                       _whole(e.weight_copies)),
        ]
    if config["kind"] == "finetune":
        return _compare_finetune(config, e)
    st = m["states"]
    d = e.device
    shape = shape_of(config)
    counters = 4 * param_shapes(shape).tensors
    predicted = {"parameters": d.weights, "gradients": d.gradients,
                 "master_weights": d.master_weights, "optimizer_states": d.optimizer_states}
    if config["dp"] > 1 and config["rank"] != 0:  # another rank than the estimate's rank 0
        rank = fsdp2_rank(param_shapes(shape).units(), config["dp"], config["rank"], "fsdp2",
                          "adamw")
        predicted = {"parameters": rank.parameters, "gradients": rank.gradients,
                     "master_weights": Bytes(0),
                     "optimizer_states": rank.optimizer_states - Bytes(counters)}
    out = [Comparison(cid, "states", kind.replace("_", " "), st[kind], _whole(b))
           for kind, b in predicted.items()]
    out.append(Comparison(cid, "states", "total", st["total"],
                          sum(_whole(b) for b in predicted.values())))
    out.append(Comparison(cid, "states", "step counters", st["step_counters"]["bytes"], counters))
    p = m["peak"]
    out.append(Comparison(cid, "peak", "peak", p["bytes"], _whole(e.peak.bytes),
                          (p["phase"], e.peak.phase)))
    if config["kind"] in TECHNIQUES:
        out += _compare_technique(config, e)
    if config["kind"] == "cp-step":  # the step peaks in the optimizer step: the activations'
        out += _phase_peaks(config, e)  # own moments are the forward's and the backward's
    return out


def _phase_peaks(config: dict, e: Estimate) -> list[Comparison]:
    """The highest moment of the forward and of the backward beside the measured phase peaks
    (2%)."""
    out = []
    for phase in ("forward", "backward"):
        top = max(x.total.n for x in e.peak.moments if x.phase == phase)
        out.append(Comparison(config["id"], "peak", f"{phase} peak",
                              config["measured"]["phase_peaks"][phase], _whole(Bytes(top))))
    return out


def _compare_technique(config: dict, e: Estimate) -> list[Comparison]:
    """A technique's own figures: what stays saved on the device and what host memory the
    offloaded activations take (1%), and the forward's and the backward's highest moments
    (2%), where the loss's spike and a layer brought back from the host fall."""
    cid, m = config["id"], config["measured"]
    out = [Comparison(cid, "activations", "saved on the device", m["saved"],
                      _whole(e.activations)),
           Comparison(cid, "activations", "host memory (activations)", m["host"]["after_forward"],
                      _whole(e.offloaded_activations))]
    return out + _phase_peaks(config, e)


def _compare_finetune(config: dict, e: Estimate) -> list[Comparison]:
    """LoRA: peft's trainable count, the states (frozen and trainable), what is saved for
    backward (one layer, the whole model) and the peak."""
    from ..memory.finetune import _adapter_states
    from ..memory.recipes import recipe
    cid, m = config["id"], config["measured"]
    states = _adapter_states(e.run.shape, e.run.adapter, recipe(e.training.recipe),
                             e.training.optimizer)
    st, d, saved = m["states"], e.device, m["saved"]
    layer = saved["per_layer"][saved["layer_shown"]]
    counters = 4 * states.trainable_tensors
    out = [Comparison(cid, "states", "trainable parameters (count)", m["trainable_count"],
                      states.trainable),
           Comparison(cid, "states", "frozen parameters", st["frozen_parameters"],
                      _whole(states.frozen_weights)),
           Comparison(cid, "states", "trainable parameters", st["trainable_parameters"],
                      _whole(states.adapter_weights))]
    for kind, b in (("parameters", d.weights), ("gradients", d.gradients),
                    ("master_weights", d.master_weights), ("optimizer_states", d.optimizer_states)):
        out.append(Comparison(cid, "states", kind.replace("_", " "), st[kind], _whole(b)))
    out.append(Comparison(cid, "states", "total", st["total"], _whole(d.model_states)))
    out.append(Comparison(cid, "states", "step counters", st["step_counters"]["bytes"], counters))
    out.append(Comparison(cid, "activations", "one layer", layer, _whole(e.layer.total)))
    out.append(Comparison(cid, "activations", "whole model", saved["total"], _whole(e.activations)))
    p = m["peak"]
    out.append(Comparison(cid, "peak", "peak", p["bytes"], _whole(e.peak.bytes),
                          (p["phase"], e.peak.phase)))
    return out


def compare_schedule(record: dict) -> list[Comparison]:
    """One of PyTorch's pipeline schedules run (a record of the document's ``schedules``) beside
    :mod:`trainmath.parallel.schedules`: each rank's peak of chunk-micro-batches in flight
    (:func:`~trainmath.parallel.schedules.in_flight` × v, a rank's micro-batch being v chunks),
    counted from the order and kept by PyTorch's runtime where it ran (``runtime_in_flight_chunks``),
    and the step's idle time for each (f, b, w) the order was run with
    (:func:`~trainmath.parallel.schedules.bubble_idle` with F = v·f, B = v·b, W = v·w, the
    whole rank's times), exactly. DualPipe (``dualpipe``): its in-flight counts only, a
    rank's micro-batch being two stages' passes; the library's idle is deepseek-ai/DualPipe's
    README formula, which the generated order idles less than (tests/test_schedules.py)."""
    sch, pp, m, v = record["schedule"], record["pp"], record["m"], record["v"]
    cid, got = record["id"], record["measured"]
    c = 2 if sch in TWO_WAY else v  # DualPipe: a device's micro-batch is two stages' passes
    want = [int(in_flight(pp, v=v, microbatches=m, stage=i, schedule=sch) * c) for i in range(pp)]
    out = [Comparison(cid, "schedule", f"rank {i} in flight (chunk-micro-batches)", n, want[i])
           for i, n in enumerate(got["in_flight_chunks"])]
    out += [Comparison(cid, "schedule", f"rank {i} in flight, PyTorch's runtime on a fake "
                       "process group", n, want[i])
            for i, n in enumerate(got.get("runtime_in_flight_chunks", ()))]
    if sch in TWO_WAY:  # the library's idle is the README's, an upper bound of the order's
        return out
    for t in got["idle"]:
        idle = bubble_idle(sch, pp, v, forward=v * t["f"], backward_input=v * t["b"],
                           backward_weight=v * t["w"])
        out.append(Comparison(cid, "schedule", f"idle at f, b, w = {t['f']}, {t['b']}, {t['w']}",
                              Fraction(t["units"]), Fraction(idle)))
    return out


def compare_all(doc: dict) -> list[Comparison]:
    """:func:`compare` for every comparable configuration of a measurements document, in its
    order (:func:`comparable`: those marked ``not_compared`` are left out)."""
    return [c for config in doc["configurations"] if comparable(config) for c in compare(config)]
