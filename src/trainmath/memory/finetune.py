"""Fine-tuning memory: full fine-tuning, LoRA (Hu et al. 2021) and QLoRA (Dettmers et al. 2023).

**Full fine-tuning** trains every parameter: it is pre-training's arithmetic on a pre-trained
model (the recipes of :data:`trainmath.memory.recipes.RECIPES`), nothing new.

**LoRA** (Hu et al. 2021, *LoRA: Low-Rank Adaptation of Large Language Models*, §4.1) freezes
the pre-trained weight W (d_out × d_in) of each targeted matrix and trains a product BA beside
it, B of d_out × r and A of r × d_in: h = Wx + (α/r)·BAx. Per targeted matrix that is
r·(d_in + d_out) trainable parameters (§4.1; with grouped-query attention the k and v
projections are d_out = kv_heads·head_dim wide, :attr:`trainmath.model.shape.ModelShape.kv_dim`).
The scale α/r multiplies an output and changes no byte. In memory:

- the frozen base weights stay in 16-bit (the format the model was loaded in) with **no
  gradient and no optimizer state** (``requires_grad=False``);
- the adapter's parameters carry a full training state, as the run's recipe keeps it: peft
  upcasts adapters to fp32 by default (``get_peft_model(..., autocast_adapter_dtype=True)``,
  ``cast_adapter_dtype`` in ``peft/tuners/tuners_utils.py``), so they are their own master copy:
  4 + 4 + 8 = 16 bytes per trainable parameter with AdamW (recipe ``fp32``);
- activations are still saved for backward through the frozen layers: a gradient must reach
  every adapter below, so the norms, attention and MLP keep what their input gradients need.
  What a frozen Linear saves is only its weight: ``F.linear`` saves its input x for the
  weight's gradient alone, and PyTorch's autograd saves an input only when a gradient that
  needs it will be computed. So the input of a frozen, untargeted projection is not kept,
  and neither are a frozen norm's normalised input (for its weight's gradient), the frozen
  embedding's token ids, or the LM head's input. Each targeted matrix adds its own: the input
  of A (x, or x cast to the adapter's format: peft's ``_cast_input_dtype``, a method of
  ``BaseTunerLayer`` in ``peft/tuners/tuners_utils.py``, makes an fp32 copy
  per targeted module when adapters are fp32; with ``lora_dropout`` > 0 the dropout's output
  and its mask) and A's r-wide output, the input of B (``LoraLayer.forward`` in
  ``peft/tuners/lora/layer.py``: ``lora_B(lora_A(dropout(x))) * scaling``). Without
  ``torch.autocast``, as measured (docs/_data/measurements.json); under autocast A's matmul
  would save a 16-bit copy instead, which this module does not model.

**QLoRA** (Dettmers et al. 2023, *QLoRA: Efficient Finetuning of Quantized LLMs*, §3) stores
the frozen base in 4-bit NormalFloat (NF4): half a byte per weight plus one absmax constant
per block of 64 weights. In fp32 that constant costs 32/64 = 0.5 bits per parameter; Double
Quantization stores the absmax values in 8 bits with one fp32 constant per block of 256 of
them: 8/64 + 32/(64·256) = 0.127 bits (§3, "Double Quantization"). bitsandbytes quantises
every ``nn.Linear`` but the output layer: transformers' bitsandbytes integration keeps the
LM head (``get_keys_to_not_convert`` in ``transformers/quantizers/base.py``, the output
embeddings and the last module) and
the embedding and norms are not Linear layers, so those stay 16-bit. Each layer's weight is
dequantised to the compute dtype (bf16) for its matmul and freed after it (one matrix at a
time, a temporary not counted here); bitsandbytes' ``MatMul4Bit`` saves the packed weight, not
its input, for backward, as a frozen Linear does. Paged AdamW (§3, "Paged Optimizers") puts the
optimizer states in CUDA unified memory, which the driver evicts to CPU RAM page by page when
the GPU runs out. This module counts them tensor by tensor (:mod:`trainmath.memory.bnb_optim`:
only tensors of 100,000 elements or more are paged) and keeps the paged part apart
(:attr:`AdapterStates.paged_states`): it is outside ``max_memory_allocated()``, in the process's
figure while resident, and a run fits when everything else does
(:attr:`trainmath.runs.estimates.Estimate.fits`). The adapter's format and optimizer are the
run's recipe and optimizer; :mod:`trainmath.memory.finetune_presets` names the recipes QLoRA's
authors, peft, torchtune and axolotl run.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .activations import LayerActivations, Saved
from .bnb_optim import states_of
from .recipes import ModelStates, Recipe, optimizer, recipe
from ..derivations import Derivation, bytes_text, number_text
from ..model.shape import ModelShape, param_count
from ..problems import Problem, check
from ..units import Bytes, choice, positive_int


#: Fine-tuning methods: every parameter trained, or a low-rank adapter on a 16-bit or a 4-bit base.
METHODS = ("full", "lora", "qlora")
#: The matrices of a Llama-style decoder layer that an adapter can target, in the layer's order.
TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
#: The module names Hugging Face's ``LlamaForCausalLM`` gives them (peft's ``target_modules``).
HF_MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj",
              "up": "up_proj", "down": "down_proj"}
#: peft's default targets for Llama: ``q_proj`` and ``v_proj``
#: (``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`` in ``peft/utils/constants.py``),
#: the two matrices Hu et al. 2021 adapt in their GPT-3 experiments (§7.1, Table 5).
DEFAULT_TARGETS = ("q", "v")
#: QLoRA's targets: every linear layer of each block (Dettmers et al. 2023, §4: adapters on all
#: layers are needed to match full fine-tuning).
ALL_LINEAR = TARGETS
#: Recipes an adapter's trainable parameters can be kept in: fp32 (peft's default), or 16-bit
#: with or without an fp32 master copy.
ADAPTER_RECIPES = ("fp32", "bf16-mixed", "fp16-mixed", "bf16")
#: How each adapter recipe keeps the adapter's weights, in a headline's words.
ADAPTER_DTYPES = {"fp32": "adapters fp32", "bf16": "adapters bf16",
                  "bf16-mixed": "adapters bf16 with an fp32 master copy",
                  "fp16-mixed": "adapters fp16 with an fp32 master copy"}
#: Formats the norms' weights can be kept in: the model's 16-bit one, or fp32 (QLoRA's
#: ``qlora.py`` casts every module with "norm" in its name to fp32, l.400-401).
NORM_DTYPES = ("16-bit", "fp32")
#: Bytes of each frozen base weight in LoRA: the 16-bit format the model is loaded in.
BASE_BYTES = 2
#: NF4 block size: one absmax constant per 64 weights (Dettmers et al. 2023, §3; bitsandbytes'
#: ``BitsAndBytesConfig(bnb_4bit_blocksize=64)`` default).
NF4_BLOCK = 64
#: Double Quantization's block: 256 first-level constants per fp32 second-level constant.
DQ_BLOCK = 256


def nf4_bits_per_param(double_quant: bool = True) -> Fraction:
    """Bits per NF4-quantised weight: 4 for the code and its share of the block constants.

    Dettmers et al. 2023 §3: 32/64 = 0.5 bits of fp32 absmax per weight without Double
    Quantization, 8/64 + 32/(64·256) = 0.127 with it.

    >>> float(nf4_bits_per_param(False)), round(float(nf4_bits_per_param(True) - 4), 3)
    (4.5, 0.127)
    """
    return 4 + _constant_bits(bool(double_quant))


def _constant_bits(double_quant: bool) -> Fraction:
    if double_quant:
        return Fraction(8, NF4_BLOCK) + Fraction(32, NF4_BLOCK * DQ_BLOCK)
    return Fraction(32, NF4_BLOCK)


def nf4_tensor_bytes(numel: int, double_quant: bool = True) -> int:
    """Bytes bitsandbytes stores for one tensor of ``numel`` weights in NF4, exactly.

    ``bitsandbytes.functional.quantize_4bit``: the packed codes, two per byte (⌈n/2⌉ bytes), one
    absmax per block of 64 (⌈n/64⌉ blocks); fp32 absmax without Double Quantization; with it
    (``compress_statistics=True``) the absmax values less their mean (one fp32 ``offset``) are
    quantised blockwise to uint8 with one fp32 absmax per 256 of them. Not counted: the 16-entry
    NF4 code and the 256-entry dynamic map, lookup tables of a few hundred bytes per tensor.

    One q_proj of Llama-2-7B, as bitsandbytes 0.50.2 stores it (validate/test_finetune.py):

    >>> nf4_tensor_bytes(4096 * 4096), nf4_tensor_bytes(4096 * 4096, double_quant=False)
    (8654852, 9437184)
    """
    n = positive_int("numel", numel)
    blocks = -(-n // NF4_BLOCK)
    packed = -(-n // 2)
    if not double_quant:
        return packed + 4 * blocks
    return packed + blocks + 4 * -(-blocks // DQ_BLOCK) + 4


@dataclass(frozen=True)
class Adapter:
    """A low-rank adapter on a frozen base: method, rank r, targeted matrices, dropout.

    ``method`` is "lora" (frozen base in 16-bit) or "qlora" (frozen base in NF4, with Double
    Quantization unless ``double_quant`` is False); ``rank`` is r; ``targets`` a set of
    :data:`TARGETS` (default: peft's for Llama, q and v); ``dropout`` is peft's
    ``lora_dropout``, a probability in [0, 1) (above 0 it saves a dropout mask and output per
    targeted matrix). ``norm_dtype`` is the format of the frozen norms' weights (one of
    :data:`NORM_DTYPES`; fp32 adds 2 bytes per norm weight; the activations are counted with
    the norms' outputs in the model's 16-bit format). LoRA's α is not a field: it scales an
    output and changes no byte.

    >>> Adapter("lora", 8, ("q", "k", "v", "o")).targets
    ('q', 'k', 'v', 'o')
    """

    method: str = "lora"
    rank: int = 16
    targets: tuple[str, ...] = DEFAULT_TARGETS
    dropout: float = 0.0
    double_quant: bool = True
    norm_dtype: str = "16-bit"

    def __post_init__(self) -> None:
        choice("fine-tuning method for an adapter", self.method, ("lora", "qlora"))
        choice("format of the norms' weights", self.norm_dtype, NORM_DTYPES)
        object.__setattr__(self, "rank", positive_int("LoRA rank r", self.rank))
        object.__setattr__(self, "targets", parse_targets(self.targets))
        p = self.dropout
        if isinstance(p, bool) or not isinstance(p, (int, float, Fraction)) or not 0 <= p < 1:
            raise ValueError(f"LoRA dropout must be a probability from 0 up to (not including) 1, "
                             f"got {p!r}")

    @property
    def quantized(self) -> bool:
        """Whether the frozen base is stored in 4-bit NF4 (QLoRA)."""
        return self.method == "qlora"


def parse_targets(targets: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Target matrices in the layer's order, from a tuple or a text such as ``"q,k,v,o"``;
    ``"all"`` is every one of :data:`TARGETS`. A ValueError names an unknown one.

    >>> parse_targets("v,q"), parse_targets("all") == TARGETS
    (('q', 'v'), True)
    """
    if isinstance(targets, str):
        targets = TARGETS if targets.strip() == "all" else tuple(
            t.strip() for t in targets.split(",") if t.strip())
    if not isinstance(targets, (tuple, list)) or not targets:
        raise ValueError(f"LoRA targets must be one or more of {', '.join(TARGETS)} (or all), "
                         f"got {targets!r}")
    for t in targets:
        choice("LoRA target", t, (*TARGETS, *HF_MODULES.values(), "all"))
    if "all" in targets:
        return TARGETS
    names = {HF_MODULES.get(t, t) for t in targets} | {t for t in targets if t in TARGETS}
    return tuple(t for t in TARGETS if t in names or HF_MODULES[t] in names)


