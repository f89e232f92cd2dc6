"""The facts every rendering of an estimate states in the same words: whether it fits, with how
much to spare or over and at which figure, and what the run assumed because it was not given.

The text (:mod:`trainmath.report.text`) and the HTML (:mod:`trainmath.report.page`) of an
estimate print these; neither words them on its own.

>>> from trainmath.runs.description import run
>>> from trainmath.runs.estimates import estimate
>>> f = fit(estimate(run("llama-3-8b", seq_len=8192, dp=8, zero_stage=3, gpu="h100-sxm")))
>>> f.where
'one H100 SXM (81,559 MiB = 85.52 GB, as nvidia-smi reports it)'
>>> f.verdict.startswith("yes") and f.verdict.endswith("at the process's memory, as nvidia-smi shows it")
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..hardware import gpu as accelerator
from ..memory.sharding import OFFLOAD_ALIASES
from ..memory.training import Training
from ..model.moe import MEASURED_BAND, MEASURED_MAX_LOAD, PUBLISHED_MAX_LOADS, Routing
from ..model.presets import preset_like
from ..runs.estimates import Estimate
from ..units import Bytes


def whole(b: Bytes) -> Bytes:
    """Whole bytes, as the JSON reports them: a shard of an uneven split rounds up."""
    return Bytes(math.ceil(b.n))


@dataclass(frozen=True)
class Fit:
    """Whether the step fits the device: what it needs (the process's memory as nvidia-smi shows
    it, plus the overhead when one is given: :attr:`~trainmath.runs.estimates.Estimate.needed`)
    against the device's memory, both in whole bytes, and how each is named."""

    fits: bool
    capacity: Bytes
    needed: Bytes
    #: the device, named: ``"one H100 SXM (81,559 MiB = 85.52 GB, as nvidia-smi reports it)"``
    where: str
    #: the figure compared: the process's memory as nvidia-smi shows it, with the overhead when
    #: one is given
    at: str
    #: paged optimizer states the driver can evict to CPU memory (counted in ``needed``)
    paged: Bytes = Bytes(0)

    @property
    def pages(self) -> bool:
        """Whether it fits only with some paged optimizer states evicted to CPU memory."""
        return self.fits and self.needed > self.capacity

    @property
    def margin(self) -> Bytes:
        """Memory to spare (fits) or over (does not); 0 B when it fits by paging."""
        if self.pages:
            return Bytes(0)
        return self.capacity - self.needed if self.fits else self.needed - self.capacity

    @property
    def verdict(self) -> str:
        """``"yes, 8.3 GB to spare at the process's memory, as nvidia-smi shows it"``, or
        ``"no, … over at …"``."""
        if self.pages:
            over = self.needed - self.capacity
            return (f"yes, with paging: {over.format('GB', 2)} of the "
                    f"{self.paged.format('GB', 2)} of paged optimizer states evicted to CPU "
                    f"memory, at {self.at}")
        if self.fits:
            return f"yes, {self.margin.format('GB', 2)} to spare at {self.at}"
        return f"no, {self.margin.format('GB', 2)} over at {self.at}"


def fit(est: Estimate) -> Fit | None:
    """The :class:`Fit` of an estimate with a GPU; None without one."""
    g = est.run.gpu
    if g is None:
        return None
    capacity = whole(g.memory)
    needed = whole(est.needed - est.overhead) + whole(est.overhead)
    where = str(capacity)
    if g.kind is not None:  # its usable memory: whole MiB, as nvidia-smi reports it
        where = (f"one {g.name} ({capacity.format('MiB', 0)} = {capacity.format('GB', 2)}, as "
                 "nvidia-smi reports it)")
        if g.memory != accelerator(g.kind).memory.usable:
            where = f"one {g.name} with {capacity} (--gpu-memory)"
    at = ("the process's memory, as nvidia-smi shows it"
          + (", with the overhead" if est.overhead.n else ""))
    return Fit(bool(est.gpu_fits), capacity, needed, where, at, whole(est.paged))


