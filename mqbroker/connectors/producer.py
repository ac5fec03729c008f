"""Appends as one idempotent producer, for the connectors that write into the log (Twisted).

Each partition's batches carry the producer id and consecutive sequence numbers. A batch that
failed with a retriable error is sent again *as it was* (same sequence): if the first attempt
did land, the partition recognises the retry and answers with the original offsets instead of
writing it twice. Until transactions exist this, with the tasks' checkpoints, is how the Redis
source and the mirror avoid duplicates when the broker, not the connector, fails.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater

from mqbroker import errors
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.connectors.broker_calls import ConnectorBroker
from mqbroker.model import ProduceResult, ProducerIdentity

#: Quick retries of one batch before the task is told (it then backs off and shows the outage).
SEND_ATTEMPTS = 5
#: Pause between those retries (a leader election takes about this long).
RETRY_PAUSE_S = 0.2
SEQUENCE_MODULUS = 2**31
#: Errors after which the producer's state at the partition is gone: start again under a new producer id.
PRODUCER_STATE_LOST = (errors.OutOfOrderSequenceError, errors.InvalidProducerEpochError,
                       errors.DuplicateSequenceError)

#: Builds a partition's next batch for (producer id, producer epoch, base sequence).
BatchFactory = Callable[[int, int, int], bytes]


class ProducerStateLostError(Exception):
    """The partition no longer knows this producer's sequence: the caller decides how to go on."""


class IdempotentProducer:
    """Sends batches to partitions with one producer id and consecutive sequence numbers per partition."""

    def __init__(self, broker: ConnectorBroker, clock: IReactorTime) -> None:
        self._broker = broker
        self._clock = clock
        self._identity: ProducerIdentity | None = None
        self._sequences: dict[tuple[str, int], int] = {}

    async def build(self, topic: str, partition: int, factory: BatchFactory) -> bytes:
        """The partition's next batch, numbered from its next sequence."""
        if self._identity is None:
            self._identity = await self._broker.producer_identity()
        identity = self._identity
        return factory(identity.producer_id, identity.producer_epoch, self._sequences.get((topic, partition), 0))

    async def send(self, topic: str, partition: int, batch: bytes, span: int) -> ProduceResult:
        """Append ``batch`` (built by ``build``; ``span`` sequence numbers), retrying it unchanged.

        Raises ``ProducerStateLostError`` when the partition refuses the sequence (its producer
        state expired, or it saw a gap): the producer starts afresh under a new id, and the caller
        builds its batch again. Other errors are raised after ``SEND_ATTEMPTS`` tries.
        """
        for attempt in range(1, SEND_ATTEMPTS + 1):
            try:
                result = await self._broker.produce(topic, partition, batch)
            except PRODUCER_STATE_LOST as error:
                self.reset()
                raise ProducerStateLostError(f"{topic}-{partition}: {error}") from None
            except (errors.BrokerError, BrokerUnavailableError) as error:
                retriable = isinstance(error, BrokerUnavailableError) or error.retriable
                if not retriable or attempt == SEND_ATTEMPTS:
                    raise
                await deferLater(self._clock, RETRY_PAUSE_S * attempt, lambda: None)
                continue
            key = (topic, partition)
            self._sequences[key] = (self._sequences.get(key, 0) + span) % SEQUENCE_MODULUS
            return result
        raise AssertionError("unreachable: the last attempt returns or raises")

    def reset(self) -> None:
        """Forget the producer id and every sequence (the next batch asks for a new id)."""
        self._identity = None
        self._sequences.clear()
