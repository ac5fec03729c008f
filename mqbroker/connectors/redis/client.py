"""Connections to Redis on txredisapi, with typed errors and one-pass command encoding (Twisted).

txredisapi's protocol encodes each argument through several calls and parses each bulk string of
a reply in its own reactor turn; the sink sends scripts with thousands of arguments and the
source reads hundreds of entries a call, so ``_OnePassProtocol`` replaces both steps
(``resp.encode_command``, ``resp.RespReader``) and keeps txredisapi's connection handling.
Replies stay raw: bytes, integers, lists. Each task
opens its own connections and reconnects itself (txredisapi's reconnecting is off), so an outage
is seen by the task, which backs off and reports it.
"""

from __future__ import annotations

import pathlib
from typing import Any

import txredisapi
from OpenSSL import SSL, crypto
from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS

from mqbroker import limits
from mqbroker.connectors.redis.resp import Argument, EncodedArguments, RespProtocolError, RespReader, encode_command
from mqbroker.connectors.settings import RedisAddress
from mqbroker.security.tls import client_options
from mqbroker.connectors.task import OutageError

#: How long connecting to Redis may take.
CONNECT_TIMEOUT_S = 5
#: A Redis reply later than this (beyond a blocking command's own wait) means the server is gone.
REPLY_TIMEOUT_S = 10.0


class RedisUnavailableError(OutageError):
    """Redis cannot be reached, or the connection broke: the task backs off and reconnects."""


class RedisProtocolError(RedisUnavailableError):
    """The server answered with something that is not a Redis reply, or one past the bounds kept here."""


class RedisCommandError(Exception):
    """Redis refused a command (e.g. WRONGTYPE: the key holds another type): a setting to fix, retried slowly."""


class _OnePassProtocol(txredisapi.RedisProtocol):
    """txredisapi's protocol with commands encoded in one pass and replies parsed by ``resp.RespReader``.

    txredisapi's own parser handles each bulk string of a reply in its own reactor turn (500
    Stream entries took 200-350 ms to arrive), passes over a line it does not know (the request
    then waits for its reply timeout) and buffers a bulk string of any announced length. The
    reader parses in one pass, bounds what it buffers by ``limits``, and on bytes that are not a
    Redis reply fails the waiting command with ``RedisProtocolError`` and closes the connection.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reader = RespReader(bulk_bytes_max=limits.redis_reply_bulk_bytes_max,
                                  array_items_max=limits.redis_reply_array_items_max,
                                  error_factory=txredisapi.ResponseError)

    def _build_command(self, *args: Any, **kwargs: Any) -> bytes:
        return encode_command(args)

    def dataReceived(self, data: bytes, unpause: bool = False) -> None:
        try:
            replies = self._reader.feed(data)
        except RespProtocolError as problem:
            self.replyReceived(RedisProtocolError(f"Redis {self.factory.uuid} answered {problem}: "
                                                  "is it a Redis server?"))
            self.transport.abortConnection()
            return
        for reply in replies:
            self.replyReceived(reply)


class _Factory(txredisapi.RedisFactory):
    protocol = _OnePassProtocol


class RedisConnection:
    """One Redis connection; ``execute`` fires with the raw reply or fails with a typed error."""

    def __init__(self, factory: _Factory, handler: Any, address: RedisAddress) -> None:
        self._factory = factory
        self._handler = handler
        self.address = address

    async def execute(self, *arguments: Argument | EncodedArguments) -> Any:
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
    factory.startConnecting(_endpoint(reactor, address))
    try:
        handler = await connected
    except Exception as error:
        factory.disconnect()
        raise RedisUnavailableError(f"cannot connect to Redis {address}: {error}") from None
    return RedisConnection(factory, handler, address)


def _endpoint(reactor: Any, address: RedisAddress) -> Any:
    """TCP to ``address``, or TLS over it for ``rediss://`` (certificate and hostname checked)."""
    endpoint = HostnameEndpoint(reactor, address.host, address.port, timeout=CONNECT_TIMEOUT_S)
    if not address.tls:
        return endpoint
    try:
        options = client_options(address.host, *(pathlib.Path(path) if path else None
                                                  for path in (address.tls_ca, address.tls_cert, address.tls_key)))
    except (OSError, ValueError, SSL.Error, crypto.Error) as error:
        raise RedisUnavailableError(f"TLS settings for Redis {address} do not load: {error}") from None
    return wrapClientTLS(options, endpoint)


def _name(arguments: tuple[Any, ...]) -> str:
    first = arguments[0] if arguments else b"?"
    return first.decode("ascii", "replace") if isinstance(first, bytes) else str(first)
