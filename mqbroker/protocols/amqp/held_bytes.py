"""The message bytes AMQP connections hold in memory, bounded per connection and over the whole broker.

A message being received (its announced size, from its content header on) and the bodies of an
open transaction's publishes are held in memory until they are handed to the broker. Past a
bound the channel that asked for more is closed with 406 PRECONDITION_FAILED and a reply text
saying which bound and what to do.
"""

from __future__ import annotations

import dataclasses

from mqbroker import limits
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode


@dataclasses.dataclass(slots=True)
class ByteBudget:
    """Bytes reserved against a bound; one is shared by every AMQP connection of a broker."""

    bytes_max: int
    reserved_bytes: int = 0

    def fits(self, byte_count: int) -> bool:
        """Whether ``byte_count`` more would fit under the bound."""
        return self.reserved_bytes + byte_count <= self.bytes_max

    def reserve(self, byte_count: int) -> bool:
        """Take ``byte_count`` if they fit under the bound."""
        if not self.fits(byte_count):
            return False
        self.reserved_bytes += byte_count
        return True

    def release(self, byte_count: int) -> None:
        """Give back bytes ``reserve`` took."""
        assert 0 <= byte_count <= self.reserved_bytes, (byte_count, self.reserved_bytes)
        self.reserved_bytes -= byte_count


@dataclasses.dataclass(slots=True)
class HeldBytes:
    """Message bytes one connection's channels hold in memory (messages being received, open transactions).

    Bounded per connection (``amqp_held_bytes_per_connection_max``) and, through ``broker_budget``,
    over every connection of the broker together (None: only this connection's bound).
    """

    broker_budget: ByteBudget | None = None
    held_bytes: int = 0

    def check(self, byte_count: int) -> None:
        """Refuse the channel with 406 as ``reserve`` would, counting nothing (a whole message handed on at once
        is checked against the bounds but never held)."""
        if self.held_bytes + byte_count > limits.amqp_held_bytes_per_connection_max:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED,
                            f"this connection holds {self.held_bytes} bytes of unfinished messages and open "
                            f"transactions; {byte_count} more would pass its limit of "
                            f"{limits.amqp_held_bytes_per_connection_max}: commit transactions sooner",
                            class_id=60, method_id=40)
        if self.broker_budget is not None and not self.broker_budget.fits(byte_count):
            raise AmqpError(ReplyCode.PRECONDITION_FAILED,
                            f"the broker holds {self.broker_budget.reserved_bytes} bytes of unfinished AMQP messages "
                            f"and open transactions (limit {self.broker_budget.bytes_max}); retry later",
                            class_id=60, method_id=40)

    def reserve(self, byte_count: int) -> None:
        """Count ``byte_count`` more, or refuse the channel with 406 when a bound would be passed."""
        self.check(byte_count)
        if self.broker_budget is not None:
            self.broker_budget.reserve(byte_count)  # fits: checked
        self.held_bytes += byte_count

    def release(self, byte_count: int) -> None:
        """Give back bytes ``reserve`` counted."""
        self.held_bytes -= byte_count
        if self.broker_budget is not None:
            self.broker_budget.release(byte_count)
