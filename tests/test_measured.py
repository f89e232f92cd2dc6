"""The library agrees with every configuration measured in real PyTorch, without torch.

docs/_data/measurements.json holds what real training code keeps at full size (validate/measure,
re-measured by ``make validate``). Here the library predicts every recorded configuration again
(:mod:`trainmath.checks.measured`, through :func:`trainmath.runs.estimates.estimate`) and each quantity must agree:
model states to the byte (each kind, and Adam's step counters), activations within 1% per layer
and per model, the step's peak within 2% and in the same phase. A library change that breaks
agreement with PyTorch fails here, naming the configuration, the measured and the predicted bytes.
The expected values are the measurements: they come from PyTorch, not from this code.

Records of today's families (Qwen3, DeepSeek-V3, Gemma 2 and 3, gpt-oss, OLMo 2, Llama 4) are
built by transformers from a published config.json (their ``config``), and compared layer group
by layer group: dense and mixture layers, local and global ones.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from trainmath.checks.measured import (CONTEXT_PARALLEL, MEASURED_IMPLEMENTATIONS, MEASURED_PRECISIONS, MEASURED_RECIPES, POST_TRAINING, TECHNIQUES, Comparison, comparable, compare, compare_all, compare_schedule, shape_of)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "_data" / "measurements.json"
DOC = json.loads(DATA.read_text(encoding="utf-8"))
ALL = DOC["configurations"]
# Predicted: all but the records marked not_compared (a CPU-only fallback; each says why) and
# post-training's (POST_TRAINING: recorded, not predicted yet).
CONFIGS = [c for c in ALL if comparable(c)]
NOT_COMPARED = [c for c in ALL if "not_compared" in c]
POST = [c for c in ALL if c["kind"] in POST_TRAINING]
#: Today's families, built by transformers from a published config.json (validate/measure/hfconfigs.py)
FROM_CONFIG = [c for c in ALL if "config" in c]


@pytest.mark.parametrize("record", DOC["schedules"], ids=[r["id"] for r in DOC["schedules"]])
def test_each_pipeline_schedule_holds_and_idles_as_pytorch_runs_it(record):
    """PyTorch's own orders (torch.distributed.pipelining, the pinned torch), run pass by pass
    in validate/measure/pipeline.py: each rank's peak of micro-batches in flight and the step's
    idle time equal the library's, exactly."""
    assert record["id"].startswith("pp-schedule-")
    bad = [c.describe() for c in compare_schedule(record) if not c.ok]
    assert not bad, bad


def test_the_schedules_measured_cover_every_schedule():
    from trainmath.parallel.schedules import SCHEDULES
    assert {r["schedule"] for r in DOC["schedules"]} == set(SCHEDULES)


def test_the_file_is_the_measurements_schema():
    assert DOC["schema"] == "trainmath-measurements/1"
    issue24 = [c for c in ALL if c["id"].startswith(("op-sac-", "compile-", "cp-"))]
    # six LoRA configurations, 38 of today's families, six steps with issue 24's techniques
    assert len(ALL) - len(issue24) - len(POST) == 118 + 6 + 38 + 6
    assert len(NOT_COMPARED) == 2  # DeepSeek-V3 under SDPA on the CPU, at both lengths
    assert {c["implementation"] for c in CONFIGS} == set(MEASURED_IMPLEMENTATIONS)
    assert {c["recipe"] for c in CONFIGS if c["kind"] == "step"} == set(MEASURED_RECIPES)
    assert {c["precision"] for c in CONFIGS if c["kind"] == "saved"} == set(MEASURED_PRECISIONS)


CHECKPOINTED = [c for c in ALL if c["id"].startswith(("op-sac-", "compile-"))]


def test_op_level_checkpointing_and_compile_are_measured():
    """Issue 24: torchtitan's op-level policy and a policy a user states, and torch.compile's
    partition, saved for backward and in a whole step, Llama-3-8B at s 8192 in torchtitan's
    layout (FSDP2 on 8 GPUs) among them."""
    ids = {c["id"] for c in CHECKPOINTED}
    assert len(CHECKPOINTED) == 14  # three of them on a rank of tp = 2, 4, 8
    # torch.compile over torchtitan's policy, as torchtitan runs both
    assert "compile-op-saved/llama-3-8b/reference-sdpa/bf16/torchtitan/s8192-b1" in ids
    assert "op-sac-step/llama-3-8b/reference-sdpa/fsdp2-bf16/torchtitan/dp8-rank0/s8192-b1" in ids
    assert "compile-step/llama-3-8b/reference-sdpa/fsdp2-bf16/dp8-rank0/s8192-b1" in ids
    assert {c["policy"] for c in CHECKPOINTED if c["kind"].startswith("op-sac")} == {
        "torchtitan", "attention"}
    for c in CHECKPOINTED:
        kinds = {x.kind for x in compare(c)}
        assert "peak" in kinds if c["kind"].endswith("step") else kinds == {"activations"}
    assert {c["tp"] for c in CHECKPOINTED if c["kind"] == "op-sac-tp-saved"} == {2, 4, 8}