def load_words(load: str, routing: Routing) -> str:
    """What an expert load means, in the words every output uses: ``"balanced: every expert
    its share"``, ``"measured: …"``, ``"worst: …"``."""
    if routing.pad:
        return "padded: every expert exactly at its capacity, whatever the router does"
    if load == "balanced":
        return "every expert its share"
    if load == "measured":
        return (f"{float(MEASURED_MAX_LOAD):g}× the share, the most loaded expert's in published "
                "training runs" + ("" if routing.dropless else ", at most the capacity"))
    if routing.dropless:
        return "every token copy of the ep group that can reach this device's experts"
    return "this device's experts full to their capacity"


def routing_name(routing: Routing) -> str:
    """``"dropless"``, or ``"capacity factor 1.25"`` (``", padded"`` when it pads)."""
    if routing.dropless:
        return "dropless"
    return (f"capacity factor {float(routing.capacity_factor):g}"
            + (", padded" if routing.pad else ""))


def routing_words(routing: Routing, capacity: int | None, router_tokens) -> str:
    """How the experts take their tokens: ``"dropless (Megatron-Core's default)"``, or the
    capacity factor, the capacity it gives and whether it pads."""
    if routing.dropless:
        return "dropless (Megatron-Core's default): every token copy reaches its expert"
    return (f"{routing_name(routing)}: at most {capacity:,} token copies per expert from each "
            f"router's {int(router_tokens):,} tokens (Megatron-Core's get_capacity), the rest "
            "dropped")


def band_words() -> str:
    """The published band of the most loaded expert's share, with what it was measured on, and
    the early-training figure no one published."""
    low, high = MEASURED_BAND
    runs = ", ".join(f"{float(m.ratio):g}× {m.what.split(', ')[-1]}" for m in PUBLISHED_MAX_LOADS)
    return (f"measured: the most loaded expert takes {float(low):g}× to {float(high):g}× the "
            f"mean load over a validation set after training (Wang et al. 2024: {runs}); no "
            "published figure was found for the first steps, when Megatron-Core warns a dropless "
            "run can run out of memory: the worst case bounds them")


#: whose figures a pipeline schedule's bubble and memory are, as the outputs cite them
SCHEDULE_SOURCES = {"1f1b": "Narayanan et al. 2021", "zb-h1": "Qi et al. 2024",
                    "zb-v": "Qi et al. 2024", "dualpipev": "DeepSeek-AI 2024 and PyTorch's DualPipeV",
                    "zb-h2": "Qi et al. 2024", "dualpipe": "DeepSeek-AI 2024"}


def pipeline_words(est: Estimate) -> str:
    """``"m = 32 micro-batches per step, bubble 9.38% of the ideal step (1f1b, Narayanan et al.
    2021)"``: the pipeline line every rendering shows (with a global batch)."""
    schedule = est.run.layout.schedule
    return (f"m = {est.microbatches} micro-batches per step, bubble {float(est.bubble):.2%} of "
            f"the ideal step ({schedule}, {SCHEDULE_SOURCES[schedule]})")


def assumed(est: Estimate) -> str | None:
    """What the run took from defaults, and why: ``"assumed (as llama-3-8b is commonly
    trained): recipe bf16-mixed, kernels megatron-te, the recipe's fused optimizer step"``;
    None when it assumed nothing."""
    r, t, shape = est.run, est.run.training, est.run.shape
    if not r.assumed:
        return None
    given = {"recipe": f"recipe {t.recipe}", "implementation": f"kernels {t.implementation}",
             "optimizer_impl": f"the recipe's {t.optimizer_impl} optimizer step"}
    if r.adapter is not None:  # what peft and transformers do, not how the preset was trained
        given["recipe"] = f"the adapter in {t.recipe}, as peft keeps it"
        given["implementation"] = f"Hugging Face's kernels {t.implementation}"
    like = None if shape is None else preset_like(shape)
    how = ("no shape" if shape is None else "not a preset" if like is None
           else f"as {like} is commonly trained" if like == shape.name
           else f"the shape of {like}, as it is commonly trained")
    if r.adapter is not None:
        how = "as peft and transformers fine-tune"
    return f"assumed ({how}): " + ", ".join(given[a] for a in r.assumed)


