"""An estimate and a plan as the JSON that ``trainmath estimate --json`` and ``trainmath plan
--json`` print: whole bytes (a shard of an uneven split rounds up: that rank holds the extra
byte), every input the run used, and for a plan every candidate with the reason it was kept or
dropped. The command and the calculator page print these; nothing here computes a figure.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from typing import TYPE_CHECKING

from ..memory.finetune import headline
from ..model.moe import MEASURED_BAND, PUBLISHED_MAX_LOADS
from ..model.shape import param_breakdown
from .facts import load_words
from ..planner.candidates import Candidate, Plan
from ..runs.estimates import Estimate
from ..time.calibration import accuracy
from ..units import Bytes

if TYPE_CHECKING:  # imported only where --suggest runs, so the command starts faster
    from ..planner.suggest import Suggestions


def _whole(b: Bytes | None) -> int | None:
    """Whole bytes: a shard of an uneven division rounds up (that rank holds the extra byte)."""
    return None if b is None else math.ceil(b.n)


def estimate_dict(e: Estimate, suggestions: Suggestions | None = None) -> dict:
    """``e`` as ``trainmath estimate --json`` prints it: whole bytes, inputs included; with
    ``suggestions`` (``--suggest``), a ``suggestions`` field (:func:`suggestions_dict`)."""
    r, lay, t, batch = e.run, e.run.layout, e.run.training, e.run.batch
    d, shape, layer = e.device, r.shape, e.layer
    per_device = {"weights": d.weights, "gradients": d.gradients,
                  "master_weights": d.master_weights, "optimizer_states": d.optimizer_states,
                  "activations": e.activations, "total": e.total}
    top = e.peak.peak
    g, (units, held) = e.gathered, e.gathered_at_peak()
    time = e.time
    extra = {} if suggestions is None else {"suggestions": suggestions_dict(suggestions)}
    return {
        "params": e.params,
        "active_params": e.params if shape is None else param_breakdown(shape).active,
        "per_device": {k: _whole(v) for k, v in per_device.items()},
        "peak": {"bytes": _whole(top.total), "phase": top.phase, "moment": top.when,
                 "pipeline_stage": e.peak_stage,
                 "parts": {k.replace(" ", "_"): _whole(v) for k, v in top.as_dict().items()},
                 "gathered": None if g is None else {
                     "unit_bytes": _whole(g.layer), "prefetch": g.prefetch,
                     "units_at_peak": units, "root_bytes": _whole(g.root),
                     "bytes_at_peak": _whole(held)}},
        "activations_per_layer": None if layer is None else _whole(layer.korthikanti),
        "activations_per_layer_with_norm_statistics": None if layer is None else _whole(layer.total),
        "pipeline_stage": e.pipeline_stage,
        "microbatches": e.microbatches,
        "pipeline_bubble": None if e.bubble is None else float(e.bubble),
        "in_flight": [None if sa is None else float(sa.held) for sa in e.saved] or None,
        "gpus": e.gpus,
        "fits": e.fits,
        "overhead": _whole(e.overhead),
        "needed": _whole(e.needed - e.overhead) + _whole(e.overhead),
        "host": {"per_device": _whole(e.host), "per_node": _whole(e.host_per_node),
                 "offload_to": e.run.tiers.offload_to,
                 "tiers": [{"tier": t.name, "need": _whole(t.need), "capacity": _whole(t.capacity),
                            "fits": t.fits} for t in e.tiers],
                 "decided_by": None if e.deciding_tier is None else e.deciding_tier.name,
                 "pcie": None if e.pcie is None else {
                     "to_gpu": _whole(e.pcie.to_gpu), "to_host": _whole(e.pcie.to_host),
                     "bytes_per_second_each_way": e.pcie.rate,
                     "seconds_at_least": None if e.pcie.seconds is None else _sig(e.pcie.seconds),
                     "cpu_optimizer_step_timed": False},
                 "activations": _whole(e.offloaded_activations)},
        "on_device": None if e.on_device is None else _device_dict(e.on_device),
        "step": None if e.step is None else _step_dict(e.step),
        "time": None if time is None else {
            "flops_per_token": time.flops_per_token, "counted": time.counted,
            "total_flops": time.total_flops, "peak_flops_per_gpu": time.peak.flops,
            "peak": time.peak.describe(), "seconds": _sig(time.seconds),
            "days": _sig(time.seconds / 86400), "gpu_hours": _sig(time.gpu_hours),
            "tokens_per_second": _sig(time.tokens_per_second), "mfu": _sig(time.mfu),
            "mfu_from": time.mfu_from},
        "finetune": _finetune_dict(e),
        "experts": _experts_dict(e),
        "checkpointing": None if e.checkpointing is None or e.checkpointing.recompute != "op" else {
            "policy": e.checkpointing.policy, "saved_ops": list(e.checkpointing.saved),
            "recomputed_ops": list(e.checkpointing.recomputed)},
        "inputs": {
            "model": None if shape is None else shape.name,
            "shape": None if shape is None else {
                f.name: getattr(shape, f.name) for f in fields(shape)
                if f.name not in ("name", "source")},
            "recipe": t.recipe, "optimizer": t.optimizer, "optimizer_impl": t.optimizer_impl,
            "zero": t.zero_stage,
            "dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "ep": lay.ep,
            "etp": lay.etp, "capacity_factor": _factor(t.routing.capacity_factor),
            "pad_to_capacity": t.routing.pad, "expert_load": t.routing.load,
            "sequence_parallel": lay.sequence_parallel, "seq_len": batch.seq_len,
            "micro_batch": batch.micro_batch, "global_batch": batch.global_batch,
            "interleave": lay.v, "schedule": lay.schedule, "cp_kind": lay.cp_kind,
            "recompute": t.recompute,
            "recompute_policy": t.recompute_policy, "compile": t.compiled,
            "implementation": t.implementation, "attention": t.attention,
            "mlp_kernel": t.mlp_kernel,
            "loss": t.loss, "loss_chunks": t.chunks if t.loss == "chunked" else None,
            "activation_offload": t.activation_offload,
            "assumed": list(r.assumed),
            "gpu": None if r.gpu is None else r.gpu.kind,
            "gpu_memory": None if r.gpu is None else _whole(r.gpu.memory),
            "offload": t.offload,
            "overhead": _whole(r.overhead),
            "gpus_per_node": r.gpus_per_node,
            "tokens": None if r.budget is None else r.budget.tokens,
            "mfu": None if r.budget is None or r.budget.mfu is None else float(r.budget.mfu),
            "timing": _timing_dict(r.timing),
            "stages": list(lay.stages) or None,
            "warnings": list(r.warnings),
            "adapter": None if r.adapter is None else {
                "method": r.adapter.method, "rank": r.adapter.rank,
                "targets": list(r.adapter.targets), "dropout": r.adapter.dropout,
                "double_quant": r.adapter.double_quant if r.adapter.quantized else None,
                "norm_dtype": r.adapter.norm_dtype,
                "headline": headline(r.adapter, r.training.recipe, r.training.optimizer)},
        },
        **extra,
    }


def suggestions_dict(s: Suggestions) -> dict:
    """:func:`trainmath.planner.suggest.suggest`'s answer as the ``suggestions`` field of
    ``trainmath estimate --suggest --json``: whether the run fits, the ranked changes (each its
    flags, levers, words, whole bytes of peak, of what fitting is judged by and of what is left
    (negative: over), GPUs, predicted step and cost, or why it is not timed, and CPU memory with
    offload), the room to spare when it fits, the ranking rule, and how many estimates it
    took."""
    h = s.headroom
    return {
        "fits": s.fits,
        "ranking": s.ranking,
        "estimates": s.estimates,
        "changes": [{
            "flags": c.flags,
            "levers": [x.lever for x in c.changes],
            "words": c.words,
            "keeps_training": c.keeps,
            "peak": _whole(c.peak),
            "needed": _whole(c.needed),
            "spare": _whole(c.spare),
            "fits": c.estimate.fits,
            "gpus": c.gpus,
            "step_seconds": None if c.step_seconds is None else _sig(c.step_seconds),
            "cost": None if c.cost is None else _sig(c.cost),
            "untimed": c.untimed,
            "host": {"per_device": _whole(c.estimate.host),
                     "per_node": _whole(c.estimate.host_per_node)},
        } for c in s.changes],
        "headroom": None if h is None else {
            "spare": _whole(h.spare), "longest_seq_len": h.longest_seq,
            "largest_micro_batch": h.largest_micro_batch, "seq_len_bound": h.seq_bound,
            "micro_batch_bound": h.micro_batch_bound},
    }


def _sig(x: float) -> float:
    """A predicted time or rate to 6 significant digits: what the model can claim, and the same
    in every Python (the calculator's Pyodide rounds the last bits of a float differently)."""
    return float(f"{x:.6g}")


def time_dict(t) -> dict:
    """A :class:`~trainmath.time.step.StepTime` as JSON: seconds by part, and per stage (6
    significant digits)."""
    return {"total": _sig(t.total), **{k.replace(" ", "_").replace("-", "_"): _sig(v)
                                       for k, v in t.parts().items()},
            "recompute": _sig(t.recompute), "microbatches": t.microbatches,
            "stage_seconds_per_microbatch": [_sig(x) for x in t.stages], "limit": t.limit}


def _band(b) -> dict:
    return {"low": _whole(b.low), "typical": _whole(b.typical), "high": _whole(b.high)}


def _device_dict(d) -> dict:
    """The three counters, whole bytes (typical), with their bands and parts."""
    return {"allocated": _whole(d.allocated), "reserved": _whole(d.reserved.typical),
            "process": _whole(d.process.typical),
            "reserved_expandable_segments": _whole(d.reserved_expandable.typical),
            "bands": {"reserved": _band(d.reserved), "process": _band(d.process),
                      "reserved_expandable_segments": _band(d.reserved_expandable)},
            "outside_allocator": {name: {**_band(b), "what": what} for name, what, b in d.outside},
            "communicators": [{"group": g, "ranks": r} for g, r in d.communicators],
            "paged_optimizer_states": _whole(d.paged)}


def _timing_dict(t) -> dict:
    o = t.overlap
    return {"overlap": {"gradients": o.gradients, "parameters": o.parameters, "tensor": o.tensor},
            "kernel": t.kernel, "sustained": t.sustained, "gpus_per_node": t.node_gpus,
            "nvlink_bytes_per_s": t.nvlink, "network_bytes_per_s": t.network}


def _step_dict(p) -> dict:
    f = p.fabric
    return {"seconds": time_dict(p.time), "tokens_per_second": _sig(p.tokens_per_second),
            "mfu": _sig(p.mfu), "peak": p.peak.describe(), "sustained": p.sustained,
            "attention_kernel": p.kernel, "overlap": p.timing.overlap.describe(),
            "gpus_per_node": f.node_gpus, "nvlink_bytes_per_s": f.nvlink,
            "network_bytes_per_s": f.network, "model_accuracy": accuracy()}


def _factor(c) -> float | None:
    return None if c is None else float(c)


def _experts_dict(e: Estimate) -> dict | None:
    """A mixture's experts on the fullest device: the folded split, the all-to-all group, the
    routing, rows, peak and process memory under each expert load, the published band and the
    drops (None for a dense model or without a sequence)."""
    x = e.experts
    if x is None:
        return None
    lay, d, routing = e.run.layout, x.dispatch, e.training.routing
    low, high = MEASURED_BAND
    dropped = x.dropped_at_most
    return {
        "ep": lay.ep, "etp": lay.expert_tp, "edp": lay.expert_zero_group,
        "local_experts": d.local_experts, "expert_params_on_device": x.params,
        "all_to_all": {"ranks": x.all_to_all[0], "ranks_per_node": x.all_to_all[1]},
        "router_tokens": float(d.router_tokens) if d.router_tokens.denominator != 1
        else int(d.router_tokens),
        "dropless": routing.dropless, "capacity_factor": _factor(routing.capacity_factor),
        "capacity": d.capacity, "padded": routing.pad, "counted": x.counted,
        "loads": {x_.load: {"rows_per_layer": math.ceil(x_.rows), "peak_bytes": _whole(x_.peak),
                            "process_bytes": _whole(x_.process), "fits": x_.fits,
                            "what": load_words(x_.load, routing)} for x_ in x.loads},
        "measured_band": {"low": float(low), "high": float(high),
                          "runs": [{"max_over_mean": float(m.ratio), "run": m.what,
                                    "when": m.when, "source": m.source}
                                   for m in PUBLISHED_MAX_LOADS]},
        "early_training": {"published_max_over_mean": None, "bounded_by": "worst"},
        "dropped_at_most": {"share": float(d.dropped_share),
                            "token_copies_per_step": None if dropped is None else int(dropped),
                            "token_copies_routed_per_step": x.step_copies},
    }


def _finetune_dict(e: Estimate) -> dict | None:
    st = e.adapter_states
    if st is None:
        return None
    return {"trainable_params": st.trainable, "frozen_params": st.frozen,
            "frozen_weights": _whole(st.frozen_weights),
            "adapter_weights": _whole(st.adapter_weights)}


def estimate_json(e: Estimate, suggestions: Suggestions | None = None) -> str:
    """:func:`estimate_dict` as the command prints it (indented by two spaces)."""
    return json.dumps(estimate_dict(e, suggestions), indent=2)


def candidate_dict(c: Candidate) -> dict:
    """``c`` as the JSON of ``trainmath plan --json`` lists it."""
    lay, t = c.layout, c.time
    return {
        "dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "ep": lay.ep,
        "etp": lay.expert_tp, "v": lay.v, "schedule": lay.schedule, "cp_kind": lay.cp_kind,
        "sequence_parallel": lay.sequence_parallel, "zero": c.zero_stage,
        "recompute": c.recompute, "micro_batch": c.micro_batch,
        "status": c.status, "reason": c.reason, "rank": c.rank,
        "peak_bytes": None if c.peak is None else math.ceil(c.peak.n),
        "process_bytes": None if c.process is None else math.ceil(c.process.n),
        "stages": list(lay.stages) or None,
        "step_seconds": None if t is None else _sig(t.total),
        "time": None if t is None else time_dict(t),
        "mfu": None if c.mfu is None else _sig(c.mfu),
        "tokens_per_second": None if c.tokens_per_second is None else _sig(c.tokens_per_second),
        "limit": None if t is None else t.limit,
    }


def plan_dict(p: Plan) -> dict:
    """``p`` as ``trainmath plan --json`` prints it: inputs, ranking, every candidate."""
    return {
        "inputs": {
            "model": p.model.name, "gpu": p.gpu, "gpus": p.gpus,
            "node_gpus": p.node_gpus, "seq_len": p.seq_len,
            "global_batch": p.global_batch, "recipe": p.training.recipe,
            "implementation": p.training.implementation,
            "optimizer": p.training.optimizer,
            "capacity_factor": _factor(p.training.routing.capacity_factor),
            "pad_to_capacity": p.training.routing.pad,
            "expert_load": p.training.routing.load,
            "recompute_policy": p.training.recompute_policy, "compile": p.training.compiled,
            "loss": p.training.loss,
            "loss_chunks": p.training.chunks if p.training.loss == "chunked" else None,
            "activation_offload": p.training.activation_offload,
            "usable_memory_bytes": math.ceil(p.memory.n),
            "sustained": p.share, "attention_kernel": p.kernel_used,
            "nvlink_bytes_per_s": p.fabric.nvlink, "network_bytes_per_s": p.fabric.network,
            "overlap": {"gradients": p.overlap.gradients, "parameters": p.overlap.parameters,
                        "tensor": p.overlap.tensor, "described": p.overlap.describe()},
            "warnings": list(p.warnings),
        },
        "model_accuracy": accuracy(),
        "ranking": [candidate_dict(c) for c in p.ranking],
        "user_layout": None if p.user is None else candidate_dict(p.user),
        "candidates": [candidate_dict(c) for c in p.candidates],
    }


def plan_json(p: Plan) -> str:
    """:func:`plan_dict`, indented by two spaces."""
    return json.dumps(plan_dict(p), indent=2)


def check_dict(dg) -> dict:
    """A :class:`~trainmath.checks.diagnosis.Diagnosis` as ``trainmath check --json`` prints it:
    the estimate's JSON, the OOM message's figures (whole bytes), each reading against its band,
    the causes and the unexplained rest."""
    o = dg.oom
    return {
        "estimate": estimate_dict(dg.estimate),
        "oom": None if o is None else {
            "requested": _whole(o.requested), "capacity": _whole(o.capacity),
            "free": _whole(o.free), "process": _whole(o.process), "allocated": _whole(o.allocated),
            "reserved_unallocated": _whole(o.reserved_unallocated),
            "private_pools": _whole(o.private_pools), "form": o.form, "gpu": o.gpu_index,
            "rank": o.rank},
        "fragmentation": None if o is None else o.fragmentation,
        "readings": [{"counter": c.counter, "measured": _whole(c.measured),
                      "predicted": _band(c.predicted), "within": c.within, "source": c.source}
                     for c in dg.comparisons],
        "causes": [{"name": c.name, "figure": c.figure,
                    "accounts": None if c.accounts is None else _whole(c.accounts)}
                   for c in dg.causes],
        "unexplained": _whole(dg.unexplained),
    }


def check_json(dg) -> str:
    """:func:`check_dict`, indented by two spaces."""
    return json.dumps(check_dict(dg), indent=2)
