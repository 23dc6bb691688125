"""The values of a frozen graph's weights, in the keys of Inductor's caches.

Freezing folds a graph's weights into constants, and a C++ GEMM template packs each weight into a
new one at compile time. Inductor's FX graph cache (and AOTAutograd's, which holds its key) keys a
frozen weight by its metadata only: on a hit it reads the frozen weights themselves from the graph
being compiled, but the packed copies are constants of the cached entry. So another model of the
same shapes (the next checkpoint, loaded in the next process) was served the packed weights of
the one compiled first: a wrong answer, silently.

Within :func:`frozen_weights`, ext's choices handler puts a digest of the weights' bytes into its
cache key (``ExtChoices.uuid``, part of both caches' keys): the same weights hit, other weights
miss. The digest is computed only when a key asks for it (not when the user turned both caches
off), once per compile. A weight whose bytes cannot be read here (a tensor subclass) turns both
caches off for the compile instead: a key that does not cover it would not be honest.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Iterator, Sequence

import torch

log = logging.getLogger("inductor_ext")

__all__ = ["current_digest", "frozen_weights", "weights_digest"]


class _Scope:
    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        self.tensors = list(tensors)
        self.digest: str | None = None

    def get(self) -> str:
        if self.digest is None:
            self.digest = weights_digest(self.tensors)
        return self.digest


_scope: ContextVar[_Scope | None] = ContextVar("inductor_ext_frozen_weights", default=None)


def readable(t: torch.Tensor) -> bool:
    """Whether ``t``'s bytes can be hashed here: a plain dense tensor (or Parameter)."""
    return (type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided
            and not t.is_quantized and t.device.type != "meta")


def _tensor_digest(t: torch.Tensor) -> bytes:
    data = t.detach()
    if data.device.type != "cpu":
        data = data.cpu()
    data = data.contiguous().reshape(-1)
    h = hashlib.sha256(f"{data.dtype}|{tuple(t.shape)}|".encode())
    if data.numel():
        h.update(data.view(torch.uint8).numpy())  # hashlib reads the buffer without the GIL
    return h.digest()


def weights_digest(tensors: Sequence[torch.Tensor]) -> str:
    """A digest of the tensors' dtypes, shapes and bytes, in order (each tensor hashed on its
    own, beside the others)."""
    workers = max(1, min(len(tensors), os.cpu_count() or 1, 8))
    with ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(_tensor_digest, tensors))
    return hashlib.sha256(b"".join(parts)).hexdigest()


def current_digest() -> str | None:
    """The digest of the frozen weights of the compile under way, or None outside one."""
    scope = _scope.get()
    return None if scope is None else scope.get()


@contextlib.contextmanager
def frozen_weights(tensors: Sequence[torch.Tensor]) -> Iterator[None]:
    """A frozen compile of ``tensors``: their values in the caches' keys, or the caches off."""
    unreadable = [t for t in tensors if not readable(t)]
    if unreadable:
        log.info("ext: a frozen weight of this graph is a %s, whose values ext cannot put in a cache key: "
                 "Inductor's FX graph and AOTAutograd caches are off for this compile", type(unreadable[0]).__name__)
        with torch._inductor.config.patch(fx_graph_cache=False), \
                torch._functorch.config.patch(enable_autograd_cache=False):
            yield
        return
    token = _scope.set(_Scope(tensors))
    try:
        yield
    finally:
        _scope.reset(token)
