"""What a decoder layer saves for backward when its linear layers run in fp8 under NVIDIA
Transformer Engine (the recipe ``fp8-te``, :data:`trainmath.memory.recipes.RECIPES`).

Read from Transformer Engine's modules (``transformer_engine/pytorch/module/``, TE 2.x): each fp8
linear layer quantizes its input and saves that for its weight gradient, one byte a value,
instead of the 16-bit input a bf16 model saves ("Discard row-wise data since it is not needed in
backward pass": only the column-wise copy is kept, the transpose on Hopper, the row-wise data
itself where the GPU runs fp8 GEMMs of every layout), with one fp32 ``scale_inv`` per tensor:

- ``LayerNormLinear`` (the Q, K, V projections and the MLP's first projection) saves the norm's
  16-bit input, its statistics and the normalised input quantized (``ln_out``): the linear's
  input takes 1 byte a value, not 2;
- ``Linear`` (the output projection, the MLP's down projection) saves its input quantized
  (``saved_inputmat``). The down projection's input is only the linear's, so it becomes fp8; the
  output projection's input is also the attention's output O, which FlashAttention saves for
  its own backward in 16 bits: under flash attention the fp8 copy comes on top;
- ``LayerNormMLP``'s pre-activation ``fc1_out`` and the attention's Q, K, V stay 16-bit: they are
  not the input of an fp8 GEMM.

Not modelled here: a mixture of experts' grouped GEMMs and multi-head latent attention's inner
projections (counted in 16 bits, an upper bound), and MXFP8's scales (Blackwell's block format,
one E8M0 byte per 32 values, 1/32 byte more a value). CUDA only: not measured by this library
(the How we know page says so).
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from .activations import LayerActivations, Saved
from ..units import Bytes

#: Bytes of an fp8 value (E4M3 in the forward pass).
FP8_BYTES = 1

#: The saved tensors of the megatron kernel family that are an fp8 GEMM's input, by the words
#: their names end with (:mod:`trainmath.memory.activations`).
_GEMM_INPUTS = ("input to the Q, K, V projections", "input to the first projection(s)",
                "input to the down projection (ffn wide)", "input to the second projection (ffn wide)")
_OUTPUT_PROJECTION = "input to the output projection"


def fp8_saved(layer: LayerActivations, *, attention: str, value_bytes: int = 2
              ) -> LayerActivations:
    """``layer`` (megatron kernels, ``value_bytes`` a 16-bit value) as Transformer Engine's fp8
    linears save it (module docstring): each GEMM input quantized to :data:`FP8_BYTES`, and
    under ``attention`` "flash" an fp8 copy of the attention's output beside its 16-bit one.

    >>> from trainmath.memory.activations import layer_activations
    >>> from trainmath.model.presets import preset
    >>> bf16 = layer_activations(preset("llama-3-8b"), 8192, 1, implementation="megatron-te")
    >>> fp8 = fp8_saved(bf16, attention="flash")
    >>> fp8.total < bf16.total
    True
    """
    if not isinstance(layer, LayerActivations):
        raise ValueError(f"layer must be a LayerActivations, got {layer!r}")
    if attention not in ("flash", "eager"):
        raise ValueError(f"attention {attention!r}; accepted: flash, eager")
    scale = Fraction(FP8_BYTES, value_bytes)
    out: list[Saved] = []
    for t in layer.tensors:
        if t.name.endswith(_GEMM_INPUTS):
            out.append(replace(t, name=t.name + ", fp8", bytes=Bytes(t.bytes.n * scale)))
        elif t.name.endswith(_OUTPUT_PROJECTION):
            copy = Saved(t.block, "fp8 copy of the output projection's input (Transformer Engine)",
                         Bytes(t.bytes.n * scale))
            out.extend((t, copy) if attention == "flash" else (copy,))
        else:
            out.append(t)
    return LayerActivations(tuple(out))