def test_todays_families_are_measured():
    """Issue 22's list: Qwen3-8B, Qwen3-30B-A3B, DeepSeek-V3's layers, Gemma-2-9B and gpt-oss,
    each saved for backward and in a whole AdamW step (and OLMo 2, Gemma 3, Llama 4 besides)."""
    models = {c["model"] for c in FROM_CONFIG}
    assert {"qwen3-8b", "qwen3-30b-a3b", "deepseek-v3", "gemma-2-9b", "gpt-oss-20b"} <= models
    for model in models:
        kinds = {c["kind"] for c in FROM_CONFIG if c["model"] == model and comparable(c)}
        assert kinds == {"saved", "step"}, model


@pytest.mark.parametrize("config", FROM_CONFIG, ids=[c["id"] for c in FROM_CONFIG])
def test_a_record_from_a_config_json_reads_that_file(config):
    """Each names a file of tests/data/hf-configs/ whose (text) model_type is its family; its
    keys are that file's with the overrides applied (what transformers built), and it says
    what was changed and what ran."""
    c = config["config"]
    d = json.loads((ROOT / c["file"]).read_text(encoding="utf-8"))
    d = d["text_config"] if c["text_config"] else d
    assert c["file"].startswith("tests/data/hf-configs/") and config["notes"]
    assert (d | c["overrides"])["model_type"] == config["family"]
    assert set(c["overrides"]) <= set(d), "an override replaces a published key"
    layers = c["keys"]["num_hidden_layers"]
    expected = d | c["overrides"]
    if isinstance(expected.get("layer_types"), list):
        expected["layer_types"] = expected["layer_types"][:layers]
    assert c["keys"] == expected


def test_post_training_records_are_recorded_but_not_predicted_yet():
    """DPO steps and GRPO/PPO log-prob passes (validate/measure/post_training.py): Llama-3-8B
    as TRL trains it, both orders of the DPO step; compare refuses them by name and
    compare_all leaves them out, until the library's post-training estimate is compared."""
    ids = {c["id"] for c in POST}
    for s in (1024, 2048):
        for b in (1, 2):
            assert f"dpo-step/llama-3-8b/hf-sdpa/zero-bf16/s{s}-b{b}" in ids
            assert f"dpo-step/llama-3-8b/hf-sdpa/zero-bf16/reference-first/s{s}-b{b}" in ids
    for b in (1, 4):
        assert f"logprob-pass/llama-3-8b/hf-sdpa/zero-bf16/logits-fp32/s2048-b{b}" in ids
    assert not any(comparable(c) for c in POST)
    for c in POST:
        with pytest.raises(ValueError, match=c["id"]):
            compare(c)
    assert {r.config for r in compare_all(DOC)}.isdisjoint(ids)


@pytest.mark.parametrize("config", NOT_COMPARED, ids=[c["id"] for c in NOT_COMPARED])
def test_a_record_not_compared_says_why_and_is_refused(config):
    assert "fallback" in config["not_compared"] and "fallback" in config["notes"]
    with pytest.raises(ValueError, match=config["id"]):
        compare(config)


@pytest.mark.parametrize("config", CONFIGS, ids=[c["id"] for c in CONFIGS])
def test_every_configuration_agrees(config):
    wrong = [c.describe() for c in compare(config) if not c.ok]
    assert not wrong, "the library no longer agrees with PyTorch:\n" + "\n".join(wrong)


@pytest.mark.parametrize("config", [c for c in CONFIGS if not c["kind"].endswith("saved")],
                         ids=[c["id"] for c in CONFIGS if not c["kind"].endswith("saved")])
def test_the_peak_falls_in_the_measured_phase(config):
    (peak,) = [c for c in compare(config) if c.quantity == "peak"]
    measured, predicted = peak.phases
    assert measured == predicted, f"{config['id']}: peak measured in {measured}, predicted in {predicted}"


