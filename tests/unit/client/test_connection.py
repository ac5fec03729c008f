"""The blocking client's socket wrapper against a minimal peer speaking the server codec over a real socket,
and how bootstrap addresses are read."""

import socket
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.client.connection import BlockingConnection, parse_bootstrap
from mqbroker.protocols.native.codec import supported_api_versions
from mqbroker.protocols.native.connection import RequestReceived, ServerConnection
from mqbroker.protocols.native.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
)

FRAME_BYTES_MAX = 32 * 1024 * 1024


class _Peer:
    """A peer speaking the server codec over a socket of its own, served by ``_serve`` on a thread."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Wait for the serving thread to end (the client closed), then stop listening."""
        self._thread.join(timeout=10)
        self._listener.close()


class _SlowPeer(_Peer):
    """Answers ApiVersions, then stops reading for ``stall_s`` (the client's send buffer fills), then reads on."""

    def __init__(self, stall_s: float) -> None:
        self._stall_s = stall_s
        self.requests: list[object] = []
        super().__init__()

    def _serve(self) -> None:
        peer, _ = self._listener.accept()
        codec = ServerConnection(FRAME_BYTES_MAX)
        with peer:
            while not self.requests:
                for event in codec.receive_data(peer.recv(65536)):
                    assert isinstance(event, RequestReceived)
                    self.requests.append(event.request)
                    peer.sendall(codec.reply(event.header, supported_api_versions()))
            time.sleep(self._stall_s)
            while len(self.requests) < 2 and (data := peer.recv(1 << 20)):
                self.requests += [event.request for event in codec.receive_data(data)]


def test_a_request_larger_than_the_send_buffer_goes_out_whole_on_a_non_blocking_socket() -> None:
    """The producer's I/O thread uses non-blocking sockets, where ``sendall`` gives up half-way."""
    peer = _SlowPeer(stall_s=0.3)
    connection = BlockingConnection("127.0.0.1", peer.port, "test", timeout_s=5)
    connection.socket.setblocking(False)
    records = bytes(8 * 1024 * 1024)  # far beyond a loopback socket's send buffer
    request = ProduceRequest(acks=1, timeout_ms=1000, topics=(
        ProduceTopic(name="big", partitions=(ProducePartition(partition_index=0, records=records),)),
    ))
    connection.send(request)
    peer.close()
    connection.close()
    assert len(peer.requests) == 2
    received = peer.requests[1]
    assert isinstance(received, ProduceRequest)
    assert bytes(received.topics[0].partitions[0].records) == records


def test_bootstrap_takes_kafkas_comma_separated_form_a_list_or_both_in_order() -> None:
    assert parse_bootstrap("host1:9393,host2:9394") == [("host1", 9393), ("host2", 9394)]
    assert parse_bootstrap(["host1:9393", " host2:9394 , [::1]:9395"]) == [
        ("host1", 9393), ("host2", 9394), ("::1", 9395)]
    assert parse_bootstrap("localhost:9393,") == [("localhost", 9393)]


@pytest.mark.parametrize("bootstrap", ["", " , ", [], "host1:9393,host2", "host:port"])
def test_a_bootstrap_without_a_usable_address_is_refused_with_the_form_to_use(bootstrap: object) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_bootstrap(bootstrap)  # type: ignore[arg-type]


@given(st.text(alphabet=st.sampled_from("ab:[],1 9"), max_size=30) | st.text(max_size=30))
def test_any_bootstrap_text_parses_to_addresses_or_raises_value_error(text: str) -> None:
    try:
        addresses = parse_bootstrap(text)
    except ValueError:
        return
    assert addresses and all(isinstance(host, str) and 0 <= port for host, port in addresses)


class _ReorderingPeer(_Peer):
    """Answers ApiVersions, then takes ``count`` more ApiVersions requests and answers them in ``order``."""

    def __init__(self, count: int, order: list[int]) -> None:
        self._count, self._order = count, order
        self.answer = threading.Event()  # set to let the answers go
        super().__init__()

    def _serve(self) -> None:
        peer, _ = self._listener.accept()
        codec = ServerConnection(FRAME_BYTES_MAX)
        headers: list[object] = []
        with peer:
            while len(headers) < self._count + 1:
                for event in codec.receive_data(peer.recv(65536)):
                    assert isinstance(event, RequestReceived)
                    if not headers:
                        peer.sendall(codec.reply(event.header, supported_api_versions()))
                    headers.append(event.header)
            self.answer.wait(10)
            for index in self._order:
                peer.sendall(codec.reply(headers[1 + index], supported_api_versions()))  # type: ignore[arg-type]
            peer.recv(1)  # until the client closes


