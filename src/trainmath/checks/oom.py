"""PyTorch's out-of-memory message, read into bytes.

PyTorch's caching allocator words the message by release (c10/cuda/CUDACachingAllocator.cpp and
its history: PRs #44742, #99699, #113481, #121932); each size is printed by its
``format_size``, in bytes, KiB, MiB or GiB with two decimals, so a figure is known to the unit's
half-hundredth. The forms read here:

- **since 2.1**: "Tried to allocate X. GPU N has a total capacity of Y of which Z is free.
  [Process P has W memory in use.] Including non-PyTorch memory, this process has W memory in
  use. Of the allocated memory A is allocated by PyTorch, [with G allocated in private pools
  (e.g., CUDA Graphs),] and R is reserved by PyTorch but unallocated." (2.1 printed "capacty");
- **before 2.1**: "Tried to allocate X (GPU N; Y total capacity; A already allocated; Z free;
  [M allowed;] T reserved in total by PyTorch)"; the oldest releases printed "C cached", the
  cached bytes beside the allocated ones (pytorch/pytorch#16417: 8.57 MiB allocated, 4.68 MiB
  cached);
- **cudaMallocAsync**: "Allocation on device N would exceed allowed memory. (out of memory)
  Currently allocated : A Requested : X Device limit : Y Free (according to CUDA): Z".

Lines may carry a ``[rankN]:`` or a worker's prefix, be wrapped, or sit inside a traceback: the
message is found wherever it is. Inside a container the process may be listed as "Process N"
with no "this process" line: a single such process holding at least the allocator's reserve is
taken as this one. "Tried to allocate" prints the block the allocator asked the
driver for (requests up to 1 MiB get 2 MiB, up to 10 MiB get 20 MiB, larger ones are rounded up
to 2 MiB), not the tensor.

>>> r = read_oom("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 388.00 MiB. "
...              "GPU 0 has a total capacity of 9.68 GiB of which 95.75 MiB is free. Including "
...              "non-PyTorch memory, this process has 9.54 GiB memory in use. Of the allocated "
...              "memory 6.61 GiB is allocated by PyTorch, and 2.57 GiB is reserved by PyTorch "
...              "but unallocated.")
>>> r.requested.n, r.fragmentation
(406847488, True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from ..units import Bytes

_UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE = r"(\d+(?:\.\d+)?) ?(bytes|KiB|MiB|GiB|TiB)"
#: NVML reports a process's memory it cannot read as a huge number: above this it is not a reading
_NVML_GARBAGE = 2**50


@dataclass(frozen=True)
class OomReading:
    """What an out-of-memory message says, in bytes (each as printed). ``process`` is None when
    the message has no figure for this process (or NVML's is not a reading); ``reserved`` is
    allocated plus reserved-but-unallocated."""

    form: str
    requested: Bytes
    capacity: Bytes
    free: Bytes
    allocated: Bytes
    reserved_unallocated: Bytes
    process: Bytes | None
    gpu_index: int | None = None
    #: the ``[rankN]`` the line carried, when it did
    rank: int | None = None
    #: bytes in CUDA Graphs' private pools, when the message says
    private_pools: Bytes | None = None
    #: other processes on the GPU, by PID
    others: tuple[tuple[int, Bytes], ...] = ()

    @property
    def reserved(self) -> Bytes:
        """What ``torch.cuda.memory_reserved()`` showed: allocated plus reserved but
        unallocated."""
        return self.allocated + self.reserved_unallocated

    @property
    def fragmentation(self) -> bool:
        """Whether the reserved but unallocated memory alone would have held the request: the
        allocator had the bytes, in blocks too small or split."""
        return self.reserved_unallocated >= self.requested

    @property
    def outside_allocator(self) -> Bytes | None:
        """What the process held beyond the allocator's reserve (context, NCCL, libraries)."""
        return None if self.process is None else self.process - self.reserved


def _b(value: str, unit: str) -> Bytes:
    return Bytes(Fraction(value) * _UNITS[unit])


def _flat(text: str) -> str:
    """The text on one line: line breaks, prefixes repeated on wrapped lines, and the carets
    and stars some consoles add, removed."""
    prefix = (r"^\s*(?:\[rank\d+\]:|\([^)]*pid=\d+\)\s*"
              r"(?:(?:ERROR|WARNING|INFO)\s+[\d\-: .]+\[[^\]]*\]\s*)?)")
    lines = [re.sub(prefix, "", line) for line in text.splitlines()]
    flat = " ".join(lines).replace("^", " ").replace("*", " ")
    return re.sub(r"\s+", " ", flat)


_MODERN = re.compile(
    r"Tried to allocate " + _SIZE + r"\. GPU (\d+) has a total capac(?:i)?ty of " + _SIZE
    + r" of which " + _SIZE + r" is free\. (?P<procs>.*?)(?:" + _SIZE + r" allowed; )?"
    r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch, (?:with " + _SIZE
    + r" allocated in private pools \(e\.g\., CUDA Graphs\), )?and " + _SIZE
    + r" is reserved by PyTorch but unallocated\.")
_OLD = re.compile(
    r"Tried to allocate " + _SIZE + r" \(GPU (\d+); " + _SIZE + r" total capacity; " + _SIZE
    + r" already allocated; " + _SIZE + r" free; (?:" + _SIZE + r" allowed; )?" + _SIZE
    + r" (reserved in total by PyTorch|cached)\)")
_ASYNC = re.compile(
    r"Allocation on device (\d+) would exceed allowed memory\. \(out of memory\) Currently "
    r"allocated ?: " + _SIZE + r" Requested ?: " + _SIZE + r" Device limit ?: " + _SIZE
    + r" Free \(according to CUDA\) ?: " + _SIZE)
_PROCESS = re.compile(r"(?:Process (\d+)|Including non-PyTorch memory, this process) has "
                      + _SIZE + r" memory in use\.")
_RANK = re.compile(r"\[rank(\d+)\]")


def read_oom(text: str) -> OomReading:
    """The first out-of-memory message in ``text`` (module docstring); a ValueError says what
    was expected when there is none."""
    if not isinstance(text, str):
        raise ValueError(f"an out-of-memory message is text, got {text!r}")
    flat = _flat(text)
    rank = _RANK.search(text)
    rank_n = int(rank.group(1)) if rank else None
    m = _MODERN.search(flat)
    if m:
        g = m.groups()
        own, others = None, []
        for pid, value, unit in _PROCESS.findall(m.group("procs")):
            size = _b(value, unit)
            if size.n >= _NVML_GARBAGE:
                continue
            if pid:
                others.append((int(pid), size))
            else:
                own = size
        if own is not None and not own.n:  # "this process has 0 bytes": NVML could not see it
            own = None
        reserved = _b(g[10], g[11]) + _b(g[14], g[15])
        if own is None and len(others) == 1 and others[0][1] >= reserved:
            own, others = others[0][1], []  # in a container the process is listed by PID alone
        return OomReading(
            "since 2.1", _b(g[0], g[1]), _b(g[3], g[4]), _b(g[5], g[6]),
            allocated=_b(g[10], g[11]), reserved_unallocated=_b(g[14], g[15]), process=own,
            gpu_index=int(g[2]), rank=rank_n,
            private_pools=_b(g[12], g[13]) if g[12] else None, others=tuple(others))
    m = _OLD.search(flat)
    if m:
        g = m.groups()
        allocated, held = _b(g[5], g[6]), _b(g[11], g[12])
        # "reserved in total" counts the allocated bytes too; the oldest "cached" does not
        unallocated = held if g[13] == "cached" else held - allocated
        return OomReading("oldest (cached)" if g[13] == "cached" else "before 2.1", _b(g[0], g[1]),
                          _b(g[3], g[4]), _b(g[7], g[8]), allocated=allocated,
                          reserved_unallocated=unallocated, process=None, gpu_index=int(g[2]),
                          rank=rank_n)
    m = _ASYNC.search(flat)
    if m:
        g = m.groups()
        allocated = _b(g[1], g[2])
        return OomReading("cudaMallocAsync", _b(g[3], g[4]), _b(g[5], g[6]), _b(g[7], g[8]),
                          allocated=allocated, reserved_unallocated=Bytes(0), process=None,
                          gpu_index=int(g[0]), rank=rank_n)
    start = flat.find("out of memory")
    found = repr(flat[max(0, start - 20):start + 120]) if start >= 0 else repr(flat[:120])
    raise ValueError("no PyTorch out-of-memory message found; expected \"CUDA out of memory. "
                     "Tried to allocate X. GPU N has a total capacity of ...\" (or the older \"Tried "
                     f"to allocate X (GPU N; ... total capacity; ...)\"), got {found}")
