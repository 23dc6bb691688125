"""What a template family's lowering adapter hands ExtChoices for one problem."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Prepared:
    """One GEMM problem, ready for a family's choices to be appended.

    ``problem`` is the family's problem dataclass (ExtChoices sets its ``use_pdl`` with
    ``dataclasses.replace``); ``inputs`` and ``layout`` are the Inductor nodes and output layout
    every choice takes; ``extra`` holds family-specific arguments for its choices.
    """

    problem: Any
    inputs: tuple[Any, ...]
    layout: Any
    extra: dict[str, Any] = field(default_factory=dict)
