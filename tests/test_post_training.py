"""Post-training's phases (trainmath.runs.post_training), the command, and the published runs.

Expected values come from outside the code: published parameter counts (Hugging Face's
checkpoints), vLLM's budget rule (gpu_memory_utilization × the total nvidia-smi reports), TRL's
and verl's documented behaviour (DPO's concatenated chosen and rejected sequences, the adapter
switched off as the reference), and the figures the sources in
docs/_data/post-training-runs.json print.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from trainmath.checks.post_training import compare, published
from trainmath.cli.command import execute
from trainmath.memory.finetune import Adapter
from trainmath.memory.post_training import critic_params, logprob_pass
from trainmath.memory.rollout import Engine
from trainmath.model.presets import preset
from trainmath.problems import Invalid
from trainmath.runs.description import run
from trainmath.runs.estimates import estimate
from trainmath.runs.post_training import PostTraining, post_training_estimate
from trainmath.units import Bytes, MiB

ROOT = Path(__file__).resolve().parents[1]
DATA = json.loads((ROOT / "docs" / "_data" / "post-training-runs.json").read_text("utf-8"))
LLAMA3_8B = 8_030_261_248  # HF meta-llama/Meta-Llama-3-8B
H100_TOTAL = 81_559 * MiB  # nvidia-smi's memory.total for an H100 SXM 80GB


def dpo(**kw):
    return post_training_estimate(run("llama-3-8b", gpu="h100-sxm", **kw),
                                  PostTraining("dpo", prompt_len=512, response_len=512))


# --- DPO ----------------------------------------------------------------------------------------
def test_dpo_holds_a_bf16_reference_beside_the_policy():
    e = dpo()
    assert [p.name for p in e.phases] == ["reference log-probs", "training"]
    assert e.phase("training").as_dict()["reference weights"] == Bytes(2 * LLAMA3_8B)


def test_dpo_shards_the_reference_like_the_policy_under_zero_3():
    e = dpo(dp=8, zero_stage=3)
    assert e.phase("training").as_dict()["reference weights"] == Bytes(Fraction(2 * LLAMA3_8B, 8))


def test_dpo_trains_on_chosen_and_rejected_at_once():
    """TRL's concatenated_forward: b examples are 2b sequences in one forward."""
    e = dpo(micro_batch=2, recompute="full")
    alone = estimate(run("llama-3-8b", gpu="h100-sxm", micro_batch=4, seq_len=1024,
                         recompute="full"))
    assert e.policy.peak.bytes == alone.peak.bytes
    assert e.phase("training").as_dict()["policy step"] == alone.peak.bytes


def test_dpo_reference_options():
    pre = post_training_estimate(run("llama-3-8b"), PostTraining("dpo", reference="precomputed"))
    assert "reference weights" not in pre.phase("training").as_dict()
    lora = post_training_estimate(run("llama-3-8b", adapter=Adapter("lora", 16)),
                                  PostTraining("dpo"))
    assert lora.reference == "adapter"  # peft's disable_adapter: no second copy
    assert "reference weights" not in lora.phase("training").as_dict()


def test_the_log_prob_pass_holds_the_logits_in_16_and_32_bits():
    m = preset("llama-3-8b")
    lp = logprob_pass(m, seq_len=1000, micro_batch=3)
    assert lp.logits == Bytes(3000 * 128_256 * 2)
    assert lp.upcast == Bytes(3000 * 128_256 * 4)


def test_a_critic_swaps_the_output_layer_for_a_value_head():
    m = preset("llama-3-8b")
    assert critic_params(LLAMA3_8B, m) == LLAMA3_8B - 128_256 * 4096 + 4096


# --- GRPO and PPO with an engine ------------------------------------------------------------------
def grpo(placement="colocated", **post):
    return post_training_estimate(
        run("llama-3-8b", dp=8, zero_stage=3, gpu="h100-sxm", recompute="full", micro_batch=2),
        PostTraining("grpo", placement=placement, prompts=4, **post))


