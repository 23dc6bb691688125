"""The ``ext`` backend as Dynamo's backend lookup loads it (the ``torch_dynamo_backends`` entry
point): ``torch.compile(model, backend="ext")`` imports this module when it is called, before the
model's first call traces anything.

Loading it starts what the first compile on this machine would otherwise wait for and that needs
nothing from the model: where this machine's preset is the cpu one, Inductor's vector-ISA probe
(test builds in subprocesses, ~1-3 s; ``lowering/vec_isa_record.ask_ahead``) runs in the
background from here, beside the user's code and Dynamo's tracing, instead of from the backend's
entry. Where ext's cache already holds the probe's outcome, or this process probed, nothing starts.
"""

from __future__ import annotations

import logging

from inductor_ext import presets
from inductor_ext.backend import ext_backend
from inductor_ext.lowering import install

__all__ = ["ext_backend"]

log = logging.getLogger("inductor_ext")


def ask_isas_at_lookup() -> None:
    """Ask the ISAs ahead for a compile with this machine's preset and no options. A compile
    with other options reuses the answer all the same (it is this machine's); any failure here
    is left to the compile, which asks again."""
    try:
        name = presets.preset_for_device(presets.machine_device())
        config = presets.resolve({"preset": name})
        install.ask_isas_ahead(config)
    except Exception as e:
        log.debug("ext: not asking the vector ISAs at backend lookup: %s", e)


ask_isas_at_lookup()