def model_problems(model: ModelShape) -> list[Problem]:
    """An adapter needs a Llama-style shape: separate q, k, v and a SwiGLU MLP (gate, up, down)."""
    if model.mlp != "swiglu":
        return [Problem(("mlp",), f"LoRA and QLoRA are modelled for Llama-style models (separate "
                        f"q, k, v projections, SwiGLU MLP); {model.name} has mlp {model.mlp!r}; "
                        "accepted: mlp 'swiglu'")]
    return []


def check_model(model: ModelShape) -> None:
    """:func:`model_problems`, raised."""
    check(model_problems(model))


def matrices(model: ModelShape) -> dict[str, tuple[int, int]]:
    """(d_in, d_out) of each targetable matrix of one decoder layer (GQA: k and v are kv_dim wide).

    >>> from trainmath.model.presets import preset
    >>> matrices(preset("llama-3-8b"))["k"]
    (4096, 1024)
    """
    h, kv, f = model.hidden, model.kv_dim, model.ffn
    return {"q": (h, h), "k": (h, kv), "v": (h, kv), "o": (h, h),
            "gate": (h, f), "up": (h, f), "down": (f, h)}


def lora_params(model: ModelShape, rank: int, targets=DEFAULT_TARGETS) -> int:
    """Trainable parameters of LoRA: r·(d_in + d_out) per targeted matrix, in every layer
    (Hu et al. 2021, §4.1). Llama-2-7B, r = 8 on q and v: 32 layers × 2 × 8 × 8192.

    >>> from trainmath.model.presets import preset
    >>> lora_params(preset("llama-2-7b"), 8, ("q", "v"))
    4194304
    """
    check_model(model)
    r = positive_int("LoRA rank r", rank)
    m = matrices(model)
    return model.layers * sum(r * sum(m[t]) for t in parse_targets(targets))


