"""Deterministic call counts for the tests that hold a hot path to a budget of Python calls (issue 24)."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from types import FrameType


def calls_of(run: Callable[[], object]) -> list[FrameType]:
    """The Python frames ``run`` called (every call, its callees' too).

    The garbage collector is held off meanwhile: a collection during ``run`` finalises objects of earlier tests (an
    unfinished coroutine's frame runs as it closes), which would count calls that are not ``run``'s.
    """
    frames: list[FrameType] = []

    def profile(frame: FrameType, event: str, argument: object) -> None:
        if event == "call":
            frames.append(frame)

    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
        if enabled:
            gc.enable()
    return frames


def is_mqbroker(frame: FrameType) -> bool:
    """Whether ``frame`` runs ``mqbroker`` code (not the standard library's, Twisted's or the tests')."""
    return "/mqbroker/" in frame.f_code.co_filename
