"""Context parallelism in real code: DeepSpeed-Ulysses' ``DistributedAttention``, one rank of cp.

1. The method: on a fake process group (collectives move no data), fake tensors save what real
   tensors save for the Ulysses layers, and the backward reaches every parameter; the full-size
   records (``cp-saved/`` in docs/_data/measurements.json) are re-measured by
   test_measurements.py.
2. The library's per-rank prediction for ``--cp-kind ulysses`` agrees with each record:
   activations within 1%, the step's peak within 2% (tests/test_measured.py checks the same
   without torch). ``cp-step/`` records are two whole training steps of one rank.
3. The head-count rule: what DeepSpeed does where cp does not divide the heads, and that
   trainmath refuses such a layout naming the rule.
4. Ring attention (torch's ``context_parallel``) does not run on the CPU: the error, as
   docs/how-we-know.md states it.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("deepspeed")

from validate.measure import configs, shapes  # noqa: E402
from validate.measure.context import measure_cp_saved, measure_cp_step  # noqa: E402

TINY = dict(shapes.SHAPES["llama-3-8b"], layers=2, hidden=64, heads=8, kv_heads=4, ffn=96,
            vocab=101)


@pytest.mark.parametrize("cp", [2, 4])
def test_fake_tensors_save_what_real_tensors_save_under_ulysses(cp):
    fake = measure_cp_saved(TINY, 32, cp, backward=True)
    real = measure_cp_saved(TINY, 32, cp, backward=True, fake=False)
    assert fake == real
    assert fake["attention_ops"] == ["_scaled_dot_product_flash_attention_for_cpu.default"]


def test_fake_tensors_track_a_ulysses_step_as_real_tensors_do():
    fake = measure_cp_step(TINY, 32, 2)
    real = measure_cp_step(TINY, 32, 2, fake=False)
    assert fake == real


def test_the_library_predicts_every_ulysses_record():
    from trainmath.checks.measured import compare
    doc = json.loads(configs.OUTPUT.read_text())
    for kind in ("cp-saved", "cp-step"):
        records = [c for c in doc["configurations"] if c["kind"] == kind]
        assert {c["context_parallel"]["cp"] for c in records} == {2, 4, 8}
    records = [c for c in doc["configurations"] if c["kind"] in ("cp-saved", "cp-step")]
    for c in records:
        bad = [x.describe() for x in compare(c) if not x.ok]
        assert not bad, bad


def test_ulysses_keeps_the_output_projections_input_beside_o():
    """The one storage Ulysses adds to a ring's count: the second all-to-all's output, which
    the output projection saves, as large as O (s/cp tokens of all heads)."""
    from trainmath.memory.activations import layer_activations
    from trainmath.model.presets import preset
    m = measure_cp_saved("llama-3-8b", 8192, 4, layers=2)
    ring = layer_activations(preset("llama-3-8b"), 8192, 1, cp=4, implementation="megatron-te")
    o_bytes = 2 * 8192 // 4 * 4096
    assert m["per_layer"][1] - ring.total.n == o_bytes


def test_deepspeed_splits_indivisible_heads_unevenly_and_trainmath_refuses_them():
    """DeepSpeed 0.19.8 runs cp 3 over Llama-3-8B's 32 heads (8 KV heads): its uneven path
    (``uneven_heads_all2all``) gives rank 0 three of the eight KV groups, 12 query heads, not
    32/3. trainmath counts heads/cp on every rank, so it refuses the layout, naming the rule."""
    from trainmath.model.presets import preset
    from trainmath.parallel.layout import Layout, layout_problems
    m = measure_cp_saved("llama-3-8b", 8160, 3, layers=1)
    heads = {tuple(t[2]) for t in m["layer_tensors"] if t[0].startswith("_scaled_dot")}
    assert (1, 12, 8160, 128) in heads
    (p,) = layout_problems(preset("llama-3-8b"), Layout(cp=3, cp_kind="ulysses"))
    assert "heads / tp = 32 / 1 = 32 is not divisible by cp 3" in p.message


def test_deepspeed_refuses_more_ranks_than_kv_heads():
    """cp 16 over 8 KV heads: DistributedAttention asserts; trainmath allows it, each rank
    holding one KV head replicated (DeepSpeed's UlyssesSPAttentionHF), which is not measured."""
    with pytest.raises(AssertionError, match=r"key-value heads \(8\) must be at least the "
                                             r"sequence parallel size \(16\)"):
        measure_cp_saved("llama-3-8b", 8192, 16, layers=1)


def test_torch_ring_attention_needs_a_cuda_kernel():
    """torch.distributed.tensor.experimental.context_parallel shards SDPA's CUDA kernels
    (flash, efficient, cuDNN) only: the CPU's flash kernel has no sharding strategy."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=2, store=FakeStore())
    try:
        mesh = init_device_mesh("cpu", (2,))
        q, k, v = (torch.randn(1, 4, 64, 16, dtype=torch.bfloat16) for _ in range(3))
        with pytest.raises(NotImplementedError, match="_scaled_dot_product_flash_attention_for_cpu"
                                                      ".default does not have a sharding strategy"):
            with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
                torch.nn.functional.scaled_dot_product_attention(
                    *(t.detach().clone().requires_grad_() for t in (q, k, v)), is_causal=True)
    finally:
        dist.destroy_process_group()
