"""The shortcuts that make the planner fast build only the pipeline stages that can differ.

``estimate`` builds the step's moments for the first, second and last stage only, and
``communication`` computes the first, one middle and the last stage: a middle stage holds the
same parameters as the second and fewer micro-batches in flight. Here every stage is built the
long way, from the estimate's own per-stage memory, and the fullest must be the same.
"""

from dataclasses import replace

import pytest

from trainmath.memory import step
from trainmath.model.presets import preset
from trainmath.parallel.layout import Layout
from trainmath.time.communication import communication
from trainmath.parallel.placement import stage_params
from trainmath.memory.peak import _step_peak
from trainmath.planner.search import plan
from trainmath.runs.estimates import estimate
from trainmath.runs.description import run

CASES = [
    dict(model="llama-3-70b", dp=16, tp=8, pp=4, zero_stage=1, seq_len=8192, global_batch=1024),
    dict(model="llama-3-70b", dp=16, pp=4, cp=8, v=4, zero_stage=1, seq_len=8192,
         global_batch=1024),
    dict(model="llama-3-70b", dp=4, tp=8, pp=16, v=5, zero_stage=0, recompute="full",
         seq_len=4096, global_batch=64),
    dict(model="llama-3-8b", dp=2, tp=2, pp=8, zero_stage=1, seq_len=8192, global_batch=4),
    dict(model="megatron-gpt-1t", tp=8, pp=64, seq_len=2048, global_batch=512),
    dict(model="llama-3-8b", dp=8, pp=2, zero_stage=1, seq_len=8192, global_batch=64),
    dict(model="llama-3-8b", dp=8, zero_stage=3, seq_len=8192, global_batch=64),
]


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_the_fullest_stage_is_among_those_built(kw):
    kw = dict(kw)
    model = kw.pop("model")
    r_ = run(model, sequence_parallel=kw.get("tp", 1) > 1, gpu="h100-sxm", **kw)
    e = estimate(r_)
    peaks = [_step_peak(step.stage_inputs(shape=r_.shape, layout=r_.layout, training=r_.training,
                                          batch=r_.batch, device=d, activations=a,
                                          fsdp2=False)).bytes
             for d, a in zip(e.stages, e.saved)]
    top = max(range(len(peaks)), key=lambda i: (peaks[i], -i))
    assert (e.peak_stage, e.peak.bytes) == (top, peaks[top])


@pytest.mark.parametrize("kw", CASES[:5], ids=lambda kw: kw["model"])
def test_middle_stages_send_the_same(kw):
    """The middle stages hold the same parameters and layers (the premise of computing one of
    them); every stage asked for by number; the one picked sends the most."""
    kw = dict(kw)
    model = preset(kw.pop("model"))
    lay = Layout(kw.get("dp", 1), kw.get("tp", 1), kw.get("pp", 1), kw.get("cp", 1),
                 kw.get("v", 1), kw.get("tp", 1) > 1)
    args = dict(seq_len=kw["seq_len"], micro_batch=1, global_batch=kw["global_batch"],
                zero_stage=kw.get("zero_stage", 0), recompute=kw.get("recompute", "none"))
    middle = {replace(sp, stage=0) for sp in stage_params(model, lay)[1:-1]}
    assert len(middle) <= 1
    each = [communication(model, lay, stage=i, **args) for i in range(lay.pp)]
    assert all(c.stage == i for i, c in enumerate(each))
    most = max(each, key=lambda c: (c.total, -c.stage))
    assert communication(model, lay, **args) == most


def test_plan_is_memoised():
    """The same arguments give the same (immutable) plan without a second search."""
    kw = dict(gpu="h100-sxm", gpus=8, seq_len=8192, global_batch=64)
    assert plan("llama-3-8b", **kw) is plan("llama-3-8b", **kw)
    assert plan("llama-3-8b", layout={"dp": 8}, **kw) is plan("llama-3-8b", layout={"dp": 8}, **kw)
    with pytest.raises(ValueError, match=r"sustained must be a share in \(0, 1\], such as 0.7, got True"):
        plan("llama-3-8b", sustained=True, **kw)  # not taken for sustained=1
