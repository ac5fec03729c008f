"""The blocking client's socket wrapper against a minimal peer speaking the server codec over a real socket."""

import socket
import threading
import time

from mqbroker.client.connection import BlockingConnection
from mqbroker.protocols.native.codec import supported_api_versions
from mqbroker.protocols.native.connection import RequestReceived, ServerConnection
from mqbroker.protocols.native.messages import ProducePartition, ProduceRequest, ProduceTopic

FRAME_BYTES_MAX = 32 * 1024 * 1024


class _SlowPeer:
    """Answers ApiVersions, then stops reading for ``stall_s`` (the client's send buffer fills), then reads on."""

    def __init__(self, stall_s: float) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._stall_s = stall_s
        self.requests: list[object] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

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

    def join(self) -> None:
        self._thread.join(timeout=10)
        self._listener.close()


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
    peer.join()
    connection.close()
    assert len(peer.requests) == 2
    received = peer.requests[1]
    assert isinstance(received, ProduceRequest)
    assert bytes(received.topics[0].partitions[0].records) == records
