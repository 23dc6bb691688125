"""Triton template families (NVIDIA and AMD GPUs; tier C in Triton's interpreter)."""

# What these families need installed; templates/registry.py lists them as unavailable without it.
# Triton (torch brings it on Linux; macOS has none).
REQUIRES = ("triton",)
