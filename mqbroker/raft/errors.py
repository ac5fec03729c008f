"""Typed errors of the Raft core: refused proposals and undecodable peer bytes."""

from __future__ import annotations

from mqbroker.errors import BrokerError, ErrorCode
from mqbroker.raft.messages import NO_NODE


class ProposalDroppedError(BrokerError):
    """This node cannot take the proposal or read now; ``leader_id`` says where to retry."""

    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    retriable = True

    def __init__(self, message: str, leader_id: int = NO_NODE) -> None:
        super().__init__(message)
        self.leader_id = leader_id


class ConfigurationChangeRefusedError(BrokerError):
    """A membership change that would break the one-server-at-a-time rule or empty the cluster."""

    code = ErrorCode.INVALID_REQUEST
    retriable = True


class RaftCodecError(BrokerError):
    """Bytes from a peer that are not a valid Raft message; close that peer's connection."""

    code = ErrorCode.MALFORMED_REQUEST
