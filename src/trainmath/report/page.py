"""An estimate as the calculator page draws it: HTML of the per-device table in GB and GiB,
the step's peak, whether it fits, a stacked bar of what is alive at the peak, and each figure's
arithmetic (:mod:`trainmath.report.terms`), with one-line summaries for the bar that stays in
view. Every figure comes from the :class:`~trainmath.runs.estimates.Estimate`; nothing is
computed here.
"""

from __future__ import annotations

import html
import json
import math
import re
from typing import Sequence

from ..cli.command import build_parser, to_run
from .text import render
from ..units import Bytes


# -- output ---------------------------------------------------------------------------------------
#: The colour (a trainmath.report.plots palette name) of each kind alive at the peak.
COLORS = {"parameters": "blue", "weights": "blue", "gradients": "light-blue",
          "master weights": "orange", "optimizer states": "red", "activations": "green",
          "logits": "purple", "gathered parameters": "gray"}


def _gb(n: int) -> str:
    return Bytes(n).format("GB", 2)


def _gib(n: int) -> str:
    return Bytes(n).format("GiB", 2)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _slug(name: str) -> str:
    return "tm-calc-term-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _bar(parts: dict[str, int], capacity: int | None, alt: str) -> str:
    """A stacked bar of what is alive at the peak, widths in % of the larger of the peak and
    the GPU's memory, with the GPU's memory marked."""
    scale = max(sum(parts.values()), capacity or 0) or 1
    segs, keys = [], []
    for name, n in parts.items():
        color = COLORS.get(name, "light-gray")
        width = 100 * n / scale
        segs.append(f'<span class="tm-calc-seg" style="width:{width:.3f}%;'
                    f'background:var(--tm-fig-{color})"></span>')
        keys.append(f'<li><span class="tm-calc-key" style="background:var(--tm-fig-{color})">'
                    f'</span>{_e(name)} {_gb(n)}</li>')
    mark = ""
    if capacity:
        mark = (f'<span class="tm-calc-cap" style="left:{100 * capacity / scale:.3f}%">'
                '</span>')
    return (f'<div class="tm-calc-bar" role="img" aria-label="{_e(alt)}">{"".join(segs)}{mark}'
            f'</div><ul class="tm-calc-legend">{"".join(keys)}'
            + ('<li><span class="tm-calc-key tm-calc-key-cap"></span>the GPU\'s memory</li>'
               if capacity else "") + "</ul>")


def _terms_html(terms) -> str:
    out = []
    for t in terms:
        value = "" if t.value is None else f": {_gb(math.ceil(t.value.n))}"
        inputs = "".join(f"<dt><var>{_e(k)}</var></dt><dd>{_e(v)}</dd>" for k, v in t.inputs)
        note = f"<p>{_e(t.note)}</p>" if t.note else ""
        out.append(
            f'<details class="tm-calc-term" id="{_slug(t.name)}"><summary>{_e(t.name)}{value}'
            f'</summary><p class="tm-calc-formula"><code>{_e(t.name)} = {_e(t.formula)}</code>'
            f'</p>{"<dl>" + inputs + "</dl>" if inputs else ""}<p><code>{_e(t.arithmetic)}'
            f'</code></p>{note}<p>Source: {_e(t.source)}. Explained in '
            f'<a href="{_e(t.link)}">{_e(_page_title(t.link))}</a>.</p></details>')
    return "".join(out)


_TITLES = {"memory-math": "Memory math for training", "zero-fsdp": "ZeRO and FSDP",
           "distributed-training": "Distributed training", "how-we-know": "How we know",
           "cli": "Command line"}


def _page_title(link: str) -> str:
    return _TITLES.get(link.split(".html")[0], link)


