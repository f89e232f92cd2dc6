"""An estimate and a plan as ``trainmath estimate`` and ``trainmath plan`` print them: the
per-device table in GB with GiB beside, the step's peak, whether it fits, the sources; the
ranking table with the assumptions behind its times.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..hardware import HOST_LINKS, gpu
from ..memory.finetune import describe, headline, share
from ..memory.recipes import recipe
from ..model.moe import active_params
from ..planner.candidates import Plan
from ..runs.estimates import Estimate
from ..units import Bytes
from ..time.calibration import accuracy
from .facts import (assumed, band_words, change_words, fit, headroom_words, host_what,
                    load_words, pipeline_words, routing_name, routing_words, techniques,
                    techniques_of)

if TYPE_CHECKING:  # imported only where --suggest runs, so the command starts faster
    from ..planner.suggest import Suggestions


# -- output ---------------------------------------------------------------------------------------
def render(est: Estimate, suggestions: Suggestions | None = None) -> str:
    """The readable table: per device, GB with GiB beside, the step's peak, what fits, sources;
    with ``suggestions`` (``--suggest``), what to change or the room to spare, after the fit."""
    r, lay, t, batch, shape = est.run, est.run.layout, est.run.training, est.run.batch, est.run.shape
    name = "--params" if shape is None else shape.name
    lines = [f"{name}: {est.params:,} parameters, recipe {t.recipe}, {t.optimizer} "
             f"({t.optimizer_impl} step), ZeRO stage {t.zero_stage}"]
    if r.adapter is not None:  # what is trained and what is frozen, never just "recipe fp32"
        lines = [f"{name}: {est.params:,} parameters, fine-tuned: "
                 f"{headline(r.adapter, t.recipe, t.optimizer)} ({t.optimizer_impl} step)"]
    if shape is not None and shape.moe:
        lines.append(f"mixture of experts: {shape.experts} experts, top {shape.experts_per_token}"
                     + (f", {shape.shared_experts} shared" if shape.shared_experts else "")
                     + f"; {active_params(shape):,} parameters active per token")
    said = assumed(est)
    if said:
        lines.append(said)
    lines.extend(f"note: {w}" for w in r.warnings)
    st = est.adapter_states
    if st is not None:
        base = ("frozen, NF4 for the decoder layers' matrices, 16-bit elsewhere" if r.adapter.quantized
                else "frozen in 16-bit")
        if r.adapter.norm_dtype == "fp32":
            base += " (the norms fp32)"
        lines.append(f"fine-tuning: {describe(r.adapter)}: {st.trainable:,} trainable "
                     f"parameters ({float(share(st.trainable, shape)):.2%}), the base "
                     f"{base}, with no gradients or optimizer states")
    lines.append(f"layout: {lay.describe()}")
    if batch.seq_len is not None and shape is not None:
        kernel = "" if t.mlp_kernel == "eager" else f", {t.mlp_kernel} MLP"
        cast = ", autocast" if recipe(t.recipe).autocast else ""
        lines.append(f"activations: s = {batch.seq_len}, b = {batch.micro_batch}, recompute "
                     f"{est.checkpointing.describe()}, {t.implementation} kernels "
                     f"({t.attention} attention"
                     f"{kernel}{cast}){techniques(est)}")
    if est.microbatches is not None:
        lines.append(f"pipeline: {pipeline_words(est)}")
    where = f" (pipeline stage {est.pipeline_stage}, the fullest)" if lay.pp > 1 else ""
    lines.append(f"per device{where}:")

    def row(label: str, amount: Bytes) -> str:
        whole = Bytes(math.ceil(amount.n))  # the whole bytes --json reports
        return f"  {label:<17}{whole.format('GB', 2):>12}  {whole.format('GiB', 2):>12}"

    for label, amount in [*est.parts().items(), ("total", est.total)]:
        if amount is None:
            why = "needs a model shape" if shape is None else "needs --seq-len"
            lines.append(f"  {label:<17}{'not counted':>12}   ({why})")
            continue
        lines.append(row(label, amount))
        if label == "weights" and st is not None:
            lines.append(row("  frozen base", st.frozen_weights))
            lines.append(row("  adapter", st.adapter_weights))
    if est.layer is not None:
        layer = Bytes(math.ceil(est.layer.korthikanti.n))
        mixed = est.saved and est.saved[0] is not None and est.saved[0].mix
        which = "the largest layer" if mixed else "one layer"
        lines.append(f"  {which} keeps {layer.format('GB', 3)} for backward (Korthikanti et al. "
                     "2022 count)")
        if lay.pp == 1:
            every = (sum((a.korthikanti * n for a, n in est.saved[0].mix), Bytes(0)) if mixed
                     else layer * shape.layers)
            rest = ("in CPU memory (offloaded): the GPU keeps the output head's and the loss's"
                    if est.training.activation_offload != "none" else
                    "the embedding, the loss and norm statistics make up the rest")
            sep = " " if est.training.activation_offload != "none" else "; "
            lines.append(f"  all {shape.layers} layers keep {Bytes(math.ceil(every.n)).format('GB', 2)}"
                         + sep + rest)
    top = est.peak.peak
    stage = f" on stage {est.peak_stage}" if lay.pp > 1 else ""
    lines.append(row("peak of a step", top.total) + f"   ({top.phase}{stage})")
    lines.append(f"  at {top.when}")
    cache = dict(top.parts).get("fp8 weight copies")
    if cache is not None:
        lines.append(row("  fp8 copies", cache) + "   (in the peak: each linear weight in "
                     "fp8 and transposed, cached by Transformer Engine)")
    lines.extend(_gathered_lines(est, row))
    if est.gathered is None and t.zero_stage == 3 and shape is None:
        lines.append(f"  {'gathered units':<17}{'not counted':>12}   (needs a model shape: a "
                     "unit is a layer)")
    lines.extend(_device_lines(est, row))
    if est.overhead.n:
        lines.append(row("overhead", est.overhead) + "   (--overhead: what no part above counts)")
        lines.append(row("process + overhead", est.needed))
    verdict = fit(est)
    if verdict is not None:
        lines.append(f"fits in {verdict.where}: {verdict.verdict}")
    if suggestions is not None:
        lines.extend(suggestion_lines(suggestions))
    lines.extend(_expert_lines(est))
    lines.extend(_host_lines(est))
    lines.extend(_step_lines(est))
    lines.extend(_time_lines(est))
    lines.append("sources: model states, Rajbhandari et al. 2020 (ZeRO) §5.1–5.3 and the recipe's")
    lines.append("  framework; activations, Korthikanti et al. 2022 §4, tensor by tensor; the peak,")
    lines.append("  trainmath.memory.peak; all checked against PyTorch (the How we know page).")
    if r.adapter is not None:
        lines.append("  fine-tuning: Hu et al. 2021 (LoRA) §4.1, Dettmers et al. 2023 (QLoRA) §3;")
        lines.append("  checked against peft (the Fine-tuning page).")
    lines.append("  GB = 10^9 bytes, GiB = 2^30 bytes")
    return "\n".join(lines)


#: The most suggestions the text and the page show (the JSON has every one).
SHOWN = 8


def suggestion_lines(s: Suggestions) -> list[str]:
    """``--suggest``: the changes that make the run fit, ranked, each its flags, what it does,
    its memory and cost; or the room a run that fits has to spare and what it could buy."""
    if s.fits:
        return [f"room: {headroom_words(s.headroom, s.estimate)}"]
    if not s.changes:
        return ["to make it fit: no change of one or two levers does (trainmath plan ranks every "
                "layout of a GPU count)"]
    lines = [("to make it fit, the smallest setting of each lever that does, or of two together "
             f"where neither does alone; ranked: {s.ranking}:")]
    for i, c in enumerate(s.changes[:SHOWN], 1):
        mark = "" if c.keeps else " (changes what a step trains)"
        lines.append(f"  {i}. {c.flags}{mark}: {c.words}")
        lines.append(f"     {change_words(c)}")
    if len(s.changes) > SHOWN:
        lines.append(f"  and {len(s.changes) - SHOWN} more (--json lists every one)")
    return lines


def _gathered_lines(est: Estimate, row) -> list[str]:
    """ZeRO-3/FSDP's unsharded units: what the peak holds, how many units of what size."""
    g = est.gathered
    if g is None:
        return []
    units, held = est.gathered_at_peak()
    fsdp2 = est.training.recipe == "fsdp2"
    root = "the root unit" if fsdp2 else "the LM head"
    with_root = f" + {root}" if g.root.n and held.n else ""
    plural = "s" if units != 1 else ""
    lines = [row("gathered units", held) + f"   (in the peak: {units} layer unit{plural}{with_root})"]
    size = f"  ZeRO-3 units: a decoder layer, {Bytes(math.ceil(g.layer.n)).format('GB', 2)}"
    if g.root.n:
        what = " (embedding, final norm, LM head)" if fsdp2 else ""
        size += f"; {root}{what}, {Bytes(math.ceil(g.root.n)).format('GB', 2)}"
    lines.append(size)
    lines.append(f"  in the backward pass: the layer computing + {g.prefetch} prefetched = "
                 f"{1 + g.prefetch} layer units unsharded"
                 + (f", and {root}" if g.root.n else ""))
    return lines


