"""Builds of ext's own C++ started beside a compile instead of on its critical path (the frozen
graphs' weight check, a C++ kernel a table or cache picked), and the wait for them: a benchmark
must not share the CPU with a compiler (``lowering/cold_timing``)."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Callable

log = logging.getLogger("inductor_ext")

_running: list[threading.Thread] = []
_lock = threading.Lock()


def lowest_priority() -> None:
    """The calling thread, and the processes it starts from now on, yield the CPU to everything
    else (Linux: a thread's nice, 19, which a forked compiler inherits)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):  # another OS, or not allowed: the default priority
        pass


def start(build: Callable[[], Any], name: str, lowest: bool = False) -> threading.Thread:
    """Run ``build`` in a thread of its own, now; at the ``lowest`` priority where nothing waits
    for it. A failure is logged at debug level: whoever needs the result builds again in the
    foreground and says what is wrong. Not a daemon: a process leaving mid-build lets it finish,
    so no half-written file is left in a cache folder."""
    def run() -> None:
        try:
            if lowest:
                lowest_priority()
            build()
        except Exception as e:  # noqa: BLE001  (built again where it is needed, failing there)
            log.debug("ext: %s in the background failed (%s); built where it is needed", name, e)

    thread = threading.Thread(target=run, name=name)
    with _lock:
        _running[:] = [t for t in _running if t.is_alive()]
        _running.append(thread)
    thread.start()
    return thread


def wait() -> None:
    """Return once every build started so far is over."""
    with _lock:
        threads = list(_running)
    for thread in threads:
        thread.join()
