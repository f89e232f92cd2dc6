"""Issue 24's techniques in real PyTorch: a chunked loss and activations offloaded to host memory.

1. The method: fake tensors measure the chunked loss and the offloading hooks as real tensors
   do (a tiny model, whole steps), so the full-size records (``chunked-loss-step/``,
   ``act-offload-step/`` in docs/_data/measurements.json, re-measured by test_measurements.py)
   are what PyTorch would allocate.
2. The loss's backward, alone, on real tensors: the bytes above its start are what
   :func:`trainmath.memory.loss.loss_memory` says, both of its cases (the first chunk's fp32
   gradients, the second chunk's weight gradients accumulated out of place).
3. What the hooks move: every saved tensor of the embedding, layers and final norm, and what
   stays is what the library keeps on the device.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from validate.measure.techniques import (SavedOnDevice, chunked_cross_entropy,  # noqa: E402
                                         measure_technique)
from validate.measure.tracking import AllocationTracker  # noqa: E402

TINY = {"name": "tiny", "family": "llama", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
        "ffn": 96, "vocab": 1001, "mlp": "swiglu", "norm": "rmsnorm", "bias": False,
        "tied_embeddings": False, "positions": 0, "dropout": False, "dropout_p": 0.0,
        "norm_eps": 1e-5, "rope_theta": 10000.0, "sliding_window": 0, "source": ""}


@pytest.mark.parametrize("kw", [dict(loss="chunked", chunks=4), dict(offload=True),
                                dict(loss="chunked", chunks=4, offload=True)],
                         ids=["chunked", "offload", "both"])
def test_fake_tensors_measure_the_techniques_as_real_tensors_do(kw):
    fake = measure_technique(TINY, "reference-sdpa", "zero-bf16", 64, **kw)
    real = measure_technique(TINY, "reference-sdpa", "zero-bf16", 64, fake=False, **kw)
    assert fake == real
    if kw.get("offload"):
        assert real["host"]["after_forward"] > 0


def _loss_backward(T: int, h: int, V: int, chunks: int) -> tuple[int, int]:
    """Bytes above the start of the loss's forward at its forward peak, and above the start of
    its backward at the backward's peak, real tensors."""
    hidden = torch.randn(1, T, h, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.nn.Parameter(torch.randn(V, h, dtype=torch.bfloat16) * h ** -0.5)
    targets = torch.randint(0, V, (1, T))
    tracker = AllocationTracker(vocab=V)
    with tracker:
        tracker.tag([hidden, weight], "parameters")
        start = tracker.current
        loss = chunked_cross_entropy(hidden, weight, targets, chunks)
        forward = tracker.peak - start
        tracker.set_phase("backward")
        base = tracker.current
        tracker.reset_peak()
        loss.backward()
        return forward, tracker.peak - base


@pytest.mark.parametrize("T,h,V,chunks", [(2048, 256, 4096, 8), (512, 1024, 8192, 8),
                                           (512, 1024, 8192, 4), (512, 256, 4096, 1)])
def test_the_chunked_loss_holds_what_the_library_says(T, h, V, chunks):
    from trainmath.memory.loss import loss_memory

    m = loss_memory("chunked" if chunks > 1 else "standard", tokens=T, vocab=V, hidden=h,
                    chunks=chunks if chunks > 1 else None)
    forward, backward = _loss_backward(T, h, V, chunks)
    saved = 4 * T * V  # every chunk's fp32 log-softmax, saved until the backward
    assert forward - saved == pytest.approx(m.forward.n, rel=0.01)
    assert backward == pytest.approx(m.backward.n, rel=0.01)


def test_offloading_hooks_keep_the_head_and_move_the_rest():
    """With the hooks, the bytes left saved on the device are the library's: the loss's and
    the LM head's tensors; the rest is host memory."""
    from trainmath.checks.measured import shape_of
    from trainmath.memory.act_offload import offloaded_activations
    from trainmath.memory.stages import stage_activations

    m = measure_technique(TINY, "reference-sdpa", "zero-bf16", 64, offload=True, fake=False)
    shape = shape_of({"shape": TINY})
    device, host = offloaded_activations(stage_activations(shape, 64, 1,
                                                           implementation="megatron-te"))
    assert m["saved"] == device.total.n
    assert m["host"]["after_forward"] == host.n


def test_the_hooks_count_every_saved_storage_once():
    """Under the hooks without offloading, the saved bytes are those the saved-tensor counter
    of validate/measure/saved.py records for the same model."""
    from validate.measure.saved import measure_saved

    plain = measure_technique(TINY, "reference-sdpa", "zero-bf16", 64)
    assert plain["saved"] == measure_saved(TINY, "reference-sdpa", 64, precision="bf16")["total"]


def test_a_tensor_under_the_threshold_stays_on_the_device():
    """torchtune's and TRL's min_offload_size: 1024 bytes."""
    from validate.measure.techniques import HostTracker

    tracker = HostTracker()
    small = torch.randn(8, requires_grad=True)  # 32 bytes
    large = torch.randn(512, requires_grad=True)  # 2048 bytes
    with tracker:
        hooks = SavedOnDevice(tracker, [], offload=True)
        with hooks.hooks():
            y = (small * small).sum() + (large * large).sum()
        assert hooks.saved() == 32 and tracker.host == 2048
        y.backward()
