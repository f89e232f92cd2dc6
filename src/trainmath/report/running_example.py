"""The site's running example: Llama-3-70B pretrained on 512 H100s, carried through every page.

Each page shows what its idea does to this one run, so that a reader meets it once and watches
it through: its memory per parameter (memory math), its precision (mixed precision), its
sharding (ZeRO and FSDP), its layout (distributed training) and, on the how-to page, planning it
from scratch as the closing exercise. The layout is one of those the planner ranks for it
(plan-a-run): 64 nodes of 8 H100s, dp 16 × tp 8 × pp 4 with 5 model chunks per pipeline device
(Narayanan et al. 2021's interleaved schedule) and sequence parallelism (Korthikanti et al.
2022), the distributed optimizer (ZeRO-1), sequences of 8,192 tokens and 1,024 of them a step,
about 8.4M tokens (Llama 3 trained with 4M to 16M tokens a step: Dubey et al. 2024, §3.4.1).

>>> example_run().layout.gpus
512
"""

from __future__ import annotations

from ..runs.description import Run, run
from ..runs.estimates import Estimate, estimate

#: The model (a preset: trainmath.model.presets)
MODEL = "llama-3-70b"
#: The GPU kind
GPU = "h100-sxm"
#: How many GPUs
GPUS = 512
#: GPUs a node: an HGX H100 board
GPUS_PER_NODE = 8
#: Tokens per sequence
SEQ_LEN = 8192
#: Sequences per step
GLOBAL_BATCH = 1024
#: The layout: data, tensor and pipeline parallel sizes, model chunks per pipeline device
LAYOUT = {"dp": 16, "tp": 8, "pp": 4, "v": 5, "sequence_parallel": True}
#: ZeRO stage: Megatron-LM's distributed optimizer shards the optimizer state
ZERO_STAGE = 1


def example_run(**changes: object) -> Run:
    """The running example as a :class:`~trainmath.runs.description.Run`; ``changes`` replace any
    of :func:`~trainmath.runs.description.run`'s arguments (``zero_stage=3``, ``tp=4`` ...)."""
    kwargs: dict[str, object] = dict(LAYOUT, seq_len=SEQ_LEN, global_batch=GLOBAL_BATCH,
                                     zero_stage=ZERO_STAGE, gpu=GPU, gpus_per_node=GPUS_PER_NODE)
    kwargs.update(changes)
    return run(MODEL, **kwargs)  # type: ignore[arg-type]


def example_estimate(**changes: object) -> Estimate:
    """:func:`~trainmath.runs.estimates.estimate` of :func:`example_run` (with ``changes``)."""
    return estimate(example_run(**changes))