def _expert_lines(est: Estimate) -> list[str]:
    """A mixture's experts: their folded split and all-to-all group, the routing, the fullest
    device under each expert load (the one counted marked), the published band, the drops."""
    x = est.experts
    if x is None:
        return []
    lay, routing, d = est.run.layout, est.training.routing, x.dispatch
    ranks, per_node = x.all_to_all
    lines = [f"experts: ep {lay.ep} × etp {lay.expert_tp} × edp {lay.expert_zero_group} over the "
             f"dp × cp × tp = {lay.dp * lay.cp * lay.tp} GPUs of a stage (Megatron-Core's parallel "
             f"folding); {d.local_experts} of {d.experts} experts and {x.params:,} expert "
             f"parameters per device; all-to-all among {ranks} GPU{'s' if ranks > 1 else ''}, "
             f"{per_node} in a node",
             f"  routing: {routing_words(routing, d.capacity, d.router_tokens)}",
             "  expert load   rows a layer        peak     process  fits"]
    for load in x.loads:
        fits = "-" if load.fits is None else ("yes" if load.fits else "no")
        mark = " (counted, --expert-load)" if load.load == x.counted else ""
        lines.append(f"  {load.load:<10}{int(math.ceil(load.rows)):>15,} {whole_gb(load.peak):>11} "
                     f"{whole_gb(load.process):>11}  {fits:>4}  {load_words(load.load, routing)}"
                     f"{mark}")
    lines.append(f"  {band_words()}")
    if est.training.recompute == "full":
        lines.append("  recompute full: each layer keeps only its input for backward, so the load "
                     "changes only the tensors of the one layer being recomputed, which the peak "
                     "does not count")
    dropped = x.dropped_at_most
    if routing.dropless:
        lines.append("  drops: none (dropless)")
    elif dropped is None:
        lines.append(f"  drops: at most {float(d.dropped_share):.1%} of the token copies "
                     "(--global-batch gives a step's count)")
    else:
        lines.append(f"  drops: at most {int(dropped):,} of a step's {x.step_copies:,} token "
                     f"copies ({float(d.dropped_share):.1%}), when a router sends every token to "
                     "the same experts")
    return lines


