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

from ..model.shape import ModelShape, param_breakdown
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


@lru_cache(maxsize=4096)  # the planner asks for each layout's stages many times
def _stage_params(model: ModelShape, lay: Layout) -> tuple[StageParams, ...]:
    """:func:`stage_params` for a layout already checked against the model."""
    tp, pp = lay.tp, lay.pp
    parts = param_breakdown(model)
    h = model.hidden
    replicated = parts.per_layer_norms + (2 * h if model.bias else 0)
    routed = parts.per_layer_routed  # routed experts: split ep·etp ways
    if model.moe:
        replicated += h * model.experts  # the router, on every rank
    split = parts.per_layer - replicated - routed
    if split % tp:  # cannot happen once heads, kv_heads and ffn divide by tp; guard the algebra
        raise ValueError(f"per-layer sharded parameters {split} are not divisible by tp {tp}")
    on_device = lay.device_layers(model.layers)
    word_rows = _ceil_div(model.vocab, tp) * h  # vocabulary-parallel rows on this rank
    positions = model.positions * h  # replicated
    assert parts.embedding == model.vocab * h + positions  # the breakdown's definition
    stages = []
    for i in range(pp):
        per_stage = on_device[i]
        first, last = i == 0, i == pp - 1
        embedding = word_rows + positions if first else 0
        if last:
            lm_head = word_rows if (not model.tied_embeddings or pp > 1) else 0
            final_norm = parts.final_norm
        else:
            lm_head = final_norm = 0
        stages.append(
            StageParams(
                stage=i,
                layers=per_stage,
                layer_sharded=per_stage * split // tp,
                layer_replicated=per_stage * replicated,
                embedding=embedding,
                lm_head=lm_head,
                final_norm=final_norm,
                expert=per_stage * routed // (lay.ep * lay.expert_tp),
            )
        )
    return tuple(stages)
