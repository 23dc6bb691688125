"""Runs a worker on 2 (or more) gloo ranks on CPU, each in a spawned process, and returns what
each rank wrote; a hang fails the test instead of waiting (as test_comms's ``gloo_ranks`` does).

The worker is ``worker(rank, world, port, out_dir)``, a module-level function of a test module (it
is pickled by name), and writes ``out_dir/rank<r>.json``.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any, Callable

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(worker: Callable[..., None], out_dir: Path, world: int = 2, deadline_s: float = 300) -> list[Any]:
    """Each rank's JSON, after all ranks exited; fails the test when they run past ``deadline_s``."""
    import torch.multiprocessing as mp

    ctx = mp.start_processes(worker, args=(world, free_port(), str(out_dir)), nprocs=world, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + deadline_s
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"the {world}-rank gloo run did not finish in {deadline_s:.0f} s (a hang?)")
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(world)]
