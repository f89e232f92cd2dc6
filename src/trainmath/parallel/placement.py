"""Which parameters one device of each pipeline stage holds, after the tensor-parallel split.

Per layer, the norms and the row-parallel biases are replicated and everything else is divided
by tp (Shoeybi et al. 2019, §3); stages hold L/pp layers (or the layout's split,
:meth:`~trainmath.parallel.layout.Layout.device_layers`), the first also the embedding, the last
the final norm and LM head (Narayanan et al. 2021, §2.2); a mixture's routed experts are split
ep·etp ways (etp, the expert-tensor-parallel size, is tp unless the layout gives it), its
shared experts tp ways like a dense MLP (Megatron-Core's ``SharedExpertMLP`` runs in the
tensor-parallel region of the attention). Counts, not bytes: :mod:`trainmath.memory.stages` turns them into memory and
:mod:`trainmath.time.communication` into traffic.

>>> from trainmath.model.presets import preset
>>> from trainmath.parallel.layout import Layout
>>> [sp.layers for sp in stage_params(preset("llama-2-7b"), Layout(pp=4))]
[8, 8, 8, 8]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..model.shape import ModelShape, distinct_kinds, kind_counts, param_breakdown
from .layout import Layout, expert_problems, pipeline_split_problems, tensor_split_problems
from ..problems import check


# -- parameters and memory per device -----------------------------------------------------------
def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class StageParams:
    """Parameters held by one device of one pipeline stage (after the tensor-parallel split)."""

    stage: int
    layers: int
    #: per-layer parameters split tp ways, on this device (all layers of the stage)
    layer_sharded: int
    #: per-layer parameters replicated on every TP rank: norms, row-parallel biases
    layer_replicated: int
    #: word embedding / LM head rows on this device (vocabulary-parallel), position embeddings
    embedding: int
    lm_head: int
    final_norm: int
    #: routed experts' parameters on this device (all layers of the stage), split ep·etp ways;
    #: ZeRO shards their states over the expert data-parallel group, edp = dp·cp·tp/(etp·ep)
    expert: int = 0

    @property
    def dense(self) -> int:
        """Parameters on this device that every data-parallel rank holds alike."""
        return self.layer_sharded + self.layer_replicated + self.embedding + self.lm_head + self.final_norm

    @property
    def total(self) -> int:
        """Parameters on one device of this stage."""
        return self.dense + self.expert


def stage_params(model: ModelShape, lay: Layout) -> tuple[StageParams, ...]:
    """Parameters on one device of each pipeline stage, exactly, from ``param_breakdown``.

    Per layer, ``per_layer_norms`` and (with biases) the two row-parallel biases (attention
    output, second MLP projection: 2h) are replicated; everything else is divided by tp
    (Shoeybi et al. 2019, §3). Stages hold L/pp layers each, the first also the embedding, the
    last the final norm and LM head (Narayanan et al. 2021, §2.2).
    """
    check([*pipeline_split_problems(model, lay.pp, lay.v, lay.stages), *tensor_split_problems(model, lay.tp),
           *expert_problems(model, lay)])
    return _stage_params(model, lay)


def layer_split(model: ModelShape, moe: bool) -> tuple[int, int, int]:
    """(split tp ways, replicated on every tensor-parallel rank, routed experts) of one layer of
    ``model``, a mixture layer when ``moe``.

    Replicated: the norms (per-head q/k norms too), the row-parallel biases (the output
    projection's; a dense MLP's down projection's, or each shared expert's), a mixture's router,
    and latent attention's down-projections and their norms, which Megatron-Core's MLA keeps
    whole on every rank (``linear_q_down_proj``, ``linear_kv_down_proj``: not tensor-parallel).
    Routed experts are split ep·etp ways (:func:`stage_params`); everything else tp ways.
    """
    parts = param_breakdown(model)
    h, E = model.hidden, model.experts
    total = parts.layer(moe)
    replicated = parts.per_layer_norms + (h if model.bias else 0)  # o_proj's bias
    if model.qk_norm == "head":
        replicated += 2 * model.head_dim
    if model.latent:
        rank, rope = model.kv_rank, model.rotary_dim
        replicated += h * (rank + rope) + rank + ((rank + rope) if model.bias else 0)
        if model.q_rank:
            replicated += h * model.q_rank + model.q_rank + (model.q_rank if model.bias else 0)
    routed = 0
    if moe:
        routed = parts.per_layer_routed
        replicated += h * E + (E if model.bias else 0)  # the router
        replicated += (h if model.bias else 0) * model.shared_experts
    elif model.bias:
        replicated += h  # the MLP's down projection's bias
    return total - replicated - routed, replicated, routed


@lru_cache(maxsize=4096)  # the planner asks for each layout's stages many times
def _stage_params(model: ModelShape, lay: Layout) -> tuple[StageParams, ...]:
    """:func:`stage_params` for a layout already checked against the model."""
    tp, pp = lay.tp, lay.pp
    parts = param_breakdown(model)
    h = model.hidden
    kinds = distinct_kinds(model)
    per_kind = {k: layer_split(model, k.moe) for k in kinds}
    for k, (split, _, _) in per_kind.items():
        if split % tp:  # cannot happen once heads, kv_heads and ffn divide by tp
            raise ValueError(f"per-layer sharded parameters {split} are not divisible by tp {tp}")
    on_device = lay.device_layer_indices(model.layers)
    word_rows = _ceil_div(model.vocab, tp) * h  # vocabulary-parallel rows on this rank
    positions = model.positions * h  # replicated
    assert parts.embedding == model.vocab * h + positions  # the breakdown's definition
    stages = []
    for i in range(pp):
        held = on_device[i]
        first, last = lay.holds_first(i), lay.holds_last(i)
        embedding = word_rows + positions if first else 0
        if last:
            lm_head = word_rows if (not model.tied_embeddings or pp > 1) else 0
            final_norm = parts.final_norm
        else:
            lm_head = final_norm = 0
        sharded = replicated = routed = 0
        counts = ((kinds[0], len(held)),) if len(per_kind) == 1 else kind_counts(model, held)
        for kind, n in counts:
            a, b, c = per_kind[kind]
            sharded, replicated, routed = sharded + n * a, replicated + n * b, routed + n * c
        if last and parts.mtp:  # the prediction modules sit after the last layer
            a, b, c = per_kind[kinds[-1]]
            n = model.mtp_layers
            sharded += n * (a + 2 * h * h)
            replicated += n * (b + 3 * parts.final_norm)
            routed += n * c
        stages.append(
            StageParams(
                stage=i,
                layers=len(held),
                layer_sharded=sharded // tp,
                layer_replicated=replicated,
                embedding=embedding,
                lm_head=lm_head,
                final_norm=final_norm,
                expert=routed // (lay.ep * lay.expert_tp),
            )
        )
    return tuple(stages)