def whole_gb(b: Bytes) -> str:
    """Whole bytes in GB, two decimals."""
    return Bytes(math.ceil(b.n)).format("GB", 2)


def _host_lines(est: Estimate) -> list[str]:
    """The CPU memory that offload needs, per device and per node."""
    what = host_what(est)
    if not what:
        return []
    nvme = est.run.tiers.offload_to == "nvme" and est.training.offload != "none"
    lines = [f"{'NVMe' if nvme else 'CPU memory'} ({what}):",
             f"  per device       {Bytes(math.ceil(est.host.n)).format('GB', 2):>12}  "
             f"{Bytes(math.ceil(est.host.n)).format('GiB', 2):>12}"]
    if est.host_per_node is not None:
        n = min(est.run.gpus_per_node, est.gpus)
        node = Bytes(math.ceil(est.host_per_node.n))
        lines.append(f"  per node         {node.format('GB', 2):>12}  {node.format('GiB', 2):>12}"
                     f"   ({n} GPU{'s' if n > 1 else ''})")
    lines.extend(_pcie_lines(est))
    lines.extend(_tier_lines(est))
    return lines


def _pcie_lines(est: Estimate) -> list[str]:
    """What offload sends over PCIe each step, and the least time it takes at the GPU's link."""
    t = est.pcie
    if t is None:
        return []
    up, down = Bytes(math.ceil(t.to_gpu.n)), Bytes(math.ceil(t.to_host.n))
    lines = [f"  over PCIe        {up.format('GB', 2):>12}  to the GPU, {down.format('GB', 2)} "
             "to the host, each step"]
    if t.seconds is None:
        lines.append("    not timed: the PCIe rate is known for --gpu " + ", ".join(HOST_LINKS))
    else:
        lines += [f"    at least {t.seconds:.2f} s at {t.rate / 1e9:g} GB/s each way; the CPU's "
                  "optimizer step is not timed", f"    ({t.rate_source})"]
    return lines


