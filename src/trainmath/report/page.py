"""An estimate as the calculator page draws it: HTML of the per-device table in GB and GiB,
the step's peak, whether it fits, a stacked bar of what is alive at the peak, and each figure's
arithmetic (:mod:`trainmath.report.terms`), with one-line summaries for the bar that stays in
view. Every figure comes from the :class:`~trainmath.runs.estimates.Estimate`; nothing is
computed here.
"""

from __future__ import annotations

import html
import math
import re
from typing import TYPE_CHECKING

from ..planner.candidates import Plan
from ..runs.estimates import Estimate
from ..units import Bytes
from .data import estimate_dict
from .facts import assumed, change_words, fit, headroom_words, pipeline_words, techniques, whole
from .terms import explain
from .text import SHOWN, plan_reasons, render, render_check, render_plan

if TYPE_CHECKING:  # imported only where --suggest runs, so the command starts faster
    from ..planner.suggest import Suggestions


# -- output ---------------------------------------------------------------------------------------
#: The colour (a trainmath.report.plots palette name) of each kind alive at the peak.
COLORS = {"parameters": "blue", "weights": "blue", "gradients": "light-blue",
          "master weights": "orange", "optimizer states": "red", "activations": "green",
          "logits": "purple", "gathered parameters": "gray"}


def _gb(n: int) -> str:
    return Bytes(n).format("GB", 2)


def _gib(n: int) -> str:
    return Bytes(n).format("GiB", 2)


def escape(text: object) -> str:
    """``text`` safe to put in HTML, quotes included."""
    return html.escape(str(text), quote=True)


def _slug(name: str) -> str:
    return "tm-calc-term-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _bar(parts: dict[str, int], capacity: int | None, alt: str,
         colors: dict[str, str] = COLORS) -> str:
    """A stacked bar of what is alive at the peak, widths in % of the larger of the peak and
    the GPU's memory, with the GPU's memory marked; ``colors`` names each part's colour."""
    scale = max(sum(parts.values()), capacity or 0) or 1
    segs, keys = [], []
    for name, n in parts.items():
        color = colors.get(name, "light-gray")
        width = 100 * n / scale
        segs.append(f'<span class="tm-calc-seg" style="width:{width:.3f}%;'
                    f'background:var(--tm-fig-{color})"></span>')
        keys.append(f'<li><span class="tm-calc-key" style="background:var(--tm-fig-{color})">'
                    f'</span>{escape(name)} {_gb(n)}</li>')
    mark = ""
    if capacity:
        mark = (f'<span class="tm-calc-cap" style="left:{100 * capacity / scale:.3f}%">'
                '</span>')
    return (f'<div class="tm-calc-bar" role="img" aria-label="{escape(alt)}">{"".join(segs)}{mark}'
            f'</div><ul class="tm-calc-legend">{"".join(keys)}'
            + ('<li><span class="tm-calc-key tm-calc-key-cap"></span>the GPU\'s memory</li>'
               if capacity else "") + "</ul>")


def peak_bar(est: Estimate) -> str:
    """A stacked bar of what is alive at the step's peak on the fullest device, by kind (the
    estimate's :attr:`~trainmath.runs.estimates.Estimate.peak` parts), with the GPU's memory
    marked when the run names one, its legend in GB, and the same figures as its text
    alternative: the calculator's chart, and the chart of the pages' small calculators
    (``trainmath.cli.widget``).

    >>> from trainmath.runs.description import run
    >>> from trainmath.runs.estimates import estimate
    >>> 'aria-label="What is alive at the peak: parameters' in peak_bar(estimate(run(
    ...     "llama-3-8b", seq_len=4096, gpu="h100-sxm")))
    True
    """
    peak = estimate_dict(est)["peak"]
    verdict = fit(est)
    capacity = None if verdict is None else verdict.capacity.n
    parts = {k.replace("_", " "): v for k, v in peak["parts"].items()}
    alt = ("What is alive at the peak: " + ", ".join(f"{k} {_gb(v)}" for k, v in parts.items())
           + (f"; the GPU holds {_gb(capacity)}" if capacity else ""))
    return _bar(parts, capacity, alt)


