"""A post-training estimate as ``trainmath estimate --post-training`` prints it, and as JSON: each
phase per device, part by part, the peak and whether it fits, and the rollout engine's memory
with vLLM's own start-up figures (:mod:`trainmath.runs.post_training`, :mod:`trainmath.memory.rollout`).
"""

from __future__ import annotations

import json

from ..runs.post_training import ALGORITHMS, PLACEMENTS, PostTrainingEstimate
from ..units import Bytes
from .data import _whole as _bytes, estimate_dict
from .facts import whole

#: How each reference is described.
REFERENCE_WORDS = {
    "model": "a frozen copy in 16-bit",
    "none": "none (no KL term: TRL's GRPO default, beta 0)",
    "precomputed": "precomputed before training (precompute_ref_log_probs), not loaded",
    "adapter": "the base with the adapter off: no second copy",
}


def _amount(b: Bytes) -> str:
    w = whole(b)
    return f"{w.format('GB', 2):>10} {w.format('GiB', 2):>11}"


def _verdict(e: PostTrainingEstimate, group: str) -> str:
    """Whether the largest phase on ``group``, with the run's overhead, fits: the room to spare
    or how far over, in GB."""
    r = e.run
    need = e.peak(group).total + r.overhead
    if e.fits(group):
        return f"yes, {whole(r.gpu.memory - need).format('GB', 2)} to spare"
    return f"no, {whole(need - r.gpu.memory).format('GB', 2)} over"


def render_post_training(e: PostTrainingEstimate) -> str:
    """The readable report: setup, each phase part by part, the peak and the fit, the engine."""
    p, r, pol = e.post, e.run, e.policy
    t, lay = r.training, r.layout
    name = r.shape.name
    how = "" if e.engine is None else f", {p.placement} ({PLACEMENTS[p.placement]})"
    lines = [f"post-training: {p.algorithm.upper()}{how}",
             f"  models: {ALGORITHMS[p.algorithm]}",
             f"  policy: {name}, {r.params:,} parameters, recipe {t.recipe}, {t.optimizer}, "
             f"ZeRO stage {t.zero_stage}, layout {lay.describe()}",
             f"  reference: {REFERENCE_WORDS[e.reference]}"
             + (", in CPU memory outside its pass" if p.offload_reference else "")]
    if p.algorithm != "dpo":
        lines.append(f"  reward model: {'a frozen copy in 16-bit' if p.has_reward_model() else 'none (rule-based rewards)'}"
                     + ("; critic: the policy's shape with a value head, trained" if e.critic else ""))
    seqs = (f"{r.batch.micro_batch // 2} examples × (chosen + rejected) = {r.batch.micro_batch} "
            "sequences" if p.algorithm == "dpo" else f"{r.batch.micro_batch} sequences")
    lines.append(f"  sequences: prompt {p.prompt_len} + response {p.response_len} = {p.seq_len} "
                 f"tokens; training micro-batch {seqs}")
    for group in e.groups:
        where = ("each trainer GPU" if group == "trainer" else
                 f"each rollout GPU ({p.rollout_gpus or p.engine.tp} in all)")
        lines.append(f"per device, phase by phase ({where}):")
        for ph in (x for x in e.phases if x.gpus == group):
            lines.append(f"  {ph.name:<28}{_amount(ph.total)}   ({ph.when})")
            for k, v in ph.as_dict().items():
                lines.append(f"    {k:<26}{_amount(v)}")
        top = e.peak(group)
        lines.append(f"  {'peak: ' + top.name:<28}{_amount(top.total)}")
        fits = e.fits(group)
        if fits is not None:
            cap = whole(r.gpu.memory)
            extra = f" with --overhead {r.overhead.format('GiB', 2)}" if r.overhead.n else ""
            lines.append(f"  fits in {cap.format('GB', 2)} ({cap.format('GiB', 2)}){extra}: "
                         f"{_verdict(e, group)}")
    lines.extend(engine_lines(e))
    loss = (" with a cross-entropy loss (DPO's keeps 16-bit log-softmax rows instead: the "
            "training phase above)" if p.algorithm == "dpo" else "")
    lines.append(f"the policy's step{loss}: {pol.peak.bytes.format('GB', 2)} at its peak "
                 f"({pol.peak.phase}); trainmath estimate without --post-training (and "
                 f"--micro-batch {r.batch.micro_batch}) prints it in full")
    lines.append("sources: phases and models, trainmath.runs.post_training (Ouyang et al. 2022 "
                 "§3.5; Rafailov et al. 2023;")
    lines.append("  Shao et al. 2024 §4.1; TRL, verl); the engine, vLLM's own arithmetic "
                 "(trainmath.memory.rollout);")
    lines.append("  the policy's step, trainmath.runs.estimates. GB = 10^9 bytes, GiB = 2^30 bytes")
    return "\n".join(lines)


