"""Measurements of real training code at full size, recorded as data: docs/_data/measurements.json.

Run ``python -m validate.measure`` from the repository root (``make validate`` installs what it
needs) to measure every configuration and rewrite the file; ``--only REGEX`` re-measures the
matching configurations and keeps the rest; ``--report`` prints the recorded figures as tables
(no torch needed). ``validate/test_measurements.py`` re-measures and fails when the file is stale.

Everything runs under ``torch._subclasses.fake_tensor.FakeTensorMode``: PyTorch's own kernels
decide every shape, dtype and alias, but no memory is allocated, so a 22B model runs on a laptop
CPU in seconds. The modules: ``shapes`` (the model shapes, as plain data), ``models`` (the
reference model with the library's kernels, and the Hugging Face builders), ``tracking``
(storage counting: saved for backward, alive over a step), ``saved`` (what a forward pass saves
for backward), ``step`` (a whole training step per precision recipe: states and peak),
``configs`` (the list of configurations and the document), ``report`` (the tables).

Schema of measurements.json (``"schema": "trainmath-measurements/1"``); all byte counts are
integers, bytes (not GB):

.. code-block:: text

    schema            "trainmath-measurements/1"
    about, date       what the file is; the day it was measured (YYYY-MM-DD)
    versions          {python, torch, transformers}
    methods           {saved, states, peak: how each quantity is measured (prose);
                       implementations: {name: what it is}; precisions; recipes}
    configurations    list of objects, each:
      id              stable id, "<kind>/<model>/<implementation>/<precision or recipe>
                      [/foreach][/dp<N>-rank<R>]/s<s>-b<b>"
      kind            "saved" (bytes saved for backward by one forward pass),
                      "step" (a whole training step: states after it, its peak) or
                      "finetune" (LoRA with peft: both, ``finetune.py``)
      model           shape name; shape: every hyperparameter (layers, hidden, heads,
                      kv_heads, ffn, vocab, mlp, norm, bias, tied_embeddings, positions,
                      dropout, dropout_p, norm_eps, rope_theta, sliding_window, family,
                      source), enough for trainmath.model.shape.shape() without torch
      implementation  reference-sdpa | reference-eager | hf-sdpa | hf-eager
      s, b            sequence length and micro-batch size
      dtype           {parameters, compute}: "bf16", "fp16" or "fp32"
      precision       (saved) "bf16" | "autocast-bf16"
      recipe          (step) zero-bf16 | zero-fp16 | megatron-bf16 | bf16-master-naive |
                      bf16-master-free-grads | autocast-fp32 | fsdp2-bf16
      optimizer       (step) {name: "torch.optim.AdamW", foreach: bool}
      dp, rank        (step) data-parallel size and the rank measured (1, 0 unless FSDP2)
      adapter         (finetune) {method "lora", r, targets [q, k, v, o, gate, up, down],
                      dropout, dtype of the adapters "fp32"}
      measured        kind "saved":
        total             every storage saved for backward except parameters
        weight_copies     part of total: 16-bit copies of parameters (autocast)
        parameters_saved  parameters the ops saved (not extra memory; not in total)
        embedding         saved before the first decoder layer (token ids, embedding dropout)
        per_layer         [bytes of layer 0, 1, ...]: storages saved only inside that layer
        layer_weight_copies  part of per_layer[layer_shown] that is weight copies
        output            saved after the last layer: final norm, LM head, loss
        shared            saved in more than one scope (rotary tables, attention masks)
                          total = embedding + sum(per_layer) + output + shared
        layer_shown       which layer the *_tensors list shows
        layer_tensors, embedding_tensors, output_tensors, shared_tensors:
                          [[aten op that allocated it, dtype, shape, bytes, kind], ...]
                          in the order first saved; kind: activation | input | weight copy
        attention_ops     the aten ops behind the saved attention/softmax tensors
                      kind "step":
        parameters_count  parameters of the model (all ranks together)
        local_parameters  (FSDP2) elements of this rank's shards, padding included
        states            after the second step, before zero_grad: {parameters, gradients,
                          master_weights, optimizer_states, total (the four summed),
                          step_counters: {count, bytes, dtype}, dtypes: {...}}
        peak              steady state (the second step): {bytes, phase (forward |
                          backward | optimizer step | zero_grad), op (the aten op after
                          which it was reached), alive: {category: bytes}, largest:
                          the 8 largest storages then, [[category, aten op that
                          allocated it, dtype, shape, bytes, phase allocated in], ...]}
        first_step_peak   {bytes, phase, alive} for the first step (optimizer states not
                          yet made); setup (master copies) counts in it
        phase_peaks       {phase: highest bytes alive during it}, second step
        alive_after_step  {category: bytes} alive after the second step
                      kind "finetune": trainable_count and parameters_count (peft's
                      get_nb_trainable_parameters), saved (as kind "saved"), and states,
                      peak, phase_peaks, first_step_peak, alive_after_step as kind "step";
                      states add frozen_parameters and trainable_parameters (bytes), and
                      dtypes {frozen, trainable, optimizer_states}
"""
