"""trainmath.report.diagrams.post_training: one bar per phase, to the GPU's scale."""

import pytest
from mystclaims.figures import checked

from trainmath.memory.rollout import Engine
from trainmath.report.diagrams.post_training import phases
from trainmath.runs.description import run
from trainmath.runs.post_training import PostTraining, post_training_estimate


def _grpo(util):
    return post_training_estimate(
        run("qwen2.5-7b", dp=8, zero_stage=3, gpu="h100-sxm", recompute="full", micro_batch=4),
        PostTraining("grpo", prompts=16, engine=Engine(gpu_memory_utilization=util, sleep_level=1)))


def test_each_phase_is_a_bar_labelled_with_its_total_and_the_gpu_is_a_line():
    e = _grpo(0.4)
    d = checked(phases(e))
    assert [x.value for x in d.numbers] == [p.total for p in e.phases] + [e.run.gpu.memory]
    assert all(p.name in d.alt for p in e.phases)


def test_split_draws_each_group_on_its_own():
    e = post_training_estimate(
        run("qwen2.5-7b", dp=6, zero_stage=3, gpu="h100-sxm", recompute="full"),
        PostTraining("grpo", placement="split", rollout_gpus=2))
    assert [x.value for x in phases(e, "rollout").numbers][:-1] == [e.phase("generation", "rollout").total]
    with pytest.raises(ValueError, match="accepted: rollout, trainer"):
        phases(e, "critic")
