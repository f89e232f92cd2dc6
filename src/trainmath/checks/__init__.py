"""The library against reality: its prediction for every configuration measured in PyTorch."""
