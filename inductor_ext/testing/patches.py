"""A check for ext's patches of Inductor's functions (``lowering/jinja_templates``,
``parsed_index_exprs``, ``early_kernel_builds``, ``kernel_batches``): in force only inside their
context, and Inductor's own function back after it, also when the compile inside fails."""

from __future__ import annotations

import contextlib
from typing import Any, Callable


def assert_in_force_only_inside(owner: Any, name: str,
                                context: Callable[[], contextlib.AbstractContextManager[Any]]) -> None:
    """``owner.name`` (a class's or module's own attribute) is replaced inside ``context()`` and
    is Inductor's own again after it exits, normally or by an exception."""
    inductor = vars(owner)[name]
    with context():
        assert vars(owner)[name] is not inductor, f"{name} is not patched inside the context"
    assert vars(owner)[name] is inductor, f"{name} is not Inductor's own after the context"
    try:
        with context():
            raise RuntimeError("a failed compile")
    except RuntimeError as e:
        assert str(e) == "a failed compile", e
    assert vars(owner)[name] is inductor, f"{name} is not Inductor's own after a failed compile"