def _terms_html(terms) -> str:
    out = []
    for t in terms:
        value = "" if t.value is None else f": {_gb(math.ceil(t.value.n))}"
        inputs = "".join(f"<dt><var>{escape(k)}</var></dt><dd>{escape(v)}</dd>" for k, v in t.inputs)
        note = f"<p>{escape(t.note)}</p>" if t.note else ""
        out.append(
            f'<details class="tm-calc-term" id="{_slug(t.name)}"><summary>{escape(t.name)}{value}'
            f'</summary><p class="tm-calc-formula"><code>{escape(t.name)} = {escape(t.formula)}</code>'
            f'</p>{"<dl>" + inputs + "</dl>" if inputs else ""}<p><code>{escape(t.arithmetic)}'
            f'</code></p>{note}<p>Source: {escape(t.source)}. Explained in '
            f'<a href="{escape(t.link)}">{escape(_page_title(t.link))}</a>.</p></details>')
    return "".join(out)


_TITLES = {"memory-math": "Memory math for training", "zero-fsdp": "ZeRO and FSDP",
           "distributed-training": "Distributed training", "how-we-know": "How we know",
           "cli": "Command line", "post-training": "Memory of post-training"}


def _page_title(link: str) -> str:
    return _TITLES.get(link.split(".html")[0], link)


def render_estimate(est: Estimate, suggestions: Suggestions | None = None) -> str:
    """The HTML the calculator shows for an estimate: what the command's table shows, a stacked
    bar of what is alive at the peak, and the arithmetic of each figure
    (:func:`trainmath.report.terms.explain`), from the :class:`~trainmath.runs.estimates.Estimate`
    itself and its JSON (:func:`trainmath.report.data.estimate_dict`); with ``suggestions``
    (``--suggest``), what to change after the verdict (:func:`render_suggestions`)."""
    data = estimate_dict(est)
    inputs, per = data["inputs"], data["per_device"]
    name = inputs["model"] or "--params"
    what = (f"recipe {escape(inputs['recipe'])}, {escape(inputs['optimizer'])} "
            f"({escape(inputs['optimizer_impl'])} step), ZeRO stage {inputs['zero']}")
    if inputs["adapter"] is not None:  # what is trained and what is frozen
        what = (f"fine-tuned: {escape(inputs['adapter']['headline'])} "
                f"({escape(inputs['optimizer_impl'])} step)")
    head = (f"<p><strong>{escape(name)}</strong>: {data['params']:,} parameters, {what}; "
            f"{escape(est.run.layout.describe())}.</p>")
    said = assumed(est)
    if said:
        head += f"<p>{escape(said[0].upper() + said[1:])}.</p>"
    t = est.run.training
    if inputs["seq_len"] is not None and inputs["shape"] is not None:
        kernel = "" if t.mlp_kernel == "eager" else f", {t.mlp_kernel} MLP"
        head += (f"<p>Activations: s = {inputs['seq_len']}, b = {inputs['micro_batch']}, "
                 f"recompute {escape(est.checkpointing.describe())}, "
                 f"{escape(t.implementation)} kernels "
                 f"({escape(t.attention)} attention{escape(kernel)}){escape(techniques(est))}."
                 "</p>")
    if data["microbatches"] is not None:
        head += f"<p>Pipeline: {escape(pipeline_words(est))}.</p>"
    where = ""
    if inputs["pp"] > 1:
        where = f" (pipeline stage {data['pipeline_stage']}, the fullest)"
    rows = []
    for key, n in per.items():  # every kind the command reports, in its order
        label = escape(key.replace("_", " "))
        if n is None:
            why = "needs a model shape" if inputs["shape"] is None else "needs --seq-len"
            rows.append(f'<tr><th scope="row">{label}</th><td colspan="2">not counted ({why})'
                        "</td></tr>")
        else:
            rows.append(f'<tr><th scope="row">{label}</th><td>{_gb(n)}</td><td>{_gib(n)}</td>'
                        "</tr>")
    peak = data["peak"]
    stage = f" on stage {peak['pipeline_stage']}" if inputs["pp"] > 1 else ""
    rows.append(f'<tr class="tm-calc-peak"><th scope="row">peak of a step</th>'
                f'<td>{_gb(peak["bytes"])}</td><td>{_gib(peak["bytes"])}</td></tr>')
    if data["overhead"]:  # what no formula counts, as given (--overhead)
        for label, n in (("overhead", data["overhead"]), ("peak + overhead", data["needed"])):
            rows.append(f'<tr><th scope="row">{label}</th><td>{_gb(n)}</td><td>{_gib(n)}</td>'
                        "</tr>")
    host = data["host"]
    if host["per_device"]:  # offload: CPU memory
        for label, n in (("CPU memory per device", host["per_device"]),
                         ("CPU memory per node", host["per_node"])):
            if n is not None:
                rows.append(f'<tr><th scope="row">{label}</th><td>{_gb(n)}</td>'
                            f"<td>{_gib(n)}</td></tr>")
    table = (f'<table class="tm-calc-table"><caption>Per device{escape(where)}</caption><thead>'
             '<tr><th scope="col">memory</th><th scope="col">GB</th><th scope="col">GiB</th>'
             f'</tr></thead><tbody>{"".join(rows)}</tbody></table>')
    when = (f'<p class="tm-calc-when">The peak comes in the <strong>{escape(peak["phase"])}'
            f'</strong>{escape(stage)}, at {escape(peak["moment"])}.</p>')
    fits = ""
    verdict = fit(est)
    if verdict is not None:
        fits = (f'<p class="tm-calc-fits" data-fits="{str(verdict.fits).lower()}">Fits in '
                f"{escape(verdict.where)}: <strong>{escape(verdict.verdict)}</strong>.</p>")
    if suggestions is not None:
        fits += render_suggestions(suggestions)
    bar = peak_bar(est)
    time = data["time"]
    if time:
        fits += (f"<p>Time to train: <strong>{time['days']:,.1f} days</strong>, "
                 f"{time['gpu_hours']:,.0f} GPU-hours, {time['tokens_per_second']:,.0f} tokens/s "
                 f"({escape(time['peak'])}).</p>")
    terms = _terms_html(explain(est))
    text = escape(render(est, suggestions))  # the command's own table, as a terminal shows it
    return (f"{warnings_html(est.run.warnings)}{head}{table}{when}{fits}<h3>At the peak</h3>{bar}"
            f'<h3>Show the arithmetic</h3><div class="tm-calc-terms">{terms}</div>'
            f'<details class="tm-calc-text-box"><summary>What <code>trainmath estimate</code> '
            f'prints (without <code>--json</code>)</summary><pre class="tm-calc-text" '
            f'tabindex="0">{text}</pre></details>')


