"""FlyDSL template families for AMD GPUs (gfx950, gfx1250); see design.md, "AMD (FlyDSL 0.5.0)"."""