def render_estimate(argv: Sequence[str], stdout: str) -> str:
    """The HTML the calculator shows for ``trainmath estimate`` run with ``argv`` (which printed
    ``stdout``, its JSON): what the command's table shows, a stacked bar of the peak, and the
    arithmetic of each figure (:func:`trainmath.report.terms.explain`)."""
    from .terms import explain
    from ..runs.estimates import estimate

    data = json.loads(stdout)
    est = estimate(to_run(build_parser().parse_args(list(argv))))
    inputs, per = data["inputs"], data["per_device"]
    name = inputs["model"] or "--params"
    head = (f"<p><strong>{_e(name)}</strong>: {data['params']:,} parameters, recipe "
            f"{_e(inputs['recipe'])}, {_e(inputs['optimizer'])} ({_e(inputs['optimizer_impl'])} "
            f"step), ZeRO stage {inputs['zero']}; {_e(est.run.layout.describe())}")
    if inputs["assumed"]:
        head += f"; assumed: {_e(', '.join(inputs['assumed']).replace('_', ' '))}"
    head += ".</p>"
    t = est.run.training
    if inputs["seq_len"] is not None and inputs["shape"] is not None:
        kernel = "" if t.mlp_kernel == "eager" else f", {t.mlp_kernel} MLP"
        head += (f"<p>Activations: s = {inputs['seq_len']}, b = {inputs['micro_batch']}, "
                 f"recompute {_e(t.recompute)}, {_e(t.implementation)} kernels ({_e(t.attention)} "
                 f"attention{_e(kernel)}).</p>")
    if data["microbatches"] is not None:
        head += (f"<p>Pipeline: m = {data['microbatches']} micro-batches per step, bubble "
                 f"{data['pipeline_bubble']:.2%} of the ideal step (Narayanan et al. 2021).</p>")
    where = ""
    if inputs["pp"] > 1:
        where = f" (pipeline stage {data['pipeline_stage']}, the fullest)"
    rows = []
    for key, n in per.items():  # every kind the command reports, in its order
        label = key.replace("_", " ")
        link = _e(label)  # its arithmetic follows the table
        if n is None:
            why = "needs a model shape" if inputs["shape"] is None else "needs --seq-len"
            rows.append(f"<tr><th scope=\"row\">{link}</th><td colspan=\"2\">not counted ({why})"
                        "</td></tr>")
        else:
            rows.append(f'<tr><th scope="row">{link}</th><td>{_gb(n)}</td><td>{_gib(n)}</td>'
                        "</tr>")
    peak = data["peak"]
    stage = f" on stage {peak['pipeline_stage']}" if inputs["pp"] > 1 else ""
    rows.append(f'<tr class="tm-calc-peak"><th scope="row">'
                f'peak of a step</th><td>{_gb(peak["bytes"])}</td><td>{_gib(peak["bytes"])}'
                "</td></tr>")
    if data.get("overhead"):  # what no formula counts, as given (--overhead)
        for label, n in (("overhead", data["overhead"]), ("peak + overhead", data["needed"])):
            rows.append(f'<tr><th scope="row">{label}</th><td>{_gb(n)}</td><td>{_gib(n)}</td>'
                        "</tr>")
    host = data.get("host") or {}
    if host.get("per_device"):  # offload: CPU memory
        for label, n in (("CPU memory per device", host["per_device"]),
                         ("CPU memory per node", host.get("per_node"))):
            if n is not None:
                rows.append(f'<tr><th scope="row">{label}</th><td>{_gb(n)}</td>'
                            f"<td>{_gib(n)}</td></tr>")
    table = (f'<table class="tm-calc-table"><caption>Per device{_e(where)}</caption><thead><tr>'
             '<th scope="col">memory</th><th scope="col">GB</th><th scope="col">GiB</th></tr>'
             f'</thead><tbody>{"".join(rows)}</tbody></table>')
    when = (f'<p class="tm-calc-when">The peak comes in the <strong>{_e(peak["phase"])}</strong>'
            f'{_e(stage)}, at {_e(peak["moment"])}.</p>')
    fits = ""
    capacity = inputs["gpu_memory"]
    if data["fits"] is not None:
        gpu = est.run.gpu
        what = (f"one {gpu.name} ({Bytes(capacity).format('MiB', 0)} = {_gb(capacity)}, as "
                "nvidia-smi reports it)" if gpu.kind else _gb(capacity))
        needed = data.get("needed", peak["bytes"])
        at = "the peak" + (" with the overhead" if data.get("overhead") else "")
        if data["fits"]:
            verdict = f"yes, {_gb(capacity - needed)} to spare at {at}"
        else:
            verdict = f"no, {_gb(needed - capacity)} over at {at}"
        fits = (f'<p class="tm-calc-fits" data-fits="{str(data["fits"]).lower()}">Fits in '
                f"{_e(what)}: <strong>{_e(verdict)}</strong>.</p>")
    parts = {k.replace("_", " "): v for k, v in peak["parts"].items()}
    alt = ("What is alive at the peak: " + ", ".join(f"{k} {_gb(v)}" for k, v in parts.items())
           + (f"; the GPU holds {_gb(capacity)}" if capacity else ""))
    bar = _bar(parts, capacity, alt)
    time = data.get("time")
    if time:
        fits += (f"<p>Time to train: <strong>{time['days']:,.1f} days</strong>, "
                 f"{time['gpu_hours']:,.0f} GPU-hours, {time['tokens_per_second']:,.0f} tokens/s "
                 f"({_e(time['peak'])}).</p>")
    terms = _terms_html(explain(est))
    text = _e(render(est))  # the command's own table, as a terminal shows it
    return (f"{head}{table}{when}{fits}<h3>At the peak</h3>{bar}"
            f'<h3>Show the arithmetic</h3><div class="tm-calc-terms">{terms}</div>'
            f'<details class="tm-calc-text-box"><summary>What <code>trainmath estimate</code> '
            f'prints (without <code>--json</code>)</summary><pre class="tm-calc-text" '
            f'tabindex="0">{text}</pre></details>')


def summarize_estimate(stdout: str) -> str:
    """One line of ``trainmath estimate --json``'s output, for the bar that stays in view while
    the form is edited: the step's peak per device, its phase, and whether it fits.

    >>> summarize_estimate('{"peak": {"bytes": 72345575568, "phase": "backward"}, "fits": true}')
    'Peak of a step: 72.35 GB per device (backward); fits'
    """
    d = json.loads(stdout)
    text = (f"Peak of a step: {Bytes(d['peak']['bytes']).format('GB', 2)} per device "
            f"({d['peak']['phase']})")
    if d.get("fits") is not None:
        text += "; fits" if d["fits"] else "; does not fit"
    return text


def summarize_plan(stdout: str) -> str:
    """One line of ``trainmath plan --json``'s output: the fastest layout that fits.

    >>> summarize_plan('{"ranking": [{"dp": 16, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "zero": 2, '
    ...                '"step_seconds": 6.39, "mfu": 0.6}], "candidates": [1, 2]}')
    'Fastest of 1 that fit (2 considered): dp 16 × tp 1 × pp 1 × cp 1, ZeRO-2, 6.39 s a step, MFU 60.0%'
    """
    d = json.loads(stdout)
    best = d["ranking"][0]
    ep = f" (ep {best['ep']})" if best.get("ep", 1) > 1 else ""
    return (f"Fastest of {len(d['ranking'])} that fit ({len(d['candidates'])} considered): "
            f"dp {best['dp']} × tp {best['tp']} × pp {best['pp']} × cp {best['cp']}{ep}, "
            f"ZeRO-{best['zero']}, {best['step_seconds']:.2f} s a step, MFU {best['mfu']:.1%}")
