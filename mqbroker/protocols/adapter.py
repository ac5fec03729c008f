"""One generic Twisted protocol that moves bytes between a socket and a front end's session.

The session (a front end's handler around its sans-I/O codec) never sees the transport: it
gets ``data_received`` calls and writes through ``ConnectionHandle``. Backpressure works both
ways: when the socket's send buffer fills (a slow reader), or the session has too much work in
flight, the adapter stops reading from the socket until both have drained.
"""

from __future__ import annotations

from typing import Any, Protocol as TypingProtocol

from twisted.internet import tcp
from twisted.internet.interfaces import IPushProducer, ISSLTransport
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.protocols.policies import ProtocolWrapper, TimeoutMixin
from twisted.python.failure import Failure
from zope.interface import implementer

from mqbroker.model import PeerIdentity
from mqbroker.security.tls import peer_identity


class Session(TypingProtocol):
    """What a front end provides per connection."""

    def connection_made(self, connection: ConnectionHandle) -> None: ...

    def data_received(self, data: bytes) -> None: ...

    def connection_lost(self, reason: Failure) -> None: ...


class ConnectionHandle(TypingProtocol):
    """What a session may do with its connection."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    @property
    def peer(self) -> str: ...

    @property
    def secure(self) -> bool: ...

    def peer_certificate(self) -> PeerIdentity | None: ...


@implementer(IPushProducer)
class CodecProtocol(Protocol, TimeoutMixin):
    """Bytes in → ``session.data_received``; ``write`` → socket; pauses reading under pressure."""

    log = Logger()

    def __init__(
        self, session: Session, idle_timeout_s: float | None, metrics_gauge: Any = None,
        frame_timeout_s: float | None = None, no_delay: bool = False,
    ) -> None:
        self.session = session
        self._no_delay = no_delay
        self._idle_timeout_s = idle_timeout_s
        self._frame_timeout_s = frame_timeout_s
        self._frame_timer: Any = None
        self._metrics_gauge = metrics_gauge
        self._paused_by_transport = False
        self._paused_by_session = False
        self._reading_paused = False
        self._tcp: tcp.Connection | None = None
        #: The session's ``buffered_bytes`` after the last read (None: it reports none).
        self._buffered_after_read: int | None = 0
        self.closed = False

    # -- Protocol -------------------------------------------------------------------------

    def connectionMade(self) -> None:
        set_no_delay = getattr(self.transport, "setTcpNoDelay", None)  # absent on non-TCP test transports
        if self._no_delay and set_no_delay is not None:
            set_no_delay(True)  # writes already coalesce per reactor turn; Nagle would only delay them
        self.transport.registerProducer(self, True)
        self._tcp = _plain_tcp_connection(self.transport)
        self.setTimeout(self._idle_timeout_s)
        if self._metrics_gauge is not None:
            self._metrics_gauge.inc()
        self._start_frame_timer()  # the first frame (and the TLS handshake) must arrive in time too
        self.session.connection_made(self)

    def dataReceived(self, data: bytes) -> None:
        if self._idle_timeout_s is not None:  # (MQTT has none: its keep-alive is the session's)
            self.resetTimeout()
        # A session's buffer grows only by what it receives: none left after the last read, none now (the usual
        # read, of whole frames: the session is asked once per read, not twice). It may have shrunk since.
        buffered_before = self._buffered_after_read and self._buffered_bytes()
        self.session.data_received(data)
        buffered_after = self._buffered_after_read = self._buffered_bytes()
        if not buffered_after and self._frame_timer is None:
            return  # no frame begun, no frame timer to stop (``_check_frame``)
        completed_a_frame = buffered_before is not None and buffered_after is not None and (
            buffered_after < buffered_before + len(data))
        self._check_frame(buffered_after, restart=completed_a_frame)

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        self.closed = True
        self.setTimeout(None)
        self._stop_frame_timer()
        if self._metrics_gauge is not None:
            self._metrics_gauge.dec()
        self.session.connection_lost(reason)

    def timeoutConnection(self) -> None:
        self.log.debug("closing the connection from {peer}: nothing received for {timeout_s} s (connection_idle_ms)",
                       peer=self.peer, timeout_s=self._idle_timeout_s)
        self.close()

    # -- slow clients: a frame begun must be complete within the frame timeout ----------------

    def _buffered_bytes(self) -> int | None:
        """Bytes of the session's incomplete frame, or None for sessions without slow-loris protection."""
        return getattr(self.session, "buffered_bytes", None)

    def _check_partial_frame(self, restart: bool = False) -> None:
        """Sessions that report ``buffered_bytes`` get slow-loris protection: a client that
        trickles a frame (each byte resetting the idle timeout) is closed after the frame timeout.

        The timeout is the age of the frame still incomplete: it starts again when a read completed a
        frame (``restart``: the bytes left over begin a new one), so a fast client whose reads end
        mid-frame is never closed for it, and it does not run while the broker itself holds reading
        back (a produce quota or unstored publishes), which the client cannot help.
        """
        self._check_frame(self._buffered_bytes(), restart)

    def _check_frame(self, buffered: int | None, restart: bool) -> None:
        """``_check_partial_frame`` with the session's ``buffered`` bytes already read (one read per ``dataReceived``)."""
        if buffered is None or self._frame_timeout_s is None or buffered == 0 or self._paused_by_session:
            self._stop_frame_timer()
            return
        if restart:
            self._stop_frame_timer()
        if self._frame_timer is None:
            self._start_frame_timer()

    def _start_frame_timer(self) -> None:
        if self._frame_timeout_s is not None and self._frame_timer is None:
            self._frame_timer = self.callLater(self._frame_timeout_s, self._frame_timed_out)  # TimeoutMixin's clock seam

    def _stop_frame_timer(self) -> None:
        if self._frame_timer is not None:
            if self._frame_timer.active():
                self._frame_timer.cancel()
            self._frame_timer = None

    def _frame_timed_out(self) -> None:
        self._frame_timer = None
        if not self.closed:
            self.log.info("closing the connection from {peer}: a frame begun {timeout_s} s ago is still incomplete "
                          "(a stalled or trickling client; the limit is quotas.frame_timeout_ms)",
                          peer=self.peer, timeout_s=self._frame_timeout_s)
        self.close()

    # -- IPushProducer: the transport tells us its send buffer is full / drained ------------

    def pauseProducing(self) -> None:
        self._paused_by_transport = True
        self._update_reading()

    def resumeProducing(self) -> None:
        self._paused_by_transport = False
        self._update_reading()

    def stopProducing(self) -> None:
        self.close()

    # -- ConnectionHandle ------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Send bytes to the peer (ignored once the connection is closed).

        On a plain TCP connection with nothing queued the bytes go to the socket at once;
        Twisted's own ``write`` would buffer them until the next reactor turn reports the
        socket writable, costing a turn and two ``epoll_ctl`` calls per reply. What the
        socket does not take, and everything on TLS, goes through the transport as usual.
        """
        if self.closed:
            return
        connection = self._tcp
        if (
            connection is not None
            and not connection.dataBuffer
            and not connection._tempDataLen
            and connection.connected
            and not connection.disconnecting
        ):
            try:
                sent = connection.socket.send(data)
            except OSError:  # would block, or the connection broke: the transport's write path handles both
                sent = 0
            if sent == len(data):
                return
            data = data[sent:]
        self.transport.write(data)

    def close(self) -> None:
        """Close after queued bytes are written."""
        if not self.closed:
            self.closed = True
            self.transport.loseConnection()

    def pause_reading(self) -> None:
        """The session has too much in flight: stop reading requests."""
        if not self._paused_by_session:  # sessions say so after every read: only a change has anything to do
            self._paused_by_session = True
            self._update_reading()

    def resume_reading(self) -> None:
        """The session has caught up."""
        if self._paused_by_session:
            self._paused_by_session = False
            self._update_reading()

    @property
    def peer(self) -> str:
        """``host:port`` of the peer, for logs."""
        address = self.transport.getPeer()
        return f"{getattr(address, 'host', '?')}:{getattr(address, 'port', '?')}"

    @property
    def secure(self) -> bool:
        """True on a TLS connection."""
        return ISSLTransport.providedBy(self.transport)

    def peer_certificate(self) -> PeerIdentity | None:
        """The verified client certificate's subject and SANs (mutual TLS), if any."""
        return peer_identity(self.transport) if self.secure else None

    @property
    def write_buffer_full(self) -> bool:
        """True while the socket's send buffer is past its high-water mark (a slow reader)."""
        return self._paused_by_transport

    def _update_reading(self) -> None:
        should_pause = self._paused_by_transport or self._paused_by_session
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            self.transport.pauseProducing()
        elif not should_pause and self._reading_paused:
            self._reading_paused = False
            self.transport.resumeProducing()
        if not self.closed:
            self._check_partial_frame()


