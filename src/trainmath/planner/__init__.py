"""The planner: every layout of a run's GPUs that fits, ranked by predicted step time."""