def render_suggestions(s: Suggestions) -> str:
    """``--suggest`` as HTML: the ranked changes that make the run fit (a list: each its flags,
    what it does, its memory and cost, :func:`trainmath.report.facts.change_words`), or the room
    a run that fits has to spare and what it could buy."""
    if s.fits:
        return (f'<div class="tm-calc-suggest"><h3>Room to spare</h3><p>'
                f"{escape(headroom_words(s.headroom, s.estimate))}.</p></div>")
    if not s.changes:
        return ('<div class="tm-calc-suggest"><h3>What to change</h3><p>No change of one or two '
                "levers makes it fit; the planner (Which layout?) ranks every layout of a GPU "
                "count.</p></div>")
    items = "".join(
        f"<li><code>{escape(c.flags)}</code>"
        + ("" if c.keeps else " <em>(changes what a step trains)</em>")
        + f": {escape(c.words)}.<br>{escape(change_words(c))}.</li>" for c in s.changes[:SHOWN])
    if len(s.changes) > SHOWN:
        items += f"<li>and {len(s.changes) - SHOWN} more, which the JSON lists</li>"
    return (f'<div class="tm-calc-suggest"><h3>What to change</h3><p>The smallest setting of '
            "each lever that makes it fit, or of two together where neither does alone; ranked: "
            f"{escape(s.ranking)}.</p><ol>{items}</ol></div>")


def warnings_html(warnings) -> str:
    """A run's or a plan's warnings (accepted, worth saying), beside the figures they are about."""
    if not warnings:
        return ""
    items = "".join(f"<li>{escape(w)}</li>" for w in warnings)
    return (f'<div class="tm-calc-warnings" role="note"><p><strong>Check these inputs</strong>'
            f"</p><ul>{items}</ul></div>")


#: The plan table's columns: (heading, what it says), in the command's order.
_PLAN_COLUMNS = (("rank", "rank"), ("layout", "dp × tp × pp × cp"), ("v", "chunks per device"),
                 ("schedule", "pipeline schedule"), ("cp by", "context-parallel kind"),
                 ("ZeRO", "ZeRO stage"), ("recompute", "recompute"), ("b", "micro-batch"),
                 ("GPU GB", "on the GPU"), ("step s", "step time"), ("MFU", "MFU"),
                 ("tokens/s", "tokens per second"), ("limited by", "limited by"))


