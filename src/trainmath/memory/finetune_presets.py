"""Adapter recipes as their authors' code and the main trainers run them, by name.

Each :class:`AdapterRecipe` is read from one file at one commit (``source``): what it trains
(rank, targets, dropout, the adapter's format and optimizer) and what it does around it (the
norms' format, gradient checkpointing, the micro-batch and, where the file fixes one, the
longest sequence). :data:`ADAPTER_PRESETS` holds them; ``trainmath estimate --adapter-recipe
NAME`` and :func:`AdapterRecipe.run_keywords` apply one.

- **qlora**: the authors' ``qlora.py`` as their Guanaco scripts run it (Dettmers et al. 2023;
  artidoro/qlora at 7f4e95a). ``lora_r`` 64 on every ``Linear4bit`` but the LM head
  (``find_all_linear_names``: ``--lora_modules all`` is parsed into ``extra_args`` and never
  read), ``--lora_dropout 0.05`` (``finetune_guanaco_33b.sh`` and ``_65b.sh``; the 7B script
  sets 0.1), ``--bf16``: the LoraLayer modules cast to bf16 and every module named "norm" to
  fp32 after ``get_peft_model`` (l.396-405), ``optim='paged_adamw_32bit'`` (l.198, fp32 moments
  for the bf16 adapters: 2 + 2 + 8 = 12 bytes per trainable parameter, no master copy),
  ``--gradient_checkpointing``, ``--per_device_train_batch_size 1`` and sequences of at most
  ``--source_max_len 16`` + ``--target_max_len 512`` = 528 tokens (dynamic padding, l.490).
- **peft**: ``LoraConfig()``'s defaults (r 8, ``lora_dropout`` 0.0, Llama's targets q_proj and
  v_proj: ``peft/tuners/lora/config.py``, ``peft/utils/constants.py``), adapters upcast to fp32
  (``autocast_adapter_dtype=True`` since peft 0.12), transformers' Trainer defaults
  (``optim="adamw_torch"``, ``per_device_train_batch_size=8``, ``gradient_checkpointing=False``).
- **torchtune**: ``recipes/configs/llama3_1/8B_lora_single_device.yaml`` (pytorch/torchtune at
  bd2a0fc): ``lora_rank`` 8 on q_proj, v_proj, output_proj and the MLP, dropout 0.0, the whole
  model in bf16 adapters included (``training.set_default_dtype``), ``torch.optim.AdamW``
  (its states in the parameters' bf16), activation checkpointing per layer, ``batch_size`` 2.
  ``8B_qlora_single_device.yaml`` is the same with an NF4 base.
- **axolotl**: ``examples/llama-3/qlora.yml`` (axolotl-ai-cloud/axolotl at 067b021c):
  ``lora_r`` 32 on every linear layer, ``lora_dropout`` 0.05, peft's fp32 adapters
  (``peft_autocast_adapter_dtype`` unset), ``optimizer: paged_adamw_32bit``,
  ``gradient_checkpointing: true``, ``micro_batch_size`` 2, ``sequence_len`` 4096 (packed);
  axolotl casts the norms back to the model's dtype after ``prepare_model_for_kbit_training``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .finetune import ALL_LINEAR, DEFAULT_TARGETS, Adapter
from ..units import choice

_QLORA = "artidoro/qlora @7f4e95a, qlora.py l.177-206 and l.396-405, scripts/finetune_guanaco_65b.sh"
_PEFT = ("huggingface/peft @5d602fd, src/peft/tuners/lora/config.py l.613-634, "
         "src/peft/utils/constants.py l.85, src/peft/peft_model.py l.156; transformers "
         "TrainingArguments defaults")
_TORCHTUNE = ("pytorch/torchtune @bd2a0fc, recipes/configs/llama3_1/8B_lora_single_device.yaml "
              "l.24-93, recipes/lora_finetune_single_device.py l.410, l.470")
_AXOLOTL = ("axolotl-ai-cloud/axolotl @067b021c, examples/llama-3/qlora.yml l.18-46, "
            "src/axolotl/loaders/adapter.py l.368-369, src/axolotl/loaders/model.py l.458-477")


@dataclass(frozen=True)
class AdapterRecipe:
    """One named fine-tuning recipe: the adapter, its format and optimizer, and the run's
    checkpointing, micro-batch and longest sequence (None: the file does not fix one)."""

    name: str
    method: str
    rank: int
    targets: tuple[str, ...]
    dropout: float
    recipe: str
    optimizer: str
    norm_dtype: str
    recompute: str
    micro_batch: int
    seq_len: int | None
    source: str

    def adapter(self, method: str | None = None, *, rank: int | None = None, targets=None,
                dropout: float | None = None, double_quant: bool = True) -> Adapter:
        """The :class:`~trainmath.memory.finetune.Adapter` of this recipe, with any field given
        instead of the recipe's (``method`` "lora" or "qlora": the same recipe on a 16-bit or an
        NF4 base)."""
        return Adapter(self.method if method is None else method,
                       self.rank if rank is None else rank,
                       self.targets if targets is None else targets,
                       self.dropout if dropout is None else dropout, double_quant, self.norm_dtype)

    def run_keywords(self, method: str | None = None) -> dict:
        """Keywords of :func:`trainmath.runs.description.run` for this recipe."""
        return {"adapter": self.adapter(method), "recipe": self.recipe, "optimizer": self.optimizer,
                "recompute": self.recompute, "micro_batch": self.micro_batch,
                "seq_len": self.seq_len}


#: The recipes by name (``--adapter-recipe``), each with its source.
#:
#: :meta hide-value:
ADAPTER_PRESETS: dict[str, AdapterRecipe] = {
    a.name: a
    for a in (
        AdapterRecipe("qlora", "qlora", 64, ALL_LINEAR, 0.05, "bf16", "paged-adamw-32bit",
                      "fp32", "full", 1, 16 + 512, _QLORA),
        AdapterRecipe("peft", "lora", 8, DEFAULT_TARGETS, 0.0, "fp32", "adamw", "16-bit",
                      "none", 8, None, _PEFT),
        AdapterRecipe("torchtune", "lora", 8, ("q", "v", "o", "gate", "up", "down"), 0.0, "bf16",
                      "adamw", "16-bit", "full", 2, None, _TORCHTUNE),
        AdapterRecipe("axolotl", "qlora", 32, ALL_LINEAR, 0.05, "fp32", "paged-adamw-32bit",
                      "16-bit", "full", 2, 4096, _AXOLOTL),
    )
}


def adapter_preset(name: str) -> AdapterRecipe:
    """The recipe called ``name``; a ValueError lists them."""
    return ADAPTER_PRESETS[choice("adapter recipe", name, ADAPTER_PRESETS)]
