"""Network cuts for loopback clusters: fault-injecting TCP proxies in front of every broker link.

``Network`` runs one ``LinkProxy`` (a thread per listener, two per connection) per link a test
wants to be able to cut, and a set of cut node ids. A connection through a proxy knows the node
it reaches (``target``) and, where it can tell, the node it comes from (``source``): the
controller links are one proxy per ordered pair of brokers; on a native listener the source is
read from the first request's client id (``replica-N`` for broker N's replica fetches; anything
else is a client, which no cut of a broker isolates by itself). While either end is cut, a
connection forwards nothing (bytes that arrive are dropped, as by a silent network) and new
connections are accepted but stay silent; when the node is healed those connections are reset,
so both sides see what a partition that outlived TCP's patience looks like, and reconnect.

``start_partitionable_cluster`` starts brokers whose controller quorum and advertised native
port point at such proxies, so every broker-to-broker and client connection can be cut.
"""

from __future__ import annotations

import pathlib
import socket
import struct
import threading
from collections.abc import Callable

from tests.integration.brokerprocess import BrokerProcess, free_port
from tests.integration.clusterprocess import start_all

#: How often a forwarding thread looks at the cut set while its socket is idle.
POLL_S = 0.1
#: Bytes read before the first request's client id is known (a request header is far smaller).
HEADER_BYTES_MAX = 64 * 1024
CHUNK_BYTES = 64 * 1024
REPLICA_CLIENT_PREFIX = b"replica-"


def replica_source(first_bytes: bytes) -> int | None | bool:
    """The broker id of a native connection whose first request says ``replica-N`` (None: a client).

    False while ``first_bytes`` does not yet hold the request header's client id: size (int32),
    api key (int16), api version (int16), correlation id (int32), client id (int16 length + bytes).
    """
    if len(first_bytes) < 14:
        return False
    (length,) = struct.unpack_from(">h", first_bytes, 12)
    if length < 0:
        return None
    if len(first_bytes) < 14 + length:
        return False
    client_id = first_bytes[14 : 14 + length]
    number = client_id[len(REPLICA_CLIENT_PREFIX):]
    return int(number) if client_id.startswith(REPLICA_CLIENT_PREFIX) and number.isdigit() else None


class _Connection:
    """One accepted connection and its upstream socket; forwards while neither end is cut."""

    def __init__(self, proxy: LinkProxy, downstream: socket.socket) -> None:
        self.proxy = proxy
        self.downstream = downstream
        self.upstream: socket.socket | None = None
        self.source: int | None = proxy.source
        self.broken = False  # something was dropped: this connection never forwards again
        self.closed = threading.Event()

    def cut(self) -> bool:
        """Whether either end of this connection is cut off right now."""
        return self.proxy.network.is_cut(self.source) or self.proxy.network.is_cut(self.proxy.target)

    def run(self) -> None:
        """Connect upstream, learn the source if needed, then forward both ways."""
        try:
            first = b""
            if self.proxy.identify:
                first = self._read_header()
            self.upstream = socket.create_connection(self.proxy.upstream, timeout=5)
            self.upstream.settimeout(POLL_S)
            if first and not self._forward(first, self.upstream):
                return
            pump = threading.Thread(target=self._pump, args=(self.upstream, self.downstream), daemon=True)
            pump.start()
            self._pump(self.downstream, self.upstream)
            pump.join()
        except OSError:
            pass  # an end went away: close the other one below
        finally:
            self.close()

    def _read_header(self) -> bytes:
        first = b""
        while not self.closed.is_set():
            try:
                chunk = self.downstream.recv(CHUNK_BYTES)
            except TimeoutError:
                continue
            if not chunk:
                raise ConnectionError("closed before its first request")
            first += chunk
            source = replica_source(first)
            if source is not False or len(first) > HEADER_BYTES_MAX:
                self.source = source if source is not False else None
                return first
        raise ConnectionError("closed by the proxy")

    def _forward(self, data: bytes, to: socket.socket) -> bool:
        if self.broken or self.cut():
            self.broken = True
            return True  # dropped: the connection stays silent until the node is healed
        to.sendall(data)
        return True

    def _pump(self, source: socket.socket, destination: socket.socket) -> None:
        while not self.closed.is_set():
            try:
                data = source.recv(CHUNK_BYTES)
            except TimeoutError:
                if self.cut():
                    self.broken = True
                continue
            except OSError:
                break
            if not data:
                break
            try:
                self._forward(data, destination)
            except OSError:
                break
        self.close()

    def close(self) -> None:
        """Reset both sockets (SO_LINGER 0: an RST, as after a partition that timed the connection out)."""
        if self.closed.is_set():
            return
        self.closed.set()
        for sock in (self.downstream, self.upstream):
            if sock is None:
                continue
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass  # already closed by the peer
            sock.close()


def _listen_avoiding(ports: set[int]) -> socket.socket:
    """A listener on a free loopback port that is none of ``ports`` (chosen for brokers, not yet bound)."""
    held = []
    try:
        while True:
            listener = socket.create_server(("127.0.0.1", 0))
            if listener.getsockname()[1] not in ports:
                return listener
            held.append(listener)  # keep it so the next try gets another port
    finally:
        for listener in held:
            listener.close()