def _plain_tcp_connection(transport: Any) -> tcp.Connection | None:
    """The TCP connection under pass-through wrappers (connection limiting), or None (TLS, test transports)."""
    while isinstance(transport, ProtocolWrapper) and type(transport).write is ProtocolWrapper.write:
        transport = transport.transport
    return transport if isinstance(transport, tcp.Connection) else None


class SessionFactory(Factory):
    """Builds one ``CodecProtocol`` around a fresh session per connection."""

    noisy = False

    def __init__(
        self, make_session: Any, idle_timeout_s: float | None, metrics_gauge: Any = None,
        frame_timeout_s: float | None = None, no_delay: bool = False, started: Any = None, admin_view: Any = None,
    ) -> None:
        self._make_session = make_session
        #: What the admin API shows of this front end (``mqtt.admin_view``, ``amqp.admin_view``; None: nothing).
        self.admin_view = admin_view
        #: The front end's ``startup.StartedSignal`` when it must start before it serves (None: serves at once).
        self.started = started
        self._no_delay = no_delay
        self._idle_timeout_s = idle_timeout_s
        self._metrics_gauge = metrics_gauge
        self.frame_timeout_s = frame_timeout_s

    def buildProtocol(self, addr: Any) -> CodecProtocol:
        protocol = CodecProtocol(
            self._make_session(addr), self._idle_timeout_s, self._metrics_gauge, self.frame_timeout_s, self._no_delay
        )
        protocol.factory = self
        return protocol
