"""Helion template families: one Helion kernel, compiled with Helion's FlyDSL backend for AMD
(gfx950) and run with its Triton backend in Triton's interpreter for tier C."""

# What these families need installed; templates/registry.py lists them as unavailable without it.
# Helion (which imports Triton): inductor-ext[amd], Linux only.
REQUIRES = ("helion", "triton")
