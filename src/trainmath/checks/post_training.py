"""Published post-training runs, held against the post-training estimate.

``docs/_data/post-training-runs.json`` records runs that TRL, verl, open-r1 and Unsloth
published, each with its source, its configuration as the source gives it and what the source
leaves unstated (``assumed``). Each row becomes a :class:`~trainmath.runs.description.Run` of the
policy and a :class:`~trainmath.runs.post_training.PostTraining` (:func:`published`), and its
published figure is compared with the estimate (:func:`compare`):

- ``runs``: the run ran on its GPUs. The estimate agrees when its largest phase fits each GPU;
  with ``fewest`` (a source's minimum-resource tag) it must also not fit on half as many GPUs;
- ``peak``: a memory reading per GPU, within the row's tolerance; a figure printed "GB" is read
  both as 10^9 and as 2^30 bytes, and the row says which one agrees;
- ``parts``: a breakdown, part by part, each read both ways.

The file is data read by the caller: this module does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..memory.finetune import ALL_LINEAR, Adapter
from ..memory.post_training import logprob_pass
from ..memory.rollout import Engine
from ..runs.description import Run, run as make_run
from ..runs.post_training import PostTraining, PostTrainingEstimate, post_training_estimate
from ..units import GB, GiB, Bytes


@dataclass(frozen=True)
class PublishedPostTraining:
    """One published run in the library's vocabulary, with its row."""

    id: str
    row: dict
    run: Run
    post: PostTraining

    @property
    def source(self) -> str:
        """Where the run was published, in words."""
        return self.row["source"]

    @property
    def url(self) -> str:
        """The published source's address."""
        return self.row["url"]


def _adapter(spec: dict | None) -> Adapter | None:
    if spec is None:
        return None
    targets = ALL_LINEAR if spec["targets"] == "all" else tuple(spec["targets"])
    return Adapter(spec["method"], spec["rank"], targets)


def published(data: dict) -> tuple[PublishedPostTraining, ...]:
    """Every row of the file's ``runs``, as a policy's run and a post-training setup."""
    out = []
    for row in data["runs"]:
        kwargs = dict(row["run"])
        policy = make_run(row["model"], adapter=_adapter(row.get("adapter")), **kwargs)
        engine = Engine(**row["engine"]) if "engine" in row else Engine()
        post = PostTraining(engine=engine, **row["post"])
        out.append(PublishedPostTraining(row["id"], row, policy, post))
    return tuple(out)


@dataclass(frozen=True)
class Part:
    """One published figure against the estimate's: ``unit`` the reading that agrees (or the
    nearer one), ``error`` the estimate's relative error under it."""

    name: str
    printed: str
    published: Bytes
    predicted: Bytes
    unit: str
    error: float
    ok: bool


@dataclass(frozen=True)
class Comparison:
    """One published run against its estimate: the figures compared and whether all agree."""

    run: PublishedPostTraining
    estimate: PostTrainingEstimate
    kind: str
    published: str
    predicted: str
    ok: bool
    parts: tuple[Part, ...] = ()
    #: "runs" and "peak" rows: the longest sequence (prompt and response scaled together) whose
    #: estimate fits every GPU, or (a peak) stays within the reading; None when none does
    longest: int | None = None

    def describe(self) -> str:
        """One line naming the run, what was published and what the estimate gives."""
        return (f"{self.run.id}: published {self.published}; trainmath {self.predicted}: "
                + ("agrees" if self.ok else "disagrees"))


def _reading(name: str, value: float, unit: str, predicted: Bytes, tolerance: float) -> Part:
    """A printed figure read as GB and, when printed "GB", as GiB too: the reading nearer the
    estimate is kept and named."""
    readings = [("GB", Bytes(round(value * GB)))] if unit == "GB" else []
    readings.append(("GiB", Bytes(round(value * GiB))))
    if unit not in ("GB", "GiB"):
        raise ValueError(f"unit {unit!r} of {name!r}; accepted: GB, GiB")
    best = None
    for u, amount in readings:
        err = float((predicted.n - amount.n) / amount.n)
        if best is None or abs(err) < abs(best[2]):
            best = (u, amount, err)
    u, amount, err = best
    return Part(name, f"{value:g} {unit}", amount, predicted, u, err, abs(err) <= tolerance)