def test_every_quantity_is_compared():
    """Saved: one layer, the whole model, the weight copies; step: four kinds of state, their
    total, the step counters and the peak."""
    comparisons = compare_all(DOC)
    saved = sum(c["kind"] in ("saved", "compile-saved", "compile-op-saved", "cp-saved")
                for c in CONFIGS)
    op_saved = sum(c["kind"] == "op-sac-saved" for c in CONFIGS)  # no weight copies to compare
    op_tp = sum(c["kind"] == "op-sac-tp-saved" for c in CONFIGS)  # one layer on one rank
    lora = sum(c["kind"] == "finetune" for c in CONFIGS)
    techniques = sum(c["kind"] in TECHNIQUES for c in CONFIGS)
    steps = len(CONFIGS) - saved - op_saved - op_tp - lora
    # a record of layers of several kinds compares each group of alike layers
    groups = sum(len(c["measured"].get("layer_groups", [None])) - 1 for c in CONFIGS
                 if c["kind"] == "saved")
    # a technique's step adds what stays saved on the device, the host bytes and two phase peaks
    # a context-parallel rank's step adds the forward's and the backward's highest moments
    cp_steps = sum(c["kind"] == "cp-step" for c in CONFIGS)
    assert len(comparisons) == (3 * saved + 2 * op_saved + op_tp + groups + 7 * steps + 12 * lora
                                + 4 * techniques + 2 * cp_steps)
    states = [c for c in comparisons if c.kind == "states"]
    assert all(c.measured == c.predicted for c in states)


def test_a_disagreement_names_the_configuration_and_both_figures():
    """What make test prints when a formula drifts: the id, the measured and the predicted bytes."""
    drifted = Comparison("step/llama-2-7b/reference-sdpa/megatron-bf16/s2048-b1", "states",
                         "gradients", 26_953_662_464, 13_476_831_232)
    assert not drifted.ok
    assert drifted.describe() == (
        "step/llama-2-7b/reference-sdpa/megatron-bf16/s2048-b1: gradients: measured "
        "26,953,662,464 bytes, predicted 13,476,831,232 (ratio 2.0000, tolerance 0%)")
    near = Comparison("x", "peak", "peak", 100, 101)
    assert near.ok and not Comparison("x", "activations", "one layer", 100, 102).ok


def test_changing_a_formula_breaks_agreement(monkeypatch):
    """If the 16-bit recipes kept 2-byte gradients in Megatron's place (the ZeRO paper's 16, not
    its 18), the Megatron configurations would fail, by name."""
    from trainmath.memory import recipes as memory
    wrong = dict(memory.RECIPES)
    wrong["megatron"] = memory.Recipe("megatron", 2, 2, 4, 4, "drifted", persistent_gradients=True)
    monkeypatch.setattr(memory, "RECIPES", wrong)
    config = next(c for c in CONFIGS if c["kind"] == "step" and c["recipe"] == "megatron-bf16")
    failed = [c for c in compare(config) if not c.ok]
    assert failed and failed[0].describe().startswith(config["id"] + ": gradients: measured")


def test_lora_trainable_counts_are_peft_s():
    """peft's get_nb_trainable_parameters for Llama-2-7B, recorded by validate/measure."""
    lora = [c for c in CONFIGS if c["kind"] == "finetune"]
    assert {c["measured"]["trainable_count"] for c in lora if c["model"] == "llama-2-7b"} == {
        8_388_608, 159_907_840, 39_976_960}
    for c in lora:
        (count,) = [x for x in compare(c) if x.quantity == "trainable parameters (count)"]
        assert count.measured == count.predicted


TECHNIQUE_RECORDS = [c for c in CONFIGS if c["kind"] in TECHNIQUES]


def test_issue_24s_techniques_are_measured():
    """A chunked loss at 8 and 16 chunks beside the standard loss, and activations offloaded,
    in the run issue 24 names (Llama-3-8B at s 8192)."""
    ids = {c["id"] for c in TECHNIQUE_RECORDS}
    for tail in ("standard", "chunked8", "chunked16"):
        assert f"chunked-loss-step/llama-3-8b/reference-sdpa/zero-bf16/{tail}/s8192-b1" in ids
    assert "act-offload-step/llama-3-8b/reference-sdpa/zero-bf16/standard/s8192-b1" in ids
    assert all(c["id"].startswith(("chunked-loss-", "act-offload-")) for c in TECHNIQUE_RECORDS)


def _record(tail: str) -> dict:
    return next(c for c in TECHNIQUE_RECORDS if c["id"] == f"chunked-loss-step/llama-3-8b/"
                f"reference-sdpa/zero-bf16/{tail}/s8192-b1")


