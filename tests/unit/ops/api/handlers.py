"""Calling an admin API route handler in process, as ``ApiResource`` would after validation."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred

from mqbroker.model import Principal
from mqbroker.ops.api.routing import ApiCall
from tests.fakes import fired

ALICE = Principal("User", "alice")


def run_handler(handler: Any, operations: Any, path: dict[str, Any] | None = None, body: Any = None) -> Any:
    """The handler's answer to alice's call over ``operations`` (its exception raised as itself)."""
    call = ApiCall(principal=ALICE, path=path or {}, query={}, body=body, operations=operations)
    return fired(Deferred.fromCoroutine(handler(call)))
