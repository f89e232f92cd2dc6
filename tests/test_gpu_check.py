"""The recorded H200 run (docs/_data/gpu-check.json, `python -m validate.gpu`) against the library.

The expected values are measurements on a real GPU: torch.cuda.max_memory_allocated() over a
training step. The library predicts the sum of live tensors; the allocator adds kernel
workspaces (cuBLAS's, 32 MiB each on Hopper) and temporaries inside operators, so the
measurement must be at least the prediction and exceed it by no more than a quarter of a GB.
"""

import json
from pathlib import Path

import pytest

from trainmath.checks.measured import estimate_of

DATA = Path(__file__).resolve().parents[1] / "docs" / "_data"
GPU = json.loads((DATA / "gpu-check.json").read_text())
RECORDED = {c["id"]: c for c in json.loads((DATA / "measurements.json").read_text())["configurations"]}
RAN = [r for r in GPU["steps"] if "cuda_max_allocated" in r]
WORKSPACE_ALLOWANCE = 250 * 10**6  # bytes: what the allocator may add beyond live tensors


def test_the_run_is_recorded():
    assert GPU["schema"] == "trainmath-gpu-check/1"
    assert len(RAN) >= 20 and all(r["id"] in RECORDED for r in GPU["steps"])


@pytest.mark.parametrize("row", RAN, ids=[r["id"] for r in RAN])
def test_max_memory_allocated_is_the_prediction_plus_workspaces(row):
    predicted = estimate_of(RECORDED[row["id"]]).peak.bytes.n
    measured = row["cuda_max_allocated"]
    assert predicted <= measured <= predicted + WORKSPACE_ALLOWANCE, (
        f"{row['id']}: torch.cuda.max_memory_allocated() on {GPU['device']['name']} was "
        f"{measured:,} bytes; the library predicts a peak of {float(predicted):,.0f} bytes")


@pytest.mark.parametrize("row", RAN, ids=[r["id"] for r in RAN])
def test_the_gpu_holds_the_tensors_the_cpu_measured(row):
    assert abs(row["tracker_peak_on_gpu"] - RECORDED[row["id"]]["measured"]["peak"]["bytes"]) <= 512


QLORA = GPU["qlora"]


@pytest.mark.parametrize("row", QLORA, ids=[r["id"] for r in QLORA])
def test_qlora_on_the_gpu(row):
    """A real QLoRA step (bitsandbytes Linear4bit, NF4 with double quantization, peft's fp32
    adapters): its peak and its weights against the library's QLoRA estimate."""
    from trainmath.memory.finetune import Adapter
    from trainmath.runs.estimates import estimate
    from trainmath.runs.description import run

    e = estimate(run(row["model"], adapter=Adapter("qlora", row["rank"], tuple(row["targets"])),
                     recipe="fp32", implementation="hf-sdpa", seq_len=row["s"], micro_batch=1,
                     optimizer="adamw", optimizer_impl="for-loop"))
    predicted = e.peak.bytes.n
    assert predicted <= row["cuda_max_allocated"] <= predicted + WORKSPACE_ALLOWANCE, row["id"]
    on_gpu = row["frozen_bytes"] + row["quant_constants_bytes"] + 4 * row["trainable_count"]
    assert abs(on_gpu - e.device.weights.n) <= 1024, (on_gpu, e.device.weights.n)


MOE = GPU["moe"]


@pytest.mark.parametrize("row", MOE, ids=[r["id"] for r in MOE])
def test_mixture_of_experts_on_the_gpu(row):
    """transformers' MixtralForCausalLM (grouped_mm experts), Mixtral-8x7B's shape with fewer
    layers, one AdamW step on the GPU: the allocator's peak against the library's."""
    from trainmath.model.shape import modified
    from trainmath.model.presets import preset
    from trainmath.runs.estimates import estimate
    from trainmath.runs.description import run

    recipe = {"zero-bf16": "bf16-mixed", "megatron-bf16": "megatron"}[row["recipe"]]
    e = estimate(run(modified(preset(row["model"]), layers=row["layers"]), recipe=recipe,
                     implementation="hf-sdpa", seq_len=row["s"], optimizer_impl="for-loop"))
    predicted = e.peak.bytes.n
    assert predicted <= row["cuda_max_allocated"] <= predicted + WORKSPACE_ALLOWANCE, row["id"]
    assert abs(row["tracker_peak_on_gpu"] - predicted) <= 10**-5 * predicted, row["id"]