def quantized_params(model: ModelShape) -> int:
    """Base weights bitsandbytes stores in NF4: every decoder layer's Linear weights (the seven
    matrices); the embedding, the norms and the LM head stay 16-bit."""
    check_model(model)
    return model.layers * sum(a * b for a, b in matrices(model).values())


def norm_params(model: ModelShape) -> int:
    """The norms' weights of a Llama-style model: two per layer and a final one, each h wide."""
    return (2 * model.layers + 1) * model.hidden


def adapter_tensors(model: ModelShape, adapter: Adapter) -> list[int]:
    """Elements of each tensor the optimizer steps: A (r × d_in) and B (d_out × r) per targeted
    matrix, in every layer."""
    m, r = matrices(model), adapter.rank
    return [r * d for _ in range(model.layers) for t in adapter.targets for d in m[t]]


@dataclass(frozen=True, kw_only=True)
class AdapterStates(ModelStates):
    """Model states of an adapter run, whole model on one device, with the split the pages show.

    ``weights`` is the frozen base plus the adapter's weights; gradients, master weights and
    optimizer states are the adapter's alone.
    """

    trainable: int
    frozen: int
    frozen_weights: Bytes
    adapter_weights: Bytes
    #: tensors the optimizer steps (two per targeted matrix per layer: A and B)
    trainable_tensors: int
    #: the part of ``optimizer_states`` a paged bitsandbytes optimizer keeps in CUDA managed
    #: memory (:mod:`trainmath.memory.bnb_optim`): outside PyTorch's allocator
    paged_states: Bytes = Bytes(0)


