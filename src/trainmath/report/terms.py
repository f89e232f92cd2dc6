"""The arithmetic behind each figure of an estimate: formula, inputs, and where it is explained.

:func:`explain` takes an :class:`~trainmath.runs.estimates.Estimate` and returns one :class:`Term` per
figure ``trainmath estimate`` prints for the fullest device: the four kinds of model state, the
activations, their total, the step's peak and, with a GPU, whether it fits. Each term carries
its formula in symbols, the values of the symbols for this run, the arithmetic written out, the
result, the source of the formula, and a link to the page of this site that explains it. The
calculator page shows them, one per figure; nothing there is computed outside the
library.

The model states follow Rajbhandari et al. 2020 (ZeRO, §5.1-5.3): P parameters on the device
(after tensor and pipeline parallelism, :mod:`trainmath.parallel.layout`), times the recipe's bytes
per parameter (:data:`trainmath.memory.recipes.RECIPES`), divided by the ZeRO group n = dp·cp when the
stage shards that kind. FSDP2 pads each flat parameter to a multiple of n
(:func:`trainmath.memory.sharding.fsdp2_rank`), so its shards are the formula's value rounded up to
whole elements; the term says so. Activations follow Korthikanti et al. 2022 (§4) as
:mod:`trainmath.memory.activations` counts them, with the micro-batches in flight on a pipeline stage
from Narayanan et al. 2021 (§2.2). Every term's :attr:`Term.value` is the estimate's own figure;
:attr:`Term.formula_value` is what the formula gives, equal to it except for FSDP2's padding.

>>> from trainmath.runs.estimates import estimate
>>> from trainmath.runs.description import run
>>> terms = explain(estimate(run(7_500_000_000, dp=64, zero_stage=3)))
>>> t = terms[0]
>>> t.name, t.formula, t.arithmetic
('weights', 'P × w ÷ n', '7,500,000,000 × 2 B ÷ 64 = 234,375,000 B')
>>> t.value == t.formula_value
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from ..memory.recipes import bytes_per_param, recipe
from ..runs.estimates import Estimate
from ..units import Bytes


#: Pages of this site that explain each term (relative links from a page at the site's root).
LINKS = {
    "states": "memory-math.html#the-bytes-per-parameter",
    "frameworks": "memory-math.html#what-frameworks-really-keep",
    "zero": "zero-fsdp.html#concept",
    "fsdp2": "zero-fsdp.html#checked-against-pytorch-fsdp2",
    "activations": "distributed-training.html#activation-memory-tensor-by-tensor",
    "pipeline": "distributed-training.html#pipelines-hold-more-than-one-micro-batch",
    "peak": "how-we-know.html#the-peak-of-a-step",
    "fits": "cli.html#will-it-fit",
    "offload": "zero-fsdp.html#cpu-offload-what-moves-and-what-stays",
    "time": "cli.html#beyond-the-states-zero-3s-units-overhead-offload-and-time",
    "finetune": "fine-tuning.html",
    "moe": "mixture-of-experts.html",
}

_ZERO = "Rajbhandari et al. 2020 (ZeRO), §5.1–5.3"


@dataclass(frozen=True)
class Term:
    """One figure of an estimate with the arithmetic that gives it.

    ``inputs`` pairs each symbol of ``formula`` with what it is for this run (in words, with
    its value); ``arithmetic`` is the formula with the values put in; ``value`` is the
    estimate's figure and ``formula_value`` what the formula gives (None for terms that are a
    comparison, not an amount). ``link`` is a page of this site, relative to its root.
    """

    name: str
    formula: str
    inputs: tuple[tuple[str, str], ...]
    arithmetic: str
    value: Bytes | None
    formula_value: Bytes | None
    source: str
    link: str
    note: str = ""


def _b(n: int | Fraction) -> str:
    """Bytes as the arithmetic writes them: whole bytes with separators, a fraction exactly."""
    n = Fraction(n)
    if n.denominator == 1:
        return f"{int(n):,} B"
    return f"{float(n):,.2f} B"


def _num(x: int | Fraction) -> str:
    x = Fraction(x)
    return f"{int(x):,}" if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def _state(name: str, per_param: int | Fraction, params: int, n: int, sharded: bool,
           value: Bytes, symbol: str, meaning: str, exact_fsdp2: bool, link: str,
           zero_stage: int, shards_from: int) -> Term:
    got = Fraction(per_param) * params / (n if sharded else 1)
    inputs = [("P", f"parameters on this device: {params:,}"),
              (symbol, f"{meaning}: {_num(per_param)} B per parameter")]
    if sharded:
        inputs.append(("n", f"ZeRO group dp·cp: {n} (stage {zero_stage} shards this from stage "
                            f"{shards_from})"))
        formula = f"P × {symbol} ÷ n"
        arithmetic = f"{params:,} × {_num(per_param)} B ÷ {n} = {_b(got)}"
    else:
        if n > 1:
            inputs.append(("n", f"ZeRO group dp·cp: {n}, not dividing this: stage {zero_stage} "
                                f"shards it only from stage {shards_from}"))
        formula = f"P × {symbol}"
        arithmetic = f"{params:,} × {_num(per_param)} B = {_b(got)}"
    note = ""
    if exact_fsdp2 and Bytes(got) != value:
        note = ("FSDP2 pads each layer's flat parameter to a multiple of n, so rank 0 holds "
                f"{_b(value.n)}, the formula's value rounded up to whole elements")
    return Term(name, formula, tuple(inputs), arithmetic, value, Bytes(got), _ZERO, link, note)


def _gradients(per, params: int, n: int, stage: int, value: Bytes, fsdp2: bool) -> Term:
    g, c = per.gradients, per.gradient_copy
    main = Fraction(g) * params / (n if stage >= 2 else 1)
    if not c:
        t = _state("gradients", g, params, n, stage >= 2, value, "g",
                   "gradient bytes the recipe keeps", fsdp2, LINKS["states"], stage, 2)
        return t
    copy = Fraction(c) * params / (n if stage >= 1 else 1)
    got = main + copy
    inputs = [("P", f"parameters on this device: {params:,}"),
              ("g", f"backward's gradients: {_num(g)} B per parameter"),
              ("c", f"the fp32 copy the optimizer steps from: {_num(c)} B per parameter"),
              ("n", f"ZeRO group dp·cp: {n} (stage {stage}: g sharded from stage 2, c from 1)")]
    sg = " ÷ n" if stage >= 2 else ""
    sc = " ÷ n" if stage >= 1 else ""
    ng = f" ÷ {n}" if stage >= 2 else ""
    nc = f" ÷ {n}" if stage >= 1 else ""
    arithmetic = (f"{params:,} × {_num(g)} B{ng} + {params:,} × {_num(c)} B{nc} = {_b(got)}")
    return Term("gradients", f"P × g{sg} + P × c{sc}", tuple(inputs), arithmetic, value,
                Bytes(got), _ZERO, LINKS["frameworks"])


def _activations(est: Estimate) -> Term | None:
    if est.layer is None:
        return None
    sa = est.saved[est.pipeline_stage]
    run = est.run
    t, b = run.training, run.batch
    inputs = [("A", f"one layer's saved tensors for one micro-batch (s = {b.seq_len}, "
                    f"b = {b.micro_batch}, {t.implementation} kernels, recompute {t.recompute}): "
                    f"{_b(sa.per_layer.total.n)}"),
              ("L", f"layers on this pipeline stage: {sa.layers_on_stage}"),
              ("k", f"micro-batches in flight on stage {est.pipeline_stage}: {_num(sa.held)}")]
    formula, arithmetic = "A × L × k", (f"{_b(sa.per_layer.total.n)} × {sa.layers_on_stage} × "
                                         f"{_num(sa.held)}")
    got = sa.layers.n
    if sa.embedding is not None:
        inputs.append(("E", f"the embedding's tensors, for {sa.embedding_held} micro-batch(es) "
                            f"in flight: {_b(sa.embedding.total.n)} each"))
        formula += " + E × e"
        arithmetic += f" + {_b(sa.embedding.total.n)} × {sa.embedding_held}"
        got += sa.inputs.n
    if sa.output is not None:
        inputs.append(("O", f"final norm, LM head and loss, one micro-batch: {_b(sa.outputs.n)}"))
        formula += " + O"
        arithmetic += f" + {_b(sa.outputs.n)}"
        got += sa.outputs.n
    if sa.rotary.total.n:
        inputs.append(("R", f"rotary tables, one pair per forward in flight and model chunk: "
                            f"{_b(sa.rotary.total.n)}"))
        formula += " + R × k × v"
        arithmetic += f" + {_b(sa.rotary.total.n)} × {_num(sa.held)} × {sa.chunks}"
        got += sa.shared.n
    arithmetic += f" = {_b(got)}"
    link = LINKS["pipeline"] if run.layout.pp > 1 else LINKS["activations"]
    return Term("activations", formula, tuple(inputs), arithmetic, est.activations, Bytes(got),
                "Korthikanti et al. 2022, §4 (tensor by tensor, trainmath.memory.activations); "
                "Narayanan et al. 2021, §2.2 (micro-batches in flight)", link)


def explain(est: Estimate) -> tuple[Term, ...]:
    """The arithmetic of every figure of ``est`` (see the module docstring), in the order
    ``trainmath estimate`` prints them: weights, gradients, master weights, optimizer
    states, activations (when counted), total, peak of a step and, with a GPU, fits."""
    run, d = est.run, est.device
    t, lay = run.training, run.layout
    r = recipe(t.recipe)
    per = bytes_per_param(t.recipe, t.optimizer)
    P, n, z = d.params, d.zero_group, t.zero_stage
    fsdp2 = r.name == "fsdp2"
    offload = t.offload if hasattr(t, "offload") else "none"
    before = _before_offload(est, per, P, n, z)
    device_values = (d.weights, d.gradients, d.master_weights, d.optimizer_states)
    if offload != "none":  # the formula's amounts; those moved to the host are 0 on the GPU
        d = _Kinds(*before)
    terms = [
        _state("weights", per.weights, P, n, z >= 3, d.weights, "w",
               f"weight bytes in recipe {r.name}", fsdp2, LINKS["states"], z, 3),
        _gradients(per, P, n, z, d.gradients, fsdp2),
        _state("master weights", per.master_weights, P, n, z >= 1, d.master_weights, "m",
               f"fp32 master copy in recipe {r.name}", fsdp2, LINKS["states"], z, 1),
        _state("optimizer states", per.optimizer_states, P, n, z >= 1, d.optimizer_states, "o",
               f"{t.optimizer}'s states in recipe {r.name}", fsdp2, LINKS["states"], z, 1),
    ]
    if offload != "none":
        terms = [_moved(x, on_gpu, offload) for x, on_gpu in zip(terms, device_values)]
    terms = [_unmodelled(x, est) for x in terms]
    if P != est.params:
        where = f"tp {lay.tp}" + (f", pipeline stage {est.device.stage} of {lay.pp}"
                                  if lay.pp > 1 else "")
        terms = [x if not x.inputs else
                 Term(x.name, x.formula, ((x.inputs[0][0], x.inputs[0][1] + f" of "
                                           f"{est.params:,} ({where})"),) + x.inputs[1:],
                      x.arithmetic, x.value, x.formula_value, x.source, x.link, x.note)
                 for x in terms]
    acts = _activations(est)
    if acts is not None:
        terms.append(acts)
    parts = [x for x in terms]
    total = sum((x.value.n for x in parts), Fraction(0))
    if offload != "none":
        terms.append(_host(est, per, P, n, before, offload))
    terms.append(Term(
        "total", " + ".join(x.name for x in parts), (),
        " + ".join(_b(x.value.n) for x in parts) + f" = {_b(total)}", est.total, Bytes(total),
        "the sum of the kinds above; not the peak, which counts what is alive at one moment",
        LINKS["states"]))
    top = est.peak.peak
    alive = top.as_dict()
    stage = f" on pipeline stage {est.peak_stage}" if lay.pp > 1 else ""
    peak_total = sum((b.n for b in alive.values()), Fraction(0))
    terms.append(Term(
        "peak of a step", " + ".join(alive),
        tuple((k, _b(v.n)) for k, v in alive.items()),
        " + ".join(_b(v.n) for v in alive.values()) + f" = {_b(peak_total)}",
        top.total, Bytes(peak_total),
        "trainmath.memory.peak: what is alive at each moment of the step, checked against PyTorch",
        LINKS["peak"], f"{top.phase}{stage}, {top.when}"))
    if run.gpu is not None:
        capacity = run.gpu.memory
        peak = Bytes(math.ceil(top.total.n))
        cap = Bytes(math.ceil(capacity.n))
        name = run.gpu.name or "the device"
        verdict = "fits" if est.fits else "does not fit"
        rel = "≤" if est.fits else ">"
        extra = getattr(run, "overhead", Bytes(0))
        if extra.n:  # what no formula counts, as given (--overhead)
            over = Bytes(math.ceil(extra.n))
            formula = "peak + overhead ≤ memory"
            inputs = (("peak", _b(peak.n)), ("overhead", f"as given: {_b(over.n)}"),
                      ("memory", f"{name}: {_b(cap.n)}"))
            arithmetic = (f"{_b(peak.n)} + {_b(over.n)} = {_b(peak.n + over.n)} {rel} "
                          f"{_b(cap.n)}: {verdict}")
        else:
            formula = "peak ≤ memory"
            inputs = (("peak", _b(peak.n)), ("memory", f"{name}: {_b(cap.n)}"))
            arithmetic = f"{_b(peak.n)} {rel} {_b(cap.n)}: {verdict}"
        terms.append(Term(
            "fits", formula, inputs, arithmetic, None, None,
            "the usable memory nvidia-smi reports (trainmath.hardware.GpuMemory)" if run.gpu.kind
            else "the memory given", LINKS["fits"]))
    time = getattr(est, "time", None)
    if time is not None:
        terms.append(Term(
            "time to train", "D × F ÷ (MFU × G × peak)",
            (("D", f"tokens: {time.tokens:,}"),
             ("F", f"FLOPs per token: {time.flops_per_token:,} ({time.counted})"),
             ("MFU", f"assumed: {time.mfu:.1%}"), ("G", f"GPUs: {time.gpus:,}"),
             ("peak", f"{time.peak.describe()}")),
            f"{time.tokens:,} × {time.flops_per_token:,} ÷ ({time.mfu:g} × {time.gpus:,} × "
            f"{time.peak.flops:.4g} FLOP/s) = {time.seconds:,.0f} s = {time.seconds / 86400:,.1f} "
            f"days; {time.gpu_hours:,.0f} GPU-hours", None, None,
            "trainmath.time.flops.time_to_train: Kaplan et al. 2020 (§2.1), Chowdhery et al. 2022 "
            "(Appendix B)", LINKS["time"]))
    return tuple(terms)


def _unmodelled(x: Term, est: Estimate) -> Term:
    """A model-state term whose ZeRO formula does not give the estimate's figure, because the
    run is one this module does not write out yet (LoRA or QLoRA, a mixture of experts): the
    figure, and where it comes from, with no formula that would disagree with it."""
    if x.formula_value == x.value or "FSDP2 pads" in x.note:
        return x
    run = est.run
    if getattr(run, "adapter", None) is not None:
        why, source, link = ("a LoRA or QLoRA run: the frozen base model and the adapter's own "
                             "states", "trainmath.memory.finetune (Hu et al. 2021; Dettmers et al. 2023)",
                             LINKS["finetune"])
    elif getattr(est.device, "expert_params", 0):
        why, source, link = ("a mixture of experts: the routed experts are split over ep ranks, "
                             "with their own ZeRO group", "trainmath.runs.estimates and trainmath.model.moe",
                             LINKS["moe"])
    else:
        why, source, link = "this run", "trainmath.runs.estimates.estimate", x.link
    return Term(x.name, "(not written out here)", (), f"{_b(x.value.n)}, from the estimate",
                x.value, None, source, link,
                f"The ZeRO formula does not cover {why}; the page linked explains it.")


@dataclass(frozen=True)
class _Kinds:
    weights: Bytes
    gradients: Bytes
    master_weights: Bytes
    optimizer_states: Bytes


def _before_offload(est: Estimate, per, P: int, n: int, z: int) -> tuple[Bytes, ...]:
    """The four kinds on the device as the ZeRO formulas give them, before any offload."""
    def share(x, sharded):
        return Bytes(Fraction(x) * P / (n if sharded else 1))

    return (share(per.weights, z >= 3),
            share(per.gradients, z >= 2) + share(per.gradient_copy, z >= 1),
            share(per.master_weights, z >= 1), share(per.optimizer_states, z >= 1))


def _moved(x: Term, on_gpu: Bytes, offload: str) -> Term:
    """A kind that offload moved to the host: 0 on the GPU, the formula's amount on the host."""
    if on_gpu == x.value:
        return x
    return Term(x.name, f"0 on the GPU ({x.formula} in host memory)", x.inputs,
                f"{x.arithmetic} in host memory (--offload {offload}); on the GPU: 0 B", on_gpu,
                on_gpu, x.source + "; offload: Ren et al. 2021 (ZeRO-Offload), Rajbhandari et al. "
                "2021 (ZeRO-Infinity)", LINKS["offload"], x.note)