def test_a_chunked_loss_drops_the_peak_by_the_measured_amount():
    """Issue 24's done-when: for Llama-3-8B at s 8192, the estimate with a chunked loss drops
    the step's peak by what PyTorch measured, within the peak's 2%; and the backward's own
    peak, where the loss's spike falls, as well (that one holds with any optimizer step)."""
    from trainmath.checks.measured import estimate_of
    standard, chunked = _record("standard"), _record("chunked8")
    measured = standard["measured"]["peak"]["bytes"] - chunked["measured"]["peak"]["bytes"]
    predicted = estimate_of(standard).peak.bytes.n - estimate_of(chunked).peak.bytes.n
    assert measured > 4e9  # the spike: the fp32 logits and their gradients over 128,256 tokens
    assert abs(predicted - measured) <= Fraction(2, 100) * measured
    for phase in ("backward",):
        drop = (standard["measured"]["phase_peaks"][phase]
                - chunked["measured"]["phase_peaks"][phase])
        top = [max(x.total.n for x in estimate_of(c).peak.moments if x.phase == phase)
               for c in (standard, chunked)]
        assert abs((top[0] - top[1]) - drop) <= Fraction(2, 100) * drop


def test_offloaded_activations_leave_the_output_head_on_the_device():
    """What stays saved on the device with activations offloaded is what the loss and the LM
    head save (the log-softmax over the vocabulary, the head's input, the targets), measured."""
    rec = next(c for c in TECHNIQUE_RECORDS if c["id"].startswith("act-offload-step/llama-3-8b/"
                                                                  "reference-sdpa/zero-bf16/standard"))
    m = rec["measured"]
    s, V, h = 8192, 128256, 4096
    assert m["saved"] == 4 * s * V + 2 * s * h + 8 * s + 4
    assert m["saved"] + m["host"]["after_forward"] == _record("standard")["measured"]["saved"]


CP_RECORDS = [c for c in CONFIGS if c["kind"] == "cp-saved"]
CP_STEPS = [c for c in CONFIGS if c["kind"] == "cp-step"]


def test_ulysses_is_measured_with_deepspeeds_own_attention():
    """DeepSpeed-Ulysses' DistributedAttention on one rank of cp 2, 4 and 8, Llama-3-8B at s
    8192 (validate/measure/context.py, run by ``make validate``)."""
    assert all(c["kind"] in CONTEXT_PARALLEL for c in CP_RECORDS + CP_STEPS)
    for records in (CP_RECORDS, CP_STEPS):
        assert {(c["context_parallel"]["kind"], c["context_parallel"]["cp"]) for c in records} == {
            ("ulysses", 2), ("ulysses", 4), ("ulysses", 8)}
    assert {c["context_parallel"]["implementation"] for c in CP_RECORDS + CP_STEPS} == {
        "deepspeed.sequence.layer.DistributedAttention"}
    assert DOC["versions"]["deepspeed"] == "0.19.8"


@pytest.mark.parametrize("config", CP_RECORDS, ids=[c["id"] for c in CP_RECORDS])
def test_a_ulysses_rank_saves_what_the_library_predicts(config):
    """Per rank, within the activations' 1%: one layer and the whole model; and the layer is
    more than a ring's cp-th by the output projection's own input, 2·(s/cp)·h bytes, which
    DeepSpeed's second all-to-all makes (measured: ``clone`` of the output's layout)."""
    from trainmath.memory.activations import layer_activations
    for c in compare(config):
        assert c.ok, c.describe()
    cp, s, h = config["context_parallel"]["cp"], config["s"], config["shape"]["hidden"]
    m = config["measured"]
    ring = layer_activations(shape_of(config), s, 1, cp=cp, implementation="megatron-te").total.n
    assert m["per_layer"][m["layer_shown"]] - ring == 2 * (s // cp) * h
    assert [t for t in m["layer_tensors"] if t[0] == "clone.default"] == [
        ["clone.default", "bf16", [1, s // cp, cp, 32 // cp, 128], 2 * (s // cp) * h, "activation"]]


@pytest.mark.parametrize("config", CP_STEPS, ids=[c["id"] for c in CP_STEPS])
def test_a_ulysses_ranks_step_peaks_where_the_library_says(config):
    """The states to the byte, the step's peak within 2% and in the same phase, and the
    forward's and the backward's highest moments within 2%."""
    for c in compare(config):
        assert c.ok, c.describe()
    (peak,) = [c for c in compare(config) if c.quantity == "peak"]
    assert peak.phases[0] == peak.phases[1]