def engine_lines(e: PostTrainingEstimate) -> list[str]:
    """The rollout engine on one of its GPUs: what it reserves, and vLLM's start-up figures."""
    g, p = e.engine, e.post
    if g is None:
        return []
    eng = p.engine
    kv = g.kv
    lines = [f"rollout engine (vLLM, tp {eng.tp}, {eng.weights} weights, KV {eng.kv_dtype}, "
             f"block {eng.block_size}, sleep level {eng.sleep_level}), on one of its GPUs:",
             f"  {'requested':<28}{_amount(g.requested)}   (gpu_memory_utilization "
             f"{eng.gpu_memory_utilization:g} × the GPU's total)",
             f"    {'weights':<26}{_amount(g.weights)}",
             f"    {'activations (profiled)':<26}{_amount(g.activations)}",
             f"    {'non-torch':<26}{_amount(g.non_torch)}",
             f"    {'KV cache':<26}{_amount(kv.available)}",
             f"  {'CUDA graphs':<28}{_amount(g.cuda_graphs)}",
             f"  {'awake, in all':<28}{_amount(g.awake())}"]
    if eng.sleep_level:
        lines.append(f"  {f'asleep (level {eng.sleep_level})':<28}{_amount(g.asleep(eng.sleep_level))}")
    lines.append(f"  KV cache: {kv.blocks:,} blocks × {eng.block_size} tokens = {kv.tokens:,} tokens "
                 f"({whole(kv.per_token).n:,} B per token); vLLM logs \"GPU KV cache size: "
                 f"{kv.tokens:,} tokens\" and \"Maximum concurrency for {e.engine_len:,} tokens per "
                 f"request: {kv.concurrency:.2f}x\"")
    holds = e.kv_holds
    lines.append(f"  rollout: {p.prompts} prompt{'s' if p.prompts > 1 else ''} × "
                 f"{p.generations} = {e.rollout_sequences} sequences at once, "
                 f"{e.kv_tokens_needed:,} tokens of cache: "
                 + ("all held at once" if holds >= e.rollout_sequences else
                    f"{holds} held at once; vLLM preempts the rest and recomputes them (slower, "
                    "not out of memory)"))
    return lines


def post_training_dict(e: PostTrainingEstimate) -> dict:
    """The estimate as plain data: whole bytes (rounded up), each phase by part."""
    p, r = e.post, e.run

    out = {
        "algorithm": p.algorithm, "placement": None if e.engine is None else p.placement,
        "reference": e.reference, "reward_model": p.has_reward_model(),
        "critic": e.critic is not None,
        "prompt_len": p.prompt_len, "response_len": p.response_len, "seq_len": p.seq_len,
        "micro_batch_sequences": r.batch.micro_batch,
        "phases": [{"name": ph.name, "gpus": ph.gpus, "when": ph.when,
                    "parts": {k: _bytes(v) for k, v in ph.as_dict().items()},
                    "total_bytes": _bytes(ph.total)} for ph in e.phases],
        "peak": {g: {"phase": e.peak(g).name, "bytes": _bytes(e.peak(g).total), "fits": e.fits(g)}
                 for g in e.groups},
        "gpu_memory_bytes": None if r.gpu is None else _bytes(r.gpu.memory),
        "overhead_bytes": _bytes(r.overhead),
        "engine": None,
        "policy": estimate_dict(e.policy),
        "derivations": [{"name": d.name, "formula": d.formula, "arithmetic": d.arithmetic}
                        for d in e.derivations],
    }
    g = e.engine
    if g is not None:
        eng = p.engine
        out["engine"] = {
            "gpu_memory_utilization": eng.gpu_memory_utilization, "tp": eng.tp,
            "weights_format": eng.weights, "kv_dtype": eng.kv_dtype, "block_size": eng.block_size,
            "max_model_len": e.engine_len, "max_num_seqs": eng.max_num_seqs,
            "sleep_level": eng.sleep_level, "gpus": p.rollout_gpus or eng.tp,
            "requested_bytes": _bytes(g.requested), "weights_bytes": _bytes(g.weights),
            "activations_bytes": _bytes(g.activations), "non_torch_bytes": _bytes(g.non_torch),
            "cuda_graphs_bytes": _bytes(g.cuda_graphs), "awake_bytes": _bytes(g.awake()),
            "asleep_bytes": _bytes(g.idle()),
            "kv_cache": {"available_bytes": _bytes(g.kv.available),
                         "per_token_bytes": _bytes(g.kv.per_token), "blocks": g.kv.blocks,
                         "tokens": g.kv.tokens, "concurrency": round(g.kv.concurrency, 4)},
            "rollout_sequences": e.rollout_sequences, "kv_tokens_needed": e.kv_tokens_needed,
            "sequences_held": e.kv_holds,
        }
    return out