def change_words(s) -> str:
    """What one suggested change gives, in the words every rendering of it uses: its peak, the
    memory fitting is judged by and what is left, and its cost in the step-time model (a
    :class:`trainmath.planner.suggest.Suggestion`)::

        peak 43.83 GB, 46.71 GB as nvidia-smi shows it, 39.19 GB to spare; not timed: …
    """
    spare = s.spare
    left = (f"{whole(spare).format('GB', 2)} to spare" if spare.n >= 0
            else f"{whole(-spare).format('GB', 2)} over")
    text = (f"peak {whole(s.peak).format('GB', 2)}, {whole(s.needed).format('GB', 2)} as "
            f"nvidia-smi shows it, {left}")
    host = s.estimate.host
    if host.n:  # offload: the CPU memory it needs, as the estimate counts it
        node = s.estimate.host_per_node
        text += (f"; CPU memory {whole(host).format('GB', 2)} per GPU"
                 + ("" if node is None else f", {whole(node).format('GB', 2)} per node"))
    if s.cost is not None:
        text += (f"; step {s.step_seconds:.3g} s on {s.gpus:,} GPU{'s' if s.gpus > 1 else ''}, "
                 f"GPU time per token {s.cost:+.1%}")
    elif s.untimed:
        text += f"; cost not timed: {s.untimed}"
    return text


def headroom_words(h, est: Estimate) -> str:
    """What a run that fits has to spare and could buy (a
    :class:`trainmath.planner.suggest.Headroom`): ``"8.02 GB to spare: the longest sequence
    that fits is 9,216 tokens, now 8,192 (--seq-len); the largest micro-batch 1, now 1
    (--micro-batch)"``."""
    text = f"{whole(h.spare).format('GB', 2)} to spare"
    if h.longest_seq is None:
        return text + " (a longer sequence or a larger micro-batch needs a model shape and --seq-len)"
    now = est.run.batch
    seq = f"{h.longest_seq:,} tokens" + (" or more, the most searched"
                                         if h.longest_seq >= h.seq_bound else "")
    micro = f"{h.largest_micro_batch}" + (", the most the global batch allows"
                                         if h.largest_micro_batch >= h.micro_batch_bound else "")
    return (f"{text}: the longest sequence that fits is {seq}, now {now.seq_len:,} (--seq-len); "
            f"the largest micro-batch {micro}, now {now.micro_batch} (--micro-batch)")
def techniques(est: Estimate) -> str:
    """The memory techniques a run uses, in words, for the activations line: ``", loss chunked
    (8 chunks), activations offloaded to CPU memory (sync)"``; "" for neither."""
    return techniques_of(est.training)


def techniques_of(t: Training) -> str:
    """:func:`techniques` of a training setup (a plan's)."""
    out = ""
    if t.loss == "chunked":
        out += f", loss chunked ({t.chunks} chunks)"
    elif t.loss == "fused":
        out += ", loss fused (Liger's kernel)"
    if t.activation_offload != "none":
        out += f", activations offloaded to CPU memory ({t.activation_offload})"
    return out


def host_what(est: Estimate) -> str:
    """What the CPU memory holds, in words: ``"--offload optimizer: master weights, optimizer
    states, gradient partition; --activation-offload sync: every saved tensor but the output
    head's"``; "" when nothing is offloaded."""
    t = est.training
    parts = []
    if t.offload != "none":
        flag = {v: k for k, v in OFFLOAD_ALIASES.items()}.get(t.offload, t.offload)
        moved = ("master weights, optimizer states, gradient partition" if t.offload == "optimizer"
                 else "every sharded state")
        parts.append(f"--offload {flag}: {moved}")
    if t.activation_offload != "none":
        parts.append(f"--activation-offload {t.activation_offload}: every saved tensor but the "
                     f"output head's, {whole(est.offloaded_activations).format('GB', 2)}")
    return "; ".join(parts)