def _tier_lines(est: Estimate) -> list[str]:
    """Each tier of the node against its capacity (--offload-to, --host-memory, --nvme), and the
    tier that decides the verdict; nothing when the run gives no tier's capacity."""
    tiers = est.tiers
    if len(tiers) == 1 or not any(t.capacity is not None for t in tiers[1:]):
        return []
    to = est.run.tiers.offload_to
    lines = [f"tiers (--offload-to {to}" + (": the states on NVMe, DeepSpeed's pinned swap "
             "buffers in CPU memory):" if to == "nvme" else ": every offloaded byte in CPU memory):")]
    for t in tiers:
        need = Bytes(math.ceil(t.need.n)).format("GB", 2)
        where = "per device" if t.name == "GPU" else "per node"
        if t.fits is None:
            said = "capacity not given: not checked"
        else:
            cap = Bytes(math.ceil(t.capacity.n)).format("GB", 2)
            said = f"of {cap}: " + ("holds it" if t.fits else "does not hold it")
        lines.append(f"  {t.name:<12}{need:>14}  {where}, {said}")
    d = est.deciding_tier
    unchecked = [t.name for t in tiers if t.fits is None and t.need.n]
    lines.append(("fits" if est.fits else "does not fit") + f": decided by {d.name}"
                 + (f" ({', '.join(unchecked)} not checked)" if unchecked else ""))
    return lines


def _device_lines(est: Estimate, row) -> list[str]:
    """The three figures the GPU shows: allocated (the peak), reserved and process, with their
    bands and what sits between them."""
    d = est.on_device
    if d is None:
        return []
    out = ["on the GPU, as PyTorch and nvidia-smi count it (typical, and the band measured):",
           row("allocated", d.allocated) + "   max_memory_allocated(): the tensors' peak"
           + (" (not the paged states)" if d.paged.n else ""),
           row("reserved", d.reserved.typical) + f"   max_memory_reserved(): "
           f"{d.reserved.low.format('GB', 1)}–{d.reserved.high.format('GB', 1)} (fragmentation)",
           row("  expandable", d.reserved_expandable.typical) + "   the same with "
           "expandable_segments:True"]
    for name, what, band in d.outside:
        spread = (f": {band.low.format('GB', 2)}–{band.high.format('GB', 2)}"
                  if band.low != band.high else "" if name == "paged"
                  else " (one measurement)")
        out.append(row(f"  + {name}", band.typical) + f"   {what}{spread}")
    out.append(row("process", d.process.typical) + "   what nvidia-smi shows: "
               f"{d.process.low.format('GB', 1)}–{d.process.high.format('GB', 1)}")
    return out


def step_lines(st, indent: str = "  ") -> list[str]:
    """A predicted step by part, seconds and share, the largest parts first."""
    parts = sorted(((v, k) for k, v in st.parts().items() if v > 0), reverse=True)
    return [f"{indent}{k:<14}{v:>10.3f} s  {v / st.total:>6.1%}" for v, k in parts]


def _step_lines(est: Estimate) -> list[str]:
    """The predicted step: its time by part, tokens per second and MFU, and what it assumed."""
    p = est.step
    if p is None:
        return []
    st, f = p.time, p.fabric
    return [
        f"step: {st.total:.3f} s predicted, {p.tokens_per_second:,.0f} tokens/s, MFU "
        f"{p.mfu:.1%} of the {p.peak.describe()}",
        *step_lines(st),
        f"  assumed: tensor cores at {p.sustained:.0%} of their benchmarks' rates, {p.kernel} "
        f"attention; {p.timing.overlap.describe()}; NVLink {f.nvlink / 1e9:g} GB/s, network "
        f"{f.network / 1e9:g} GB/s per GPU each way, {f.node_gpus} GPUs a node",
        f"  the step-time model: {accuracy()}",
    ]


