"""Loaded by ``import torch`` (the ``torch.backends`` entry point), before TORCH_LOGS is parsed,
so ``TORCH_LOGS=ext_autotune,ext_passes`` is accepted. It must stay tiny and never raise:
an exception here would break ``import torch`` for the user."""


def register_log_artifacts() -> None:
    try:
        from inductor_ext.logs import register_artifacts

        register_artifacts()
    except Exception:  # never break torch's import; ext's logs fall back to module loggers
        pass