def test_a_response_arriving_while_another_is_awaited_waits_for_its_own_wait() -> None:
    """The consumer keeps a fetch parked at the broker while it sends other requests on the connection."""
    peer = _ReorderingPeer(2, order=[1, 0])
    connection = BlockingConnection("127.0.0.1", peer.port, "test", timeout_s=5)
    first, second = connection.send(ApiVersionsRequest()), connection.send(ApiVersionsRequest())
    assert connection.wait_response(first, 0.05) is None  # not answered yet: still in flight, no error
    peer.answer.set()
    assert isinstance(connection.wait_response(first, 5), ApiVersionsResponse)  # the second came first
    assert isinstance(connection.wait_response(second, 0), ApiVersionsResponse)  # kept, no read needed
    connection.close()
    peer.close()


def test_an_abandoned_request_has_its_response_dropped_whenever_it_arrives() -> None:
    peer = _ReorderingPeer(3, order=[0, 1, 2])
    connection = BlockingConnection("127.0.0.1", peer.port, "test", timeout_s=5)
    first, second, third = (connection.send(ApiVersionsRequest()) for _ in range(3))
    connection.abandon(first)  # before its answer
    peer.answer.set()
    assert isinstance(connection.wait_response(third, 5), ApiVersionsResponse)
    connection.abandon(second)  # after its answer arrived
    assert connection.wait_response(first, 0.05) is None and connection.wait_response(second, 0.05) is None
    connection.close()
    peer.close()


class _AnsweringPeer(_Peer):
    """Answers every request (ApiVersions) at once, until the client closes."""

    def _serve(self) -> None:
        peer, _ = self._listener.accept()
        codec = ServerConnection(FRAME_BYTES_MAX)
        with peer:
            while data := peer.recv(65536):
                for event in codec.receive_data(data):
                    assert isinstance(event, RequestReceived)
                    peer.sendall(codec.reply(event.header, supported_api_versions()))


def test_abandoned_requests_are_forgotten_once_answered_however_long_the_connection_lives() -> None:
    """Abandoned before its answer, after it was taken (a poll interrupted after the wait), or read by ``receive``
    alone: the connection keeps an id only while its request is unanswered."""
    peer = _AnsweringPeer()
    connection = BlockingConnection("127.0.0.1", peer.port, "test", timeout_s=5)
    for _ in range(50):
        early = connection.send(ApiVersionsRequest())
        connection.abandon(early)
        taken = connection.send(ApiVersionsRequest())
        assert isinstance(connection.wait_response(taken, 5), ApiVersionsResponse)
        connection.abandon(taken)
        read_alone = connection.send(ApiVersionsRequest())
        connection.abandon(read_alone)
        while read_alone in connection.codec.inflight_correlation_ids:
            connection.receive(5)
    assert len(connection._abandoned) <= 1 and not connection._arrived
    connection.close()
    peer.close()


def test_a_wait_interrupted_abandons_its_request_and_close_forgets_every_answer() -> None:
    peer = _AnsweringPeer()
    connection = BlockingConnection("127.0.0.1", peer.port, "test", timeout_s=5)
    receive = connection.receive

    def interrupted(timeout_s: float | None = None) -> list:
        connection.receive = receive  # type: ignore[method-assign]
        raise KeyboardInterrupt

    connection.receive = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        connection.request(ApiVersionsRequest(), 5)
    assert isinstance(connection.request(ApiVersionsRequest(), 5), ApiVersionsResponse)
    assert not connection._arrived and not connection._abandoned  # the interrupted request's answer was dropped
    connection.send(ApiVersionsRequest())  # answered first: its answer is kept while the next one is awaited
    assert connection.wait_response(connection.send(ApiVersionsRequest()), 5) is not None
    assert connection._arrived
    connection.close()
    assert not connection._arrived and not connection._abandoned
    peer.close()
