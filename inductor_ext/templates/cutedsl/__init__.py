"""CuTeDSL template families for NVIDIA Blackwell (quack-kernels' block-scaled GEMMs)."""

# What these families need installed; templates/registry.py lists them as unavailable without it.
# CuTeDSL and quack-kernels: inductor-ext[nvidia], Linux only.
REQUIRES = ("cutlass", "quack")
