"""A framework's memory log line, read into the counters it reports.

Each framework prints PyTorch's counters in its own words and units (the code that formats each
is named):

- **Megatron-LM** ``report_memory`` (``megatron/training/utils.py``): "memory (MB) | allocated: A | max allocated: M | reserved:
  R | max reserved: X", in MiB despite the label (``torch.cuda.memory_allocated() / 2**20``);
- **Megatron-Bridge** (NeMo 2, ``src/megatron/bridge/training/utils/train_utils.py``): "memory (GB) | mem-allocated-gigabytes: A | … |
  mem-max-allocated-gigabytes: M | …", decimal GB (10^9), five significant digits;
- **torchtitan** (``torchtitan/components/metrics.py``): "memory: 33.21GiB(34.95%)", the peak reserved since the last log, in GiB;
- **DeepSpeed** ``see_memory_usage`` (``deepspeed/runtime/utils.py``): "MA 4.96 GB Max_MA 5.09 GB CA 6.39 GB Max_CA 6 GB",
  GiB labelled GB (``/ 2**30``), Max_CA rounded to a whole number;
- **torchtune** (``torchtune/training/memory.py``): "GPU peak memory allocation: 4.98 GiB / GPU peak memory reserved: 5.12 GiB"
  (older releases: GB = 10^9);
- **verl** (``verl/utils/debug/performance.py``): "memory allocated (GB): A, memory reserved
  (GB): R", GiB labelled GB;
- **nvidia-smi**: a process row ``… python 2629MiB |``, or the device's ``2631MiB / 16160MiB``
  (every process on the GPU together: the process's own figure when it is the only one).

:func:`read_log` finds every line it knows in a text and returns the readings, each named by the
counter it is (:data:`COUNTERS`): "allocated" (``max_memory_allocated``), "reserved"
(``max_memory_reserved``) or "process" (nvidia-smi).

Megatron-LM's MiB: 65,203.93359375 × 2^20 bytes allocated at most, 74,306 × 2^20 reserved:

>>> [(r.framework, r.counter, int(r.value.n)) for r in read_log(
...     "[Rank 0] (after 10 iterations) memory (MB) | allocated: 24761.0 | max allocated: "
...     "65203.93359375 | reserved: 64438.0 | max reserved: 74306.0")]
[('Megatron-LM', 'allocated', 68371279872), ('Megatron-LM', 'reserved', 77915488256)]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from ..units import Bytes

#: The counters a reading can be: the allocator's peaks and nvidia-smi's figure.
COUNTERS = ("allocated", "reserved", "process")

_GIB, _MIB, _GB = 2**30, 2**20, 10**9
_NUM = r"(\d+(?:\.\d+)?)"


@dataclass(frozen=True)
class Reading:
    """One figure a framework printed: which framework, which counter, its value in bytes, and
    the text it was read from."""

    framework: str
    counter: str
    value: Bytes
    text: str


def _bytes(number: str, unit: int) -> Bytes:
    return Bytes(round(Fraction(number) * unit))


_PATTERNS = [
    ("Megatron-LM", re.compile(r"memory \(MB\) \| allocated: " + _NUM + r" \| max allocated: "
                               + _NUM + r" \| reserved: " + _NUM + r" \| max reserved: " + _NUM),
     lambda m: [("allocated", _bytes(m[2], _MIB)), ("reserved", _bytes(m[4], _MIB))]),
    ("Megatron-Bridge", re.compile(r"mem-max-allocated-gigabytes: " + _NUM + r".*?"
                                   r"mem-max-reserved-gigabytes: " + _NUM),
     lambda m: [("allocated", _bytes(m[1], _GB)), ("reserved", _bytes(m[2], _GB))]),
    ("torchtitan", re.compile(r"\bmemory:\s*" + _NUM + r"GiB\(\s*" + _NUM + r"%\)"),
     lambda m: [("reserved", _bytes(m[1], _GIB))]),
    ("DeepSpeed", re.compile(r"\bMA " + _NUM + r" GB\s+Max_MA " + _NUM + r" GB\s+CA " + _NUM
                             + r" GB\s+Max_CA " + _NUM + r" GB"),
     lambda m: [("allocated", _bytes(m[2], _GIB)), ("reserved", _bytes(m[4], _GIB))]),
    ("torchtune", re.compile(r"GPU peak memory allocation: " + _NUM + r" (GiB|GB)\s+GPU peak "
                             r"memory reserved: " + _NUM + r" (GiB|GB)"),
     lambda m: [("allocated", _bytes(m[1], _GIB if m[2] == "GiB" else _GB)),
                ("reserved", _bytes(m[3], _GIB if m[4] == "GiB" else _GB))]),
    ("verl", re.compile(r"memory allocated \(GB\): " + _NUM + r", memory reserved \(GB\): " + _NUM),
     lambda m: [("allocated", _bytes(m[1], _GIB)), ("reserved", _bytes(m[2], _GIB))]),
    ("nvidia-smi", re.compile(r"\|\s+\d+\s+\S+\s+\S+\s+\d+\s+[CG]\s+\S+\s+(\d+)MiB\s*\|"),
     lambda m: [("process", _bytes(m[1], _MIB))]),
    # the device's row: every process on the GPU together (one process a GPU: its figure)
    ("nvidia-smi (device)", re.compile(r"\|\s+(\d+)MiB\s*/\s*\d+MiB\s*\|"),
     lambda m: [("process", _bytes(m[1], _MIB))]),
]


def read_log(text: str) -> tuple[Reading, ...]:
    """Every memory reading of a framework's log in ``text`` (module docstring); a ValueError
    names the formats expected when there is none."""
    if not isinstance(text, str):
        raise ValueError(f"a log is text, got {text!r}")
    flat = re.sub(r"\s*\n\s*", " ", text)
    found: list[Reading] = []
    for name, pattern, read in _PATTERNS:
        for m in pattern.finditer(flat):
            found += [Reading(name, counter, value, m.group(0)) for counter, value in read(m)]
    if not found:
        raise ValueError("no memory log line found; accepted: Megatron-LM's \"memory (MB) | "
                         "allocated: … | max reserved: …\", Megatron-Bridge's \"mem-max-"
                         "allocated-gigabytes: …\", torchtitan's \"memory: 33.21GiB(34.95%)\", "
                         "DeepSpeed's \"MA … GB Max_MA … GB CA … GB Max_CA … GB\", torchtune's "
                         "\"GPU peak memory allocation: … GiB\", verl's \"memory allocated (GB): "
                         "…\", or an nvidia-smi process row")
    return tuple(found)
