"""Memory per device: bytes per parameter by recipe, the training setup, the kernels and the
tensors they save for backward, ZeRO and FSDP sharding, LoRA and QLoRA, and the peak of a step."""
