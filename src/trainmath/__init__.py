"""trainmath: the arithmetic of large-model training, checked.

The library is built in layers, each a folder, each layer using only those before it:

- foundations: :mod:`trainmath.units` (bytes that know GB from GiB), :mod:`trainmath.hardware`
  (GPUs: peaks, memory, nodes and links), :mod:`trainmath.precision` (floating-point formats,
  rounding and loss scaling; the ``precision`` extra);
- :mod:`trainmath.model`: transformer shapes, presets, config.json, mixtures of experts;
- :mod:`trainmath.parallel`: the layout dp × tp × pp × cp and its rules, what each pipeline
  stage holds, the pipeline schedules;
- :mod:`trainmath.memory.recipes`: bytes per parameter, saved activations, ZeRO/FSDP, LoRA, the peak;
- :mod:`trainmath.time`: FLOPs, MFU, collectives, the step-time model;
- :mod:`trainmath.runs.estimates`: one run, checked once, and its estimate;
- :mod:`trainmath.planner.search`: every layout that fits, ranked by step time;
- :mod:`trainmath.checks`: the predictions held against PyTorch measurements;
- :mod:`trainmath.report`: text, JSON, HTML, each figure's arithmetic, the site's figures;
- :mod:`trainmath.cli.command`: the ``trainmath`` command and the calculator page.

The names below are the ones pages, tools and scripts use most.
"""

from .memory.activations import activation_bytes, layer_activation_bytes, layer_activations
from .memory.recipes import bytes_per_param, training_state
from .memory.stages import stage_activations
from .model.presets import preset
from .model.shape import param_count
from .planner.search import plan
from .runs.description import Run, run
from .runs.estimates import Estimate, estimate
from .units import GB, Bytes, GiB, parse_bytes

__all__ = [
    "GB",
    "Bytes",
    "Estimate",
    "GiB",
    "Run",
    "activation_bytes",
    "bytes_per_param",
    "estimate",
    "layer_activation_bytes",
    "layer_activations",
    "param_count",
    "parse_bytes",
    "plan",
    "preset",
    "run",
    "stage_activations",
    "training_state",
]
__version__ = "0.1.0"