def adapter_states(model: ModelShape, adapter: Adapter, recipe_name: str = "fp32",
                   optimizer_name: str = "adamw") -> AdapterStates:
    """Model states of LoRA or QLoRA on ``model``: frozen base without gradients or optimizer
    state, adapter with the full state ``recipe_name`` keeps (one of :data:`ADAPTER_RECIPES`).

    >>> from trainmath.model.presets import preset
    >>> s = adapter_states(preset("llama-2-7b"), Adapter("lora", 8, ("q", "v")))
    >>> print(s.frozen_weights, s.trainable, s.adapter_weights.n, s.optimizer_states.n)
    13.5 GB 4194304 16777216 33554432
    """
    if not isinstance(adapter, Adapter):
        raise ValueError(f"adapter must be an Adapter, got {adapter!r}")
    choice("recipe for adapter weights", recipe(recipe_name).name, ADAPTER_RECIPES)
    return _adapter_states(model, adapter, recipe(recipe_name), optimizer_name)


def _adapter_states(model: ModelShape, adapter: Adapter, r: Recipe,
                    optimizer_name: str) -> AdapterStates:
    n = lora_params(model, adapter.rank, adapter.targets)
    total = param_count(model)
    if adapter.quantized:
        q = quantized_params(model)
        frozen = Bytes(q * nf4_bits_per_param(adapter.double_quant) / 8 + BASE_BYTES * (total - q))
    else:
        frozen = Bytes(BASE_BYTES * total)
    if adapter.norm_dtype == "fp32":
        frozen = frozen + Bytes((4 - BASE_BYTES) * norm_params(model))
    o = optimizer(optimizer_name)
    value = r.state_value if o.state_bytes is None else o.state_bytes
    weights = Bytes(n * r.weights)
    states, paged = Bytes(n * (o.states * value + o.overhead)), Bytes(0)
    if o.bits is not None:  # bitsandbytes: tensor by tensor
        sb = states_of(adapter_tensors(model, adapter), bits=o.bits, paged=o.paged)
        states, paged = sb.total, sb.paged
    return AdapterStates(
        weights=frozen + weights, gradients=Bytes(n * r.gradients),
        master_weights=Bytes(n * r.master_weights), optimizer_states=states,
        trainable=n, frozen=total, frozen_weights=frozen, adapter_weights=weights,
        trainable_tensors=2 * len(adapter.targets) * model.layers, paged_states=paged)


