"""bitsandbytes' optimizer states, tensor by tensor: 32-bit and 8-bit, paged or not.

The Hugging Face Trainer's ``--optim`` names map onto one class, ``bitsandbytes.optim.AdamW``
(transformers ``trainer.py``, ``get_optimizer_cls_and_kwargs``: ``is_paged`` when the name
holds "paged", ``optim_bits = 8`` when it holds "8bit"): ``paged_adamw_32bit`` is
``AdamW(optim_bits=32, is_paged=True)``, ``paged_adamw_8bit`` is ``AdamW(optim_bits=8,
is_paged=True)`` and ``adamw_bnb_8bit`` is ``AdamW(optim_bits=8)``, not paged.

What ``Optimizer2State.init_state`` (``bitsandbytes/optim/optimizer.py``, release 0.50.1) keeps
for one parameter tensor of n elements, made at the first ``step()``:

- **32-bit**: ``state1`` and ``state2`` (Adam's m and v) in float32, whatever the parameter's
  dtype: 8 bytes per element, so bf16 adapters still carry fp32 moments;
- **8-bit**: ``state1`` and ``state2`` in uint8 (2 bytes per element) and ``absmax1``,
  ``absmax2``: one float32 per block of :data:`BLOCK_8BIT` elements each (256 since release
  0.44.0, pull request 1365; 2048 through 0.43, :data:`BLOCK_8BIT_BEFORE_044`); a tensor with
  fewer than :data:`MIN_8BIT_SIZE` elements (``min_8bit_size=4096``) falls back to 32-bit
  states. The two 256-entry quantisation maps are shared by every tensor (not counted);
- **paged**: ``get_state_buffer`` allocates ``state1`` and ``state2`` with ``F.get_paged``
  (``cudaMallocManaged``, CUDA unified memory) only when ``p.numel() >= 1e5``
  (:data:`PAGE_MIN_NUMEL`); smaller tensors' states, and every ``absmax``, are ordinary CUDA
  tensors from PyTorch's allocator.

Managed memory is outside PyTorch's caching allocator, and bitsandbytes wraps it with
``torch.frombuffer`` over a numpy array, so PyTorch sees a CPU tensor: the paged states are not
in ``torch.cuda.max_memory_allocated()`` or ``max_memory_reserved()``. While they are resident on
the GPU they are in the process's figure nvidia-smi shows; under memory pressure the driver
evicts them to CPU memory page by page and ``prefetch_state`` brings them back before each
update (Dettmers et al. 2023, §3 "Paged Optimizers"). The sizes, the shared maps and the
paging rule are checked against bitsandbytes 0.50.2's own buffers on the CPU
(``validate/test_bnb_optim.py``); which figure paged memory lands in comes from the code and has
not been measured on a GPU here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..units import Bytes, choice, positive_int

#: ``get_state_buffer``: a state is paged only when its parameter has at least this many
#: elements (``if not self.is_paged or p.numel() < 1e5: return torch.zeros_like(...)``).
PAGE_MIN_NUMEL = 100_000
#: ``Optimizer2State(min_8bit_size=4096)``: smaller tensors keep 32-bit states in an 8-bit optimizer.
MIN_8BIT_SIZE = 4096
#: Elements per fp32 ``absmax`` of an 8-bit state since bitsandbytes 0.44.0 (pull request 1365,
#: "Change 8bit optimizer blocksize 2048->256").
BLOCK_8BIT = 256
#: The block through bitsandbytes 0.43 (``blocks = n // 2048``), the release QLoRA pinned (0.40.0).
BLOCK_8BIT_BEFORE_044 = 2048
#: Adam's two states, m and v.
ADAM_STATES = 2


@dataclass(frozen=True)
class StateBytes:
    """One or more tensors' optimizer states: in CUDA managed memory (``paged``) and in
    PyTorch's allocator (``allocated``)."""

    paged: Bytes
    allocated: Bytes

    @property
    def total(self) -> Bytes:
        """Both together: what the states take while resident on the GPU."""
        return self.paged + self.allocated

    def __add__(self, other: "StateBytes") -> "StateBytes":
        return StateBytes(self.paged + other.paged, self.allocated + other.allocated)


def tensor_states(numel: int, *, bits: int, paged: bool, block: int = BLOCK_8BIT) -> StateBytes:
    """The AdamW states bitsandbytes keeps for one parameter tensor of ``numel`` elements.

    A LoRA A of rank 16 over 4096 inputs (65,536 elements) is under the paging threshold, so
    even ``paged_adamw_32bit`` keeps its 8 bytes per element in the allocator; at rank 64
    (262,144 elements) they are paged:

    >>> tensor_states(16 * 4096, bits=32, paged=True)
    StateBytes(paged=Bytes(n=0), allocated=Bytes(n=524288))
    >>> tensor_states(64 * 4096, bits=32, paged=True).paged.n
    2097152
    >>> tensor_states(64 * 4096, bits=8, paged=False).allocated.n  # 2 bytes each + 2 absmax per 256
    532480
    """
    n = positive_int("numel", numel)
    choice("optimizer bits", bits, (8, 32))
    block = positive_int("block", block)
    if bits == 8 and n >= MIN_8BIT_SIZE:
        states = Bytes(ADAM_STATES * n)
        absmax = Bytes(ADAM_STATES * 4 * -(-n // block))
    else:
        states, absmax = Bytes(ADAM_STATES * 4 * n), Bytes(0)
    if paged and n >= PAGE_MIN_NUMEL:
        return StateBytes(states, absmax)
    return StateBytes(Bytes(0), states + absmax)


def states_of(numels, *, bits: int, paged: bool, block: int = BLOCK_8BIT) -> StateBytes:
    """:func:`tensor_states` summed over parameter tensors of ``numels`` elements each."""
    total = StateBytes(Bytes(0), Bytes(0))
    for n in numels:
        total = total + tensor_states(n, bits=bits, paged=paged, block=block)
    return total