def _predicted_parts(e: PostTrainingEstimate, names) -> dict[str, Bytes]:
    """The estimate's figure for each published part."""
    g, p = e.engine, e.post
    found = {}
    for name in names:
        if name == "engine weights":
            found[name] = g.weights
        elif name == "KV cache of one sequence":
            found[name] = g.kv.per_token * p.seq_len
        elif name == "fp32 logits of the group":
            found[name] = logprob_pass(e.run.shape, seq_len=p.seq_len,
                                       micro_batch=p.generations).upcast
        else:
            raise ValueError(f"unknown published part {name!r}; accepted: engine weights, KV "
                             "cache of one sequence, fp32 logits of the group")
    return found


#: A published part agrees within this share (each is one product of stated sizes).
PART_TOLERANCE = 0.02


def compare(r: PublishedPostTraining) -> Comparison:
    """The run's published figure against its estimate (module docstring)."""
    e = post_training_estimate(r.run, r.post)
    pub = r.row["published"]
    kind = pub["kind"]
    groups = e.groups
    peak = {g: e.peak(g) for g in groups}
    said = "; ".join(f"{g} GPU: {peak[g].name} {peak[g].total.format('GB', 2)}" for g in groups)
    if kind == "runs":
        ok = all(e.fits(g) for g in groups)
        words = f"ran on {pub['gpus']} GPU{'s' if pub['gpus'] > 1 else ''}"
        predicted = said + ("; fits" if ok else "; does not fit")
        if pub.get("fewest"):
            half = _on_fewer(r)
            words += " (the fewest)"
            fits_half = all(half.fits(g) for g in half.groups)
            predicted += f"; on {half.run.layout.gpus}: " + ("fits" if fits_half else "does not fit")
            ok = ok and not fits_half
        return Comparison(r, e, kind, words, predicted, ok, longest=longest_fitting(r))
    if kind == "peak":
        top = peak["trainer"]
        part = _reading("peak", pub["amount"], pub["unit"], top.total, pub["tolerance"])
        return Comparison(r, e, kind, f"peak {part.printed}",
                          f"{top.name} {top.total.format('GB', 2)} "
                          f"({part.error:+.1%} of the {part.unit} reading)", part.ok, (part,),
                          longest=longest_fitting(r, part.published))
    if kind == "parts":
        predicted = _predicted_parts(e, pub["parts"])
        parts = tuple(_reading(k, v, pub["unit"], predicted[k], PART_TOLERANCE)
                      for k, v in pub["parts"].items())
        return Comparison(r, e, kind, ", ".join(f"{p.name} {p.printed}" for p in parts),
                          ", ".join(f"{p.name} {p.predicted.format(p.unit, 2)}" for p in parts),
                          all(p.ok for p in parts), parts)
    raise ValueError(f"unknown published kind {kind!r} of {r.id}; accepted: runs, peak, parts")


def _on_fewer(r: PublishedPostTraining) -> PostTrainingEstimate:
    """The same run on half as many GPUs (dp halved; a colocated engine's tp at most that)."""
    lay = r.run.layout
    if lay.dp < 2:
        raise ValueError(f"{r.id}: 'fewest' needs dp of 2 or more to halve, got dp {lay.dp}")
    policy = replace(r.run, layout=replace(lay, dp=lay.dp // 2))
    engine = r.post.engine
    gpus = policy.layout.gpus
    if r.post.placement == "colocated" and engine.tp > gpus:
        engine = replace(engine, tp=gpus)
    return post_training_estimate(policy, replace(r.post, engine=engine))


def _at(r: PublishedPostTraining, seq_len: int) -> PostTrainingEstimate:
    """The run with its prompt and response scaled to ``seq_len`` tokens in all."""
    p = r.post
    prompt = max(1, round(p.prompt_len * seq_len / p.seq_len))
    post = replace(p, prompt_len=prompt, response_len=max(1, seq_len - prompt))
    return post_training_estimate(r.run, post)


def longest_fitting(r: PublishedPostTraining, reading: Bytes | None = None) -> int | None:
    """The longest sequence, prompt and response scaled together, at which the run fits every
    GPU (``reading`` given: at which the trainer's peak is at most the reading); None when not
    even one token does. Published runs pack or pad to real lengths, which are shorter than
    the configured limits: this says how much shorter the estimate needs them to be."""

    def holds(n: int) -> bool:
        e = _at(r, n)
        if reading is not None:
            return e.peak("trainer").total <= reading
        return all(e.fits(g) for g in e.groups)

    lo, hi = 0, r.post.seq_len
    if holds(hi):
        return hi
    while hi - lo > 1:  # holds(lo) or lo == 0; not holds(hi)
        mid = (lo + hi) // 2
        if mid >= 2 and holds(mid):
            lo = mid
        else:
            hi = mid
    return lo or None