def _host(est: Estimate, per, P: int, n: int, before, offload: str) -> Term:
    """The host memory offload needs per device: the gradient partition in the master weights'
    format, the master weights and the optimizer states (and with "params" the weights)."""
    r = recipe(est.run.training.recipe)
    g = max(r.gradients, r.master_weights)
    grads = Fraction(g) * P / n
    got = grads + before[2].n + before[3].n
    formula = "P × max(g, m) ÷ n + master weights + optimizer states"
    arithmetic = (f"{P:,} × {g} B ÷ {n} + {_b(before[2].n)} + {_b(before[3].n)}")
    if offload != "optimizer":
        got += before[0].n
        formula += " + weights"
        arithmetic += f" + {_b(before[0].n)}"
    return Term("host memory", formula,
                (("P", f"parameters on this device: {P:,}"),
                 ("g, m", f"gradient and master-weight bytes: {r.gradients} B and "
                          f"{r.master_weights} B per parameter"),
                 ("n", f"ZeRO group dp·cp: {n}")),
                arithmetic + f" = {_b(got)}", est.host, Bytes(got),
                "Ren et al. 2021 (ZeRO-Offload), §4; Rajbhandari et al. 2021 (ZeRO-Infinity); "
                "DeepSpeed's estimate_zero3_model_states_mem_needs", LINKS["offload"])
