"""Where a step's time goes, drawn from the step-time model: one bar of its parts, and which
communication runs under the compute and which waits.

The parts are :class:`trainmath.time.step.StepTime`'s (GEMMs, attention, memory-bound work,
the optimizer, the bubble, and the traffic compute does not hide) for a run as
``trainmath.runs.estimates.estimate`` times it. Its overlap rules are the model's
(:class:`trainmath.time.step.Overlap`): tensor-parallel collectives wait between a layer's
GEMMs unless Transformer Engine overlaps them; the data-parallel reduction runs in buckets
under the last micro-batch's backward (Megatron-Core's ``--overlap-grad-reduce``) and the weight
gather under the next forward (``--overlap-param-gather``), only their tails exposed.
:func:`layer_of` gives one layer's :class:`trainmath.time.layer.LayerWork` on the run's device,
built as the step-time model builds it.

>>> from trainmath.report.running_example import example_estimate, example_run
>>> d = step_diagram(example_estimate().step.time)
>>> d.numbers[1].text
'GEMMs 13.1 s'
>>> [g[0] for g in layer_of(example_run()).gemms]
['qkv', 'attention out', 'mlp up', 'mlp down']
"""

from __future__ import annotations

from ...memory.kernels import implementation
from ...memory.recipes import peak_precision, recipe
from ...runs.description import Run
from ...time.layer import Device, LayerWork, layer_work
from ...time.step import StepTime, attention_kernel
from . import Diagram, Label


def layer_of(run: Run) -> LayerWork:
    """One layer's work for one micro-batch on one GPU of ``run`` (a dense model), on the
    device the step-time model times (:func:`trainmath.time.step.step_time`)."""
    t, lay, b = run.training, run.layout, run.batch
    shape = run.model
    if shape.moe:
        raise ValueError("layer_of times a dense layer; a mixture's layers differ by kind")
    g = run.gpu.kind
    device = Device(g, peak_precision(recipe(t.recipe)), attention_kernel(t.implementation, g,
                                                                          run.timing.kernel),
                    implementation(t.implementation).family, run.timing.share(g))
    s = b.seq_len
    return layer_work(shape, tokens=b.micro_batch * s // lay.cp, batch=b.micro_batch,
                      seq_q=s // lay.cp, seq_kv=s, tp=lay.tp, ep=lay.ep,
                      sequence_parallel=lay.sequence_parallel, recompute=t.recompute,
                      device=device)


_COLOURS = {"GEMMs": "blue", "attention": "light blue", "memory-bound": "green",
            "optimizer": "gray", "bubble": "light gray", "tp comm": "red", "cp comm": "purple",
            "pp comm": "orange", "dp comm": "purple", "ep comm": "red"}
_WHY = {"GEMMs": "the matrix multiplies", "attention": "FlashAttention's core",
        "memory-bound": "norms, activations, adds", "optimizer": "the update",
        "bubble": "pipeline fill and drain", "tp comm": "waits between GEMMs",
        "cp comm": "exposed ring", "pp comm": "sends between stages",
        "dp comm": "tail not under backward", "ep comm": "all-to-alls"}


def _s(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 1 else (
        f"{seconds:.2f} s" if seconds >= 0.01 else f"{seconds * 1e3:.1f} ms")


def step_diagram(step: StepTime, *, dp_traffic: float | None = None) -> Diagram:
    """``step``'s parts as one bar and a key of seconds and shares; with ``dp_traffic`` (the
    seconds the data-parallel collectives take in all) a second bar shows how much of it the
    backward hides (module docstring)."""
    parts = {k: v for k, v in step.parts().items() if v > 0}
    total = step.total
    rows = len(parts)
    extra = 56 if dp_traffic is not None else 0
    d = Diagram("Where a step's time goes", height=58 + rows * 20 + extra,
                alt=f"One step of {_s(total)}, by part: "
                    + "; ".join(f"{k} {_s(v)} ({v / total:.0%})" for k, v in parts.items())
                    + (f". The data-parallel traffic takes {_s(dp_traffic)} but only "
                       f"{_s(step.dp)} of it waits; the rest runs under the backward."
                       if dp_traffic is not None else "."))
    x0, width = 4, 412
    x = x0
    d.text(4, 10, Label(f"one step: {_s(total)}", total, claim=_s(total)), anchor="start",
           weight="bold")
    for k, v in parts.items():
        w = v / total * width
        d.rect(x, 22, max(w, 0.5), 24, _COLOURS[k], rounded=0)
        x += w
    y = 60
    for k, v in parts.items():
        d.rect(4, y - 6, 12, 12, _COLOURS[k], rounded=1)
        d.text(22, y, Label(f"{k} {_s(v)}", v, claim=_s(v)), anchor="start")
        if v / total >= 0.0005:  # a share that rounds to 0.0% is not shown
            share = f"{v / total:.0%}" if v / total >= 0.005 else f"{v / total:.1%}"
            d.text(196, y, Label(share, v / total), anchor="end")
        d.text(206, y, _WHY[k], anchor="start", size=12)
        y += 20
    if dp_traffic is not None:
        hidden = max(0.0, dp_traffic - step.dp)
        y += 4
        d.text(4, y, Label(f"dp traffic {_s(dp_traffic)} in all:", dp_traffic,
                           claim=_s(dp_traffic)), anchor="start")
        d.text(4, y + 18, Label(f"{_s(hidden)} under the backward,", hidden, claim=_s(hidden)),
               anchor="start")
        d.text(200, y + 18, Label(f"{_s(step.dp)} exposed", step.dp, claim=_s(step.dp)),
               anchor="start")
        d.text(4, y + 36, "tp comm: every layer's collectives wait, no overlap",
               anchor="start", size=12)
    return d
