"""Offload's PCIe traffic per step (trainmath.time.offload) against the papers' counts.

ZeRO-Offload (Ren et al. 2021, §4.1, Figure 2): per step the GPU sends the 16-bit gradients
(2M bytes for M parameters) to the CPU and receives the 16-bit parameters (2M), "4M" in all.
ZeRO-Infinity (Rajbhandari et al. 2021, §5): the 16-bit parameters come in for the forward and
for the backward, and the gradients go out. The link rates are half the datasheets' two-way
figures.
"""

from __future__ import annotations

import pytest

from trainmath.hardware import pcie
from trainmath.runs.description import run
from trainmath.runs.estimates import estimate
from trainmath.time.offload import offload_traffic
from trainmath.units import GB

M = 10_000_000_000  # ZeRO-Offload's 10B model on one V100


def test_zero_offload_moves_4m_bytes_a_step():
    t = offload_traffic("optimizer", M, weight_bytes=2, gradient_bytes=2)
    assert t.to_host.n == 2 * M and t.to_gpu.n == 2 * M
    assert t.to_host.n + t.to_gpu.n == 4 * M
    assert t.seconds is None  # no link given


def test_zero_infinity_fetches_parameters_twice_and_sends_gradients_once():
    t = offload_traffic("parameters", M, weight_bytes=2, gradient_bytes=2, rate=16 * GB)
    assert (t.to_gpu.n, t.to_host.n) == (4 * M, 2 * M)
    assert t.seconds == pytest.approx(4 * M / (16 * GB))


@pytest.mark.parametrize(("kind", "two_way"), [("a100-sxm", 64), ("h100-sxm", 128), ("h200", 128)])
def test_pcie_each_way_is_half_the_datasheet_figure(kind, two_way):
    assert pcie(kind)[0] == two_way * GB / 2


def test_an_estimate_with_data_parallel_offload_moves_only_its_partition():
    e = estimate(run(M, dp=8, zero_stage=2, offload="optimizer", gpu="h100-sxm"))
    assert e.pcie.to_host.n == 2 * M // 8 and e.pcie.to_gpu.n == 2 * M // 8
    assert e.pcie.seconds == pytest.approx(2 * M / 8 / (64 * GB))
    assert estimate(run(M, dp=8, zero_stage=2)).pcie is None


def test_bad_offload_is_named():
    with pytest.raises(ValueError, match="optimizer"):
        offload_traffic("gradients", M, weight_bytes=2, gradient_bytes=2)
    with pytest.raises(ValueError, match="-1"):
        offload_traffic("optimizer", -1, weight_bytes=2, gradient_bytes=2)
