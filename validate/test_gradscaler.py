"""The mixed-precision page's loss-scaler simulation against PyTorch's own GradScaler update."""

import inspect

import numpy as np
import torch

from trainmath.precision import GRADSCALER_DEFAULTS as D
from trainmath.precision import LossScaler, simulate_loss_scaler


def test_defaults_match_torch():
    p = inspect.signature(torch.amp.GradScaler.__init__).parameters
    assert (p["init_scale"].default, p["growth_factor"].default, p["backoff_factor"].default,
            p["growth_interval"].default) == (D.init_scale, D.growth_factor, D.backoff_factor,
                                              D.growth_interval)


def test_simulation_matches_amp_update_scale():
    """Step by step, the same scale and the same skipped steps as torch._amp_update_scale_."""
    cfg = LossScaler(2.0**16, 2.0, 0.5, 20)
    grads = np.random.default_rng(0).lognormal(np.log(0.03), 1.2, 3000)
    ours = simulate_loss_scaler(grads, "fp16", cfg)
    scale = torch.tensor([cfg.init_scale])
    tracker = torch.tensor([0], dtype=torch.int32)
    skipped = 0
    for step, g in enumerate(grads):
        assert scale.item() == ours.scales[step], step
        scaled = (torch.tensor([g], dtype=torch.float64) * scale.double()).half()
        found = float(torch.isinf(scaled).any())
        assert bool(found) == ours.skipped[step], step
        skipped += bool(found)
        torch._amp_update_scale_(scale, tracker, torch.tensor([found]), 2.0, 0.5, 20)
    assert 0 < skipped < len(grads)  # the stream exercises both growth and backoff
