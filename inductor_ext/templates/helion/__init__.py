"""Helion template families: one Helion kernel, compiled with Helion's FlyDSL backend for AMD
(gfx950) and run with its Triton backend in Triton's interpreter for tier C."""
