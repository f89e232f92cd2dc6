"""Time: FLOPs per token, MFU and time to train, the bytes collectives send, and the step-time
model the planner ranks layouts by."""
