"""Metal (MSL) template families for Apple GPUs (target ``mps``), launched through
``inductor_ext.runtime.metal``: ``torch.mps.compile_shader`` on a Mac, the Metal-on-CPU executor
on CPU tensors (tier C). Shared MSL text lives in ``_msl.py``.
"""
