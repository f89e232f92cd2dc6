"""The ZeRO page's diagrams (trainmath.report.diagrams.zero, .collectives, .fsdp) draw the
library's own numbers: the prefetch timeline's exposed seconds are the estimate's, the traffic
figure's bytes are ZeRO's traffic, and bad input gets a clear error."""

from __future__ import annotations

import pytest
from mystclaims.figures import checked

from trainmath.report.diagrams.collectives import ring_all_reduce, ring_seconds, ring_steps
from trainmath.report.diagrams.fsdp import gathered_at_peak, micro_of, prefetch_timeline
from trainmath.report.diagrams.zero import (memory_by_ranks, stage_collectives, stage_holdings,
                                            traffic_by_stage)
from trainmath.runs.description import run
from trainmath.runs.estimates import estimate
from trainmath.time.communication import zero_traffic
from trainmath.units import Bytes


def _fsdp(seq_len: int):
    return run("llama-2-7b", dp=8, zero_stage=3, seq_len=seq_len, global_batch=8,
               gpu="h100-sxm", recipe="fsdp2")


@pytest.mark.parametrize("seq_len", [512, 4096])
def test_the_timeline_is_the_estimates_data_parallel_time(seq_len):
    r = _fsdp(seq_len)
    z = micro_of(r)
    assert z.exposed == estimate(r).step.time.dp
    assert (z.gather > z.forward) == (seq_len == 512)  # short sequences expose the gathers
    checked(prefetch_timeline(z))


def test_each_stages_collectives_send_zeros_traffic():
    for stage in range(4):
        kinds = [k for k, _ in stage_collectives(7_500_000_000, 64, stage)]
        assert len(kinds) == (1, 2, 2, 3)[stage]
    assert zero_traffic(7_500_000_000, 64, 3).total / zero_traffic(7_500_000_000, 64, 0).total == 1.5
    checked(traffic_by_stage(7_500_000_000, 64, "h100-sxm", 8))


def test_the_network_ring_is_slower_than_nvlink_and_the_figures_check():
    s = ring_seconds("reduce_scatter", Bytes(10**9), 4, "h100-sxm")
    assert s["NVLink"] < s["InfiniBand"]
    for d in (ring_all_reduce(Bytes(10**9), 4, "h100-sxm"), ring_steps("reduce_scatter"),
              ring_steps("all_gather"), stage_holdings(7_000_000_000),
              memory_by_ranks(7_000_000_000), gathered_at_peak(estimate(_fsdp(4096)))):
        checked(d)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="'reduce_scatter' or 'all_gather'"):
        ring_steps("all_reduce")
    with pytest.raises(ValueError, match="2 to 6 GPUs"):
        ring_all_reduce(Bytes(10**9), 9, "h100-sxm")
    with pytest.raises(ValueError, match="2 to 4 ranks"):
        stage_holdings(10**9, 8)
    with pytest.raises(ValueError, match="ZeRO-3 run"):
        gathered_at_peak(estimate(run("llama-2-7b", dp=8, zero_stage=1, seq_len=512,
                                      global_batch=8, gpu="h100-sxm")))
    with pytest.raises(ValueError, match="without pipeline"):
        micro_of(run("llama-2-7b", dp=2, pp=4, zero_stage=3, seq_len=512, global_batch=64,
                      gpu="h100-sxm"))