def test_a_colocated_engine_claims_its_share_of_the_total_while_generating():
    e = grpo(engine=Engine(gpu_memory_utilization=0.5))
    assert e.engine.requested == Bytes(H100_TOTAL // 2)
    gen = e.phase("generation").as_dict()
    assert gen["rollout engine, awake"] == e.engine.awake() >= e.engine.requested
    assert set(gen) >= {"policy states", "reference weights"}


def test_sleep_mode_shrinks_what_the_engine_keeps_outside_generation():
    awake, asleep = grpo(), grpo(engine=Engine(sleep_level=1))
    a = awake.phase("training").as_dict()["rollout engine, awake"]
    b = asleep.phase("training").as_dict()["rollout engine, asleep"]
    assert b < a / 10


def test_split_keeps_the_engine_off_the_trainer():
    e = grpo("split")
    assert e.groups == ("rollout", "trainer")
    assert all("rollout engine" not in k for p in e.phases if p.gpus == "trainer"
               for k in p.as_dict())
    assert e.peak("rollout").name == "generation"


def test_grpo_generates_a_group_per_prompt():
    e = grpo(group_size=16)
    assert e.rollout_sequences == 4 * 16  # prompts × completions per prompt
    assert e.kv_tokens_needed == 64 * 1536


def test_ppo_adds_a_critic_and_a_reward_model():
    e = post_training_estimate(run("llama-3-8b", dp=8, zero_stage=3, gpu="h100-sxm",
                                   recompute="full"), PostTraining("ppo"))
    assert e.critic is not None and e.post.has_reward_model()
    assert [p.name for p in e.phases] == ["generation", "log-probs", "training", "critic training"]
    assert "critic states" in e.phase("training").as_dict()


def test_offloading_the_policy_empties_it_during_generation():
    e = grpo(offload_policy=True)
    assert "policy states" not in e.phase("generation").as_dict()
    assert "policy parameters" in e.phase("log-probs").as_dict()


# --- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("post", "message"), [
    (dict(algorithm="sft"), "unknown post-training algorithm 'sft'; accepted: dpo, ppo, grpo"),
    (dict(algorithm="grpo", reference="precomputed"), "reference 'precomputed' is DPO's"),
    (dict(algorithm="ppo", group_size=4), "group_size 4 is GRPO's"),
    (dict(algorithm="dpo", placement="split"), "dpo generates nothing"),
    (dict(algorithm="grpo", rollout_gpus=2), "rollout_gpus 2 needs placement 'split'"),
])
def test_bad_setups_are_refused_by_name(post, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        PostTraining(**post)


def test_a_run_that_does_not_fit_its_setup_is_refused():
    with pytest.raises(Invalid, match="seq_len 4096 differs from prompt_len"):
        post_training_estimate(run("llama-3-8b", seq_len=4096, gpu="h100-sxm"),
                               PostTraining("grpo"))
    with pytest.raises(Invalid, match="give a GPU kind or its memory"):
        post_training_estimate(run("llama-3-8b"), PostTraining("grpo"))
    with pytest.raises(Invalid, match="needs a model shape"):
        post_training_estimate(run(7_000_000_000), PostTraining("dpo"))


# --- the command --------------------------------------------------------------------------------
def test_the_command_prints_each_phase_and_json():
    argv = ["estimate", "--model", "llama-3-8b", "--post-training", "grpo", "--gpu", "h100-sxm",
            "--dp", "8", "--zero", "3", "--recompute", "full", "--sleep-level", "1"]
    text = execute(argv)
    assert text.status == 0, text.stderr
    for line in ("generation", "log-probs", "training", "GPU KV cache size"):
        assert line in text.stdout
    data = json.loads(execute([*argv, "--json"]).stdout)
    assert [p["name"] for p in data["phases"]] == ["generation", "log-probs", "training"]
    assert abs(data["engine"]["requested_bytes"] - H100_TOTAL * 0.9) < 1  # vLLM: total × util
    assert data["peak"]["trainer"]["phase"] in {"generation", "log-probs", "training"}


@pytest.mark.parametrize(("extra", "message"), [
    (["--sleep-level", "1"], "--sleep-level needs --post-training"),
    (["--post-training", "dpo", "--rollout-tp", "2"], "--rollout-tp describes the rollout engine"),
    (["--post-training", "grpo", "--gpu-memory-utilization", "1.5"], "1.5"),
    (["--post-training", "ppo", "--suggest", "--gpu", "h100-sxm"], "--suggest does not take"),
])
def test_the_command_refuses_post_training_flags_out_of_place(extra, message):
    out = execute(["estimate", "--model", "llama-3-8b", *extra])
    assert out.status == 2 and message in out.stderr, out.stderr


# --- published runs -------------------------------------------------------------------------------
RUNS = published(DATA)


def test_at_least_five_published_runs_from_their_sources():
    assert len(RUNS) >= 5
    assert {r.row["framework"].split()[0] for r in RUNS} >= {"verl", "TRL"}
    for r in RUNS:
        assert r.url.startswith("https://") and r.source and r.row["what"]


@pytest.mark.parametrize("r", RUNS, ids=[r.id for r in RUNS])
def test_each_published_run_agrees_or_says_why_not(r):
    """A run agrees with its estimate unless the file says why it does not; a change that flips
    either way fails here with the published and the predicted figure."""
    c = compare(r)
    expected = "disagrees_because" not in r.row
    assert c.ok == expected, c.describe()


def test_unsloth_printed_gib_as_gb():
    """Unsloth's 2.5 and 78.3 "GB" are GiB of 20,480 tokens: the KV cache of one sequence
    (32 layers × 2 × 8 key-value heads × 128 × 2 bytes per token) and the group's fp32 logits."""
    c = compare(next(r for r in RUNS if r.id.startswith("unsloth")))
    units = {p.name: p.unit for p in c.parts}
    assert units["KV cache of one sequence"] == units["fp32 logits of the group"] == "GiB"
    assert units["engine weights"] == "GB"  # 16.06 × 10^9 bytes of bf16 weights


# --- against PyTorch: the fake-tensor records of validate/measure/post_training.py ---------------
from trainmath.checks.measured import MEASURED_IMPLEMENTATIONS, MEASURED_RECIPES, shape_of  # noqa: E402

MEASURED = json.loads((ROOT / "docs" / "_data" / "measurements.json").read_text("utf-8"))
POST = [c for c in MEASURED["configurations"] if c["kind"] in ("dpo-step", "logprob-pass")]


def _predicted(c: dict):
    s = c["s"]
    r = run(shape_of(c), micro_batch=c["b"], gpu_memory="10TB",
            implementation=MEASURED_IMPLEMENTATIONS[c["implementation"]],
            recipe=MEASURED_RECIPES[c["recipe"]],
            optimizer_impl="foreach" if c["optimizer"]["foreach"] else "for-loop")
    if c["kind"] == "dpo-step":
        e = post_training_estimate(r, PostTraining("dpo", prompt_len=s // 2,
                                                   response_len=s - s // 2, logprob_dtype="bf16"))
        return e.phase("training")
    e = post_training_estimate(r, PostTraining("grpo", placement="split", prompt_len=s // 2,
                                               response_len=s - s // 2,
                                               logprob_dtype=c["logprob"]["logits_dtype"]))
    return e.phase("log-probs")


def test_every_post_training_record_is_compared():
    assert len(POST) >= 10


@pytest.mark.parametrize("c", POST, ids=[c["id"] for c in POST])
def test_post_training_phases_agree_with_pytorch(c):
    """The log-prob pass and the DPO step (TRL's order: the reference's forward after the
    policy's, DPO's 16-bit log-softmax in place of cross-entropy's fp32 one) within 0.5% of
    PyTorch's peak. The records run in the other order (the reference first) are predicted in
    TRL's, an upper bound: high by at most 1% (within 0.5% where the optimizer step decides)."""
    measured = c["measured"]["peak"]["bytes"]
    predicted = _predicted(c).total.n
    err = predicted / measured - 1
    if c["kind"] == "dpo-step" and c["dpo"]["order"] != "trl":
        assert -0.005 <= err <= 0.01, (c["id"], measured, predicted)
    else:
        assert abs(err) <= 0.005, (c["id"], measured, predicted)


def test_a_dpo_reference_holds_exactly_its_bf16_weights():
    for c in (c for c in POST if c["kind"] == "dpo-step"):
        ref = c["measured"]["reference"]
        assert ref["weights"] == 2 * ref["parameters_count"]
        assert _predicted(c).as_dict()["reference weights"] == Bytes(ref["weights"])
