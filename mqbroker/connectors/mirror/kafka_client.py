"""What the mirror's Kafka-protocol adapters share: the librdkafka configuration, and a thread of their own (Twisted).

confluent-kafka (librdkafka) calls block: each adapter runs them, one at a time, in a
one-thread pool of its own, so the reactor never waits and no two calls share a client at once.
Every client failure becomes ``KafkaClusterError`` (an outage: the task backs off and retries).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

from mqbroker.connectors.mirror.settings import SourceSecurity
from mqbroker.connectors.task import OutageError

T = TypeVar("T")

#: How long a metadata, offsets or admin request to the Kafka cluster may take.
REQUEST_TIMEOUT_S = 10.0


class KafkaClusterError(OutageError):
    """The Kafka-protocol cluster cannot be reached or refused a request: the mirror backs off and retries."""


def client_config(bootstrap: str, security: SourceSecurity, client_id: str) -> dict[str, Any]:
    """librdkafka settings for ``bootstrap`` with the mirror's TLS and SASL options."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "client.id": client_id}
    tls = security.tls or security.tls_ca is not None or security.tls_cert is not None
    if security.username is not None:
        config["security.protocol"] = "SASL_SSL" if tls else "SASL_PLAINTEXT"
        config["sasl.mechanism"] = security.sasl_mechanism or "SCRAM-SHA-256"
        config["sasl.username"] = security.username
        config["sasl.password"] = security.password or ""
    elif tls:
        config["security.protocol"] = "SSL"
    if security.tls_ca is not None:
        config["ssl.ca.location"] = security.tls_ca
    if security.tls_cert is not None:
        config["ssl.certificate.location"] = security.tls_cert
    if security.tls_key is not None:
        config["ssl.key.location"] = security.tls_key
    return config


def described(error: BaseException) -> str:
    """A client error in one line."""
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        return str(error.args[0].str())
    return str(error)


class ClientThread:
    """Runs blocking client calls one at a time in a thread of its own; failures as ``KafkaClusterError``."""

    def __init__(self, reactor: Any, name: str, what: str) -> None:
        self._reactor = reactor
        self._what = what
        self._pool = ThreadPool(minthreads=1, maxthreads=1, name=name)
        self._pool.start()
        self._stopped = False
        #: A broker shutting down with the task still running stops the thread too (its workers are not daemons).
        self._shutdown_trigger = reactor.addSystemEventTrigger("during", "shutdown", self._stop)

    async def call(self, function: Callable[..., T], *arguments: Any) -> T:
        """``function(*arguments)`` in the thread."""
        try:
            return await deferToThreadPool(self._reactor, self._pool, function, *arguments)
        except (KafkaException, BufferError, RuntimeError, ValueError) as error:
            raise KafkaClusterError(f"{self._what}: {described(error)}") from None

    def close(self, closing: Callable[[], object]) -> None:
        """Run ``closing`` (the clients' close) in the thread after the calls queued, then end the thread."""
        finished = deferToThreadPool(self._reactor, self._pool, closing)
        finished.addErrback(lambda _: None)  # closing a client that failed: nothing left to do
        finished.addBoth(lambda _: self._reactor.callInThread(self._stop))

    def _stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._reactor.callFromThread(self._reactor.removeSystemEventTrigger, self._shutdown_trigger)
        self._pool.stop()
