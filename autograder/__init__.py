"""Sandboxed autograder for the PyTorch multi-GPU unit."""

__version__ = "0.1.0"
