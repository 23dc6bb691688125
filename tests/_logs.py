"""Capturing the records of ext's own loggers with pytest's ``caplog``.

Once torch's logging has set up the "inductor_ext" log it stops it propagating to the root
logger, where caplog's handler listens, so the handler must then sit on ext's logger itself.
Whether a record reaches the root depends on what ran before in the process (and the pytest
version); a handler on both paths records every line twice. So the handler is added only when a
record of that logger would not reach it already.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

import pytest


@contextlib.contextmanager
def records_of(caplog: pytest.LogCaptureFixture, name: str, level: int = logging.INFO) -> Iterator[None]:
    """Within the block, ``caplog`` records each line of logger ``name`` at ``level`` once."""
    logger = logging.getLogger(name)
    with caplog.at_level(level, logger=name):
        added = not _reaches(logger, caplog.handler)
        if added:
            logger.addHandler(caplog.handler)
        try:
            yield
        finally:
            if added:
                logger.removeHandler(caplog.handler)


def _reaches(logger: logging.Logger, handler: logging.Handler) -> bool:
    """Whether a record of ``logger`` reaches ``handler`` (on it or an ancestor it propagates to)."""
    current: logging.Logger | None = logger
    while current is not None:
        if handler in current.handlers:
            return True
        if not current.propagate:
            return False
        current = current.parent
    return False


@contextlib.contextmanager
def ext_log_lines() -> Iterator[list[str]]:
    """Messages of the "inductor_ext" loggers at INFO and above, for tests without ``caplog``
    (a handler of its own on ext's logger: torch's logging setup may stop it propagating)."""
    lines: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("inductor_ext")
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.setLevel(old)
        logger.removeHandler(handler)