class LinkProxy:
    """Listens on a free loopback port and forwards to ``upstream``; the connections reach node ``target``."""

    def __init__(self, network: Network, upstream: tuple[str, int], target: int, source: int | None,
                 identify: bool, avoid_ports: set[int]) -> None:
        self.network = network
        self.upstream = upstream
        self.target = target
        self.source = source
        self.identify = identify
        self.connections: set[_Connection] = set()
        self._lock = threading.Lock()
        self._listener = _listen_avoiding(avoid_ports)
        self._listener.settimeout(POLL_S)
        self.port = self._listener.getsockname()[1]
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                downstream, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            downstream.settimeout(POLL_S)
            connection = _Connection(self, downstream)
            with self._lock:
                self.connections.add(connection)
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: _Connection) -> None:
        connection.run()
        with self._lock:
            self.connections.discard(connection)

    def reset_broken(self) -> None:
        """Reset the connections that dropped bytes and whose ends are no longer cut."""
        with self._lock:
            stale = [c for c in self.connections if c.broken and not c.cut()]
        for connection in stale:
            connection.close()

    def stop(self) -> None:
        """Stop accepting and reset every connection."""
        self._stopped.set()
        self._listener.close()
        self._thread.join()
        with self._lock:
            connections = list(self.connections)
        for connection in connections:
            connection.close()


class Network:
    """The proxies of one cluster and which nodes are cut off."""

    def __init__(self) -> None:
        self._cut: set[int] = set()
        #: Ports chosen for brokers' listeners (free but not bound while they are down): no proxy takes them.
        self.reserved_ports: set[int] = set()
        self._lock = threading.Lock()
        self.proxies: list[LinkProxy] = []

    def proxy(self, upstream_port: int, target: int, source: int | None = None, identify: bool = False) -> int:
        """Start a proxy to ``127.0.0.1:upstream_port`` (node ``target``); return its port."""
        proxy = LinkProxy(self, ("127.0.0.1", upstream_port), target, source, identify, self.reserved_ports)
        self.proxies.append(proxy)
        return proxy.port

    def is_cut(self, node_id: int | None) -> bool:
        """Whether ``node_id`` (None: a client) is cut off."""
        with self._lock:
            return node_id in self._cut

    def cut(self, node_id: int) -> None:
        """Cut ``node_id`` off from every other broker and every client."""
        with self._lock:
            self._cut.add(node_id)

    def heal(self, node_id: int) -> None:
        """Reconnect ``node_id``: the connections that went silent are reset, new ones forward again."""
        with self._lock:
            self._cut.discard(node_id)
        for proxy in self.proxies:
            proxy.reset_broken()

    def stop(self) -> None:
        """Stop every proxy."""
        for proxy in self.proxies:
            proxy.stop()


def start_partitionable_cluster(
    root: pathlib.Path, size: int = 3, extra_args: list[str] | None = None,
    environments: dict[int, dict[str, str]] | None = None,
) -> tuple[list[BrokerProcess], Network, Callable[[BrokerProcess], str]]:
    """Brokers 1..size whose controller links and native listeners are all behind one ``Network``'s proxies.

    Broker i reaches broker j's controller through the proxy (i → j); clients and replica fetches
    reach broker j's native listener through j's native proxy (advertised in the metadata).
    ``environments`` adds variables to some brokers' environments (by node id).
    Returns the brokers, the network and a function giving a broker's proxied bootstrap address.
    """
    network = Network()
    node_ids = range(1, size + 1)
    controller_ports = {node_id: free_port() for node_id in node_ids}
    brokers = {node_id: BrokerProcess(data_dir=root / f"broker-{node_id}", environment=(environments or {}).get(node_id, {}),
                                      movable_ports=False)  # the proxies point at these ports
               for node_id in node_ids}
    network.reserved_ports = {*controller_ports.values(), *(p for b in brokers.values() for p in b.ports.values())}
    native_proxies = {
        node_id: network.proxy(broker.ports["native"], target=node_id, identify=True)
        for node_id, broker in brokers.items()
    }
    for node_id, broker in brokers.items():
        quorum = ",".join(
            f"{peer}@127.0.0.1:{port if peer == node_id else network.proxy(port, target=peer, source=node_id)}"
            for peer, port in controller_ports.items()
        )
        broker.extra_args = ["--node-id", str(node_id), "--controller-quorum", quorum,
                             "--controller-port", str(controller_ports[node_id]),
                             "--set", f"advertised_native_port={native_proxies[node_id]}", *(extra_args or [])]
        broker.data_dir.mkdir(parents=True, exist_ok=True)
    cluster = list(brokers.values())
    try:
        start_all(cluster)
    except BaseException:
        network.stop()
        raise

    def proxied(broker: BrokerProcess) -> str:
        return f"127.0.0.1:{native_proxies[cluster.index(broker) + 1]}"

    return cluster, network, proxied
