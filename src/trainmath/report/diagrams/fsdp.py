"""ZeRO-3 and FSDP drawn: one micro-batch's timeline of gathers, compute and reduce-scatters
with the prefetch, and the gathered units a device holds at the step's peak.

The timeline's seconds are :func:`trainmath.time.step.zero3_micro`'s, the pieces the step-time
model adds up (FSDP's prefetch of one unit, Zhao et al. 2023, §3.3; the module docstring of
:mod:`trainmath.time.step` states the overlap it assumes), so its exposed total is the
estimate's ``dp`` seconds for such a run. The gathered units are the estimate's own
(:class:`trainmath.memory.peak.GatheredUnits`, ``Estimate.gathered``).

>>> from trainmath.runs.description import run
>>> r = run("llama-2-7b", dp=8, zero_stage=3, seq_len=4096, global_batch=8, gpu="h100-sxm",
...         recipe="fsdp2")
>>> d = prefetch_timeline(micro_of(r))
>>> [lab.text for lab in d.numbers if lab.text.startswith(("exposed", "hidden"))]
['exposed: 6.8 ms', 'hidden: 125 ms']
"""

from __future__ import annotations

from ...runs.description import Run
from ...runs.estimates import Estimate, estimate
from ...time.step import Zero3Micro, zero3_micro
from ...units import Bytes
from . import Diagram, Label
from .collectives import milliseconds


def micro_of(r: Run) -> Zero3Micro:
    """:func:`trainmath.time.step.zero3_micro` for run ``r`` with the links and overlap its
    estimate uses."""
    step = estimate(r).step
    if step is None:
        raise ValueError("the run needs a shape, a sequence, a global batch and a GPU to be timed")
    t = r.training
    return zero3_micro(r.shape, r.layout, seq_len=r.batch.seq_len,
                       micro_batch=r.batch.micro_batch, recompute=t.recompute, recipe=t.recipe,
                       implementation=t.implementation, fabric=step.fabric,
                       overlap=step.timing.overlap, kernel=step.timing.kernel,
                       sustained=step.timing.sustained)


