"""ZB-H2 (Qi et al. 2024 §2.2), which torch 2.13's torch.distributed.pipelining does not ship:
the order validate/measure/pipeline.py generates from the paper's description, run by the
executor of PyTorch's orders, holds and idles what trainmath.parallel.schedules says, over a
grid of pp, m and pass times (W ≤ F ≤ B, as in a transformer layer), and its own per-stage
idle is the paper's table's (p − 1)(T_F + T_B − 2T_W) wherever that is not negative."""

from __future__ import annotations

import pytest

from trainmath.parallel.schedules import bubble_idle, in_flight
from validate.measure.pipeline import idle, in_flight as held, zb_h2_order

TIMES = [(1, 1, 1), (1, 2, 1), (2, 3, 1), (2, 2, 1), (3, 4, 2), (2, 5, 1), (3, 3, 3), (2, 3, 0)]


@pytest.mark.parametrize("pp,m", [(2, 3), (2, 8), (3, 5), (4, 7), (4, 9), (6, 11), (8, 15),
                                  (8, 24)])
def test_the_generated_zb_h2_order_holds_and_idles_as_the_library_says(pp, m):
    order = zb_h2_order(pp, m)
    until_w, _ = held(order)
    assert until_w == [in_flight(pp, microbatches=m, stage=i, schedule="zb-h2")
                       for i in range(pp)]
    for f, b, w in TIMES:
        assert idle(order, pp, f, b, w) == bubble_idle(
            "zb-h2", pp, 1, forward=f, backward_input=b, backward_weight=w), (f, b, w)
        paper = (pp - 1) * (f + b - 2 * w)  # Qi et al. 2024, the table of §2
        assert idle(order, pp, f, b, w, per_rank=True) == max(paper, 0), (f, b, w)


def test_below_two_p_minus_one_micro_batches_the_order_is_refused():
    with pytest.raises(ValueError, match="2·pp − 1 = 7"):
        zb_h2_order(4, 6)


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 12), (6, 12), (8, 16), (8, 20)])
def test_dualpipe_holds_pp_plus_one_stages_of_activations_as_its_readme_says(pp, m):
    """deepseek-ai/DualPipe's README: activation per device PP + 1 (of one stage's micro-batch),
    its PP the ranks; the library's in_flight, in the device's two stages, is half that."""
    from validate.measure.pipeline import dualpipe_order
    until_w, _ = held(dualpipe_order(pp, m))
    assert until_w == [pp + 1] * pp
    assert all(2 * in_flight(pp, microbatches=m, stage=i, schedule="dualpipe") == pp + 1
               for i in range(pp))