def _plan_row(p: Plan, c) -> str:
    lay = c.layout
    rank = "you" if c is p.user and c.rank is None else str(c.rank)
    split = f"{lay.dp} × {lay.tp} × {lay.pp} × {lay.cp}"
    if p.model.experts > 1:
        split += f", ep {lay.ep}, etp {lay.expert_tp}"
    limit = "does not fit" if c.status != "kept" else ("" if c.time is None else c.time.limit)
    cells = (rank, split, str(lay.v), "-" if lay.pp == 1 else lay.schedule,
             "-" if lay.cp == 1 else lay.cp_kind, str(c.zero_stage), c.recompute, str(c.micro_batch),
             "-" if c.process is None else f"{c.process.to('GB'):.1f}",
             "-" if c.time is None else f"{c.time.total:.2f}",
             "-" if c.mfu is None else f"{c.mfu:.1%}",
             "-" if c.tokens_per_second is None else f"{c.tokens_per_second:,.0f}", limit)
    out = []
    for (head, words), cell in zip(_PLAN_COLUMNS, cells):
        tag = 'th scope="row"' if head == "rank" else "td"
        out.append(f'<{tag} data-label="{escape(words)}">{escape(cell)}</{tag.split()[0]}>')
    best = ' class="tm-calc-best"' if c.rank == 1 else ""
    return f'<tr{best}>{"".join(out)}</tr>'


def render_plan_page(p: Plan, top: int = 10, explain: bool = False) -> str:
    """The HTML the calculator shows for a plan: the fastest layouts that fit as a table (each
    row a card on a phone), why the fastest wins (:func:`trainmath.report.text.plan_reasons`),
    and the command's own text (:func:`trainmath.report.text.render_plan`) of the same plan."""
    t = p.training
    head = (f"<p><strong>{escape(p.model.name)}</strong> on {p.gpus:,} {escape(p.gpu)} GPUs "
            f"({p.node_gpus} per node), s = {p.seq_len}, {p.global_batch} sequences per step, "
            f"recipe {escape(t.recipe)}: {len(p.candidates):,} layouts considered, "
            f"{len(p.ranking):,} fit.</p>")
    rows = list(p.ranking[:top])
    if p.user is not None and all(c.grid != p.user.grid or c.rank is None for c in rows):
        rows.append(p.user)
    heads = "".join(f'<th scope="col">{escape(h)}</th>' for h, _ in _PLAN_COLUMNS)
    table = (f'<div class="tm-calc-plan-box" tabindex="0" role="region" '
             f'aria-label="the fastest layouts"><table class="tm-calc-table tm-calc-plan">'
             f"<caption>The fastest layouts that fit, by predicted step time</caption>"
             f'<thead><tr>{heads}</tr></thead><tbody>{"".join(_plan_row(p, c) for c in rows)}'
             "</tbody></table></div>")
    reasons = plan_reasons(p, top)
    why = (f'<h3>Why the fastest wins</h3><p>{escape(reasons[0][0].upper() + reasons[0][1:])}.'
           f'</p><ul class="tm-calc-reasons">'
           + "".join(f"<li>{escape(r)}</li>" for r in reasons[1:]) + "</ul>")
    if p.user is not None:
        why += f"<p>{escape(p.user.reason)}</p>"
    text = escape(render_plan(p, top, explain))
    return (f"{warnings_html(p.warnings)}{head}{table}{why}"
            f'<details class="tm-calc-text-box"><summary>What <code>trainmath plan</code> prints '
            f'(without <code>--json</code>)</summary><pre class="tm-calc-text" tabindex="0">'
            f"{text}</pre></details>")


def summarize_estimate(est: Estimate) -> str:
    """One line of an estimate, for the bar that stays in view while the form is edited: the
    step's peak per device, its phase, and whether it fits.

    >>> from trainmath.runs.description import run
    >>> from trainmath.runs.estimates import estimate
    >>> summarize_estimate(estimate(run("llama-3-8b", seq_len=8192, dp=8, zero_stage=3, gpu="h100-sxm")))
    'Peak of a step: 72.35 GB per device (backward); fits'
    """
    top = est.peak.peak
    text = f"Peak of a step: {whole(top.total).format('GB', 2)} per device ({top.phase})"
    if est.fits is not None:
        text += "; fits" if est.fits else "; does not fit"
    return text


