"""FlyDSL template families for AMD GPUs (gfx950, gfx1250); see design.md, "AMD (FlyDSL 0.5.0)"."""

# What these families need installed; templates/registry.py lists them as unavailable without it.
# FlyDSL: inductor-ext[amd], Linux x86-64 only.
REQUIRES = ("flydsl",)
