"""python -m validate.gpu OUT.json [--only REGEX]: the same steps on a real CUDA GPU.

Run on a machine with one NVIDIA GPU and PyTorch built for CUDA (not part of ``make validate``,
which is CPU only). It records two things in OUT.json:

1. **What a process holds on the GPU beyond its tensors**, read with NVML (what ``nvidia-smi``
   reports) against PyTorch's own accounting, stage by stage: the CUDA context, cuBLAS's first
   matrix product, a flash-attention forward and backward, an NCCL communicator (one rank: the
   smallest NCCL gets), so the page can put a measured figure beside the sourced ones.
2. **Real training steps** of configurations recorded in ``docs/_data/measurements.json``
   (measured there under FakeTensorMode on the CPU), run here with real tensors on the GPU by
   the same code (:func:`validate.measure.step.measure_step` with ``device="cuda"``):
   ``torch.cuda.max_memory_allocated()`` over the second step (the allocator's view: its
   512-byte rounding and kernel workspaces included) and ``max_memory_reserved()`` (the
   segments it holds, fragmentation included), beside the live-tensor peak the same tracker
   sees on the GPU and the fake-tensor figure recorded on the CPU.

The file is written after every configuration, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import torch

from .measure import configs
from .measure.step import measure_step

RECORDED = configs.OUTPUT
# In this order (cheapest first): everything that fits one 141 GB H200 in the recorded set.
CHOSEN = (
    r"^step/gpt3-xl/reference-sdpa/(?!fsdp2)",
    r"^step/llama-2-7b/reference-sdpa/(?!fsdp2)",
    r"^step/llama-2-7b/hf-sdpa/(?!fsdp2)",
    r"^step/mistral-7b/reference-sdpa/(autocast-fp32|megatron-bf16|bf16-master-free-grads)/",
)


def _nvml_used() -> int | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0")
                                                        .split(",")[0] or 0))
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
    except Exception:  # no NVML: the stage still records PyTorch's figures
        return None


def _stage(name: str, baseline: int | None, out: list) -> None:
    torch.cuda.synchronize()
    used = _nvml_used()
    free, total = torch.cuda.mem_get_info()
    row = {
        "stage": name,
        "nvml_used_by_process": None if used is None or baseline is None else used - baseline,
        "cuda_used_on_device": total - free,
        "torch_allocated": torch.cuda.memory_allocated(),
        "torch_reserved": torch.cuda.memory_reserved(),
    }
    if row["nvml_used_by_process"] is not None:
        row["outside_torch_allocator"] = row["nvml_used_by_process"] - row["torch_reserved"]
    out.append(row)
    print(f"  {name:<40} used by process {row['nvml_used_by_process']}, reserved "
          f"{row['torch_reserved']}, outside the allocator {row.get('outside_torch_allocator')}",
          flush=True)


def overhead() -> list[dict]:
    """The stages of a process's GPU memory, before any training state exists."""
    import torch.distributed as dist
    import torch.nn.functional as F

    baseline = _nvml_used()  # before this process makes a CUDA context
    rows: list[dict] = []
    torch.empty(1, device="cuda")
    _stage("CUDA context, one tensor", baseline, rows)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    _stage("after a bf16 matrix product (cuBLAS)", baseline, rows)
    q = torch.randn(1, 32, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    _stage("after flash attention fwd+bwd", baseline, rows)
    del a, q
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    try:
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
        t = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(t)
        _stage("after an NCCL all-reduce (1 rank)", baseline, rows)
        dist.destroy_process_group()
    except Exception as e:  # record why, keep going
        rows.append({"stage": "NCCL", "error": repr(e)})
    gc.collect()
    torch.cuda.empty_cache()
    _stage("after empty_cache", baseline, rows)
    return rows


class _CudaPeak:
    """An observer for measure_step: the allocator's peaks over the second step."""

    def __init__(self) -> None:
        self.allocated = self.reserved = self.start_allocated = None

    def __call__(self, net, opt):
        return self

    def __enter__(self):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        self.start_allocated = torch.cuda.memory_allocated()
        return self

    def __exit__(self, *exc):
        torch.cuda.synchronize()
        self.allocated = torch.cuda.max_memory_allocated()
        self.reserved = torch.cuda.max_memory_reserved()
        return False


def steps(only: str | None, out_path: Path, doc: dict) -> None:
    recorded = {c["id"]: c for c in json.loads(RECORDED.read_text())["configurations"]}
    from trainmath.measured import estimate_of

    todo = []
    for pattern in ([only] if only else CHOSEN):
        todo += [c for c in configs.configurations() if re.search(pattern, c.id) and c not in todo]
    for c in todo:
        peak = _CudaPeak()
        start = time.perf_counter()
        row = {"id": c.id}
        try:
            m = measure_step(c.model, c.implementation, c.recipe, c.s, c.b, foreach=c.foreach,
                             fake=False, observer=peak, device="cuda")
            row |= {"cuda_max_allocated": peak.allocated, "cuda_max_reserved": peak.reserved,
                    "allocated_at_step_start": peak.start_allocated,
                    "tracker_peak_on_gpu": m["peak"]["bytes"], "phase_on_gpu": m["peak"]["phase"]}
            del m
        except torch.cuda.OutOfMemoryError as e:
            row["out_of_memory"] = str(e).splitlines()[0]
        rec = recorded.get(c.id)
        if rec:
            row["fake_peak_on_cpu"] = rec["measured"]["peak"]["bytes"]
            row["fake_phase_on_cpu"] = rec["measured"]["peak"]["phase"]
            est = estimate_of(rec)
            row["predicted_peak"] = -(-est.peak.bytes.n // 1) if est.peak else None
        row["seconds"] = round(time.perf_counter() - start, 1)
        doc["steps"].append(row)
        gc.collect()
        torch.cuda.empty_cache()
        out_path.write_text(json.dumps(doc, indent=1) + "\n")
        alloc = row.get("cuda_max_allocated")
        pred = row.get("predicted_peak")
        ratio = f"{alloc / pred:.4f}" if alloc and pred else "-"
        print(f"  {c.id:<62} max_allocated {alloc} predicted {pred} ratio {ratio} "
              f"({row['seconds']} s){' OOM' if 'out_of_memory' in row else ''}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validate.gpu", description=__doc__)
    parser.add_argument("output", type=Path)
    parser.add_argument("--only", metavar="REGEX", help="these configuration ids only")
    parser.add_argument("--skip-overhead", action="store_true")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("no CUDA device: this check runs on a GPU machine")
    props = torch.cuda.get_device_properties(0)
    doc = {"schema": "trainmath-gpu-check/1",
           "date": time.strftime("%Y-%m-%d"),
           "device": {"name": props.name, "total_memory": props.total_memory,
                      "torch": torch.__version__, "cuda": torch.version.cuda,
                      "python": platform.python_version()},
           "overhead": [], "steps": []}
    try:
        import transformers
        doc["device"]["transformers"] = transformers.__version__
    except ImportError:
        pass
    print(f"{props.name}, {props.total_memory} bytes, torch {torch.__version__}", flush=True)
    if not args.skip_overhead:
        doc["overhead"] = overhead()
        args.output.write_text(json.dumps(doc, indent=1) + "\n")
    steps(args.only, args.output, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