def summarize_plan(p: Plan) -> str:
    """One line of a plan: the fastest layout that fits, its step time and MFU, in the words
    ``"Fastest of N that fit (M considered): dp … × cp …, ZeRO-z, T s a step, MFU x%"``."""
    best = p.best
    return (f"Fastest of {len(p.ranking)} that fit ({len(p.candidates)} considered): "
            f"{best.describe().split(', ZeRO')[0]}, "
            f"ZeRO-{best.zero_stage}, {best.time.total:.2f} s a step, MFU {best.mfu:.1%}")


def _binary(b: Bytes) -> str:
    return b.format("MiB", 2) if b.n < 2**30 else b.format("GiB", 2)


def render_check_page(dg) -> str:
    """The HTML the calculator shows for a check: the out-of-memory message read, each reading
    against its predicted band (a table), the likely causes in order, the rest no cause
    explains, the estimate's verdict, and the command's own report
    (:func:`trainmath.report.text.render_check`) of the same diagnosis."""
    est = dg.estimate
    shape = est.run.shape
    name = "--params" if shape is None else shape.name
    out = [f"<p><strong>{escape(name)}</strong>: {est.params:,} parameters, recipe "
           f"{escape(est.run.training.recipe)}, {escape(est.run.layout.describe())}.</p>"]
    if dg.oom is not None:
        o = dg.oom
        out.append(f'<p>Out of memory on GPU {o.gpu_index} ({escape(o.form)} wording): tried to '
                   f"allocate {_binary(o.requested)} of {_binary(o.capacity)}, "
                   f"{_binary(o.free)} free; allocated {_binary(o.allocated)}, reserved but "
                   f"unallocated {_binary(o.reserved_unallocated)}"
                   + ("" if o.process is None else f", this process {_binary(o.process)}")
                   + ".</p>")
        out.append(f'<p class="tm-calc-fits" data-fits="{str(not o.fragmentation).lower()}">'
                   "Fragmentation: <strong>"
                   + ("yes</strong>: the reserved but unallocated memory alone would have held "
                      "the request." if o.fragmentation else
                      "no</strong>: the request was larger than the reserved but unallocated "
                      "memory.") + "</p>")
    rows = "".join(
        f'<tr><th scope="row">{escape(c.counter)}</th><td>{c.measured.format("GB", 2)}</td>'
        f'<td class="tm-calc-band">{c.predicted.typical.format("GB", 1)} '
        f"({c.predicted.low.format('GB', 1)}–{c.predicted.high.format('GB', 1)})</td><td>"
        + ("within" if c.within else ("above" if c.gap > 0 else "below")) + "</td></tr>"
        for c in dg.comparisons)
    out.append('<table class="tm-calc-table tm-calc-readings"><caption>Measured against predicted (GB = 10^9 '
               'bytes)</caption><thead><tr><th scope="col">counter</th><th scope="col">measured'
               '</th><th scope="col">predicted (band)</th><th scope="col">verdict</th></tr>'
               f"</thead><tbody>{rows}</tbody></table>")
    if dg.causes:
        items = "".join(f"<li><strong>{escape(c.name)}</strong>: {escape(c.figure)}</li>"
                        for c in dg.causes)
        out.append(f"<h3>Likely causes, most likely first</h3><ol>{items}</ol>")
    elif all(c.within for c in dg.comparisons):
        out.append("<p>Every reading is within its predicted band.</p>")
    if dg.unexplained is not None:
        out.append("<p>" + (f"Beyond the band and not explained by these: <strong>"
                            f"{dg.unexplained.format('GB', 2)}</strong>." if dg.unexplained.n
                            else "The causes named could account for all of it beyond the band.")
                   + "</p>")
    verdict = fit(est)
    if verdict is not None:
        out.append(f"<p>The estimate for {escape(verdict.where)}: <strong>"
                   f"{escape(verdict.verdict)}</strong>.</p>")
    return ("".join(out) + '<details class="tm-calc-text-box"><summary>What <code>trainmath '
            'check</code> prints (without <code>--json</code>)</summary><pre class="tm-calc-text"'
            f' tabindex="0">{escape(render_check(dg))}</pre></details>')


def summarize_check(dg) -> str:
    """One line of a check: how many readings fall in their predicted bands, and the first
    likely cause."""
    inside = sum(c.within for c in dg.comparisons)
    text = f"{inside} of {len(dg.comparisons)} readings within the predicted band"
    if dg.causes:
        text += f"; most likely: {dg.causes[0].name}"
    return text
