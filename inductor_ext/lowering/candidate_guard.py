"""A template candidate that fails while Inductor builds or times it is dropped, never fatal.

Inductor 2.15 times a failing choice as inf only for some exceptions (``RuntimeError``, CUDA
compile errors, Triton's OutOfResources); any other exception raised while a choice is
benchmarked (a family's ``render`` refusing with ``ValueError``, a ``TypeError`` in a launcher,
a C++ compiler's error from an extern family's ``call``) propagates and fails the user's
compile. ext's candidates are wrapped so that such a failure costs only that candidate: one log
line with the reason, a build failure marks it failed (Inductor prunes it before timing), a
failure while timed makes its time inf. ext's winner rules never pick an inf time
(``ext_choices.override_best_choice``), so the generated code never calls it.
"""

from __future__ import annotations

from typing import Any, Callable


def reason(error: BaseException) -> str:
    """``TypeName: first line of the message``."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def guard(choice: Any, dropped: Callable[[str], None]) -> Any:
    """Wrap ``choice``'s ``precompile`` and ``benchmark`` so that an exception in either calls
    ``dropped(why)`` and drops the choice instead of propagating. Returns ``choice``."""
    benchmark = choice.benchmark

    def guarded_benchmark(*args: Any, **kwargs: Any) -> Any:
        try:
            return benchmark(*args, **kwargs)
        except Exception as e:  # noqa: BLE001  (any failure of one candidate is that candidate's)
            dropped(f"failed while benchmarked: {reason(e)}")
            return float("inf")

    choice.benchmark = guarded_benchmark
    precompile = getattr(choice, "precompile", None)
    if precompile is not None:

        def guarded_precompile() -> None:
            try:
                precompile()
            except Exception as e:  # noqa: BLE001
                dropped(f"failed to build: {reason(e)}")
                choice.mark_failed()  # Inductor prunes failed choices before timing them

        choice.precompile = guarded_precompile
    return choice