# -- activations ---------------------------------------------------------------------------------
#: Tensors of the full fine-tuning layer (:func:`trainmath.memory.activations.layer_activations`) that
#: only a Linear's weight gradient or a norm's weight gradient needs, by the matrices that read
#: them: not saved when those weights are frozen (no LoRA reads them in the base's format).
_WEIGHT_ONLY = (
    ("input to the Q, K, V projections", ("q", "k", "v")),
    ("context, input to the output projection", ("o",)),
    ("input to the first projection(s)", ("gate", "up")),
    ("SiLU(gate) × up, input to the down projection (ffn wide)", ("down",)),
    ("SwiGLU output, input to the down projection (ffn wide)", ("down",)),
    (", for its weight", ()),
)


def _shared_input(adapter: Adapter, adapter_bytes: int, compute_bytes: int) -> bool:
    """Whether A reads the base Linear's own input tensor (same format, no dropout)."""
    return adapter_bytes == compute_bytes and not adapter.dropout


def _lora_layer(full: LayerActivations, model: ModelShape, adapter: Adapter, *,
                tokens: int | Fraction, compute_bytes: int, adapter_bytes: int,
                mask_bytes: int) -> LayerActivations:
    """One layer's saved tensors under an adapter: the full fine-tuning layer less what only the
    frozen weights' gradients needed, plus each targeted matrix's input to A and A's output."""
    shared = _shared_input(adapter, adapter_bytes, compute_bytes)
    kept = []
    for t in full.tensors:
        readers = next((m for name, m in _WEIGHT_ONLY if name in t.name), None)
        if readers is None or (shared and set(readers) & set(adapter.targets)):
            kept.append(t)
    r = adapter.rank
    for name, (d_in, _) in matrices(model).items():
        if name not in adapter.targets:
            continue
        block = "attention" if name in ("q", "k", "v", "o") else "MLP"
        if not shared:
            what = "dropout output" if adapter.dropout else "copy of the input in the adapter's format"
            kept.append(Saved(block, f"LoRA {name}: {what}, input to A", Bytes(adapter_bytes * tokens * d_in)))
        if adapter.dropout:
            kept.append(Saved(block, f"LoRA {name}: dropout mask", Bytes(mask_bytes * tokens * d_in)))
        kept.append(Saved(block, f"LoRA {name}: A's output (r wide), input to B",
                          Bytes(adapter_bytes * tokens * r)))
    return LayerActivations(tuple(kept))


def _frozen_output(full: LayerActivations) -> LayerActivations:
    """The output layer with a frozen final norm and LM head: their inputs for the weights'
    gradients are not saved (the log-softmax, labels and norm statistics are)."""
    return LayerActivations(tuple(t for t in full.tensors
                                  if "for its weight" not in t.name
                                  and not t.name.startswith("input to the output projection")))


def frozen_embedding() -> LayerActivations:
    """What a frozen embedding saves: nothing (the token ids serve only its weight's gradient)."""
    return LayerActivations(())


def adapter_value_bytes(r: Recipe) -> int:
    """Bytes of an adapter's weight, the format its input is cast to: the recipe's weights."""
    return r.weights


def share(trainable: int, model: ModelShape) -> Fraction:
    """Trainable parameters as a fraction of the model's."""
    return Fraction(trainable, param_count(model))


def describe(adapter: Adapter) -> str:
    """One line: "LoRA r = 16 on q, v" or "QLoRA (NF4, double quantization) r = 64 on all"."""
    where = "all linear layers" if adapter.targets == TARGETS else ", ".join(adapter.targets)
    if adapter.quantized:
        dq = "double quantization" if adapter.double_quant else "fp32 absmax"
        head = f"QLoRA (NF4 base, {dq})"
    else:
        head = "LoRA (16-bit base)"
    drop = f", dropout {adapter.dropout:g}" if adapter.dropout else ""
    return f"{head} r = {adapter.rank} on {where}{drop}"


