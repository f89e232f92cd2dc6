"""Offload's memory tiers (trainmath.memory.offload): CPU memory and NVMe per node, DeepSpeed's
pinned swap buffers, and the verdict over the tiers, against the published offload claims.

Expected values come from the sources, not from running the code:

- DeepSpeed v0.19.5 ``deepspeed/runtime/zero/offload_config.py``: offload_param buffer_count 5,
  buffer_size 1e8, pin_memory True; offload_optimizer buffer_count 4 ("Adam optimizer has 4
  states"); ``deepspeed/runtime/zero/config.py``: sub_group_size 1e9.
- DeepSpeed's ``estimate_zero3_model_states_mem_needs`` (stage3.py): 18 bytes a parameter of host
  memory with offload_param (and zero_init), 16 with the optimizer only (the 1.5 buffer factor
  aside); ``stage_1_and_2.py``: 16 bytes a parameter with ZeRO-2 offload.
- ZeRO-Offload (Ren et al. 2021, abstract): "over 13 billion parameters on a single GPU"; the
  DeepSpeed ZeRO-3 Offload post (docs/_posts/2021-03-08-zero3-offload.md): a 32GB V100 with 1.5TB
  of CPU memory.
- ZeRO-Infinity (Rajbhandari et al. 2021, abstract): a trillion parameters fine-tuned on one DGX-2
  node; the DeepSpeed ZeRO-Inference post (docs/_posts/2022-09-10-zero-inference.md): a DGX-2 has
  1.5TB of CPU DRAM and 30TB of NVMe; 16 V100 GPUs of 32GB each.
"""

import pytest

from trainmath.cli.command import main
from trainmath.memory.offload import (OPTIMIZER_BUFFER_COUNT, PARAM_BUFFER_COUNT,
                                      PARAM_BUFFER_ELEMENTS, PIN_MEMORY, SUB_GROUP_ELEMENTS, Tier,
                                      Tiers, swap_buffers, tier_needs, verdict)
from trainmath.problems import Invalid
from trainmath.runs.description import run
from trainmath.runs.estimates import estimate
from trainmath.units import GB, Bytes, parse_bytes

DGX2_GPUS, DGX2_CPU, DGX2_NVME = 16, "1.5TB", "30TB"


def test_deepspeed_defaults():
    assert (PARAM_BUFFER_COUNT, PARAM_BUFFER_ELEMENTS) == (5, 10**8)
    assert OPTIMIZER_BUFFER_COUNT == 4 and SUB_GROUP_ELEMENTS == 10**9 and PIN_MEMORY is True


def test_swap_buffers_at_the_defaults():
    # 4 fp32 buffers of a 1e9-element sub-group, and 5 × 1e8 16-bit parameter elements
    assert swap_buffers(offload="optimizer", partition_params=10**12, weight_bytes=2) == Bytes(16 * GB)
    assert swap_buffers(offload="parameters", partition_params=10**12, weight_bytes=2) == Bytes(17 * GB)
    # a partition smaller than a sub-group: the buffers hold the partition
    assert swap_buffers(offload="optimizer", partition_params=10**8, weight_bytes=2) == Bytes(16 * 10**8)


def test_tier_needs_cpu_and_nvme():
    host = Bytes(18 * 10**9)
    assert tier_needs(host, offload_to="cpu", offload="parameters", gpus=2, partition_params=10**9,
                      weight_bytes=2) == (Bytes(36 * GB), Bytes(0))
    assert tier_needs(host, offload_to="nvme", offload="parameters", gpus=2, partition_params=10**9,
                      weight_bytes=2) == (Bytes(34 * GB), Bytes(36 * GB))


def test_verdict_names_the_tier():
    gpu, cpu = Tier("GPU", Bytes(10), Bytes(20)), Tier("CPU memory", Bytes(30), Bytes(20))
    assert verdict((gpu, cpu)) == (False, cpu)
    roomy = Tier("CPU memory", Bytes(11), Bytes(100))
    assert verdict((gpu, roomy)) == (True, gpu)  # the least to spare decides
    assert verdict((Tier("GPU", Bytes(1), None),)) == (None, None)


def test_zero_offload_13b_on_one_v100():
    # ZeRO-Offload: 13B on one 32GB V100 (mixed-precision Adam, ZeRO-2 + offload_optimizer),
    # 1.5TB of CPU memory: the GPU keeps the 2-byte weights, the CPU 16 bytes a parameter
    e = estimate(run(13_000_000_000, recipe="fp16-mixed", zero_stage=2, offload="optimizer",
                     gpu_memory="32GB", gpus_per_node=1, host_memory=DGX2_CPU))
    assert e.device.weights == Bytes(2 * 13 * GB)
    assert e.host == Bytes(16 * 13 * GB)
    assert e.fits is True
    gpu, cpu, _ = e.tiers
    assert gpu.fits and cpu.fits and e.deciding_tier.name == "GPU"


def _one_trillion(**tiers):
    return estimate(run(10**12, recipe="deepspeed", zero_stage=3, offload="parameters",
                        dp=DGX2_GPUS, gpu_memory="32GB", gpus_per_node=DGX2_GPUS, **tiers))


def test_zero_infinity_1t_needs_nvme():
    # 18 bytes a parameter of offloaded state (DeepSpeed's estimator): 18 TB per node
    without = _one_trillion(host_memory=DGX2_CPU)
    assert without.host * DGX2_GPUS == Bytes(18 * 10**12)
    assert without.fits is False and without.deciding_tier.name == "CPU memory"
    with_nvme = _one_trillion(host_memory=DGX2_CPU, offload_to="nvme", nvme=DGX2_NVME)
    assert with_nvme.fits is True
    gpu, cpu, nvme = with_nvme.tiers
    assert nvme.need == Bytes(18 * 10**12)
    assert cpu.need == Bytes(DGX2_GPUS * 17 * GB)  # the pinned swap buffers, 17 GB a GPU
    too_small = _one_trillion(host_memory=DGX2_CPU, offload_to="nvme", nvme="10TB")
    assert too_small.fits is False and too_small.deciding_tier.name == "NVMe"


def test_tiers_are_checked():
    with pytest.raises(Invalid, match="needs ZeRO stage 3"):
        run(7e9, zero_stage=2, offload="optimizer", offload_to="nvme")
    with pytest.raises(Invalid, match="nothing is offloaded"):
        run(7e9, offload_to="nvme")
    with pytest.raises(Invalid, match="gpus_per_node"):
        run(7e9, zero_stage=2, offload="optimizer", host_memory="1TB")
    with pytest.raises(ValueError, match="offload device"):
        Tiers("disk")
    with pytest.raises(ValueError, match="above 0"):
        Tiers("cpu", Bytes(0))
    assert parse_bytes(DGX2_NVME) == Bytes(30 * 10**12)


def test_command_names_the_tier(capsys):
    base = ["estimate", "--params", "1e12", "--dp", "16", "--zero", "3", "--recipe", "deepspeed",
            "--offload", "params", "--gpu-memory", "32GB", "--gpus-per-node", "16",
            "--host-memory", DGX2_CPU]
    main(base)
    assert "does not fit: decided by CPU memory" in capsys.readouterr().out
    main(base + ["--offload-to", "nvme", "--nvme", DGX2_NVME])
    assert "fits: decided by NVMe" in capsys.readouterr().out
