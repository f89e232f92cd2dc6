"""trainmath.memory.peak: the moments of a step and the optimizer's temporaries.

Expected values from PyTorch's AdamW (torch/optim/adamw.py): the foreach path computes
torch._foreach_sqrt over every second moment at once; the single-tensor path holds the square
root and its quotient for one tensor at a time.
"""

import pytest

from trainmath.memory.peak import Moment, StepPeak, optimizer_temporaries
from trainmath.units import Bytes


def test_temporaries_of_each_path():
    assert optimizer_temporaries("foreach", 7 * 10**9) == Bytes(28 * 10**9)
    assert optimizer_temporaries("for-loop", 7 * 10**9, 131_072_000) == Bytes(8 * 131_072_000)
    assert optimizer_temporaries("fused", 7 * 10**9) == Bytes(0)
    assert optimizer_temporaries("foreach", 100, value_bytes=2) == Bytes(200)  # pure bf16 moments


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("loop", 10), "unknown optimizer implementation 'loop'; accepted: fused, foreach, for-loop"),
        (("for-loop", 10), "the for-loop path needs largest"),
        (("foreach", 10, 20), "largest 20 exceeds numel 10"),
        (("foreach", 0), "numel must be a positive whole number"),
    ],
)
def test_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        optimizer_temporaries(*args)


def test_the_peak_is_the_largest_moment_and_ties_go_to_the_earliest():
    a = Moment("backward", "a", (("x", Bytes(5)),))
    b = Moment("optimizer step", "b", (("x", Bytes(3)), ("y", Bytes(2))))
    c = Moment("optimizer step", "c", (("x", Bytes(4)),))
    step = StepPeak((a, b, c))
    assert step.peak is a and step.bytes == Bytes(5) and step.phase == "backward"
    assert b.as_dict() == {"x": Bytes(3), "y": Bytes(2)}