def _time_lines(est: Estimate) -> list[str]:
    """FLOPs per token, time to train and GPU-hours, with the peak they assume."""
    time = est.time
    if time is None:
        return []
    days = time.seconds / 86400
    return [
        f"time: {time.tokens:,} tokens at MFU {time.mfu:.1%} ({time.mfu_from}) of the "
        f"{time.peak.describe()}, {time.gpus:,} GPU{'s' if time.gpus > 1 else ''}",
        f"  FLOPs per token  {time.flops_per_token:.4g}: {time.counted}",
        f"  total FLOPs      {time.total_flops:.4g}",
        f"  throughput       {time.tokens_per_second:,.0f} tokens/s",
        f"  time to train    {days:,.1f} days ({time.seconds / 3600:,.1f} hours)",
        f"  GPU-hours        {time.gpu_hours:,.0f}",
    ]


def render_plan(p, top: int = 10, explain: bool = False) -> str:
    """The plan as a table: the fastest layouts that fit, where each one's step goes, and the
    assumptions behind the times."""
    t = p.training
    kept = len(p.ranking)
    moe = p.model.experts > 1  # an expert-parallel column for a mixture of experts
    f = p.fabric
    lines = [f"{p.model.name} on {p.gpus} {gpu(p.gpu).name} ({p.node_gpus} per node), "
             f"s = {p.seq_len}, {p.global_batch} sequences per step, recipe {t.recipe}, "
             f"{t.implementation} kernels"
             + (f", recompute op with policy {t.recompute_policy}" if t.recompute_policy else "")
             + (", under torch.compile" if t.compiled else "") + techniques_of(t),
             *(f"note: {w}" for w in p.warnings),
             f"assumed: tensor cores at {p.share:.0%} of their benchmarks' rates; {p.kernel_used} "
             f"attention; {p.overlap.describe()}; NVLink {f.nvlink / 1e9:g} GB/s, network "
             f"{f.network / 1e9:g} GB/s per GPU each way",
             f"the step-time model: {accuracy()}",
             *_plan_expert_lines(p),
             f"{len(p.candidates)} layouts considered, {kept} fit (--json lists every one and why)",
             f" rank  dp   tp  pp  cp{'  ep etp' if moe else ''}   v  schedule   cp by    ZeRO  recompute  b    GPU GB  step s   MFU   tokens/s  limited by"]
    rows = list(p.ranking[:top])
    if p.user is not None and all(c.grid != p.user.grid or c.rank is None for c in rows):
        rows.append(p.user)
    for c in rows:
        lay = c.layout
        rank = "you" if c is p.user and c.rank is None else str(c.rank)
        step = "-" if c.time is None else f"{c.time.total:.2f}"
        mfu = "-" if c.mfu is None else f"{c.mfu:.1%}"
        tps = "-" if c.tokens_per_second is None else f"{c.tokens_per_second:,.0f}"
        peak = "-" if c.process is None else f"{c.process.to('GB'):.1f}"
        limit = "" if c.time is None else c.time.limit
        if c.status != "kept":
            limit = "does not fit"
        ep = f" {lay.ep:>3} {lay.expert_tp:>3}" if moe else ""
        cp_by = "-" if lay.cp == 1 else lay.cp_kind
        schedule = "-" if lay.pp == 1 else lay.schedule
        lines.append(f"{rank:>5} {lay.dp:>3} {lay.tp:>4} {lay.pp:>3} {lay.cp:>3}{ep} {lay.v:>3}  "
                     f"{schedule:<9}  {cp_by:<7} {c.zero_stage:>5}  {c.recompute:<9} "
                     f"{c.micro_batch:>2} {peak:>9} "
                     f"{step:>7} {mfu:>6} {tps:>10}  {limit}")
    if p.user is not None:
        lines.append(p.user.reason)
    timed = [c for c in rows if c.time is not None][:3]
    if timed:
        names = ("GEMMs", "attention", "memory-bound", "optimizer", "bubble", "tp comm",
                 "cp comm", "pp comm", "dp comm", "ep comm")
        shown = [n for n in names if any(c.time.parts()[n] > 0 for c in timed)]
        lines.append(f"{'where the step goes (s):':<29}{'rank':>4} "
                     + "  ".join(f"{n:>9}" for n in shown))
        for c in timed:
            rank = "you" if c is p.user and c.rank is None else str(c.rank)
            parts = c.time.parts()
            lines.append(f"{'':29}{rank:>4} " + "  ".join(f"{parts[n]:>9.3f}" for n in shown))
    if explain:
        lines.extend(plan_reasons(p, top))
    lines.append(f"MFU: model FLOPs (6N + 12Lhs per token) over the dense {p.precision} peak; GPU GB:")
    lines.append("  what nvidia-smi would show, the step's peak with the allocator's reserve and what")
    lines.append("  sits outside it, as trainmath estimate counts them (GB = 10^9 bytes)")
    return "\n".join(lines)


