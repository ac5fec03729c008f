"""The push sender against real HTTP servers on real sockets (in-process twisted.web): connections are
reused, one request at a time each and never more than the bound; HTTPS is verified against the CA; a
request without an answer fails at its deadline and closes its connection; a dropped connection fails
only its request."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred, TimeoutError, gatherResults
from twisted.internet.endpoints import SSL4ServerEndpoint, TCP4ServerEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.ssl import PrivateCertificate
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from mqbroker.security.certs import init_directory
from mqbroker.shares.push.http import PushSender
from mqbroker.shares.push.signing import PushRequest


class Recorder(Resource):
    """Answers 200 (or what the body asks: ``hang``, ``drop``), recording each request and its connection."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[bytes, bytes, Any]] = []
        self.open = 0
        self.open_max = 0

    def render_POST(self, request: Request) -> Any:  # noqa: N802 (twisted.web's name)
        body = request.content.read()
        self.seen.append((body, request.getHeader(b"x-mq-topic") or b"", request.channel))
        if body == b"hang":
            return NOT_DONE_YET
        if body == b"drop":
            request.channel.transport.abortConnection()
            return NOT_DONE_YET
        self.open += 1
        self.open_max = max(self.open_max, self.open)
        reactor.callLater(0.01, self._finish, request)
        return NOT_DONE_YET

    def _finish(self, request: Request) -> None:
        self.open -= 1
        request.setResponseCode(201)
        request.write(b"thanks")
        request.finish()


def _request(body: bytes) -> PushRequest:
    return PushRequest(headers={"Content-Type": "application/octet-stream", "X-MQ-Topic": "orders\r\nX-Evil: 1"},
                       body=body)


async def _serve(resource: Resource, tls: PrivateCertificate | None = None) -> Any:
    site = Site(resource)
    if tls is None:
        return await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(site)
    return await SSL4ServerEndpoint(reactor, 0, tls.options(), interface="127.0.0.1").listen(site)


@pytest_twisted.ensureDeferred
async def test_requests_share_a_bounded_set_of_persistent_connections() -> None:
    recorder = Recorder()
    port = await _serve(recorder)
    sender = PushSender(reactor, endpoint=f"http://127.0.0.1:{port.getHost().port}/push", connections_max=3)
    try:
        statuses = await gatherResults([sender.post(_request(b"r%d" % n), 5) for n in range(30)])
        assert statuses == [201] * 30
        assert sorted(body for body, _, _ in recorder.seen) == sorted(b"r%d" % n for n in range(30))
        assert len({id(channel) for _, _, channel in recorder.seen}) <= 3 and recorder.open_max <= 3
        assert {topic for _, topic, _ in recorder.seen} == {b"orders X-Evil: 1"}  # no header smuggled in
    finally:
        sender.close()
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_https_is_verified_against_the_ca(tmp_path: pathlib.Path) -> None:
    files = init_directory(tmp_path / "tls", ["localhost"], [])
    server = PrivateCertificate.loadPEM(files.server.read_bytes() + files.server_key.read_bytes())
    port = await _serve(Recorder(), tls=server)
    trusted = PushSender(reactor, endpoint=f"https://localhost:{port.getHost().port}/push", connections_max=1,
                         ca_file=str(files.ca))
    other = init_directory(tmp_path / "other", ["localhost"], [])
    untrusted = PushSender(reactor, endpoint=f"https://localhost:{port.getHost().port}/push", connections_max=1,
                           ca_file=str(other.ca))
    try:
        assert await trusted.post(_request(b"hello"), 5) == 201
        with pytest.raises(Exception) as refused:
            await untrusted.post(_request(b"hello"), 5)
        assert not isinstance(refused.value, TimeoutError)
    finally:
        trusted.close()
        untrusted.close()
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_a_request_without_answer_fails_at_its_deadline_and_a_dropped_one_alone() -> None:
    recorder = Recorder()
    port = await _serve(recorder)
    sender = PushSender(reactor, endpoint=f"http://127.0.0.1:{port.getHost().port}/push", connections_max=2)
    try:
        hung: Deferred[int] = sender.post(_request(b"hang"), 0.3)
        dropped: Deferred[int] = sender.post(_request(b"drop"), 5)
        with pytest.raises(Exception) as lost:
            await dropped
        assert not isinstance(lost.value, TimeoutError)
        with pytest.raises(TimeoutError):
            await hung
        assert await sender.post(_request(b"after"), 5) == 201  # new connections replace the closed ones
    finally:
        sender.close()
        await port.stopListening()


class _UntilClose(Protocol):
    """Answers its one request with a body delimited by the connection's end (HTTP/1.0 style), later."""

    def dataReceived(self, data: bytes) -> None:  # noqa: N802 (Twisted's name)
        if b"\r\n\r\n" in data:
            self.transport.write(b"HTTP/1.1 202 Accepted\r\n\r\npart one, ")
            reactor.callLater(0.05, self._end)

    def _end(self) -> None:
        self.transport.write(b"part two")
        self.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_a_response_delimited_by_the_connections_end_answers_its_request() -> None:
    port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(Factory.forProtocol(_UntilClose))
    sender = PushSender(reactor, endpoint=f"http://127.0.0.1:{port.getHost().port}/push", connections_max=1)
    try:
        assert await sender.post(_request(b"one"), 5) == 202
        assert await sender.post(_request(b"two"), 5) == 202  # on a new connection
    finally:
        sender.close()
        await port.stopListening()
