"""Pausing Python's cyclic garbage collector while many long-lived objects are made."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block; the collector is on again afterwards if it was before.

    For code that makes many objects which stay alive and hold no cycles (a fetch's messages, the futures a
    benchmark keeps): CPython tracks them all, they survive into the oldest generation, and every full
    collection on the way walks every one of them again. Reference counting still frees everything else.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
