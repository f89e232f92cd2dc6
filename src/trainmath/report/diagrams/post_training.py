"""Post-training diagrams: each phase of a step as one bar of what it holds on a GPU, against the
GPU's memory.

The bars are :func:`~trainmath.runs.post_training.post_training_estimate`'s phases, part by part
(:class:`~trainmath.runs.post_training.Phase`): the largest bar, not the training step's, decides
whether the run fits.

>>> from trainmath.runs.description import run
>>> from trainmath.runs.post_training import PostTraining, post_training_estimate
>>> e = post_training_estimate(run("qwen2.5-7b", dp=8, zero_stage=3, gpu="h100-sxm",
...                                recompute="full"), PostTraining("grpo"))
>>> d = phases(e)
>>> [x.value for x in d.numbers] == [p.total for p in e.phases] + [e.run.gpu.memory]
True
"""

from __future__ import annotations

from fractions import Fraction

from . import Diagram, Label

#: Each part's fill, by what it is: the trained models' states, frozen weights, the engine, the
#: passes' working sets and the training steps
FILLS = {"policy states": "blue", "policy parameters": "blue", "policy weights": "blue",
         "critic states": "light blue", "critic parameters": "light blue",
         "reference weights": "purple", "reward model weights": "purple",
         "rollout engine, awake": "orange", "rollout engine, asleep": "orange",
         "policy step": "green", "critic step": "green"}
#: The legend: what each fill stands for
LEGEND = (("trained states", "blue"), ("critic's states", "light blue"),
          ("frozen models", "purple"), ("rollout engine", "orange"), ("log-prob pass", "red"),
          ("a training step", "green"))


def _fill(part: str) -> str:
    return FILLS.get(part, "red")  # the no-grad passes: "policy log-prob pass", "reward pass"...


def phases(e, gpus: str = "trainer") -> Diagram:
    """One bar per phase of ``e`` on a GPU of ``gpus``, its parts stacked, to one scale with the
    GPU's memory (a dashed line) when the run names a GPU."""
    mine = [p for p in e.phases if p.gpus == gpus]
    if not mine:
        raise ValueError(f"no phase on the {gpus} GPUs; accepted: "
                         + ", ".join(sorted({p.gpus for p in e.phases})))
    memory = e.run.gpu.memory if e.run.gpu is not None else None
    top = max([p.total.n for p in mine] + ([memory.n] if memory is not None else []))
    x0, span, step = 118, 270, 40
    height = 40 + step * len(mine) + 50
    d = Diagram(f"What each phase of a {e.post.algorithm.upper()} step holds on a {gpus} GPU",
                width=420, height=height,
                alt="; ".join(f"{p.name}: {p.total.format('GB', 1)} ("
                              + ", ".join(f"{k} {v.format('GB', 1)}" for k, v in p.as_dict().items())
                              + ")" for p in mine)
                + (f"; the GPU has {memory.format('GB', 1)}" if memory is not None else ""))
    for i, p in enumerate(mine):
        y = 22 + i * step
        d.text(x0 - 8, y + 21, p.name, anchor="end", size=12)
        x = x0
        for part, b in p.parts:
            w = span * float(Fraction(b.n) / top)
            if w > 0:
                d.rect(x, y + 12, w, 18, _fill(part), rounded=0)
            x += w
        d.text(min(x + 4, 416), y + 4, Label(p.total.format("GB", 1), p.total),
               anchor="end" if x + 4 > 360 else "start", size=12)
    if memory is not None:
        xm = x0 + span * float(Fraction(memory.n) / top)
        d.line(xm, 14, xm, 26 + step * len(mine), dashed=True)
        d.text(xm, 10, Label(f"GPU {memory.format('GB', 1)}", memory,
                             claim=memory.format("GB", 1)), size=11)
    y = 34 + step * len(mine)
    d.legend(14, y, LEGEND, pitch=136)
    return d


__all__ = ["FILLS", "LEGEND", "phases"]