def prefetch_timeline(z: Zero3Micro, drawn: int = 3) -> Diagram:
    """One ZeRO-3 micro-batch on two lanes, compute and the data-parallel network, to scale,
    with ``drawn`` layers of each pass (the others repeat them): the root's and the first
    layer's gathers wait; each later gather runs under the layer before it (FSDP's forward
    prefetch); in the backward the next gather and this layer's reduce-scatter share the
    window of a layer's backward; the last reduce-scatters wait. Labels: one layer's seconds of
    each, and the micro-batch's exposed and hidden network seconds (:class:`~trainmath.time.step.Zero3Micro`)."""
    f_win = max(z.forward, z.gather)
    b_win = max(z.backward, z.gather + z.reduce)
    head = z.root_gather + z.gather
    tail = z.reduce + z.root_reduce
    span = head + drawn * f_win + drawn * b_win + tail
    left, width = 74, 420 - 74 - 8
    gap = 14  # units between the passes (the layers not drawn)
    scale = (width - gap) / span
    d = Diagram("One ZeRO-3 micro-batch: gathers under compute", width=420, height=210,
                alt=(f"Compute and network lanes for one micro-batch of {z.layers} layers. A "
                     f"layer's forward takes {milliseconds(z.forward)} and its gather "
                     f"{milliseconds(z.gather)}; its backward {milliseconds(z.backward)} and "
                     f"the gather plus reduce-scatter {milliseconds(z.gather + z.reduce)}. "
                     f"The first gathers and the last reduce-scatters wait: "
                     f"{milliseconds(z.exposed)} exposed, {milliseconds(z.hidden)} hidden "
                     f"under compute."))
    yc, yn, h = 40, 78, 24
    d.text(8, yc + h / 2, "compute", anchor="start", size=12, weight="bold")
    d.text(8, yn + h / 2, "network", anchor="start", size=12, weight="bold")
    d.text(left, 18, "forward", anchor="start", size=12)
    x = left
    d.rect(x, yn, z.root_gather * scale, h, "purple", rounded=0)
    x += z.root_gather * scale
    d.rect(x, yn, z.gather * scale, h, "orange", rounded=0)
    x += z.gather * scale
    for i in range(drawn):
        d.rect(x, yc, z.forward * scale - 1, h, "blue", rounded=0)
        d.rect(x, yn, z.gather * scale - 1, h, "orange", rounded=0)  # the next layer's
        x += f_win * scale
    x += gap
    d.line(x - gap + 3, yc + h / 2, x - 3, yc + h / 2, dashed=True)
    d.text(x, 18, "backward", anchor="start", size=12)
    for i in range(drawn):
        d.rect(x, yc, z.backward * scale - 1, h, "light blue", rounded=0)
        d.rect(x, yn, z.gather * scale, h, "orange", rounded=0)
        d.rect(x + z.gather * scale, yn, z.reduce * scale - 1, h, "green", rounded=0)
        x += b_win * scale
    d.rect(x, yn, z.reduce * scale, h, "green", rounded=0)
    d.rect(x + z.reduce * scale, yn, z.root_reduce * scale, h, "purple", rounded=0)
    y = 126
    items = (("blue", Label(f"forward {milliseconds(z.forward)}", z.forward,
                            claim=milliseconds(z.forward))),
             ("light blue", Label(f"backward {milliseconds(z.backward)}", z.backward,
                                  claim=milliseconds(z.backward))),
             ("orange", Label(f"gather {milliseconds(z.gather)}", z.gather,
                              claim=milliseconds(z.gather))),
             ("green", Label(f"reduce-scatter {milliseconds(z.reduce)}", z.reduce,
                             claim=milliseconds(z.reduce))))
    for k, (fill, lab) in enumerate(items):
        cx, cy = 8 + (k % 2) * 206, y + (k // 2) * 20
        d.rect(cx, cy - 6, 12, 12, fill)
        d.text(cx + 16, cy, lab, anchor="start", size=12)
    d.rect(8, y + 34, 12, 12, "purple")
    d.text(24, y + 40, "root: embedding, LM head", anchor="start", size=12)
    d.text(8, y + 66, Label(f"exposed: {milliseconds(z.exposed)}", z.exposed,
                            claim=milliseconds(z.exposed)), anchor="start", weight="bold")
    d.text(214, y + 66, Label(f"hidden: {milliseconds(z.hidden)}", z.hidden,
                              claim=milliseconds(z.hidden)), anchor="start")
    return d


def gathered_at_peak(est: Estimate) -> Diagram:
    """What a ZeRO-3/FSDP device holds unsharded in the backward (``est.gathered``, the
    estimate's :class:`~trainmath.memory.peak.GatheredUnits`) beside its sharded state: the
    layer computing and the ones prefetched, the layer's gradients and reduce-scatter input,
    and FSDP2's root unit with the LM head's gradients, each a box to scale."""
    g = est.gathered
    if g is None:
        raise ValueError("gathered_at_peak draws a ZeRO-3 run (zero_stage=3)")
    dev = est.device
    state = dev.weights + dev.gradients + dev.master_weights + dev.optimizer_states
    parts = [("layer computing", g.layer, "blue"),
             *[("next layer, prefetched", g.layer, "light blue")] * g.prefetch,
             ("its gradients", g.layer_grads, "orange"),
             ("reduce-scatter input", g.layer_reduce, "red")]
    if g.root.n:
        parts += [("root: embedding, LM head", g.root, "purple"),
                  ("LM head's gradients", g.root_head_grads, "gray")]
    total = sum((b for _, b, _ in parts), Bytes(0))
    top, row = 34, 22
    height = top + len(parts) * row + 34
    widest = max(b.n for _, b, _ in parts)
    d = Diagram("What ZeRO-3 holds gathered in the backward", width=420, height=height,
                alt=("Unsharded on one device while a layer's backward runs: "
                     + ", ".join(f"{name} {b.format('GB', 2)}" for name, b, _ in parts)
                     + f"; {total.format('GB', 2)} in all beside {state.format('GB', 1)} of "
                       "sharded state."))
    d.text(8, 14, "gathered, unsharded", anchor="start", size=12, weight="bold")
    y = top
    for name, b, fill in parts:
        d.rect(8, y, max(3.0, 70 * b.n / widest), row - 3, fill, rounded=0)
        d.text(86, y + (row - 3) / 2, Label(f"{name} {b.format('GB', 2)}", b,
                                            claim=b.format("GB", 2)), anchor="start", size=12)
        y += row
    d.text(8, y + 12, Label(f"in all {total.format('GB', 2)}", total,
                            claim=total.format("GB", 2)), anchor="start", weight="bold", size=12)
    d.text(186, y + 12, Label(f"sharded state {state.format('GB', 1)}", state,
                              claim=state.format("GB", 1)), anchor="start", size=12)
    return d