def post_training_json(e: PostTrainingEstimate) -> str:
    """:func:`post_training_dict` as indented JSON."""
    return json.dumps(post_training_dict(e), indent=2)


# -- the calculator's HTML -----------------------------------------------------------------------
#: Colours of the phases' parts in the calculator's bars (the figures' palette).
PART_COLORS = {"policy states": "blue", "policy parameters": "blue", "policy weights": "blue",
               "policy step": "blue", "reference weights": "orange",
               "reward model weights": "gray", "critic states": "purple",
               "critic parameters": "purple", "critic step": "purple",
               "rollout engine, awake": "green", "rollout engine, asleep": "green",
               "policy log-prob pass": "red", "reference log-prob pass": "red",
               "reward pass": "red", "value pass": "red"}


def render_post_training_page(e: PostTrainingEstimate) -> str:
    """The HTML the calculator shows for a post-training estimate: each phase as a stacked bar
    against the GPU's memory, its parts in GB and GiB, the verdict per GPU group, the engine's
    figures, and the command's own text."""
    from .page import _bar, _terms_html, escape  # the calculator's parts, shared
    from .terms import LINKS, Term

    p, r = e.post, e.run
    out = [f"<p><strong>{escape(p.algorithm.upper())}</strong> on "
           f"<strong>{escape(r.shape.name)}</strong>: {escape(ALGORITHMS[p.algorithm])}."
           + ("" if e.engine is None else f" Engine {escape(p.placement)}: "
              f"{escape(PLACEMENTS[p.placement])}.") + "</p>",
           f"<p>Reference: {escape(REFERENCE_WORDS[e.reference])}. Sequences: prompt "
           f"{p.prompt_len:,} + response {p.response_len:,} = {p.seq_len:,} tokens.</p>"]
    capacity = None if r.gpu is None else _bytes(r.gpu.memory)
    for group in e.groups:
        out.append(f"<h3>Each {escape(group)} GPU, phase by phase</h3>")
        for ph in (x for x in e.phases if x.gpus == group):
            parts = {k: _bytes(v) for k, v in ph.as_dict().items()}
            total = whole(ph.total)
            alt = (f"{ph.name}: " + ", ".join(f"{k} {Bytes(v).format('GB', 2)}"
                                              for k, v in parts.items())
                   + (f"; the GPU holds {Bytes(capacity).format('GB', 2)}" if capacity else ""))
            out.append(f'<h4>{escape(ph.name)}: {total.format("GB", 2)} '
                       f'({total.format("GiB", 2)})</h4><p class="tm-calc-when">'
                       f"{escape(ph.when)}.</p>{_bar(parts, capacity, alt, PART_COLORS)}")
        top, fits = e.peak(group), e.fits(group)
        if fits is not None:
            words = _verdict(e, group)
            out.append(f'<p class="tm-calc-fits" data-fits="{str(fits).lower()}">The '
                       f"largest phase is <strong>{escape(top.name)}</strong>, "
                       f"{whole(top.total).format('GB', 2)}; fits in "
                       f"{whole(r.gpu.memory).format('GB', 2)}: <strong>{words}</strong>."
                       "</p>")
    lines = engine_lines(e)
    if lines:
        out.append("<h3>The rollout engine</h3><pre class=\"tm-calc-text\" tabindex=\"0\">"
                   + escape("\n".join(lines)) + "</pre>")
    terms = [Term(d.name, d.formula, d.inputs, d.arithmetic, d.value, d.formula_value,
                  d.source, LINKS[d.topic], d.note) for d in e.derivations]
    out.append(f'<h3>Show the arithmetic</h3><div class="tm-calc-terms">{_terms_html(terms)}'
               "</div>")
    out.append('<details class="tm-calc-text-box"><summary>What <code>trainmath estimate</code> '
               'prints (without <code>--json</code>)</summary><pre class="tm-calc-text" '
               f'tabindex="0">{escape(render_post_training(e))}</pre></details>')
    return "".join(out)


def summarize_post_training(e: PostTrainingEstimate) -> str:
    """One line for the bar that stays in view: the largest phase per trainer GPU and the fit."""
    top = e.peak("trainer")
    text = (f"{e.post.algorithm.upper()}: largest phase {top.name}, "
            f"{whole(top.total).format('GB', 2)} per trainer GPU")
    fits = [e.fits(g) for g in e.groups]
    if fits[0] is not None:
        text += "; fits" if all(fits) else "; does not fit"
    return text
