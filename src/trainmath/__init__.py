"""trainmath: the arithmetic of large-model training, checked.

One module per topic, pure functions over small frozen dataclasses:

- :mod:`trainmath.units`: byte quantities that know GB (10^9) from GiB (2^30);
- :mod:`trainmath.memory`: bytes per parameter of training state by recipe, and totals;
- :mod:`trainmath.models`: transformer shapes and their parameter counts;
- :mod:`trainmath.activations`: the bytes a layer saves for backward, tensor by tensor;
- :mod:`trainmath.precision`: floating-point formats, rounding and loss scaling (needs the
  ``precision`` extra: numpy and ml_dtypes);
- :mod:`trainmath.collectives`: the bytes ring collectives send per rank;
- :mod:`trainmath.sharding`: ZeRO stages, FSDP strategies, their traffic and FSDP2's bytes;
- :mod:`trainmath.parallelism`: dp × tp × pp × cp layouts: per-device memory, traffic, bubble;
- :mod:`trainmath.runs`: one run's memory per device, the entry point the command uses;
- :mod:`trainmath.peak`: the peak of a training step, when each kind of memory is alive;
- :mod:`trainmath.finetune`: LoRA and QLoRA: trainable parameters, the frozen base, activations;
- :mod:`trainmath.measured`: the predictions for the configurations measured in PyTorch;
- :mod:`trainmath.compute`: training FLOPs, GPU peaks, MFU/HFU and time to train;
- :mod:`trainmath.cli`: the ``trainmath`` command.
"""

from .activations import activation_bytes, layer_activation_bytes, layer_activations, stage_activations
from .runs import Estimate, Run, estimate, run
from .memory import bytes_per_param, training_state
from .models import param_count, preset
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
    "preset",
    "run",
    "stage_activations",
    "training_state",
]
__version__ = "0.1.0"
