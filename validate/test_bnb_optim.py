"""bitsandbytes' optimizer states against trainmath.memory.bnb_optim, on the CPU.

The states are the real ones: a ``bitsandbytes.optim`` optimizer takes one ``step()`` over
parameters of chosen sizes and every tensor it keeps per parameter is counted (``nbytes``). The
quantisation maps (``qmap1``, ``qmap2``) are counted once per optimizer, because every
parameter's entry points at the same tensor: the test checks that too. On the CPU bitsandbytes
never pages (``get_state_buffer`` falls back to ``zeros_like`` with a warning), so the paging
rule is checked on its own: the real ``get_state_buffer`` is called with fake CUDA tensors
(``FakeTensorMode``, no GPU) and ``F.get_paged``, which would call ``cudaMallocManaged``, is
replaced by a recorder. Which figure paged memory lands in (nvidia-smi's, not
``max_memory_allocated``) needs a GPU and is not checked here.
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
bnb = pytest.importorskip("bitsandbytes")

from trainmath.memory import bnb_optim  # noqa: E402

# Sizes on both sides of each threshold: min_8bit_size (4096), a whole and a partial 256-block,
# the paging threshold (1e5), and LoRA matrices of rank 16 and 64 over 4096 inputs.
SIZES = (100, 4095, 4096, 5000, 99_999, 100_000, 262_145, 16 * 4096, 64 * 4096)
OPTIMIZERS = {  # class: (bits, paged) as trainmath names them
    "AdamW": (32, False),
    "AdamW8bit": (8, False),
    "PagedAdamW32bit": (32, True),
    "PagedAdamW8bit": (8, True),
}


def _stepped(cls_name: str, sizes):
    params = [torch.nn.Parameter(torch.zeros(n)) for n in sizes]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Paged optimizers are not supported on CPU"
        opt = getattr(bnb.optim, cls_name)(params)
        for p in params:
            p.grad = torch.ones_like(p)
        opt.step()
    return params, opt


@pytest.mark.parametrize("cls_name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("numel", SIZES)
def test_state_bytes_per_tensor_equal_bitsandbytes(cls_name, numel):
    bits, paged = OPTIMIZERS[cls_name]
    (p,), opt = _stepped(cls_name, [numel])
    kept = sum(v.nbytes for k, v in opt.state[p].items()
               if torch.is_tensor(v) and not k.startswith("qmap"))
    predicted = bnb_optim.tensor_states(numel, bits=bits, paged=paged)
    assert predicted.total.n == kept, (cls_name, numel, predicted, kept)


@pytest.mark.parametrize("cls_name", ["AdamW8bit", "PagedAdamW8bit"])
def test_quantisation_maps_are_shared_by_every_tensor(cls_name):
    params, opt = _stepped(cls_name, [5000, 262_145])
    ptrs = {(k, opt.state[p][k].data_ptr()) for p in params for k in ("qmap1", "qmap2")}
    assert len(ptrs) == 2  # one qmap1 and one qmap2 for the whole optimizer


def test_8bit_absmax_block_is_the_library_block():
    (p,), opt = _stepped("AdamW8bit", [262_145])
    assert opt.state[p]["absmax1"].numel() == -(-262_145 // bnb_optim.BLOCK_8BIT)


@pytest.mark.parametrize("numel", [99_999, 100_000, 16 * 4096, 64 * 4096])
def test_paging_rule_is_get_state_buffer_s(numel, monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensorMode
    import bitsandbytes.functional as F

    paged_calls = []

    def fake_get_paged(*shape, dtype=torch.float32, device=None):
        paged_calls.append(shape)
        return torch.empty(*shape, dtype=dtype, device=device)

    monkeypatch.setattr(F, "get_paged", fake_get_paged)
    monkeypatch.setattr(F, "fill", lambda buff, value: None)
    opt = bnb.optim.PagedAdamW32bit([torch.nn.Parameter(torch.zeros(8))])
    with FakeTensorMode(allow_non_fake_inputs=True):
        p = torch.empty(numel, device="cuda")
        opt.get_state_buffer(p, dtype=torch.float32)
    predicted = bnb_optim.tensor_states(numel, bits=32, paged=True)
    assert bool(paged_calls) == (predicted.paged.n > 0), (numel, paged_calls, predicted)
