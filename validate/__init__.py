"""Checks of trainmath against real PyTorch (make validate); measure/ records what it measures."""