def headline(adapter: Adapter, recipe_name: str, optimizer_name: str) -> str:
    """What an adapter run trains and what it freezes, in a headline's words.

    >>> headline(Adapter("qlora", 64, ALL_LINEAR, norm_dtype="fp32"), "bf16", "paged-adamw-32bit")
    'frozen base NF4, norms fp32, adapters bf16, paged AdamW 32-bit'
    """
    base = "frozen base NF4" if adapter.quantized else "frozen base 16-bit"
    norms = ", norms fp32" if adapter.norm_dtype == "fp32" else ""
    r = recipe(recipe_name).name
    o = optimizer(optimizer_name)
    return f"{base}{norms}, {ADAPTER_DTYPES.get(r, 'adapters ' + r)}, {o.label or o.name}"


def adapter_derivations(model: ModelShape, adapter: Adapter, r: Recipe, optimizer_name: str,
                        states: AdapterStates) -> tuple[Derivation, ...]:
    """The arithmetic of an adapter run's four kinds of model state: the frozen base (16-bit,
    or NF4 for the decoder layers' matrices with its block constants, Dettmers et al. 2023 §3)
    plus the adapter's weights, and the adapter's own gradients, master weights and optimizer
    states (Hu et al. 2021, §4.1)."""
    n, total = states.trainable, states.frozen
    o = optimizer(optimizer_name)
    value = r.state_value if o.state_bytes is None else o.state_bytes
    per_state = o.states * value + o.overhead
    if o.bits is not None:  # bitsandbytes' exact bytes over n elements
        per_state = Fraction(states.optimizer_states.n) / n
    trainable = ("Pₐ", f"the adapter's parameters (rank {adapter.rank} on "
                       f"{','.join(adapter.targets)}): {n:,}")
    if adapter.quantized:
        q = quantized_params(model)
        bits = nf4_bits_per_param(adapter.double_quant)
        base_formula = "Q × b ÷ 8 + (P − Q) × 2 B"
        base_arith = f"{q:,} × {number_text(bits)} ÷ 8 + {total - q:,} × {BASE_BYTES} B"
        base_inputs = (("Q", f"the decoder layers' matrices, stored in NF4: {q:,}"),
                       ("b", f"bits per NF4 weight, its block constants included: "
                             f"{number_text(bits)}"),
                       ("P", f"all the base model's parameters: {total:,}"))
    else:
        base_formula, base_arith = "P × 2 B", f"{total:,} × {BASE_BYTES} B"
        base_inputs = (("P", f"the frozen base model's parameters, 16-bit: {total:,}"),)
    if adapter.norm_dtype == "fp32":
        base_formula += " + Pₙ × 2 B"
        base_arith += f" + {norm_params(model):,} × 2 B"
        base_inputs = (*base_inputs, ("Pₙ", f"the norms' weights, kept in fp32: {norm_params(model):,}"))
    source = "Hu et al. 2021 (LoRA), §4.1; Dettmers et al. 2023 (QLoRA), §3"

    def term(name, formula, inputs, arithmetic, value):
        return Derivation(name, formula, tuple(inputs), f"{arithmetic} = {bytes_text(value.n)}",
                          value, value, source, "finetune")

    return (
        term("weights", f"{base_formula} + Pₐ × w", [*base_inputs, trainable,
             ("w", f"the adapter's weight bytes in recipe {r.name}: {number_text(r.weights)} B")],
             f"{base_arith} + {n:,} × {number_text(r.weights)} B", states.weights),
        term("gradients", "Pₐ × g", [trainable, ("g", f"gradient bytes: {number_text(r.gradients)} B")],
             f"{n:,} × {number_text(r.gradients)} B", states.gradients),
        term("master weights", "Pₐ × m", [trainable, ("m", f"fp32 master copy: "
                                                         f"{number_text(r.master_weights)} B")],
             f"{n:,} × {number_text(r.master_weights)} B", states.master_weights),
        term("optimizer states", "Pₐ × o", [trainable, ("o", f"{optimizer_name}'s states"
                                                           + (" (bitsandbytes, tensor by tensor)"
                                                              if o.bits else "")
                                                           + f": {number_text(per_state)} B")],
             f"{n:,} × {number_text(per_state)} B", states.optimizer_states),
    )
