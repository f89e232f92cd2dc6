"""Fine-tuning diagrams: LoRA's low-rank update beside a frozen matrix, where the memory goes for
full fine-tuning, LoRA and QLoRA, and QLoRA's NF4 blocks with their constants.

The numbers are :mod:`trainmath.memory.finetune`'s: the matrices' shapes (:func:`~trainmath.memory.finetune.matrices`),
r·(d_in + d_out) trainable parameters a matrix (:func:`~trainmath.memory.finetune.lora_params`; Hu et al. 2021, §4.1), the
model states and activations of an :class:`~trainmath.runs.estimates.Estimate`, and NF4's
4 bits a weight with one absmax per block of 64, itself in 8 bits with one fp32 constant per
256 blocks (:func:`~trainmath.memory.finetune.nf4_bits_per_param`; Dettmers et al. 2023, §3).

>>> d = nf4_blocks()
>>> [x.text for x in d.numbers][-1]
'4.127 bits'
"""

from __future__ import annotations

from fractions import Fraction

from . import Diagram, Label
from ...memory.finetune import (DQ_BLOCK, NF4_BLOCK, Adapter, lora_params, matrices,
                                nf4_bits_per_param)
from ...model.shape import ModelShape
from ...units import Bytes

#: Bits of NF4's code for one weight (Dettmers et al. 2023, §3: 4-bit NormalFloat); the rest of
#: :func:`~trainmath.memory.finetune.nf4_bits_per_param` is the block constants'.
CODE_BITS = 4
#: Bits of a 16-bit (bf16) weight, the format LoRA's frozen base stays in
BF16_BITS = 16

#: The parts of a fine-tuning run's memory, in the order the bars stack them, with their fills
PARTS = (("frozen weights", "blue"), ("adapter weights", "purple"), ("gradients", "light blue"),
         ("master weights", "orange"), ("optimizer states", "red"), ("activations", "green"))


def lora(model: ModelShape, adapter: Adapter, matrix: str = "q") -> Diagram:
    """LoRA on one matrix: the frozen W (d_out × d_in) and beside it B (d_out × r) and A
    (r × d_in), h = Wx + (α/r)·BAx (Hu et al. 2021, §4.1), with the matrix's r·(d_in + d_out)
    trainable parameters and the adapter's in every layer (:func:`~trainmath.memory.finetune.lora_params`).

    >>> from trainmath.model.presets import preset
    >>> d = lora(preset("llama-2-7b"), Adapter("lora", 16, ("q", "v")))
    >>> [x.text for x in d.numbers][-3:]
    ['131,072 trainable a matrix', '0.78% of W', 'q, v in all layers: 8,388,608']
    """
    if not isinstance(adapter, Adapter):
        raise ValueError(f"adapter must be an Adapter, got {adapter!r}")
    shapes = matrices(model)
    if matrix not in shapes:
        raise ValueError(f"unknown matrix {matrix!r}; accepted: {', '.join(shapes)}")
    d_in, d_out = shapes[matrix]
    r = adapter.rank
    per = r * (d_in + d_out)
    share = Fraction(per, d_in * d_out)
    every = lora_params(model, r, adapter.targets)
    targets = ", ".join(adapter.targets)
    d = Diagram("LoRA: a frozen matrix and a trained low-rank update beside it", width=420,
                height=290,
                alt=(f"The frozen {matrix} matrix W of {model.name}, {d_out} × {d_in}, and beside "
                     f"it B ({d_out} × {r}) and A ({r} × {d_in}): {per:,} trainable parameters "
                     f"a matrix, {float(share):.2%} of W; {every:,} on {targets} in all layers."))
    d.text(105, 24, Label(f"{d_in:,}", d_in), size=12)
    d.text(34, 105, Label(f"{d_out:,}", d_out), size=12, anchor="end")
    d.box(40, 40, 130, 130, "light gray", "W", "frozen", "no gradient")
    d.text(193, 105, "+", size=20, weight="bold")
    d.text(224, 24, Label(f"r {r}", r, claim=str(r)), size=12)
    d.rect(215, 40, 18, 130, "purple")
    d.text(224, 184, "B", weight="bold")
    d.text(312, 24, Label(f"{d_in:,}", d_in), size=12)
    d.rect(247, 40, 130, 18, "purple")
    d.text(312, 72, "A", weight="bold")
    d.text(384, 49, Label(f"r {r}", r, claim=str(r)), size=12, anchor="start")
    d.text(312, 110, "trained, fp32", size=12)
    d.text(210, 210, "h = Wx + (α/r)·BAx")
    d.text(210, 234, Label(f"{per:,} trainable a matrix", per, claim=f"{per:,}"), size=12)
    d.text(210, 254, Label(f"{float(share):.2%} of W", share, claim=f"{float(share):.2%}"),
           size=12)
    d.text(210, 276, Label(f"{targets} in all layers: {every:,}", every, claim=f"{every:,}"),
           size=12)
    return d


def memory_parts(e) -> dict[str, Bytes]:
    """One fine-tuning estimate's memory by :data:`PARTS`: the frozen weights and the adapter's
    apart (:class:`trainmath.memory.finetune.AdapterStates`), then the trained parameters'
    gradients, master weights and optimizer states, and the activations."""
    st = e.adapter_states
    frozen = e.device.weights if st is None else st.frozen_weights
    trained = Bytes(0) if st is None else st.adapter_weights
    return {"frozen weights": frozen, "adapter weights": trained,
            "gradients": e.device.gradients, "master weights": e.device.master_weights,
            "optimizer states": e.device.optimizer_states, "activations": e.activations}


