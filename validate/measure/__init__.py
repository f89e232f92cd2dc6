"""Measurements of real training code at full size, recorded as data: docs/_data/measurements.json.

Run ``python -m validate.measure`` from the repository root (``make validate`` installs what it
needs) to measure every configuration and rewrite the file; ``--only REGEX`` re-measures the
matching configurations and keeps the rest; ``--report`` prints the recorded figures as tables
(no torch needed). ``validate/test_measurements.py`` re-measures and fails when the file is stale.

Everything runs under ``torch._subclasses.fake_tensor.FakeTensorMode``: PyTorch's own kernels
decide every shape, dtype and alias, but no memory is allocated, so a 22B model runs on a laptop
CPU in seconds. The modules: ``shapes`` (the model shapes, as plain data), ``hfconfigs``
(today's families, from their published config.json), ``models`` (the reference model with the
library's kernels, and the Hugging Face builders), ``tracking``
(storage counting: saved for backward, alive over a step), ``saved`` (what a forward pass saves
for backward), ``step`` (a whole training step per precision recipe: states and peak),
``configs`` (the list of configurations and the document), ``report`` (the tables).

Schema of measurements.json (``"schema": "trainmath-measurements/1"``); all byte counts are
integers, bytes (not GB):

.. code-block:: text

    schema            "trainmath-measurements/1"
    about, date       what the file is; the day it was measured (YYYY-MM-DD)
    versions          {python, torch, transformers, deepspeed}
    methods           {saved, states, peak: how each quantity is measured (prose);
                       implementations: {name: what it is}; precisions; recipes}
    schedules         list of PyTorch's pipeline schedules run (``pipeline.py``), each:
      id              "pp-schedule-<schedule>/pp<pp>-m<m>-v<v>"
      schedule        trainmath's name (1f1b, zb-h1, zb-v, dualpipev, zb-h2); torch_class and
                      torch: the class of torch.distributed.pipelining and its version, or
                      generator: the function of pipeline.py whose order was run (zb-h2, which
                      torch does not ship)
      pp, m, v        ranks, micro-batches, model chunks per rank
      measured        in_flight_chunks: per rank, the peak of chunk-micro-batches whose
                      forward ran and whose W (or B) has not; in_flight_chunks_until_input_grad:
                      the same freed at I; runtime_in_flight_chunks (PyTorch's schedules):
                      per rank, the peak of chunk-micro-batches whose saved tensors PyTorch's
                      own runtime keeps, Schedule.step run rank by rank on a fake process
                      group (``pipeline_runtime.py``); idle: [{f, b, w, units}]: the step's
                      span less one rank's work, in time units, each pass taking f, b, w
                      units per chunk; stage_units (generated orders): the largest idle of one
                      rank between its own first and last pass
    configurations    list of objects, each:
      id              stable id, "<kind>/<model>/<implementation>/<precision or recipe>
                      [/foreach][/dp<N>-rank<R>]/s<s>-b<b>"
      kind            "saved" (bytes saved for backward by one forward pass),
                      "step" (a whole training step: states after it, its peak),
                      "finetune" (LoRA with peft: both, ``finetune.py``), or the same with
                      the reference model's layers under op-level checkpointing,
                      "op-sac-saved" and "op-sac-step", or split by torch.compile's
                      partitioner, "compile-saved" and "compile-step" (``checkpointing.py``;
                      ids start with the kind), or "chunked-loss-step" or "act-offload-step"
                      (a step with a chunked loss or activations offloaded: techniques.py,
                      their ids prefixed so), or "cp-saved" (one rank of a context-parallel
                      group, DeepSpeed-Ulysses' DistributedAttention in every layer: context.py;
                      its id ends "<kind>-cp<cp>-rank<rank>/s<s>-b<b>"), or "dpo-step" (one
                      DPO step as TRL's DPOTrainer runs it, b pairs; id "dpo-step/<model>/
                      <implementation>/<recipe>[/reference-first]/s<s>-b<b>") or
                      "logprob-pass" (GRPO/PPO's no-grad log-prob pass; id "logprob-pass/
                      .../<recipe>/logits-<fp32|bf16>/s<s>-b<b>"): post_training.py
      dpo             (dpo-step) {pairs (b), sequences (2b), beta, loss "sigmoid", order
                      ("trl": the policy forward, then the reference's; "reference-first"),
                      reference {dtype, requires_grad, mode}}
      logprob         (logprob-pass) {logits_dtype, temperature, passes [policy, reference],
                      policy_resident (what of the policy's states is resident), reference}
      context_parallel  (cp-saved) {kind: trainmath's --cp-kind ("ulysses"), cp, rank, and
                      implementation: the class that ran it}; s is the whole sequence, the
                      rank runs s/cp tokens
      policy          (op-sac-*) the checkpointing policy: "torchtitan" (its SelectiveAC) or
                      "attention" (the attention kernel's outputs alone saved)
      tp, rank, sequence_parallel, tp_plan
                      (op-sac-tp-saved: one layer on rank ``rank`` of ``tp`` under
                      torchtitan's tensor- and sequence-parallel plan, tensor_parallel.py;
                      ids "op-sac-tp-saved/.../torchtitan/tp<N>-rank<R>/s<s>-b<b>")
      model           shape name; shape: every hyperparameter (layers, hidden, heads,
                      kv_heads, ffn, vocab, mlp, norm, bias, tied_embeddings, positions,
                      dropout, dropout_p, norm_eps, rope_theta, sliding_window, family,
                      source), enough for trainmath.model.shape.shape() without torch
      config          instead of shape, for today's families read from their config.json
                      (Qwen3, DeepSeek-V3, Gemma 2 and 3, gpt-oss, OLMo 2, Llama 4;
                      hfconfigs.py): {file (a config.json of tests/data/hf-configs/, from the
                      repository root), text_config (true: its "text_config" is the model),
                      overrides {key: value replaced before transformers reads it, e.g.
                      num_hidden_layers}, keys (the config as transformers read it, the
                      overrides applied: what trainmath.model.hfconfig.shape_from_config
                      reads)}; built by AutoModelForCausalLM.from_config
      not_compared    (with config, where it applies) why the library does not predict this
                      record: a fallback only the CPU takes
      family          (with config) transformers' model_type of the (text) config
      notes           (with config) what was changed and why, what transformers runs for
                      the implementation asked for (a refusal, a fallback, an argument it
                      ignores) and, for a mixture of experts, what routing the bytes assume
      implementation  reference-sdpa | reference-eager | hf-sdpa | hf-eager
      s, b            sequence length and micro-batch size
      dtype           {parameters, compute}: "bf16", "fp16" or "fp32"
      precision       (saved) "bf16" | "autocast-bf16"
      loss            (techniques) {kind: "standard" | "chunked", chunks: N or null}
      offload_activations  (techniques) true for "act-offload-step"
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
        runs              (with config) what transformers ran: {class (of the model),
                          attn_implementation (the one it settled on), experts: null or
                          {class, implementation: its experts implementation, e.g.
                          "grouped_mm", or "own forward" where it does not dispatch one}}
        layer_groups      (with config) the decoder layers grouped by what they save (the
                          same tensor list, op by op), in order of their first layer:
                          [{layers [indices], bytes (per layer), kinds: [{layer_type (the
                          config's layer_types entry or null), attention, mlp (module
                          classes), sliding_window, use_rope (where the attention module has
                          them)}, ...] (each distinct one once), tensors (of the group's first
                          layer, as layer_tensors)}, ...]
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
        runs              (with config) as for kind "saved"
                      kind "cp-saved": as kind "saved", for the rank's s/cp tokens
                      kind "op-sac-saved": total, per_layer, embedding, output (the
                      storages each scope allocated that are alive when the forward pass ends),
                      inputs (token ids and targets), layer_shown, layer_tensors [[op, shape,
                      bytes], ...]; "op-sac-tp-saved": per_layer (one layer, on the rank),
                      layer_shown, layer_tensors, collectives {forward, backward: {name:
                      count}} (the functional collectives run); "compile-saved" as "saved";
                      "*-step" as "step"
                      kinds "chunked-loss-step" and "act-offload-step" (techniques.py): as
                      kind "step", plus
        saved             bytes saved for backward that stay on the device after the forward
                          pass (distinct storages, parameters left out)
        host              {after_forward, peak}: host bytes of the offloaded activations
                      kind "dpo-step" (post_training.py): as kind "step" (the policy's
                      states and the step's peak; phases forward (the policy and the loss) |
                      reference forward | backward | optimizer step), plus
        sequences         2b: the chosen and rejected sequences of the one forward
        reference         {parameters_count, weights (bytes of its bf16 parameters), buffers,
                          dtype}: the frozen reference model
        reference_pass    {bytes, op, alive, largest} at the peak of the reference forward
                          (second step), as peak
                      kind "logprob-pass" (post_training.py): parameters_count, states (the
                      policy's, resident after a step and zero_grad: no gradients), reference
                      (as above), peak (as kind "step"; phases policy log-probs | reference
                      log-probs), phase_peaks, and
        resident          {bytes, alive}: alive when the pass starts (weights, states, tokens)
        logits            {bytes, dtype}: the one [b, s, vocab] logits tensor of a pass
        parts             {resident, logits, working}: the peak split, working = peak -
                          resident - logits (the 16-bit logits at the upcast, logsumexp's or
                          log_softmax's row, autocast's weight copies)
        passes            {phase: {bytes, op, alive, largest}} at each pass's own peak
                      kind "finetune": trainable_count and parameters_count (peft's
                      get_nb_trainable_parameters), saved (as kind "saved"), and states,
                      peak, phase_peaks, first_step_peak, alive_after_step as kind "step";
                      states add frozen_parameters and trainable_parameters (bytes), and
                      dtypes {frozen, trainable, optimizer_states}
"""
