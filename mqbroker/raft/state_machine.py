"""The seam between a Raft node and the application it replicates."""

from __future__ import annotations

from zope.interface import Interface


class IRaftStateMachine(Interface):
    """The application a Raft node replicates: deterministic apply, snapshot and restore."""

    def apply(index: int, data: bytes) -> bytes:
        """Apply the committed entry at ``index``; return the result bytes for its proposer."""

    def snapshot() -> bytes:
        """The whole state after the last applied entry."""

    def restore(data: bytes) -> None:
        """Replace the whole state with one ``snapshot`` returned (b"" means the initial state)."""