def where_memory_goes(estimates: dict) -> Diagram:
    """Bars of each estimate's model states and activations (:func:`memory_parts`), to one
    scale: full fine-tuning trains every parameter, LoRA and QLoRA only the adapter's.

    >>> from trainmath.runs.description import run
    >>> from trainmath.runs.estimates import estimate
    >>> e = estimate(run("llama-2-7b", seq_len=2048, adapter=Adapter("qlora", 64)))
    >>> [x.text for x in where_memory_goes({"QLoRA": e}).numbers][0]
    '15.5 GB'
    """
    if not estimates:
        raise ValueError("where_memory_goes needs at least one estimate; accepted: a dict of "
                         "name to Estimate")
    rows = {name: memory_parts(e) for name, e in estimates.items()}
    totals = {name: sum(parts.values(), Bytes(0)) for name, parts in rows.items()}
    top = max(t.n for t in totals.values())
    x0, span, step = 80, 320, 46
    height = 30 + step * len(rows) + 50
    d = Diagram("Where the memory goes: full fine-tuning, LoRA and QLoRA", width=420,
                height=height,
                alt="; ".join(f"{name}: {totals[name].format('GB', 1)} of model states and "
                              "activations (" + ", ".join(f"{k} {v.format('GB', 1)}"
                                                          for k, v in parts.items() if v.n)
                              + ")" for name, parts in rows.items()))
    for i, (name, parts) in enumerate(rows.items()):
        y = 14 + i * step
        d.text(x0 - 8, y + 21, name, anchor="end")
        x = x0
        for part, fill in PARTS:
            w = span * float(Fraction(parts[part].n) / top)
            if w > 0:
                d.rect(x, y + 12, w, 18, fill, rounded=0)
            x += w
        d.text(min(x + 4, 400), y + 4, Label(totals[name].format("GB", 1), totals[name]),
               anchor="end" if x + 4 > 340 else "start", size=12)
    y = 20 + step * len(rows)
    d.legend(20, y, PARTS)
    return d


def nf4_blocks(double_quant: bool = True) -> Diagram:
    """QLoRA's storage of a frozen weight: NF4's 4-bit code, one absmax constant per block of
    :data:`~trainmath.memory.finetune.NF4_BLOCK` weights, and with double quantization those constants in 8 bits with one
    fp32 constant per :data:`~trainmath.memory.finetune.DQ_BLOCK` of them (Dettmers et al. 2023, §3;
    :func:`~trainmath.memory.finetune.nf4_bits_per_param`), against a bf16 weight's 16 bits.

    >>> [x.text for x in nf4_blocks(False).numbers][-1]
    '4.5 bits'
    """
    total = nf4_bits_per_param(double_quant)
    first = Fraction(8 if double_quant else 32, NF4_BLOCK)
    second = total - CODE_BITS - first
    bits_number = f"{float(total):.3f}".rstrip("0").rstrip(".")
    bits_text = bits_number + " bits"
    d = Diagram("QLoRA's frozen weights: NF4 codes in blocks, each with its constant",
                width=420, height=250,
                alt=(f"NF4 stores each weight in {CODE_BITS} bits; each block of {NF4_BLOCK} "
                     f"weights has one absmax constant in {8 if double_quant else 32} bits"
                     + (f", and each {DQ_BLOCK} of those constants one fp32 constant" if
                        double_quant else "")
                     + f": {bits_text} a weight, against {BF16_BITS} in bf16."))
    for i in range(12):
        d.rect(20 + i * 20, 20, 18, 26, "blue", rounded=1)
    d.text(272, 33, "…", size=16)
    d.text(20, 60, Label(f"a block of {NF4_BLOCK} weights", NF4_BLOCK, claim=str(NF4_BLOCK)),
           anchor="start", size=12)
    d.text(20, 78, Label(f"{CODE_BITS} bits each", CODE_BITS, claim=str(CODE_BITS)),
           anchor="start", size=12)
    const_bits = 8 if double_quant else 32
    d.box(310, 16, 90, 34, "orange", "absmax", size=12)
    d.text(355, 60, Label(f"{const_bits} bits", const_bits, claim=str(const_bits)), size=12)
    if double_quant:
        for i in range(8):
            d.rect(20 + i * 24, 104, 20, 20, "orange", rounded=1)
        d.text(212, 114, "…", size=16)
        d.text(20, 138, Label(f"{DQ_BLOCK} blocks' absmax", DQ_BLOCK, claim=str(DQ_BLOCK)),
               anchor="start", size=12)
        d.line(232, 114, 306, 114, arrow=True)
        d.box(310, 98, 90, 34, "red", "one fp32", size=12)
        d.text(355, 142, Label("32 bits", 32, claim="32"), size=12)
    d.text(20, 170, Label(f"{CODE_BITS} +", CODE_BITS, claim=str(CODE_BITS)), anchor="start")
    d.text(56, 170, Label(f"{float(first):.3f}".rstrip("0"), first), anchor="start")
    if double_quant:
        d.text(106, 170, Label(f"+ {float(second):.3f}", second, claim=f"{float(second):.3f}"),
               anchor="start")
    d.text(400, 170, Label(f"= {bits_text} a weight", total, claim=bits_number), anchor="end",
           weight="bold")
    d.rect(80, 194, 320, 16, "light gray", rounded=0)
    d.text(72, 202, "bf16", anchor="end", size=12)
    d.text(396, 202, Label(f"{BF16_BITS} bits", BF16_BITS, claim=str(BF16_BITS)),
           anchor="end", size=12)
    d.rect(80, 222, 320 * float(total / BF16_BITS), 16, "blue", rounded=0)
    d.text(72, 230, "NF4", anchor="end", size=12)
    d.text(80 + 320 * float(total / BF16_BITS) + 6, 230, Label(bits_text, total, claim=bits_number), anchor="start",
           size=12)
    return d

