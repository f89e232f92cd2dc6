"""How a run splits over GPUs: the layout dp × tp × pp × cp (ep, v) and the batch, the rules a
layout must keep with a model, the parameters each pipeline stage holds, and the pipeline
schedules (micro-batches in flight, bubble). Memory and time both build on it."""