def _plan_expert_lines(p: Plan) -> list[str]:
    """For a mixture of experts: the routing and the expert load fitting was judged at."""
    if not p.model.moe:
        return []
    routing = p.training.routing
    return [f"experts: ep folded over dp × cp × tp (Megatron-Core's parallel folding), etp = tp "
            f"or 1; {routing_name(routing)}; fits judged at the "
            f"{p.expert_load} expert load ({load_words(p.expert_load, routing)}; "
            "--expert-load balanced, measured or worst)"]


def plan_reasons(p: Plan, top: int = 10) -> list[str]:
    """For the best layout, why each other layout of the first ``top`` lost, one line each."""
    best = p.best
    lines = [f"best: {best.describe()}: {best.time.total:.2f} s per step, "
             f"{best.process.format('GB', 1)} on the GPU ({best.peak.format('GB', 1)} peak), "
             f"limited by {best.time.limit}"]
    b = best.time
    for c in p.ranking[1:top]:
        t = c.time
        diffs = {k: v - b.parts()[k] for k, v in t.parts().items()}
        worst = sorted(((v, k) for k, v in diffs.items() if v > 0.005 * t.total),
                       reverse=True)[:2]
        why = " and ".join(f"{k} +{v:.2f} s" for v, k in worst) or "equal time, more memory"
        lines.append(f"#{c.rank} {c.describe()}: {t.total - b.total:+.2f} s per step: {why}")
    return lines


def _binary(b) -> str:
    """A size as PyTorch's messages print it: MiB under a GiB, GiB above, two decimals."""
    return b.format("MiB", 2) if b.n < 2**30 else b.format("GiB", 2)


def render_check(dg) -> str:
    """A :class:`~trainmath.checks.diagnosis.Diagnosis` as ``trainmath check`` prints it: the
    run, each reading against its predicted band, the likely causes in order, and the rest."""
    est = dg.estimate
    r, shape = est.run, est.run.shape
    name = "--params" if shape is None else shape.name
    lines = [f"{name}: {est.params:,} parameters, recipe {r.training.recipe}, ZeRO stage "
             f"{r.training.zero_stage}, {r.layout.describe()}"]
    if dg.oom is not None:
        o = dg.oom
        where = f"GPU {o.gpu_index}" if o.gpu_index is not None else "the GPU"
        rank = f" (rank {o.rank})" if o.rank is not None else ""
        lines.append(f"out of memory on {where}{rank} ({o.form} wording): tried to allocate "
                     f"{_binary(o.requested)} of {_binary(o.capacity)}, {_binary(o.free)} free; "
                     f"allocated {_binary(o.allocated)}, reserved but unallocated "
                     f"{_binary(o.reserved_unallocated)}"
                     + ("" if o.process is None else f", this process {_binary(o.process)}"))
        lines.append("  fragmentation: " + (
            "yes: the reserved but unallocated memory alone would have held the request"
            if o.fragmentation else "no: the request was larger than the reserved but "
                                    "unallocated memory"))
    lines.append("measured against predicted (GB = 10^9 bytes; predicted: typical, and its band):")
    for c in dg.comparisons:
        mark = "within" if c.within else ("above" if c.gap > 0 else "below")
        lines.append(f"  {c.counter:<10} measured {c.measured.format('GB', 2):>10}, predicted "
                     f"{c.predicted.describe()}: {mark} [{c.source}]")
    if dg.causes:
        lines.append("likely causes, most likely first:")
        for i, cause in enumerate(dg.causes, 1):
            lines.append(f"  {i}. {cause.name}: {cause.figure}")
    elif all(c.within for c in dg.comparisons):
        lines.append("every reading is within its predicted band")
    if dg.unexplained is not None:
        lines.append(f"beyond the band and not explained by these: "
                     f"{dg.unexplained.format('GB', 2)}" if dg.unexplained.n else
                     "the causes named could account for all of it beyond the band")
    fits = fit(est)
    if fits is not None:
        lines.append(f"the estimate's verdict for {fits.where}: {fits.verdict}")
    lines.append("sources: trainmath.memory.device (the counters and their bands), "
                 "trainmath.checks.oom and trainmath.checks.loglines (the readings)")
    return "\n".join(lines)
