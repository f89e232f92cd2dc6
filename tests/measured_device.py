"""What the H200 measured outside the tensors (docs/_data/gpu-check.json), for the tests that
hold a fit or a process figure against it: the median ratio of reserved to allocated over the
recorded steps, the CUDA context with one tensor, what the first GEMM and flash attention load,
and what one NCCL communicator adds."""

import json
import statistics
from pathlib import Path

GPU = json.loads((Path(__file__).parents[1] / "docs/_data/gpu-check.json").read_text())
_STEPS = [s for s in GPU["steps"] if "cuda_max_allocated" in s]
RATIO = statistics.median(s["cuda_max_reserved"] / s["cuda_max_allocated"] for s in _STEPS)
_O = {o["stage"]: o for o in GPU["overhead"]}
CONTEXT = _O["CUDA context, one tensor"]["nvml_used_by_process"]
KERNELS = (_O["after flash attention fwd+bwd"]["outside_torch_allocator"]
           - _O["CUDA context, one tensor"]["outside_torch_allocator"])
NCCL = (_O["after an NCCL all-reduce (1 rank)"]["outside_torch_allocator"]
        - _O["after flash attention fwd+bwd"]["outside_torch_allocator"])


def process(peak: int, communicators: int = 0, nvls: int = 0) -> float:
    """nvidia-smi's figure, typical: the peak times the measured ratio, the context and the
    kernels, and per communicator what one added (NVLS's per-rank buffers: vllm#9699)."""
    return peak * RATIO + CONTEXT + KERNELS + communicators * NCCL + nvls * 301_989_888
