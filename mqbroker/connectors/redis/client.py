"""Connections to Redis on txredisapi, with typed errors and one-pass command encoding (Twisted).

txredisapi's protocol encodes each argument through several calls; the sink sends scripts with
thousands of arguments, so ``_OnePassProtocol`` replaces only that step (``resp.encode_command``).
Replies stay raw (``charset=None``, ``convertNumbers=False``): bytes, integers, lists. Each task
opens its own connections and reconnects itself (txredisapi's reconnecting is off), so an outage
is seen by the task, which backs off and reports it.
"""

from __future__ import annotations

from typing import Any

import txredisapi
from twisted.internet.endpoints import HostnameEndpoint

from mqbroker import limits
from mqbroker.connectors.redis.resp import encode_command
from mqbroker.connectors.settings import RedisAddress
from mqbroker.connectors.task import OutageError

#: How long connecting to Redis may take.
CONNECT_TIMEOUT_S = 5
#: The first characters of RESP2 reply lines: status, error, integer, bulk string, array.
_RESP2_TOKENS = "+-:$*"
#: A Redis reply later than this (beyond a blocking command's own wait) means the server is gone.
REPLY_TIMEOUT_S = 10.0


class RedisUnavailableError(OutageError):
    """Redis cannot be reached, or the connection broke: the task backs off and reconnects."""


class RedisProtocolError(RedisUnavailableError):
    """The server answered with something that is not a Redis reply, or one past the bounds kept here."""


class RedisCommandError(Exception):
    """Redis refused a command (e.g. WRONGTYPE: the key holds another type): a setting to fix, retried slowly."""


class _OnePassProtocol(txredisapi.RedisProtocol):
    """txredisapi's protocol with commands encoded in one pass, and replies checked before they are buffered.

    txredisapi passes over a line it does not know (the request then waits for its reply timeout)
    and buffers a bulk reply of any announced length. Here a line that is not RESP, or a bulk or
    array header past ``limits``, fails the waiting request with ``RedisProtocolError`` at once and
    closes the connection.
    """

    def _build_command(self, *args: Any, **kwargs: Any) -> bytes:
        return encode_command(args)

    def dataReceived(self, data: bytes, unpause: bool = False) -> Any:
        try:
            return super().dataReceived(data, unpause)
        except UnicodeDecodeError:  # txredisapi decodes each reply line as UTF-8
            self._refuse("a line that is not text")
            return None

    def lineReceived(self, line: str) -> None:
        problem = reply_line_problem(line)
        if problem is None:
            super().lineReceived(line)
            return
        self._refuse(problem)

    def lineLengthExceeded(self, line: bytes) -> None:
        self._refuse(f"a line of more than {self.MAX_LENGTH} bytes")

    def _refuse(self, problem: str) -> None:
        self.replyReceived(RedisProtocolError(f"Redis {self.factory.uuid} answered {problem}: is it a Redis server?"))
        self.transport.abortConnection()


def reply_line_problem(line: str) -> str | None:
    """What is wrong with one RESP2 reply line (None: nothing; txredisapi reads it)."""
    if not line:
        return None
    token, data = line[0], line[1:]
    if token not in _RESP2_TOKENS:
        return f"a line that is not RESP ({line[:40]!r})"
    if token in "$*":
        try:
            length = int(data)
        except ValueError:
            return f"a {token} header that is not a number ({line[:40]!r})"
        bound = limits.redis_reply_bulk_bytes_max if token == "$" else limits.redis_reply_array_items_max
        if not -1 <= length <= bound:
            return f"{'a bulk string' if token == '$' else 'an array'} of {length} (at most {bound} is read)"
    return None


class _Factory(txredisapi.RedisFactory):
    protocol = _OnePassProtocol


class RedisConnection:
    """One Redis connection; ``execute`` fires with the raw reply or fails with a typed error."""

    def __init__(self, factory: _Factory, handler: Any, address: RedisAddress) -> None:
        self._factory = factory
        self._handler = handler
        self.address = address

    async def execute(self, *arguments: bytes | str | int) -> Any:
        """Send one command (many may be in flight: replies come back in order)."""
        try:
            return await self._handler.execute_command(*arguments)
        except txredisapi.ResponseError as error:
            raise RedisCommandError(f"Redis {self.address} refused {_name(arguments)}: {error}") from None
        except (txredisapi.ConnectionError, ConnectionError) as error:
            raise RedisUnavailableError(f"Redis {self.address} is unreachable: {error}") from None

    async def close(self) -> None:
        """Close the connection."""
        await self._factory.disconnect()


async def connect(reactor: Any, address: RedisAddress, *, blocking_wait_ms: int = 0) -> RedisConnection:
    """Open a connection to ``address`` (authenticated, database selected); ``RedisUnavailableError`` if it fails.

    ``blocking_wait_ms``: the longest blocking command it will carry (its replies may take that long).
    """
    factory = _Factory(str(address), address.database or None, 1, False, txredisapi.ConnectionHandler, None,
                       address.password, REPLY_TIMEOUT_S + blocking_wait_ms / 1000.0, False)
    factory.reconnect = False
    connected = factory.deferred
    factory.startConnecting(HostnameEndpoint(reactor, address.host, address.port, timeout=CONNECT_TIMEOUT_S))
    try:
        handler = await connected
    except Exception as error:
        factory.disconnect()
        raise RedisUnavailableError(f"cannot connect to Redis {address}: {error}") from None
    return RedisConnection(factory, handler, address)


def _name(arguments: tuple[Any, ...]) -> str:
    first = arguments[0] if arguments else b"?"
    return first.decode("ascii", "replace") if isinstance(first, bytes) else str(first)
