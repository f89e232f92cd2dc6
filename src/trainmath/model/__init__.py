"""Model shapes: a transformer as data, its presets, the config.json files that describe one, and
a mixture of experts' parameters. Nothing here knows about GPUs or training."""
